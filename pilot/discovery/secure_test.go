package discovery_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	pb "istio.io/api/security/v1alpha1"

	"github.com/sextantmesh/sextant/pilot/authn"
	"github.com/sextantmesh/sextant/pilot/ca"
	"github.com/sextantmesh/sextant/pilot/discovery"
)

// tokens authenticates fixed bearer tokens, standing in for the cluster's TokenReview API.
type tokens map[string]*authn.Caller

func (m tokens) AuthenticateToken(_ context.Context, token string) (*authn.Caller, error) {
	if c, ok := m[token]; ok {
		return c, nil
	}
	return nil, errors.New("token rejected")
}

var testTokens = tokens{
	"productpage": {Identities: []authn.Identity{{TrustDomain: "cluster.local", Namespace: "bookinfo",
		ServiceAccount: "bookinfo-productpage"}},
		Method: "token", PodName: "productpage-v1-0000"},
	"ztunnel": {Identities: []authn.Identity{{TrustDomain: "cluster.local", Namespace: "istio-system", ServiceAccount: "ztunnel"}},
		Method: "token", PodName: "ztunnel-a", PodUID: "6f1c0c7e-ztunnel-a"},
	// Issued for an earlier pod named ztunnel-a, deleted since (the API server would refuse it too; a
	// view of the cluster that is behind must not rely on that).
	"ztunnel-earlier-pod": {Identities: []authn.Identity{{TrustDomain: "cluster.local", Namespace: "istio-system", ServiceAccount: "ztunnel"}},
		Method: "token", PodName: "ztunnel-a", PodUID: "0d9e7b2a-earlier"},
}

const ztunnelPod = `apiVersion: v1
kind: Pod
metadata:
  name: ztunnel-a
  namespace: istio-system
  uid: 6f1c0c7e-ztunnel-a
spec:
  nodeName: node-a
  serviceAccountName: ztunnel
  containers:
  - name: istio-proxy
    image: istio/ztunnel
status:
  phase: Running
  podIP: 10.1.0.99
  conditions:
  - type: Ready
    status: "True"
`

func startSecure(t *testing.T, configDir, caDir string) *discovery.Server {
	t.Helper()
	srv, err := discovery.NewServer(discovery.Args{ConfigDir: configDir, GRPCAddr: "", SecureGRPCAddr: "127.0.0.1:0", CADir: caDir,
		HTTPAddr: "127.0.0.1:0", DebounceAfter: 20 * time.Millisecond, TrustedNodeAccounts: discovery.DefaultTrustedNodeAccounts,
		TokenAuthenticator: testTokens})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); srv.Wait() })
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return srv
}

// dialSecure connects as a proxy configured for istiod would: the root from the CA directory,
// istiod's name as the server name.
func dialSecure(t *testing.T, srv *discovery.Server, caDir string) *grpc.ClientConn {
	t.Helper()
	root, err := os.ReadFile(filepath.Join(caDir, ca.RootFile))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(root)
	cc, err := grpc.NewClient(srv.SecureGRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs: pool, ServerName: "istiod.istio-system.svc"})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func bearer(token string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
}

func csr(t *testing.T) string {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

func leafURI(t *testing.T, resp *pb.IstioCertificateResponse) string {
	t.Helper()
	block, _ := pem.Decode([]byte(resp.GetCertChain()[0]))
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil || len(c.URIs) != 1 {
		t.Fatalf("leaf: %v, URIs %v", err, c.URIs)
	}
	return c.URIs[0].String()
}

func TestSecurePortServesTheCAAndAuthenticatedXDS(t *testing.T) {
	configDir := copyDir(t, "../../examples/bookinfo")
	if err := os.WriteFile(filepath.Join(configDir, "60-ztunnel.yaml"), []byte(ztunnelPod), 0o644); err != nil {
		t.Fatal(err)
	}
	caDir := filepath.Join(t.TempDir(), "ca")
	srv := startSecure(t, configDir, caDir)
	if srv.GRPCAddr() != "" {
		t.Errorf("plaintext port open at %s although --grpc-addr is empty", srv.GRPCAddr())
	}
	cc := dialSecure(t, srv, caDir)
	certs := pb.NewIstioCertificateServiceClient(cc)

	resp, err := certs.CreateCertificate(bearer("productpage"), &pb.IstioCertificateRequest{Csr: csr(t)})
	if err != nil {
		t.Fatal(err)
	}
	if got := leafURI(t, resp); got != "spiffe://cluster.local/ns/bookinfo/sa/bookinfo-productpage" {
		t.Errorf("certificate for %s", got)
	}
	// The ztunnel on node-a may ask for productpage (on node-a), not for details (on node-b).
	impersonate := func(id string) (*pb.IstioCertificateResponse, error) {
		return certs.CreateCertificate(bearer("ztunnel"), &pb.IstioCertificateRequest{Csr: csr(t),
			Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{"ImpersonatedIdentity": structpb.NewStringValue(id)}}})
	}
	if resp, err := impersonate("spiffe://cluster.local/ns/bookinfo/sa/bookinfo-productpage"); err != nil {
		t.Errorf("ztunnel for a workload on its node: %v", err)
	} else if got := leafURI(t, resp); got != "spiffe://cluster.local/ns/bookinfo/sa/bookinfo-productpage" {
		t.Errorf("ztunnel got a certificate for %s", got)
	}
	if _, err := impersonate("spiffe://cluster.local/ns/bookinfo/sa/bookinfo-details"); status.Code(err) != codes.Unauthenticated {
		t.Errorf("ztunnel for a workload on another node: %v, want Unauthenticated", err)
	}

	ads := discoverypb.NewAggregatedDiscoveryServiceClient(cc)
	stream := func(token, nodeID string) (*discoverypb.DiscoveryResponse, error) {
		s, err := ads.StreamAggregatedResources(bearer(token))
		if err != nil {
			return nil, err
		}
		if err := s.Send(&discoverypb.DiscoveryRequest{Node: &core.Node{Id: nodeID},
			TypeUrl: "type.googleapis.com/envoy.config.cluster.v3.Cluster"}); err != nil {
			return nil, err
		}
		return s.Recv()
	}
	if r, err := stream("productpage", "sidecar~10.1.0.10~productpage-v1-0000.bookinfo~bookinfo.svc.cluster.local"); err != nil ||
		len(r.GetResources()) == 0 {
		t.Errorf("sidecar with its own token: %v, %d clusters", err, len(r.GetResources()))
	}
	_, err = stream("productpage", "sidecar~10.1.0.10~ratings-v1-0005.istio-system~istio-system.svc.cluster.local")
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "claims namespace istio-system") ||
		!strings.Contains(err.Error(), "spiffe://cluster.local/ns/bookinfo/sa/bookinfo-productpage") {
		t.Errorf("sidecar claiming another namespace: %v, want PermissionDenied naming both", err)
	}
	_, err = stream("nobody", "sidecar~10.1.0.10~productpage-v1-0000.bookinfo~bookinfo.svc.cluster.local")
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("unknown token: %v, want Unauthenticated", err)
	}
}

