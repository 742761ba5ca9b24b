package ca

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	pb "istio.io/api/security/v1alpha1"

	"github.com/sextantmesh/sextant/pilot/authn"
)

// tokens authenticates fixed tokens, standing in for TokenReview.
type tokens map[string]*authn.Caller

func (m tokens) AuthenticateToken(_ context.Context, token string) (*authn.Caller, error) {
	if c, ok := m[token]; ok {
		return c, nil
	}
	return nil, errors.New("token rejected")
}

// pods is a fixed cluster: pod namespace/name → its UID, node and service account.
type pods map[string]Pod

func (p pods) Pod(ns, name string) (Pod, bool) {
	v, ok := p[ns+"/"+name]
	return v, ok
}

func (p pods) AccountOnNode(node string, id authn.Identity) bool {
	for k, v := range p {
		if v.NodeName == node && strings.HasPrefix(k, id.Namespace+"/") && v.ServiceAccount == id.ServiceAccount {
			return true
		}
	}
	return false
}

type caServer struct {
	addr string
	ca   *Authority
}

func startCA(t *testing.T) *caServer {
	t.Helper()
	a, err := New(selfSigned(t), Options{TrustDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	serving, err := NewServingCert(a, []string{"istiod.istio-system.svc"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	ztunnel := authn.Identity{TrustDomain: "cluster.local", Namespace: "istio-system", ServiceAccount: "ztunnel"}
	svc := NewService(ServiceOptions{
		Authority: a,
		Authenticator: authn.Chain{ClientCert: &authn.ClientCertAuthenticator{TrustDomain: "cluster.local"}, Token: tokens{
			"cart-token":    {Identities: []authn.Identity{workload}, Method: "token", PodName: "cart-1", PodUID: "uid-cart-1"},
			"ztunnel-token": {Identities: []authn.Identity{ztunnel}, Method: "token", PodName: "ztunnel-a", PodUID: "uid-ztunnel-a"},
			// Issued for a ztunnel-a that was deleted since; the pod of that name now is another one.
			"replaced-ztunnel-token": {Identities: []authn.Identity{ztunnel}, Method: "token", PodName: "ztunnel-a", PodUID: "uid-ztunnel-a-before"},
			"fake-ztunnel": {Identities: []authn.Identity{{TrustDomain: "cluster.local", Namespace: "shop", ServiceAccount: "ztunnel"}},
				PodName: "z", PodUID: "uid-z"},
		}},
		TrustedNodeAccounts: authn.Accounts{"istio-system/ztunnel": true},
		Pods: pods{"istio-system/ztunnel-a": {"uid-ztunnel-a", "node-a", "ztunnel"}, "shop/cart-1": {"uid-cart-1", "node-a", "cart"},
			"shop/z": {"uid-z", "node-a", "ztunnel"}, "bank/vault-1": {"uid-vault-1", "node-b", "vault"}},
	})
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(serving.TLSConfig())))
	svc.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return &caServer{addr: lis.Addr().String(), ca: a}
}

func (s *caServer) client(t *testing.T, clientCert *tls.Certificate) pb.IstioCertificateServiceClient {
	t.Helper()
	cfg := &tls.Config{RootCAs: s.ca.Roots(), ServerName: "istiod.istio-system.svc"}
	if clientCert != nil {
		cfg.Certificates = []tls.Certificate{*clientCert}
	}
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewIstioCertificateServiceClient(conn)
}

func withToken(token string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
}

func leafOf(t *testing.T, resp *pb.IstioCertificateResponse) *x509.Certificate {
	t.Helper()
	return parseChain(t, resp.GetCertChain())[0]
}

func TestCreateCertificateForTheTokensIdentity(t *testing.T) {
	s := startCA(t)
	c := s.client(t, nil)
	resp, err := c.CreateCertificate(withToken("cart-token"), &pb.IstioCertificateRequest{
		Csr: string(newCSR(t, "spiffe://cluster.local/ns/istio-system/sa/istiod")), ValidityDuration: 3600})
	if err != nil {
		t.Fatal(err)
	}
	leaf := leafOf(t, resp)
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != workload.String() {
		t.Errorf("issued for %v, want %s", leaf.URIs, workload)
	}
	if got := leaf.NotAfter.Sub(leaf.NotBefore) - clockSkew; got != time.Hour {
		t.Errorf("validity %s, want the hour asked for", got)
	}
	if last := resp.GetCertChain()[len(resp.GetCertChain())-1]; last != string(s.ca.RootPEM()) {
		t.Error("the root is not the last element of the chain")
	}
}

func TestCreateCertificateRefusals(t *testing.T) {
	s := startCA(t)
	c := s.client(t, nil)
	for name, tc := range map[string]struct {
		ctx  context.Context
		md   map[string]string
		code codes.Code
		want string
	}{
		"no credentials": {context.Background(), nil, codes.Unauthenticated, "no credentials"},
		"unknown token":  {withToken("stolen"), nil, codes.Unauthenticated, "token rejected"},
		"malformed header": {metadata.AppendToOutgoingContext(context.Background(), "authorization", "Basic x"), nil,
			codes.Unauthenticated, "Bearer"},
		"impersonation, not a node account": {withToken("cart-token"),
			map[string]string{"ImpersonatedIdentity": "spiffe://cluster.local/ns/shop/sa/cart"},
			codes.Unauthenticated, "impersonation"},
		"node account in the wrong namespace": {withToken("fake-ztunnel"),
			map[string]string{"ImpersonatedIdentity": "spiffe://cluster.local/ns/shop/sa/cart"},
			codes.Unauthenticated, "impersonation"},
		"workload on another node": {withToken("ztunnel-token"),
			map[string]string{"ImpersonatedIdentity": "spiffe://cluster.local/ns/bank/sa/vault"},
			codes.Unauthenticated, "impersonation"},
		"node account's pod replaced since its token": {withToken("replaced-ztunnel-token"),
			map[string]string{"ImpersonatedIdentity": "spiffe://cluster.local/ns/shop/sa/cart"}, codes.Unauthenticated, "impersonation"},
		"another signer": {withToken("cart-token"), map[string]string{"CertSigner": "kubernetes.io/kube-apiserver-client"},
			codes.InvalidArgument, "signer"},
	} {
		md := &structpb.Struct{Fields: map[string]*structpb.Value{}}
		for k, v := range tc.md {
			md.Fields[k] = structpb.NewStringValue(v)
		}
		_, err := c.CreateCertificate(tc.ctx, &pb.IstioCertificateRequest{Csr: string(newCSR(t)), Metadata: md})
		if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %s containing %q", name, err, tc.code, tc.want)
		}
	}
}

func TestTrustedNodeAccountGetsCertificatesOfItsNodesWorkloads(t *testing.T) {
	s := startCA(t)
	c := s.client(t, nil)
	resp, err := c.CreateCertificate(withToken("ztunnel-token"), &pb.IstioCertificateRequest{Csr: string(newCSR(t)),
		Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{"ImpersonatedIdentity": structpb.NewStringValue(workload.String())}}})
	if err != nil {
		t.Fatal(err)
	}
	if leaf := leafOf(t, resp); leaf.URIs[0].String() != workload.String() {
		t.Errorf("issued for %v, want %s", leaf.URIs, workload)
	}
}

