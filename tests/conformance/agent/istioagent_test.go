package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"istio.io/istio/pkg/bootstrap/platform"
	"istio.io/istio/pkg/config/mesh"
	"istio.io/istio/pkg/envoy"
	istioagent "istio.io/istio/pkg/istio-agent"
	"istio.io/istio/pkg/istio-agent/grpcxds"
	"istio.io/istio/pkg/security"
	"istio.io/istio/security/pkg/credentialfetcher/plugin"

	"github.com/sextantmesh/sextant/pilot/ca"
)

const listenerType = "type.googleapis.com/envoy.config.listener.v3.Listener"

// runIstioAgent runs Istio's sidecar agent in-process as the proxyless-gRPC agent (no Envoy): it fetches
// its certificate from Sextant's CA with token, writes it to its certificate directory, and proxies xDS
// from a Unix socket to Sextant's secure port with the same token. Its paths are relative to the
// working directory, so it runs in a directory of its own.
func runIstioAgent(t *testing.T, s *sextant, token string) (dir string, bootstrap *grpcxds.Bootstrap) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join(s.caDir, ca.RootFile))
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	t.Chdir(dir)
	tokenFile := filepath.Join(dir, "istio-token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "certs"), 0o700); err != nil { // as the pod's emptyDir
		t.Fatal(err)
	}
	pc := mesh.DefaultProxyConfig()
	pc.DiscoveryAddress = s.srv.SecureGRPCAddr()
	sopts := &security.Options{
		CAEndpoint:         s.srv.SecureGRPCAddr(),
		CAEndpointSAN:      "istiod.istio-system.svc",
		CAProviderName:     "Citadel",
		TrustDomain:        "cluster.local",
		ClusterID:          "Kubernetes",
		CredFetcher:        plugin.CreateTokenPlugin(tokenFile),
		WorkloadNamespace:  "bookinfo",
		ServiceAccount:     "bookinfo-productpage",
		ECCSigAlg:          "ECDSA",
		OutputKeyCertToDir: filepath.Join(dir, "certs"),
		SecretTTL:          12 * time.Hour,
		CARootPath:         root,
	}
	aopts := &istioagent.AgentOptions{
		XDSRootCerts:               root,
		CARootCerts:                root,
		IstiodSAN:                  "istiod.istio-system.svc",
		XdsUdsPath:                 filepath.Join(dir, "XDS"),
		ServiceNode:                "sidecar~127.0.0.1~productpage-v1-0000.bookinfo~bookinfo.svc.cluster.local",
		GRPCBootstrapPath:          filepath.Join(dir, "grpc-bootstrap.json"),
		DisableEnvoy:               true,
		ProxyNamespace:             "bookinfo",
		ProxyDomain:                "bookinfo.svc.cluster.local",
		ProxyIPAddresses:           []string{"127.0.0.1"},
		Platform:                   &platform.Unknown{},
		WorkloadIdentitySocketFile: security.DefaultWorkloadIdentitySocketFile,
	}
	a := istioagent.NewAgent(pc, aopts, sopts, envoy.ProxyConfig{TestOnly: true})
	ctx, cancel := context.WithCancel(context.Background())
	wait, err := a.Run(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); a.Close(); wait() })
	if bootstrap, err = grpcxds.LoadBootstrap(aopts.GRPCBootstrapPath); err != nil {
		t.Fatal(err)
	}
	return dir, bootstrap
}

// askListener sends the first request a proxyless gRPC client would, with the bootstrap's node, through
// the agent's socket.
func askListener(t *testing.T, dir string, node *core.Node, name string) (*discovery.DiscoveryResponse, error) {
	t.Helper()
	cc, err := grpc.NewClient("unix://"+filepath.Join(dir, "XDS"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: listenerType, ResourceNames: []string{name}}); err != nil {
		return nil, err
	}
	return stream.Recv()
}

func TestIstioAgentGetsItsCertificateAndXDSFromSextant(t *testing.T) {
	s := startSextant(t)
	dir, bootstrap := runIstioAgent(t, s, "productpage-token")

	// The certificate the agent wrote is for the pod's service account and chains to Sextant's root.
	var chainPEM []byte
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		if chainPEM, err = os.ReadFile(filepath.Join(dir, "certs", "cert-chain.pem")); err == nil && len(chainPEM) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent wrote no certificate: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	leaf := parseCert(t, string(chainPEM))
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != productpage.String() {
		t.Errorf("agent's certificate names %v, want %s", leaf.URIs, productpage)
	}

	node := bootstrapNode(t, bootstrap)
	resp, err := askListener(t, dir, node, "productpage.bookinfo.svc.cluster.local:9080")
	if err != nil {
		t.Fatalf("xDS through the agent: %v", err)
	}
	if len(resp.GetResources()) != 1 {
		t.Fatalf("%d listeners, want productpage's", len(resp.GetResources()))
	}
	var l listener.Listener
	if err := resp.GetResources()[0].UnmarshalTo(&l); err != nil || l.GetName() != "productpage.bookinfo.svc.cluster.local:9080" ||
		l.GetApiListener() == nil {
		t.Errorf("listener %q (api listener %v): %v", l.GetName(), l.GetApiListener() != nil, err)
	}
}

func TestIstioAgentWithAnotherNamespacesTokenIsRefused(t *testing.T) {
	// The token proves shop/cart; the agent's node says bookinfo.
	s := startSextant(t, tokens{"shop-token": {TrustDomain: "cluster.local", Namespace: "shop", ServiceAccount: "cart"}})
	dir, bootstrap := runIstioAgent(t, s, "shop-token")
	_, err := askListener(t, dir, bootstrapNode(t, bootstrap), "productpage.bookinfo.svc.cluster.local:9080")
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "claims namespace bookinfo") ||
		!strings.Contains(err.Error(), "spiffe://cluster.local/ns/shop/sa/cart") {
		t.Fatalf("xDS with another namespace's token: %v, want PermissionDenied naming both", err)
	}
}

func bootstrapNode(t *testing.T, b *grpcxds.Bootstrap) *core.Node {
	t.Helper()
	if b.Node == nil || b.Node.GetId() == "" {
		t.Fatal("the agent's gRPC bootstrap has no node")
	}
	return b.Node
}
