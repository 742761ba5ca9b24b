package ca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"
)

// BenchmarkSignCSR is the CA's share of a CreateCertificate: parsing and checking the CSR and signing
// a workload certificate with the self-signed RSA 2048 root, without TLS, gRPC or authentication.
func BenchmarkSignCSR(b *testing.B) {
	km, err := GenerateSelfSigned("cluster.local", time.Now())
	if err != nil {
		b.Fatal(err)
	}
	a, err := New(km, Options{TrustDomain: "cluster.local"})
	if err != nil {
		b.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		b.Fatal(err)
	}
	csrPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		if _, _, err := a.SignCSR(csrPEM, workload, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "certs/s")
}
