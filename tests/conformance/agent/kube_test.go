package agent

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	xdsgrpc "google.golang.org/grpc/xds"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sextantmesh/sextant/pilot/discovery"
	"github.com/sextantmesh/sextant/tests/kubeenv"
)

// token creates namespace/sa and returns a token for it with audience istio-ca, as the kubelet
// projects it into Istio's pods.
func token(t *testing.T, api *kubeenv.Server, ns, sa string) string {
	t.Helper()
	ctx := context.Background()
	if err := api.EnsureNamespace(ns); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	exp := int64(3600)
	tr, err := api.Kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{
		Audiences: []string{"istio-ca"}, ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// TestIstioAgentWithTheRealAPIServer: Istio's agent with a real service-account token, checked by the
// real API server's TokenReview: it gets its certificate, grpc-go behind it reaches a backend; the same
// agent with another namespace's token is refused by the identity check.
func TestIstioAgentWithTheRealAPIServer(t *testing.T) {
	kubeenv.SkipIfMissing(t)
	api, err := kubeenv.Start(kubeenv.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Stop)
	kubeconfig, err := api.WriteKubeconfig(api.Admin, "admin")
	if err != nil {
		t.Fatal(err)
	}
	productpageToken := token(t, api, "bookinfo", "bookinfo-productpage")
	shopToken := token(t, api, "shop", "cart")

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	backend := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo,
		h grpc.UnaryHandler) (any, error) {
		_ = grpc.SetHeader(ctx, metadata.Pairs("backend", "echo-1"))
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(backend, health.NewServer())
	go func() { _ = backend.Serve(lis) }()
	t.Cleanup(backend.Stop)
	_, port, _ := net.SplitHostPort(lis.Addr().String())
	configDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(configDir, "echo.yaml"), fmt.Appendf(nil, echoYAML, port), 0o644); err != nil {
		t.Fatal(err)
	}
	// Tokens are reviewed by the cluster (no TokenAuthenticator); the mesh comes from the files.
	s := startSextantArgs(t, discovery.Args{ConfigDir: configDir, Kubeconfig: kubeconfig})

	dir, _ := runIstioAgent(t, s, productpageToken)
	waitForCert(t, dir)
	leaf := parseCert(t, readFile(t, filepath.Join(dir, "certs", "cert-chain.pem")))
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != productpage.String() {
		t.Errorf("agent's certificate names %v, want %s", leaf.URIs, productpage)
	}
	bootstrap := []byte(readFile(t, filepath.Join(dir, "grpc-bootstrap.json")))
	resolver, err := xdsgrpc.NewXDSResolverWithConfigForTesting(bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///echo.bookinfo.svc.cluster.local:7070", grpc.WithResolvers(resolver),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var hdr metadata.MD
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr),
		grpc.WaitForReady(true)); err != nil {
		t.Fatalf("call through xDS from the agent: %v", err)
	}
	if got := hdr.Get("backend"); len(got) != 1 || got[0] != "echo-1" {
		t.Errorf("reached %v, want echo-1", got)
	}

	// The same agent (node in bookinfo) with shop's token.
	dir2, bootstrap2 := runIstioAgent(t, s, shopToken)
	_, err = askListener(t, dir2, bootstrapNode(t, bootstrap2), "echo.bookinfo.svc.cluster.local:7070")
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "claims namespace bookinfo") ||
		!strings.Contains(err.Error(), "spiffe://cluster.local/ns/shop/sa/cart") {
		t.Fatalf("xDS with another namespace's token: %v, want PermissionDenied naming both", err)
	}
}

func waitForCert(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "certs", "cert-chain.pem")); err == nil && len(b) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent wrote no certificate")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
