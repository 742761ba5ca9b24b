package enforcement

// The gRPC half of the enforcement matrix: Sextant's xDS server in-process on loopback, a real
// xDS-enabled gRPC server (google.golang.org/grpc/xds.NewGRPCServer) that takes its inbound listener,
// mTLS mode and RBAC from Sextant and enforces them itself, and real gRPC clients calling it: the xDS
// client for plaintext calls (it resolves the service through Sextant), a TLS client with a test
// certificate for calls over mTLS.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	xdscreds "google.golang.org/grpc/credentials/xds"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	xdsgrpc "google.golang.org/grpc/xds"

	"github.com/sextantmesh/sextant/pilot/discovery"
)

// grpcOutcome is what a call should meet.
type grpcOutcome string

const (
	grpcAllowed grpcOutcome = "allowed"
	// grpcDenied: the server's RBAC refused the call (PermissionDenied).
	grpcDenied grpcOutcome = "denied"
	// grpcRefused: no connection was made (the TLS handshake failed: a plaintext client to an mTLS-only
	// server or the other way round), so the call is Unavailable.
	grpcRefused grpcOutcome = "refused"
)

// grpcCall is one request of a row.
type grpcCall struct {
	// method is healthpb's "Check" or "List".
	method string
	// from is the source address: "127.0.0.1" (the default) or "127.0.0.2".
	from string
	// identity, when set, calls over mTLS with a certificate for spiffe://cluster.local/ns/NS/sa/SA
	// ("NS/SA"); otherwise the call is plaintext through the xDS client.
	identity string
	// headers are request metadata, key value pairs.
	headers []string
	want    grpcOutcome
}

func (c grpcCall) String() string {
	s := c.method
	if c.from != "" {
		s += " from " + c.from
	}
	if c.identity != "" {
		s += " as " + c.identity + " over mTLS"
	} else {
		s += " plaintext"
	}
	if len(c.headers) > 0 {
		s += " with " + strings.Join(c.headers, "=")
	}
	return s
}

// grpcPKI is a test mesh CA and the certificates it issued.
type grpcPKI struct {
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caPEM  []byte
	pool   *x509.CertPool
}