func TestCreateCertificateWithAClientCertificateTheCAIssued(t *testing.T) {
	s := startCA(t)
	// First certificate by token, then renewal with it, as a workload without a fresh token would.
	key, csr := newKeyAndCSR(t)
	resp, err := s.client(t, nil).CreateCertificate(withToken("cart-token"), &pb.IstioCertificateRequest{Csr: string(csr)})
	if err != nil {
		t.Fatal(err)
	}
	leaf := leafOf(t, resp)
	cert := &tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err = s.client(t, cert).CreateCertificate(ctx, &pb.IstioCertificateRequest{Csr: string(newCSR(t))})
	if err != nil {
		t.Fatal(err)
	}
	if got := leafOf(t, resp).URIs[0].String(); got != workload.String() {
		t.Errorf("renewed for %s, want %s", got, workload)
	}

	// A certificate from another CA fails the handshake.
	other := startCA(t)
	resp, err = other.client(t, nil).CreateCertificate(withToken("cart-token"), &pb.IstioCertificateRequest{Csr: string(csr)})
	if err != nil {
		t.Fatal(err)
	}
	foreign := &tls.Certificate{Certificate: [][]byte{leafOf(t, resp).Raw}, PrivateKey: key}
	if _, err := s.client(t, foreign).CreateCertificate(ctx,
		&pb.IstioCertificateRequest{Csr: string(newCSR(t))}); status.Code(err) != codes.Unavailable {
		t.Errorf("client certificate of another CA: %v, want the handshake to fail", err)
	}
}

