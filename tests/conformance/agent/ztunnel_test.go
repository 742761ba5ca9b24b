package agent

import (
	"bytes"
	"context"
	"crypto/x509"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	"github.com/sextantmesh/sextant/pilot/ca"
	"github.com/sextantmesh/sextant/pilot/discovery"
	"github.com/sextantmesh/sextant/tests/kubeenv"
)

// ztunnelOn returns the model of ztunnel (see ztunnelModel) running as pod, with pod's projected token.
func ztunnelOn(t *testing.T, api *kubeenv.Server, s *sextant, pod *corev1.Pod) *ztunnelModel {
	t.Helper()
	tokenFile := filepath.Join(t.TempDir(), "istio-token")
	if err := os.WriteFile(tokenFile, []byte(podToken(t, api, pod, "istio-ca")), 0o600); err != nil {
		t.Fatal(err)
	}
	return &ztunnelModel{
		Address: "https://" + s.srv.SecureGRPCAddr(), AltHostname: "istiod.istio-system.svc",
		RootCertFile: filepath.Join(s.caDir, ca.RootFile), TokenFile: tokenFile, ClusterID: "Kubernetes",
		Shared: true, SecretTTL: 24 * time.Hour,
		Pod: pod.Name, Namespace: pod.Namespace, IP: pod.Status.PodIP, NodeName: pod.Spec.NodeName,
	}
}

// logBuffer keeps what the server logs, to check the reason of refusals the client is not told.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestZtunnelWithTheRealAPIServer: a model of ztunnel's control-plane client (ztunnel_model_test.go,
// written from ztunnel's source), with the token the API server binds to its pod on node-a, gets the
// certificates of node-a's workloads and no others; ztunnels of accounts that are not trusted node
// accounts get no certificate and no workloads.
func TestZtunnelWithTheRealAPIServer(t *testing.T) {
	api, kubeconfig := startAPIServer(t)
	ztunnelPod := createPod(t, api, "istio-system", "ztunnel-7xk2p", "ztunnel", "node-a", "10.1.0.10", corev1.PodRunning)
	createPod(t, api, "shop", "cart-1", "cart", "node-a", "10.1.0.11", corev1.PodRunning)
	createPod(t, api, "shop", "checkout-0", "checkout", "node-a", "", corev1.PodPending) // scheduled, no IP yet
	createPod(t, api, "shop", "report-29", "report", "node-a", "10.1.0.13", corev1.PodFailed)
	createPod(t, api, "bank", "vault-1", "vault", "node-b", "10.1.1.11", corev1.PodRunning)
	// Node proxies of accounts that are not trusted: ztunnel's name in another namespace, another
	// account in ztunnel's namespace.
	forgedInShop := createPod(t, api, "shop", "ztunnel-fake", "ztunnel", "node-a", "10.1.0.99", corev1.PodRunning)
	forgedInIstio := createPod(t, api, "istio-system", "gateway-1", "istio-ingressgateway", "node-a", "10.1.0.98", corev1.PodRunning)
	logs := &logBuffer{}
	s := startSextantArgs(t, discovery.Args{Kubeconfig: kubeconfig,
		Logger: slog.New(slog.NewTextHandler(io.MultiWriter(logs, os.Stderr), nil))})
	root, err := os.ReadFile(filepath.Join(s.caDir, ca.RootFile))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(root)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	z := ztunnelOn(t, api, s, ztunnelPod)
	for _, id := range []string{"spiffe://cluster.local/ns/shop/sa/cart", "spiffe://cluster.local/ns/shop/sa/checkout"} {
		leaf, chain, err := z.FetchCertificate(ctx, id)
		if err != nil {
			t.Errorf("ztunnel on node-a for %s (on node-a): %v", id, err)
			continue
		}
		if len(leaf.URIs) != 1 || leaf.URIs[0].String() != id || len(leaf.DNSNames)+len(leaf.IPAddresses)+len(leaf.EmailAddresses) != 0 {
			t.Errorf("certificate for %s names %v %v %v %v", id, leaf.URIs, leaf.DNSNames, leaf.IPAddresses, leaf.EmailAddresses)
		}
		inter := x509.NewCertPool()
		for _, c := range chain {
			inter.AddCert(c)
		}
		for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth} {
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
				t.Errorf("certificate for %s (usage %v): %v", id, usage, err)
			}
		}
		if got := leaf.NotAfter.Sub(time.Now()); got < 23*time.Hour || got > 24*time.Hour {
			t.Errorf("certificate for %s valid %s more, want ztunnel's SECRET_TTL of 24h", id, got)
		}
	}
	// Refused as istiod refuses them: Unauthenticated, the reason only in the server's log.
	refused := func(what string, z *ztunnelModel, id, reason string) {
		t.Helper()
		_, _, err := z.FetchCertificate(ctx, id)
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "request impersonation authentication failure") {
			t.Errorf("%s: %v, want Unauthenticated: request impersonation authentication failure", what, err)
		}
		if !strings.Contains(logs.String(), reason) {
			t.Errorf("%s: the server did not log the reason %q", what, reason)
		}
	}
	refused("ztunnel on node-a for a workload on node-b", z, "spiffe://cluster.local/ns/bank/sa/vault",
		`no pod of bank/vault on node \"node-a\"`)
	refused("ztunnel on node-a for a failed pod's account", z, "spiffe://cluster.local/ns/shop/sa/report",
		`no pod of shop/report on node \"node-a\"`)
	refused("ztunnel on node-a for an account no pod runs as", z, "spiffe://cluster.local/ns/shop/sa/nobody",
		`no pod of shop/nobody on node \"node-a\"`)
	forged := map[string]*ztunnelModel{"shop/ztunnel": ztunnelOn(t, api, s, forgedInShop),
		"istio-system/istio-ingressgateway": ztunnelOn(t, api, s, forgedInIstio)}
	for account, f := range forged {
		refused("a ztunnel running as "+account+" for a workload on its node", f, "spiffe://cluster.local/ns/shop/sa/cart",
			account+" is not a trusted node account")
	}

	// ztunnel names its cluster (CLUSTER_ID): a token it says is another cluster's is not this one's to review.
	elsewhere := *z
	elsewhere.ClusterID = "east"
	if _, _, err := elsewhere.FetchCertificate(ctx, "spiffe://cluster.local/ns/shop/sa/cart"); status.Code(err) != codes.Unauthenticated ||
		!strings.Contains(err.Error(), `token is from cluster "east", but tokens are reviewed by cluster "Kubernetes" only`) {
		t.Errorf("ztunnel naming another cluster: %v, want Unauthenticated naming both clusters", err)
	}

	// xDS: the trusted ztunnel is served its workloads; the others PermissionDenied, naming why.
	resp, err := z.FirstXDSResponse(ctx, addressType)
	if err != nil {
		t.Fatalf("ztunnel's workload xDS: %v", err)
	}
	names := map[string]bool{}
	for _, r := range resp.GetResources() {
		names[r.GetName()] = true
	}
	for _, want := range []string{"Kubernetes//Pod/shop/cart-1", "Kubernetes//Pod/bank/vault-1"} {
		if !names[want] {
			t.Errorf("ztunnel's workloads %v lack %s", names, want)
		}
	}
	for account, f := range forged {
		for _, typeURL := range []string{addressType, authorizationType} {
			_, err := f.FirstXDSResponse(ctx, typeURL)
			if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "not a trusted node account") {
				t.Errorf("a ztunnel running as %s asking for %s: %v, want PermissionDenied: not a trusted node account", account, typeURL, err)
			}
		}
	}
}
