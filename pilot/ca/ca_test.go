package ca

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io/fs"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sextantmesh/sextant/pilot/authn"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

func newCSR(t *testing.T, uris ...string) []byte {
	t.Helper()
	_, csr := newKeyAndCSR(t, uris...)
	return csr
}

func newKeyAndCSR(t *testing.T, uris ...string) (*ecdsa.PrivateKey, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: "asked-for"}}
	for _, u := range uris {
		pu, _ := url.Parse(u)
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func selfSigned(t *testing.T) KeyMaterial {
	t.Helper()
	km, err := GenerateSelfSigned("cluster.local", t0)
	if err != nil {
		t.Fatal(err)
	}
	return km
}

func parseChain(t *testing.T, chain []string) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for i, p := range chain {
		certs, err := parseCerts([]byte(p), "chain")
		if err != nil || len(certs) != 1 {
			t.Fatalf("chain[%d]: %d certificates, %v", i, len(certs), err)
		}
		out = append(out, certs[0])
	}
	return out
}

var workload = authn.Identity{TrustDomain: "cluster.local", Namespace: "shop", ServiceAccount: "cart"}

func TestSignCSRNamesTheVerifiedIdentityOnly(t *testing.T) {
	clk := &clock{now: t0}
	a, err := New(selfSigned(t), Options{TrustDomain: "cluster.local", Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	cert, chain, err := a.SignCSR(newCSR(t, "spiffe://cluster.local/ns/istio-system/sa/istiod"), workload, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(cert.URIs) != 1 || cert.URIs[0].String() != "spiffe://cluster.local/ns/shop/sa/cart" {
		t.Errorf("URI SANs %v, want only the caller's identity", cert.URIs)
	}
	if cert.Subject.CommonName != "" || len(cert.DNSNames) != 0 {
		t.Errorf("certificate copied the request's subject %q / DNS %v", cert.Subject.CommonName, cert.DNSNames)
	}
	if got := cert.NotAfter.Sub(t0); got != DefaultWorkloadTTL {
		t.Errorf("validity %s, want the default %s", got, DefaultWorkloadTTL)
	}
	// istiod's order: the leaf, then the root last (a self-signed CA has no intermediates).
	certs := parseChain(t, chain)
	if len(certs) != 2 || !certs[0].Equal(cert) || !bytes.Equal([]byte(chain[1]), a.RootPEM()) {
		t.Fatalf("chain of %d, want [leaf, root]", len(certs))
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: a.Roots(), CurrentTime: t0,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("leaf does not verify against the roots: %v", err)
	}
}

func TestSignCSRValidityIsBounded(t *testing.T) {
	clk := &clock{now: t0}
	a, err := New(selfSigned(t), Options{TrustDomain: "cluster.local", MaxTTL: 48 * time.Hour, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	cert, _, err := a.SignCSR(newCSR(t), workload, 36*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if got := cert.NotAfter.Sub(t0); got != 36*time.Hour {
		t.Errorf("validity %s, want the 36h asked for", got)
	}
	_, _, err = a.SignCSR(newCSR(t), workload, 49*time.Hour)
	if _, ok := errors.AsType[*SignError](err); !ok || !strings.Contains(err.Error(), "longer than the maximum allowed 48h") {
		t.Errorf("49h with a 48h maximum: %v, want a SignError naming the maximum", err)
	}
	if _, _, err := a.SignCSR(newCSR(t), authn.Identity{TrustDomain: "evil.org", Namespace: "a", ServiceAccount: "b"}, 0); err == nil {
		t.Error("signed an identity of another trust domain")
	}
	if _, _, err := a.SignCSR([]byte("not pem"), workload, 0); err == nil {
		t.Error("signed garbage")
	}
}

func TestSignCSRRefusesABadSignature(t *testing.T) {
	a, err := New(selfSigned(t), Options{TrustDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	csr := newCSR(t)
	block, _ := pem.Decode(csr)
	block.Bytes[len(block.Bytes)-3] ^= 0xff // in the signature
	if _, _, err := a.SignCSR(pem.EncodeToMemory(block), workload, 0); err == nil {
		t.Error("signed a CSR whose signature does not verify")
	}
}

// intermediateMaterial returns a plugged-in layout: a root, and an intermediate that signs.
func intermediateMaterial(t *testing.T) (KeyMaterial, *x509.Certificate) {
	t.Helper()
	root := selfSigned(t)
	rp, err := root.parse(t0)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: bigOne(), Subject: pkix.Name{CommonName: "intermediate"}, NotBefore: t0.Add(-time.Hour),
		NotAfter: t0.Add(365 * 24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, rp.cert, key.Public(), rp.signer)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalPKCS8PrivateKey(key)
	inter := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	// Istio's cert-chain.pem: the signing certificate, then up to the root.
	return KeyMaterial{Cert: inter, Key: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		Chain: append(append([]byte{}, inter...), root.Root...), Root: root.Root}, rp.cert
}

func TestPluggedInIntermediateChainsToTheRoot(t *testing.T) {
	km, root := intermediateMaterial(t)
	a, err := New(km, Options{TrustDomain: "cluster.local", Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	cert, chain, err := a.SignCSR(newCSR(t), workload, 0)
	if err != nil {
		t.Fatal(err)
	}
	certs := parseChain(t, chain)
	if len(certs) != 3 || !certs[0].Equal(cert) || certs[1].Subject.CommonName != "intermediate" || !certs[2].Equal(root) {
		t.Fatalf("chain %d long, want [leaf, intermediate, root]", len(certs))
	}
	inter := x509.NewCertPool()
	inter.AddCert(certs[1])
	if _, err := cert.Verify(x509.VerifyOptions{Roots: a.Roots(), Intermediates: inter, CurrentTime: t0,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Errorf("leaf does not verify through the intermediate: %v", err)
	}
}

func TestNewRefusesKeyMaterialThatCannotSign(t *testing.T) {
	good := selfSigned(t)
	other := selfSigned(t)
	plugged, _ := intermediateMaterial(t)
	for name, tc := range map[string]struct {
		km   KeyMaterial
		want string
	}{
		"key of another certificate": {KeyMaterial{Cert: good.Cert, Key: other.Key, Root: good.Root}, "does not hold the key of ca-cert.pem"},
		"root that did not sign it":  {KeyMaterial{Cert: good.Cert, Key: good.Key, Root: other.Root}, "does not chain to root-cert.pem"},
		"intermediate without chain": {KeyMaterial{Cert: plugged.Cert, Key: plugged.Key, Root: other.Root}, "does not chain"},
		"no root":                    {KeyMaterial{Cert: good.Cert, Key: good.Key}, "root-cert.pem: no certificate"},
		"garbage certificate":        {KeyMaterial{Cert: []byte("x"), Key: good.Key, Root: good.Root}, "ca-cert.pem: text after"},
	} {
		if _, err := New(tc.km, Options{TrustDomain: "cluster.local", Now: func() time.Time { return t0 }}); err == nil ||
			!strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, tc.want)
		}
	}
	if _, err := New(good, Options{TrustDomain: "cluster.local",
		Now: func() time.Time { return t0.Add(SelfSignedRootTTL + time.Hour) }}); err == nil ||
		!strings.Contains(err.Error(), "expired") {
		t.Errorf("expired CA: %v", err)
	}
}

func TestLoadOrCreateDirKeepsTheRootAcrossRestarts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	first, created, err := LoadOrCreateDir(dir, "cluster.local", t0)
	if err != nil || !created {
		t.Fatalf("first start: created=%v err=%v", created, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, KeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v, mode %v, want 0600", err, fi.Mode().Perm())
	}
	second, created, err := LoadOrCreateDir(dir, "cluster.local", t0)
	if err != nil || created {
		t.Fatalf("restart: created=%v err=%v", created, err)
	}
	if !bytes.Equal(first.Root, second.Root) || !bytes.Equal(first.Key, second.Key) {
		t.Error("restart generated a new root")
	}
	if _, err := New(second, Options{TrustDomain: "cluster.local", Now: func() time.Time { return t0 }}); err != nil {
		t.Errorf("reloaded material: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 4 {
		t.Errorf("%d files in the directory, want the 4 of the cacerts layout (no temporaries left)", len(entries))
	}
}

func TestReadDirNamesWhatIsMissing(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadDir(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("empty dir: %v, want ErrNotExist", err)
	}
	km := selfSigned(t)
	if err := os.WriteFile(filepath.Join(dir, CertFile), km.Cert, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ReadDir(dir)
	if err == nil || errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "ca-key.pem") ||
		!strings.Contains(err.Error(), "root-cert.pem") {
		t.Errorf("incomplete dir: %v, want an error naming ca-key.pem and root-cert.pem", err)
	}
	// An incomplete directory is never overwritten with a new root: the operator may have been plugging one in.
	if _, _, err := LoadOrCreateDir(dir, "cluster.local", t0); err == nil {
		t.Error("LoadOrCreateDir replaced an incomplete directory")
	}
}

func TestServingCertIsRenewedAtHalfLife(t *testing.T) {
	clk := &clock{now: t0}
	a, err := New(selfSigned(t), Options{TrustDomain: "cluster.local", Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewServingCert(a, []string{"istiod.istio-system.svc", "sextant.istio-system.svc"}, 10*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := s.Certificate()
	if got := first.Leaf.DNSNames; len(got) != 2 || got[0] != "istiod.istio-system.svc" || len(first.Leaf.URIs) != 0 {
		t.Errorf("names %v / %v", got, first.Leaf.URIs)
	}
	if _, err := first.Leaf.Verify(x509.VerifyOptions{DNSName: "istiod.istio-system.svc", Roots: a.Roots(), CurrentTime: t0}); err != nil {
		t.Errorf("serving certificate does not verify as istiod.istio-system.svc: %v", err)
	}
	clk.now = t0.Add(4 * time.Hour)
	if again, _ := s.Certificate(); again != first {
		t.Error("renewed before half its validity")
	}
	clk.now = t0.Add(5 * time.Hour)
	renewed, _ := s.Certificate()
	if renewed == first || !renewed.Leaf.NotAfter.After(first.Leaf.NotAfter) {
		t.Error("not renewed at half its validity")
	}
}

func bigOne() *big.Int { return big.NewInt(1) }