// A caller's request is read only once it is authenticated: one without credentials is refused as such
// even when its request is past the server's message limit (gRPC's 4 MiB here), which reading it would
// have answered with ResourceExhausted after taking it in.
func TestUnauthenticatedRequestIsNotRead(t *testing.T) {
	s := startCA(t)
	huge := strings.Repeat("x", 8<<20)
	_, err := s.client(t, nil).CreateCertificate(context.Background(), &pb.IstioCertificateRequest{Csr: huge})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("unauthenticated 8 MiB request: %v, want Unauthenticated before it is read", err)
	}
}

// An authenticated caller's request past MaxRequestBytes is refused naming the limit.
func TestOversizedRequestIsRefused(t *testing.T) {
	s := startCA(t)
	csr := string(newCSR(t)) + strings.Repeat("\n", MaxRequestBytes)
	_, err := s.client(t, nil).CreateCertificate(withToken("cart-token"), &pb.IstioCertificateRequest{Csr: csr})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "limit of 65536 bytes") {
		t.Fatalf("request with a %d-byte csr: %v, want ResourceExhausted naming the limit", len(csr), err)
	}
}

// A validity past the maximum is refused naming the field and the flag, even one so long that in
// nanoseconds it overflows (18,446,744,074 s wrapped to a certificate valid about 0 s).
func TestValidityPastTheMaximumIsRefused(t *testing.T) {
	s := startCA(t)
	c := s.client(t, nil)
	for _, v := range []int64{18_446_744_074, int64(DefaultMaxTTL/time.Second) + 1, 1 << 62} {
		_, err := c.CreateCertificate(withToken("cart-token"), &pb.IstioCertificateRequest{Csr: string(newCSR(t)), ValidityDuration: v})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "validity_duration") ||
			!strings.Contains(err.Error(), "--max-workload-cert-ttl") {
			t.Errorf("validity_duration %d: %v, want InvalidArgument naming the field and --max-workload-cert-ttl", v, err)
		}
	}
	_, err := c.CreateCertificate(withToken("cart-token"), &pb.IstioCertificateRequest{Csr: string(newCSR(t)), ValidityDuration: -1})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "validity_duration") {
		t.Errorf("validity_duration -1: %v, want InvalidArgument", err)
	}
	resp, err := c.CreateCertificate(withToken("cart-token"), &pb.IstioCertificateRequest{Csr: string(newCSR(t)),
		ValidityDuration: int64(DefaultMaxTTL / time.Second)})
	if err != nil {
		t.Fatalf("validity of exactly the maximum: %v", err)
	}
	if leaf := leafOf(t, resp); leaf.NotAfter.Sub(leaf.NotBefore)-clockSkew != DefaultMaxTTL {
		t.Errorf("validity %s, want %s", leaf.NotAfter.Sub(leaf.NotBefore)-clockSkew, DefaultMaxTTL)
	}
}

// Refusals any caller can cause are logged at a bounded rate: a flood of unauthenticated calls writes about
// the burst, not a line each.
func TestRefusalLinesAreRateLimited(t *testing.T) {
	lines := &countingHandler{}
	a, err := New(selfSigned(t), Options{TrustDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	svc := NewService(ServiceOptions{Authority: a, Authenticator: authn.Chain{Token: tokens{}}, Logger: slog.New(lines)})
	g := grpc.NewServer()
	svc.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewIstioCertificateServiceClient(conn)
	const calls = refusalLogBurst + 300
	for range calls {
		if _, err := client.CreateCertificate(withToken("nobody"),
			&pb.IstioCertificateRequest{Csr: "x"}); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("unknown token: %v, want Unauthenticated", err)
		}
	}
	if n := lines.count.Load(); n >= calls-100 {
		t.Fatalf("%d refusals wrote %d lines, want about the burst of %d", calls, n, refusalLogBurst)
	}
}

type countingHandler struct{ count atomic.Int64 }

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(context.Context, slog.Record) error {
	h.count.Add(1)
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }
