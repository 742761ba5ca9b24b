package discovery_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	pb "istio.io/api/security/v1alpha1"

	"github.com/sextantmesh/sextant/pilot/ca"
	"github.com/sextantmesh/sextant/pilot/discovery"
)

// startSecureBench starts the secure port alone, in file mode, with the fixed tokens standing in for
// TokenReview: what is measured is Sextant's TLS, gRPC, authentication and signing, not the apiserver.
func startSecureBench(b *testing.B) (*discovery.Server, *x509.CertPool) {
	b.Helper()
	caDir := b.TempDir()
	srv, err := discovery.NewServer(discovery.Args{ConfigDir: b.TempDir(), GRPCAddr: "", SecureGRPCAddr: "127.0.0.1:0", CADir: caDir,
		HTTPAddr: "127.0.0.1:0", TrustedNodeAccounts: discovery.DefaultTrustedNodeAccounts, TokenAuthenticator: testTokens})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(func() { cancel(); srv.Wait() })
	if err := srv.Start(ctx); err != nil {
		b.Fatal(err)
	}
	root, err := os.ReadFile(filepath.Join(caDir, ca.RootFile))
	if err != nil {
		b.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(root)
	return srv, pool
}

func benchCSR(b *testing.B) (*ecdsa.PrivateKey, string) {
	b.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		b.Fatal(err)
	}
	return key, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

func certClient(b *testing.B, srv *discovery.Server, roots *x509.CertPool) pb.IstioCertificateServiceClient {
	b.Helper()
	cc, err := grpc.NewClient(srv.SecureGRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs: roots, ServerName: "istiod.istio-system.svc"})))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cc.Close() })
	return pb.NewIstioCertificateServiceClient(cc)
}

// BenchmarkCreateCertificate is one CreateCertificate call over an established TLS connection to the
// secure port, authenticated by a bearer token (the fake TokenReview answers at once), the CSR made
// beforehand: Sextant's authentication, gRPC and signing with the RSA 2048 root.
func BenchmarkCreateCertificate(b *testing.B) {
	srv, roots := startSecureBench(b)
	client := certClient(b, srv, roots)
	_, csrPEM := benchCSR(b)
	req := &pb.IstioCertificateRequest{Csr: csrPEM, ValidityDuration: 3600}
	ctx := bearer("productpage")
	if _, err := client.CreateCertificate(ctx, req); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		if _, err := client.CreateCertificate(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "certs/s")
}

// BenchmarkTLSHandshake is a new TCP connection and TLS handshake to the secure port per operation,
// presenting a client certificate the CA issued (verified by the server against its roots). It waits
// for the server's first HTTP/2 frame, which the server sends only once its side of the handshake
// (client certificate verification included) is done.
func BenchmarkTLSHandshake(b *testing.B) {
	srv, roots := startSecureBench(b)
	key, csrPEM := benchCSR(b)
	resp, err := certClient(b, srv, roots).CreateCertificate(bearer("productpage"),
		&pb.IstioCertificateRequest{Csr: csrPEM, ValidityDuration: 3600})
	if err != nil {
		b.Fatal(err)
	}
	var cert tls.Certificate
	for _, c := range resp.GetCertChain() {
		block, _ := pem.Decode([]byte(c))
		cert.Certificate = append(cert.Certificate, block.Bytes)
	}
	// The last element is the root, which the server already has.
	cert.Certificate = cert.Certificate[:len(cert.Certificate)-1]
	cert.PrivateKey = key
	cfg := &tls.Config{RootCAs: roots, ServerName: "istiod.istio-system.svc", Certificates: []tls.Certificate{cert},
		NextProtos: []string{"h2"}}
	addr := srv.SecureGRPCAddr()
	buf := make([]byte, 1)
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		conn, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := conn.Read(buf); err != nil {
			b.Fatalf("no HTTP/2 frame after the handshake: %v", err)
		}
		conn.Close()
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "handshakes/s")
}
