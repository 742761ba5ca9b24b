package agent

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"istio.io/istio/pkg/security"
	"istio.io/istio/security/pkg/credentialfetcher/plugin"
	"istio.io/istio/security/pkg/nodeagent/caclient/providers/citadel"
	pkiutil "istio.io/istio/security/pkg/pki/util"

	"github.com/sextantmesh/sextant/pilot/authn"
	"github.com/sextantmesh/sextant/pilot/ca"
	"github.com/sextantmesh/sextant/pilot/discovery"
)

// tokens authenticates fixed service-account tokens as the cluster's TokenReview would.
type tokens map[string]authn.Identity

func (m tokens) AuthenticateToken(_ context.Context, token string) (*authn.Caller, error) {
	if id, ok := m[token]; ok {
		return &authn.Caller{Identities: []authn.Identity{id}, Method: "token"}, nil
	}
	return nil, errors.New("token rejected by the Kubernetes API server")
}

var productpage = authn.Identity{TrustDomain: "cluster.local", Namespace: "bookinfo", ServiceAccount: "bookinfo-productpage"}

type sextant struct {
	srv   *discovery.Server
	caDir string
}

// startSextant serves examples/bookinfo with the CA in a directory of its own; the tokens known are
// productpage's and extra.
func startSextant(t *testing.T, extra ...tokens) *sextant {
	t.Helper()
	configDir, err := filepath.Abs("../../../examples/bookinfo")
	if err != nil {
		t.Fatal(err)
	}
	return startSextantWith(t, configDir, extra...)
}

func startSextantWith(t *testing.T, configDir string, extra ...tokens) *sextant {
	t.Helper()
	known := tokens{"productpage-token": productpage}
	for _, e := range extra {
		maps.Copy(known, e)
	}
	return startSextantArgs(t, discovery.Args{ConfigDir: configDir, TokenAuthenticator: known})
}

// startSextantArgs starts Sextant with args, on loopback ports, with the CA in a directory of its own.
func startSextantArgs(t *testing.T, args discovery.Args) *sextant {
	t.Helper()
	caDir := filepath.Join(t.TempDir(), "cacerts")
	args.SecureGRPCAddr, args.GRPCAddr, args.HTTPAddr, args.CADir = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", caDir
	args.TrustedNodeAccounts = discovery.DefaultTrustedNodeAccounts
	srv, err := discovery.NewServer(args)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); srv.Wait() })
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return &sextant{srv: srv, caDir: caDir}
}

// citadelClient is Istio's CA client as the agent builds it: the token from a file, the root from a
// file, istiod's name as the server name.
func (s *sextant) citadelClient(t *testing.T, token string) *citadel.CitadelClient {
	t.Helper()
	tokenFile := filepath.Join(t.TempDir(), "istio-token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := citadel.NewCitadelClient(&security.Options{
		CAEndpoint:    s.srv.SecureGRPCAddr(),
		CAEndpointSAN: "istiod.istio-system.svc",
		ClusterID:     "Kubernetes",
		CredFetcher:   plugin.CreateTokenPlugin(tokenFile),
	}, &citadel.TLSOptions{RootCert: filepath.Join(s.caDir, ca.RootFile)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestCitadelClientGetsAWorkloadCertificate(t *testing.T) {
	s := startSextant(t)
	// The agent's own CSR: it names the identity it expects, and a key of its own.
	csrPEM, _, err := pkiutil.GenCSR(pkiutil.CertOptions{Host: productpage.String(), RSAKeySize: 2048})
	if err != nil {
		t.Fatal(err)
	}
	chain, err := s.citadelClient(t, "productpage-token").CSRSign(csrPEM, int64((12 * time.Hour).Seconds()))
	if err != nil {
		t.Fatal(err)
	}
	if len(chain) != 2 {
		t.Fatalf("chain of %d elements, want the leaf and the root", len(chain))
	}
	leaf := parseCert(t, chain[0])
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != productpage.String() {
		t.Errorf("URI SANs %v, want %s", leaf.URIs, productpage)
	}
	if got := leaf.NotAfter.Sub(time.Now()); got < 11*time.Hour || got > 12*time.Hour {
		t.Errorf("valid for %s more, want the 12h asked for", got)
	}
	root, err := os.ReadFile(filepath.Join(s.caDir, ca.RootFile))
	if err != nil {
		t.Fatal(err)
	}
	if chain[len(chain)-1] != string(root) {
		t.Error("the last element of the chain is not root-cert.pem")
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(root)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("leaf does not verify against root-cert.pem: %v", err)
	}
}

func TestCitadelClientWithABadTokenIsRefused(t *testing.T) {
	s := startSextant(t)
	csrPEM, _, err := pkiutil.GenCSR(pkiutil.CertOptions{Host: productpage.String(), RSAKeySize: 2048})
	if err != nil {
		t.Fatal(err)
	}
	for token, want := range map[string]string{
		"stolen": "token rejected",
		"":       "no credentials",
	} {
		_, err := s.citadelClient(t, token).CSRSign(csrPEM, 3600)
		if err == nil || !strings.Contains(err.Error(), "Unauthenticated") || !strings.Contains(err.Error(), want) {
			t.Errorf("token %q: %v, want Unauthenticated saying %q", token, err, want)
		}
	}
}

func parseCert(t *testing.T, p string) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode([]byte(p))
	if block == nil {
		t.Fatal("not PEM")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
