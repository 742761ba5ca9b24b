package ca

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// File names of Istio's plugged-in CA layout (the cacerts Secret, or istiod's /etc/cacerts).
const (
	CertFile  = "ca-cert.pem"
	KeyFile   = "ca-key.pem"
	ChainFile = "cert-chain.pem"
	RootFile  = "root-cert.pem"
)

// SelfSignedRootTTL is the validity of a generated root, as istiod's (10 years).
const SelfSignedRootTTL = 10 * 365 * 24 * time.Hour

// KeyMaterial is the CA's signing certificate and key, the chain from it towards the root (may be empty
// when the signing certificate is the root) and the root certificates clients trust, all PEM.
type KeyMaterial struct {
	Cert  []byte
	Key   []byte
	Chain []byte
	Root  []byte
}

// GenerateSelfSigned makes a root CA for trustDomain: RSA 2048, as istiod's self-signed root, so clients
// that accept istiod's accept it.
func GenerateSelfSigned(trustDomain string, now time.Time) (KeyMaterial, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return KeyMaterial{}, err
	}
	serial, err := randomSerial()
	if err != nil {
		return KeyMaterial{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{trustDomain}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(SelfSignedRootTTL),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return KeyMaterial{}, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return KeyMaterial{}, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return KeyMaterial{
		Cert: certPEM,
		Key:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		Root: certPEM,
	}, nil
}

// ReadDir reads key material in the cacerts layout from dir. It returns fs.ErrNotExist (wrapped) when
// dir holds none of the files; a directory with some but not all of them is an error naming what is missing.
func ReadDir(dir string) (KeyMaterial, error) {
	var km KeyMaterial
	var missing, present []string
	for _, f := range []struct {
		name     string
		dst      *[]byte
		optional bool
	}{{CertFile, &km.Cert, false}, {KeyFile, &km.Key, false}, {ChainFile, &km.Chain, true}, {RootFile, &km.Root, false}} {
		b, err := os.ReadFile(filepath.Join(dir, f.name))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if !f.optional {
				missing = append(missing, f.name)
			}
		case err != nil:
			return KeyMaterial{}, fmt.Errorf("CA key material: %w", err)
		default:
			present = append(present, f.name)
			*f.dst = b
		}
	}
	if len(present) == 0 {
		return KeyMaterial{}, fmt.Errorf("CA key material in %s: %w", dir, fs.ErrNotExist)
	}
	if len(missing) > 0 {
		return KeyMaterial{}, fmt.Errorf("CA key material in %s is incomplete: %v present, %v missing", dir, present, missing)
	}
	return km, nil
}

// WriteDir writes km to dir in the cacerts layout (the key readable by the owner only). Each file is
// written under a temporary name and renamed, so a reader never sees half a file.
func (km KeyMaterial) WriteDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{{KeyFile, km.Key, 0o600}, {CertFile, km.Cert, 0o644}, {ChainFile, km.Chain, 0o644}, {RootFile, km.Root, 0o644}} {
		tmp, err := os.CreateTemp(dir, "."+f.name+"-*")
		if err != nil {
			return err
		}
		_, werr := tmp.Write(f.data)
		cerr := tmp.Close()
		if err := errors.Join(werr, cerr, os.Chmod(tmp.Name(), f.mode)); err != nil {
			os.Remove(tmp.Name())
			return err
		}
		if err := os.Rename(tmp.Name(), filepath.Join(dir, f.name)); err != nil {
			os.Remove(tmp.Name())
			return err
		}
	}
	return nil
}

// LoadOrCreateDir reads the key material in dir, or, when dir holds none, generates a self-signed root
// and writes it there, so the next start keeps the same root. created says which happened.
func LoadOrCreateDir(dir, trustDomain string, now time.Time) (km KeyMaterial, created bool, err error) {
	km, err = ReadDir(dir)
	if err == nil {
		return km, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return KeyMaterial{}, false, err
	}
	if km, err = GenerateSelfSigned(trustDomain, now); err != nil {
		return KeyMaterial{}, false, err
	}
	if err := km.WriteDir(dir); err != nil {
		return KeyMaterial{}, false, fmt.Errorf("writing the new CA key material to %s: %w", dir, err)
	}
	return km, true, nil
}

// parsed is KeyMaterial checked and decoded.
type parsed struct {
	cert   *x509.Certificate
	signer crypto.Signer
	chain  []*x509.Certificate // from the signing certificate's issuer towards the root, as given
	roots  []*x509.Certificate
}

func (km KeyMaterial) parse(now time.Time) (*parsed, error) {
	certs, err := parseCerts(km.Cert, CertFile)
	if err != nil {
		return nil, err
	}
	if len(certs) != 1 {
		return nil, fmt.Errorf("%s: holds %d certificates, want 1", CertFile, len(certs))
	}
	p := &parsed{cert: certs[0]}
	if !p.cert.IsCA || p.cert.KeyUsage != 0 && p.cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("%s: not a CA certificate (basic constraints CA:true and key usage certSign are needed)", CertFile)
	}
	if now.After(p.cert.NotAfter) {
		return nil, fmt.Errorf("%s: expired at %s", CertFile, p.cert.NotAfter.UTC().Format(time.RFC3339))
	}
	if p.signer, err = parseKey(km.Key); err != nil {
		return nil, err
	}
	if !publicKeysEqual(p.signer.Public(), p.cert.PublicKey) {
		return nil, fmt.Errorf("%s does not hold the key of %s", KeyFile, CertFile)
	}
	if len(bytes.TrimSpace(km.Chain)) > 0 {
		chain, err := parseCerts(km.Chain, ChainFile)
		if err != nil {
			return nil, err
		}
		// Istio's cert-chain.pem often starts with ca-cert.pem itself; the response lists it once.
		if len(chain) > 0 && chain[0].Equal(p.cert) {
			chain = chain[1:]
		}
		p.chain = chain
	}
	if p.roots, err = parseCerts(km.Root, RootFile); err != nil {
		return nil, err
	}
	if len(p.roots) == 0 {
		return nil, fmt.Errorf("%s: no certificate", RootFile)
	}
	rootPool, interPool := x509.NewCertPool(), x509.NewCertPool()
	for _, r := range p.roots {
		rootPool.AddCert(r)
	}
	for _, c := range p.chain {
		interPool.AddCert(c)
	}
	if _, err := p.cert.Verify(x509.VerifyOptions{Roots: rootPool, Intermediates: interPool, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("%s does not chain to %s through %s: %w", CertFile, RootFile, ChainFile, err)
	}
	return p, nil
}

func parseCerts(data []byte, file string) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			if len(bytes.TrimSpace(rest)) > 0 {
				return nil, fmt.Errorf("%s: text after the last PEM block is not PEM", file)
			}
			return out, nil
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("%s: PEM block %q, want CERTIFICATE", file, block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		out = append(out, c)
	}
}

func parseKey(data []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("%s: no PEM block", KeyFile)
	}
	var key any
	var err error
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("%s: PEM block %q, want PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY", KeyFile, block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", KeyFile, err)
	}
	s, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%s: %T cannot sign", KeyFile, key)
	}
	return s, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	k, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && k.Equal(b)
}
