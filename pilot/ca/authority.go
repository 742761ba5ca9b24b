package ca

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"time"

	"github.com/sextantmesh/sextant/pilot/authn"
)

// Defaults of workload certificate validity, as istiod's (DEFAULT_WORKLOAD_CERT_TTL, MAX_WORKLOAD_CERT_TTL).
const (
	DefaultWorkloadTTL = 24 * time.Hour
	DefaultMaxTTL      = 90 * 24 * time.Hour
)

// clockSkew backdates certificates a little, so a peer whose clock is slightly behind accepts them.
const clockSkew = 2 * time.Minute

// Options configure an Authority.
type Options struct {
	TrustDomain string
	// DefaultTTL is the validity of a certificate whose request asks for none (default DefaultWorkloadTTL).
	DefaultTTL time.Duration
	// MaxTTL is the longest validity a request may ask for; asking for more is refused (default DefaultMaxTTL).
	MaxTTL time.Duration
	Now    func() time.Time
}

// Authority signs certificates with the CA's key material. It is safe for concurrent use.
type Authority struct {
	opts     Options
	p        *parsed
	chainPEM []string // the signing certificate and its chain, one PEM certificate each, without the roots
	rootPEM  []byte
	roots    *x509.CertPool
}

// New checks km (the key matches, the signing certificate chains to the roots and has not expired)
// and returns an authority signing with it.
func New(km KeyMaterial, opts Options) (*Authority, error) {
	if opts.TrustDomain == "" {
		return nil, errors.New("ca: no trust domain")
	}
	if opts.DefaultTTL <= 0 {
		opts.DefaultTTL = DefaultWorkloadTTL
	}
	if opts.MaxTTL <= 0 {
		opts.MaxTTL = DefaultMaxTTL
	}
	if opts.DefaultTTL > opts.MaxTTL {
		return nil, fmt.Errorf("ca: default certificate validity %s is longer than the maximum %s", opts.DefaultTTL, opts.MaxTTL)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	p, err := km.parse(opts.Now())
	if err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	a := &Authority{opts: opts, p: p, roots: x509.NewCertPool()}
	isRoot := false
	for _, r := range p.roots {
		a.roots.AddCert(r)
		a.rootPEM = append(a.rootPEM, pemCert(r)...)
		isRoot = isRoot || r.Equal(p.cert)
	}
	// As istiod: the chain in a response stops below the root, which the response carries last, whole.
	if !isRoot {
		a.chainPEM = append(a.chainPEM, string(pemCert(p.cert)))
	}
	for _, c := range p.chain {
		if !containsCert(p.roots, c) {
			a.chainPEM = append(a.chainPEM, string(pemCert(c)))
		}
	}
	return a, nil
}

// TrustDomain is the trust domain of the identities the authority signs.
func (a *Authority) TrustDomain() string { return a.opts.TrustDomain }

// MaxTTL is the longest validity a request may ask for.
func (a *Authority) MaxTTL() time.Duration { return a.opts.MaxTTL }

// RootPEM returns the root certificates clients should trust (root-cert.pem).
func (a *Authority) RootPEM() []byte { return a.rootPEM }

// Roots returns the root certificates as a pool, to verify client certificates with.
func (a *Authority) Roots() *x509.CertPool { return a.roots }

// SignError is a request the authority refuses; the request's fault, not the server's.
type SignError struct{ msg string }

func (e *SignError) Error() string { return e.msg }

func signErrorf(format string, args ...any) error {
	return &SignError{msg: fmt.Sprintf(format, args...)}
}

// SignCSR signs the public key of a PEM certificate signing request for id, valid ttl (0: the default).
// The request's own subject and SANs are ignored: the certificate names id only, which the caller
// must have verified. It returns the certificate and the response chain: the certificate, then the
// intermediates, then the roots as one PEM element last, as istiod's CreateCertificate answers.
func (a *Authority) SignCSR(csrPEM []byte, id authn.Identity, ttl time.Duration) (*x509.Certificate, []string, error) {
	block, _ := pem.Decode(csrPEM)
	if block == nil || block.Type != "CERTIFICATE REQUEST" && block.Type != "NEW CERTIFICATE REQUEST" {
		return nil, nil, signErrorf("csr: not a PEM CERTIFICATE REQUEST")
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, nil, signErrorf("csr: %v", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, nil, signErrorf("csr: signature does not verify: %v", err)
	}
	cert, err := a.sign(csr.PublicKey, id, nil, ttl)
	if err != nil {
		return nil, nil, err
	}
	return cert, a.responseChain(cert), nil
}

// sign issues a leaf certificate for pub naming id (when id.Namespace is set) and dnsNames.
func (a *Authority) sign(pub any, id authn.Identity, dnsNames []string, ttl time.Duration) (*x509.Certificate, error) {
	if ttl < 0 {
		return nil, signErrorf("requested validity %s is negative", ttl)
	}
	if ttl == 0 {
		ttl = a.opts.DefaultTTL
	}
	if ttl > a.opts.MaxTTL {
		return nil, signErrorf("requested validity %s is longer than the maximum allowed %s", ttl, a.opts.MaxTTL)
	}
	now := a.opts.Now()
	notAfter := now.Add(ttl)
	// A certificate outliving its issuer would fail verification before it expires.
	notAfter = minTime(notAfter, a.p.cert.NotAfter)
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     dnsNames,
	}
	if id.Namespace != "" {
		if id.TrustDomain != a.opts.TrustDomain {
			return nil, signErrorf("identity %s: trust domain is not %q", id, a.opts.TrustDomain)
		}
		u, err := url.Parse(id.String())
		if err != nil {
			return nil, signErrorf("identity %s: %v", id, err)
		}
		tmpl.URIs = []*url.URL{u}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.p.cert, pub, a.p.signer)
	if err != nil {
		return nil, fmt.Errorf("signing: %w", err)
	}
	return x509.ParseCertificate(der)
}

func (a *Authority) responseChain(leaf *x509.Certificate) []string {
	out := make([]string, 0, len(a.chainPEM)+2)
	out = append(out, string(pemCert(leaf)))
	out = append(out, a.chainPEM...)
	return append(out, string(a.rootPEM))
}

func pemCert(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

func containsCert(list []*x509.Certificate, c *x509.Certificate) bool {
	for _, x := range list {
		if x.Equal(c) {
			return true
		}
	}
	return false
}

func randomSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
