package ca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"sync"
	"time"

	"github.com/sextantmesh/sextant/pilot/authn"
)

// DefaultServingTTL is the validity of the control plane's own serving certificate.
const DefaultServingTTL = 24 * time.Hour

// ServingCert is the control plane's TLS certificate, issued by its own CA for the names clients dial,
// and replaced once half its validity has passed: no handshake ever sees it expired.
type ServingCert struct {
	ca       *Authority
	dnsNames []string
	ttl      time.Duration

	mu      sync.Mutex
	current *tls.Certificate
	renewAt time.Time
}

// NewServingCert issues the first certificate for dnsNames (ttl 0: DefaultServingTTL, capped by the CA's maximum).
func NewServingCert(a *Authority, dnsNames []string, ttl time.Duration) (*ServingCert, error) {
	if len(dnsNames) == 0 {
		return nil, errors.New("serving certificate: no DNS names")
	}
	if ttl <= 0 {
		ttl = DefaultServingTTL
	}
	s := &ServingCert{ca: a, dnsNames: dnsNames, ttl: min(ttl, a.opts.MaxTTL)}
	if _, err := s.Certificate(); err != nil {
		return nil, err
	}
	return s, nil
}

// Certificate returns the current certificate, issuing a new one when it is due.
func (s *ServingCert) Certificate() (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.ca.opts.Now()
	if s.current != nil && now.Before(s.renewAt) {
		return s.current, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return s.keep(err)
	}
	leaf, err := s.ca.sign(key.Public(), authn.Identity{}, s.dnsNames, s.ttl)
	if err != nil {
		return s.keep(err)
	}
	// The signing certificate and intermediates let clients that trust only the root verify it.
	chain := [][]byte{leaf.Raw}
	if !containsCert(s.ca.p.roots, s.ca.p.cert) {
		chain = append(chain, s.ca.p.cert.Raw)
	}
	for _, c := range s.ca.p.chain {
		if !containsCert(s.ca.p.roots, c) {
			chain = append(chain, c.Raw)
		}
	}
	s.current = &tls.Certificate{Certificate: chain, PrivateKey: key, Leaf: leaf}
	s.renewAt = leaf.NotBefore.Add(leaf.NotAfter.Sub(leaf.NotBefore) / 2)
	return s.current, nil
}

// keep serves the certificate in hand while it is still valid when a new one cannot be issued.
func (s *ServingCert) keep(err error) (*tls.Certificate, error) {
	if s.current != nil && s.ca.opts.Now().Before(s.current.Leaf.NotAfter) {
		return s.current, nil
	}
	return nil, err
}

// TLSConfig returns a server configuration presenting the serving certificate and asking for, but
// not requiring, a client certificate, verified against the CA's roots when one is presented (a
// client may authenticate with a token instead).
func (s *ServingCert) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return s.Certificate() },
		ClientAuth:     tls.VerifyClientCertIfGiven,
		ClientCAs:      s.ca.Roots(),
		NextProtos:     []string{"h2"},
	}
}
