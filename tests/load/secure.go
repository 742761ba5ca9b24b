package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"path/filepath"
	"time"

	"github.com/sextantmesh/sextant/pilot/authn"
	"github.com/sextantmesh/sextant/pilot/ca"
)

// secureServerName is the name the fleet dials on the secure port, as proxies configured for istiod do.
const secureServerName = "istiod.istio-system.svc"

// secureServerArgs are the server's arguments for -secure: the secure port on a free address, the CA's
// key material in a directory of the work directory (created by the server on its first start).
func secureServerArgs(work string) (addr, caDir string, args []string, err error) {
	if addr, err = freePort(); err != nil {
		return "", "", nil, err
	}
	caDir = filepath.Join(work, "ca")
	return addr, caDir, []string{"--secure-grpc-addr", addr, "--ca-dir", caDir}, nil
}

// issueClientCerts gives every proxy a TLS configuration for the secure port: the root the server wrote
// to caDir, and a client certificate for the proxy's own namespace and service account. Without a
// cluster the server has no TokenReview, so no first CreateCertificate can be authenticated: the
// certificates are signed here, with Sextant's CA code and the key material in caDir, before the cold
// start's clock starts (CreateCertificate's own cost is BenchmarkCreateCertificate's).
func issueClientCerts(caDir string, proxies []*proxy) error {
	km, err := ca.ReadDir(caDir)
	if err != nil {
		return err
	}
	authority, err := ca.New(km, ca.Options{TrustDomain: "cluster.local"})
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(authority.RootPEM())
	for _, p := range proxies {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
		if err != nil {
			return err
		}
		id := authn.Identity{TrustDomain: "cluster.local", Namespace: p.ns, ServiceAccount: p.sa}
		_, chain, err := authority.SignCSR(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), id, 2*time.Hour)
		if err != nil {
			return fmt.Errorf("certificate for %s: %w", id, err)
		}
		cert := tls.Certificate{PrivateKey: key}
		// The chain's last element is the root, which the server has.
		for _, c := range chain[:len(chain)-1] {
			block, _ := pem.Decode([]byte(c))
			cert.Certificate = append(cert.Certificate, block.Bytes)
		}
		p.tls = &tls.Config{RootCAs: roots, ServerName: secureServerName, Certificates: []tls.Certificate{cert},
			NextProtos: []string{"h2"}}
	}
	return nil
}