func newGRPCPKI(t *testing.T) *grpcPKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{Organization: []string{"cluster.local"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &grpcPKI{caCert: cert, caKey: key, caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pool: pool}
}

// issue returns a workload certificate and key (PEM) for spiffe://cluster.local/ns/NS/sa/SA, usable
// by clients and servers, with dnsName as its DNS SAN when given.
func (p *grpcPKI) issue(t *testing.T, identity, dnsName string) (certPEM, keyPEM []byte) {
	t.Helper()
	ns, sa, _ := strings.Cut(identity, "/")
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{{Scheme: "spiffe", Host: "cluster.local", Path: "/ns/" + ns + "/sa/" + sa}},
	}
	if dnsName != "" {
		tmpl.DNSNames = []string{dnsName}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

const (
	grpcServerHost = "echo.default.svc.cluster.local"
	grpcServerIP   = "127.0.0.1"
)

// grpcMeshYAML is the echo service, its pod on 127.0.0.1 (labels plus extraLabels) and its endpoints,
// all on port.
func grpcMeshYAML(port int, extraLabels string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Service
metadata:
  name: echo
  namespace: default
spec:
  clusterIP: 10.96.0.50
  selector:
    app: echo
  ports:
  - name: grpc
    port: %[1]d
    targetPort: %[1]d
---
apiVersion: v1
kind: Pod
metadata:
  name: echo-0
  namespace: default
  labels:
    app: echo%[3]s
spec:
  serviceAccountName: echo
  containers:
  - name: echo
    image: echo
status:
  phase: Running
  podIP: %[2]s
  conditions:
  - type: Ready
    status: "True"
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: echo-0
  namespace: default
  labels:
    kubernetes.io/service-name: echo
addressType: IPv4
ports:
- name: grpc
  port: %[1]d
endpoints:
- addresses: ["%[2]s"]
  conditions:
    ready: true
  targetRef:
    kind: Pod
    namespace: default
    name: echo-0
`, port, grpcServerIP, extraLabels)
}

// grpcMesh is one row's world: Sextant serving the row's config, the xDS gRPC server, and the material
// clients need.
type grpcMesh struct {
	t          *testing.T
	ctx        context.Context
	xdsAddr    string
	serverAddr string
	port       int
	pki        *grpcPKI
	// plain holds an xDS client per source address.
	plain map[string]*grpc.ClientConn
}

// startGRPCMesh starts Sextant on a config dir holding the mesh and policyYAML, then the xDS gRPC server,
// and waits until the server serves on the listener Sextant sent.
func startGRPCMesh(t *testing.T, policyYAML, extraLabels string) *grpcMesh {
	t.Helper()
	lis, err := net.Listen("tcp", grpcServerIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	dir := t.TempDir()
	grpcWrite(t, dir, "mesh.yaml", grpcMeshYAML(port, extraLabels))
	if policyYAML != "" {
		grpcWrite(t, dir, "policy.yaml", policyYAML)
	}
	srv, err := discovery.NewServer(discovery.Args{ConfigDir: dir, GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		DebounceAfter: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); srv.Wait() })
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	m := &grpcMesh{t: t, ctx: ctx, xdsAddr: srv.GRPCAddr(), serverAddr: lis.Addr().String(), port: port, pki: newGRPCPKI(t),
		plain: map[string]*grpc.ClientConn{}}

	// The server's certificate provider reads the files Istio's agent would write.
	certs := t.TempDir()
	certPEM, keyPEM := m.pki.issue(t, "default/echo", grpcServerHost)
	grpcWrite(t, certs, "cert-chain.pem", string(certPEM))
	grpcWrite(t, certs, "key.pem", string(keyPEM))
	grpcWrite(t, certs, "root-cert.pem", string(m.pki.caPEM))
	bootstrap := fmt.Sprintf(`{
  "xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
  "node": {"id": "sidecar~%s~echo-0.default~default.svc.cluster.local",
           "metadata": {"GENERATOR": "grpc", "NAMESPACE": "default", "INSTANCE_IPS": %q}},
  "certificate_providers": {"default": {"plugin_name": "file_watcher", "config": {
    "certificate_file": %q, "private_key_file": %q, "ca_certificate_file": %q, "refresh_interval": "900s"}}},
  "server_listener_resource_name_template": "xds.istio.io/grpc/lds/inbound/%%s"
}`, m.xdsAddr, grpcServerIP, grpcServerIP,
		filepath.Join(certs, "cert-chain.pem"), filepath.Join(certs, "key.pem"), filepath.Join(certs, "root-cert.pem"))

	creds, err := xdscreds.NewServerCredentials(xdscreds.ServerOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		t.Fatal(err)
	}
	serving := make(chan error, 8)
	server, err := xdsgrpc.NewGRPCServer(grpc.Creds(creds), xdsgrpc.BootstrapContentsForTesting([]byte(bootstrap)),
		xdsgrpc.ServingModeCallback(func(_ net.Addr, args xdsgrpc.ServingModeChangeArgs) {
			if args.Mode == connectivity.ServingModeServing {
				serving <- nil
			} else if args.Err != nil {
				serving <- args.Err
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	healthpb.RegisterHealthServer(server, health.NewServer())
	go func() { _ = server.Serve(lis) }()
	t.Cleanup(server.Stop)
	select {
	case err := <-serving:
		if err != nil {
			t.Fatalf("xDS gRPC server is not serving: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("xDS gRPC server did not start serving within 20 s")
	}
	return m
}

func grpcWrite(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// grpcDialerFrom dials from the source address ip.
func grpcDialerFrom(ip string) func(context.Context, string) (net.Conn, error) {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
}

// conn returns the client for call: the xDS client (plaintext, the cluster Sextant sends carries no TLS)
// or a TLS client presenting the call's identity.
func (m *grpcMesh) conn(c grpcCall) *grpc.ClientConn {
	t := m.t
	t.Helper()
	from := c.from
	if from == "" {
		from = "127.0.0.1"
	}
	if c.identity == "" {
		if cc := m.plain[from]; cc != nil {
			return cc
		}
		bootstrap := fmt.Sprintf(`{
  "xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
  "node": {"id": "sidecar~%s~client.default~default.svc.cluster.local", "metadata": {"GENERATOR": "grpc", "NAMESPACE": "default"}}
}`, m.xdsAddr, from)
		resolver, err := xdsgrpc.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
		if err != nil {
			t.Fatal(err)
		}
		cc, err := grpc.NewClient(fmt.Sprintf("xds:///%s:%d", grpcServerHost, m.port), grpc.WithResolvers(resolver),
			grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(grpcDialerFrom(from)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		m.plain[from] = cc
		return cc
	}
	certPEM, keyPEM := m.pki.issue(t, c.identity, "")
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: m.pki.pool, ServerName: grpcServerHost, MinVersion: tls.VersionTLS12}
	cc, err := grpc.NewClient(m.serverAddr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)),
		grpc.WithContextDialer(grpcDialerFrom(from)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// do makes the call and returns the outcome it met, with the error for the log.
func (m *grpcMesh) do(c grpcCall) (grpcOutcome, error) {
	ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
	defer cancel()
	if len(c.headers) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, c.headers...)
	}
	client := healthpb.NewHealthClient(m.conn(c))
	var err error
	switch c.method {
	case "Check":
		_, err = client.Check(ctx, &healthpb.HealthCheckRequest{})
	case "List":
		_, err = client.List(ctx, &healthpb.HealthListRequest{})
	default:
		m.t.Fatalf("unknown method %q", c.method)
	}
	switch status.Code(err) {
	case codes.OK:
		return grpcAllowed, nil
	case codes.PermissionDenied:
		return grpcDenied, err
	case codes.Unavailable:
		return grpcRefused, err
	}
	return grpcOutcome("error " + status.Code(err).String()), err
}