func TestCADirKeepsTheRootAcrossRestarts(t *testing.T) {
	configDir := copyDir(t, "../../examples/bookinfo")
	caDir := filepath.Join(t.TempDir(), "ca")
	first := startSecure(t, configDir, caDir)
	cert1, err := first.ServingCertificate()
	if err != nil {
		t.Fatal(err)
	}
	root1, _ := os.ReadFile(filepath.Join(caDir, ca.RootFile))
	second := startSecure(t, configDir, caDir)
	cert2, _ := second.ServingCertificate()
	root2, _ := os.ReadFile(filepath.Join(caDir, ca.RootFile))
	if string(root1) != string(root2) || len(root1) == 0 {
		t.Fatal("the root changed on restart")
	}
	// Both servers' certificates verify against the one root, as istiod.istio-system.svc and Sextant's own name.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(root1)
	for _, c := range []*tls.Certificate{cert1, cert2} {
		for _, name := range discovery.DefaultServingDNSNames {
			if _, err := c.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name}); err != nil {
				t.Errorf("serving certificate as %s: %v", name, err)
			}
		}
	}
}

// Pods on node-a beside bookinfo's: one scheduled but without an IP yet, one that has failed.
const nodeAPods = `apiVersion: v1
kind: Pod
metadata:
  name: checkout-0
  namespace: shop
  uid: 3a7d-checkout-0
spec:
  nodeName: node-a
  serviceAccountName: checkout
  containers:
  - name: app
    image: checkout
status:
  phase: Pending
---
apiVersion: v1
kind: Pod
metadata:
  name: report-29
  namespace: shop
  uid: 91bc-report-29
spec:
  nodeName: node-a
  serviceAccountName: report
  containers:
  - name: app
    image: report
status:
  phase: Failed
  podIP: 10.1.0.77
`

// TestZtunnelImpersonationFollowsThePodsOnItsNode: the node is the caller's pod's, the pod must be the
// one the token was issued for, and a workload counts from when it is scheduled until it fails (istiod's
// node authorizer).
func TestZtunnelImpersonationFollowsThePodsOnItsNode(t *testing.T) {
	configDir := copyDir(t, "../../examples/bookinfo")
	if err := os.WriteFile(filepath.Join(configDir, "60-ztunnel.yaml"), []byte(ztunnelPod+"---\n"+nodeAPods), 0o644); err != nil {
		t.Fatal(err)
	}
	caDir := filepath.Join(t.TempDir(), "ca")
	srv := startSecure(t, configDir, caDir)
	certs := pb.NewIstioCertificateServiceClient(dialSecure(t, srv, caDir))
	impersonate := func(token, id string) (*pb.IstioCertificateResponse, error) {
		return certs.CreateCertificate(bearer(token), &pb.IstioCertificateRequest{Csr: csr(t),
			Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{"ImpersonatedIdentity": structpb.NewStringValue(id)}}})
	}
	if resp, err := impersonate("ztunnel", "spiffe://cluster.local/ns/shop/sa/checkout"); err != nil {
		t.Errorf("ztunnel for a pod on its node that has no IP yet: %v", err)
	} else if got := leafURI(t, resp); got != "spiffe://cluster.local/ns/shop/sa/checkout" {
		t.Errorf("certificate for %s", got)
	}
	for name, tc := range map[string]struct{ token, id string }{
		"a failed pod's account":              {"ztunnel", "spiffe://cluster.local/ns/shop/sa/report"},
		"token of an earlier pod of the name": {"ztunnel-earlier-pod", "spiffe://cluster.local/ns/bookinfo/sa/bookinfo-productpage"},
	} {
		if _, err := impersonate(tc.token, tc.id); status.Code(err) != codes.Unauthenticated ||
			!strings.Contains(err.Error(), "request impersonation authentication failure") {
			t.Errorf("%s: %v, want Unauthenticated (impersonation refused)", name, err)
		}
	}
}
