package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

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

// issueTokens gives every proxy what Istio's agent has on the secure port: the root the server wrote to
// caDir, and a service-account token for its own namespace and service account, from the API server's
// TokenRequest (audience istio-ca, an hour), which the server verifies with TokenReview. The service
// accounts are created first; all of it happens before the cold start's clock starts.
func issueTokens(ctx context.Context, admin *rest.Config, caDir string, proxies []*proxy) error {
	if admin == nil {
		return errors.New("service-account tokens need -source kube")
	}
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
	cfg := rest.CopyConfig(admin)
	cfg.QPS, cfg.Burst = 500, 500
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	accounts := map[string][]*proxy{}
	for _, p := range proxies {
		accounts[p.ns+"/"+p.sa] = append(accounts[p.ns+"/"+p.sa], p)
	}
	type job struct {
		ns, sa string
		ps     []*proxy
	}
	jobs := make(chan job)
	errs := make(chan error, len(accounts))
	var wg sync.WaitGroup
	for range loadWorkers {
		wg.Go(func() {
			for j := range jobs {
				token, err := serviceAccountToken(ctx, client, j.ns, j.sa)
				if err != nil {
					errs <- fmt.Errorf("token for %s/%s: %w", j.ns, j.sa, err)
					continue
				}
				for _, p := range j.ps {
					p.token = token
					p.tls = &tls.Config{RootCAs: roots, ServerName: secureServerName, NextProtos: []string{"h2"}}
				}
			}
		})
	}
	for account, ps := range accounts {
		ns, sa, _ := strings.Cut(account, "/")
		jobs <- job{ns, sa, ps}
	}
	close(jobs)
	wg.Wait()
	close(errs)
	return <-errs
}

func serviceAccountToken(ctx context.Context, client kubernetes.Interface, ns, sa string) (string, error) {
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	if _, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	exp := int64(3600)
	tr, err := client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{authn.DefaultAudience}, ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return tr.Status.Token, nil
}
