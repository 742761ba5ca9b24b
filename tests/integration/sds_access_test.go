//go:build integration

package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sextantmesh/sextant/pilot/ca"
	"github.com/sextantmesh/sextant/pilot/envoy"
)

// sdsStream is an authenticated SotW stream asking only for secrets; it ACKs and keeps what it received.
type sdsStream struct {
	mu       sync.Mutex
	received map[string]*tlsv3.Secret
	err      error
}

func openSDS(t *testing.T, cc *grpc.ClientConn, token, nodeID string, names ...string) *sdsStream {
	t.Helper()
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token))
	t.Cleanup(cancel)
	st, err := discoverypb.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	must(t, err)
	must(t, st.Send(&discoverypb.DiscoveryRequest{Node: &core.Node{Id: nodeID}, TypeUrl: envoy.SecretType, ResourceNames: names}))
	s := &sdsStream{received: map[string]*tlsv3.Secret{}}
	go func() {
		for {
			resp, err := st.Recv()
			if err != nil {
				s.mu.Lock()
				s.err = err
				s.mu.Unlock()
				return
			}
			s.mu.Lock()
			for _, a := range resp.Resources {
				sec := &tlsv3.Secret{}
				if a.UnmarshalTo(sec) == nil {
					s.received[sec.Name] = sec
				}
			}
			s.mu.Unlock()
			_ = st.Send(&discoverypb.DiscoveryRequest{TypeUrl: resp.TypeUrl, VersionInfo: resp.VersionInfo,
				ResponseNonce: resp.Nonce, ResourceNames: names})
		}
	}()
	return s
}

func (s *sdsStream) has(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.received[name] != nil
}

func (s *sdsStream) names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for n := range s.received {
		out = append(out, n)
	}
	return out
}

// TestSDSAccessReviewedByTheRealAPIServer: over 15012 with real tokens, a gateway whose service account may
// list Secrets in its namespace (a Role, as Istio's gateway charts grant) is served its key pair; another
// account of the same namespace without that Role gets only the public CA, and the refusal is in
// /debug/config_errors naming the account; another namespace's Secret is never served. Sextant runs as
// the least-privilege account of manifests/, which may create SubjectAccessReviews.
func TestSDSAccessReviewedByTheRealAPIServer(t *testing.T) {
	s := startAPIServer(t)
	_, kubeconfig := leastPrivilege(t, s)
	ctx := context.Background()
	for _, ns := range []string{"ingress", "shop"} {
		s.EnsureNamespace(ns)
	}
	cert, key := selfSignedPEM(t, "shop.example.com")
	for _, ns := range []string{"ingress", "shop"} {
		_, err := s.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "shop-cert", Namespace: ns},
			Type: corev1.SecretTypeTLS, Data: map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": cert}}, metav1.CreateOptions{})
		must(t, err)
	}
	_, err := s.Kube.RbacV1().Roles("ingress").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "gateway-sds"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "watch", "list"}}}},
		metav1.CreateOptions{})
	must(t, err)
	_, err = s.Kube.RbacV1().RoleBindings("ingress").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "gateway-sds"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "gateway-sds"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "ingress", Name: "gateway"}}}, metav1.CreateOptions{})
	must(t, err)
	gatewayToken := serviceAccountToken(t, s, "ingress", "gateway", "istio-ca")
	intruderToken := serviceAccountToken(t, s, "ingress", "intruder", "istio-ca")

	srv := startSecureSextant(t, kubeconfig)
	secret, err := s.Kube.CoreV1().Secrets("istio-system").Get(ctx, ca.SelfSignedSecret, metav1.GetOptions{})
	must(t, err)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(secret.Data[ca.RootFile])
	cc, err := grpc.NewClient(srv.SecureGRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs: pool, ServerName: "istiod.istio-system.svc"})))
	must(t, err)
	t.Cleanup(func() { cc.Close() })

	names := []string{"kubernetes://shop-cert", "kubernetes://shop-cert-cacert", "kubernetes://shop/shop-cert"}
	start := time.Now()
	gw := openSDS(t, cc, gatewayToken, "router~10.1.1.1~gw-1.ingress~ingress.svc.cluster.local", names...)
	eventually(t, 10*time.Second, "the allowed gateway's key pair", func() bool { return gw.has("kubernetes://shop-cert") })
	t.Logf("key pair served %v after the stream opened (TokenReview, then SubjectAccessReview)", time.Since(start).Round(time.Millisecond))
	gw.mu.Lock()
	if got := gw.received["kubernetes://shop-cert"].GetTlsCertificate().GetPrivateKey().GetInlineBytes(); string(got) != string(key) {
		t.Error("the key pair is not the Secret's")
	}
	gw.mu.Unlock()

	intruder := openSDS(t, cc, intruderToken, "router~10.1.1.2~gw-2.ingress~ingress.svc.cluster.local", names...)
	eventually(t, 10*time.Second, "the CA for the account without the Role",
		func() bool { return intruder.has("kubernetes://shop-cert-cacert") })
	var denial string
	eventually(t, 10*time.Second, "the refusal in config_errors", func() bool {
		for _, w := range srv.Warnings() {
			if w.Kind == "Secret" && w.Namespace == "ingress" && w.Name == "shop-cert" && strings.Contains(w.Message, "gw-2.ingress") {
				denial = w.Error()
				return true
			}
		}
		return false
	})
	t.Logf("reported: %s", denial)
	if !strings.Contains(denial, "system:serviceaccount:ingress:intruder may not list Secrets in namespace ingress") {
		t.Errorf("the refusal does not say who may not list what: %s", denial)
	}

	// Rotation pushes the new key pair to the gateway, never to the intruder; the answers are cached.
	newCert, newKey := selfSignedPEM(t, "shop.example.com")
	_, err = s.Kube.CoreV1().Secrets("ingress").Update(ctx,
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "shop-cert", Namespace: "ingress"},
			Type: corev1.SecretTypeTLS, Data: map[string][]byte{"tls.crt": newCert, "tls.key": newKey, "ca.crt": newCert}}, metav1.UpdateOptions{})
	must(t, err)
	eventually(t, 5*time.Second, "the rotated key pair", func() bool {
		gw.mu.Lock()
		defer gw.mu.Unlock()
		return string(gw.received["kubernetes://shop-cert"].GetTlsCertificate().GetPrivateKey().GetInlineBytes()) == string(newKey)
	})
	time.Sleep(500 * time.Millisecond)
	for _, st := range []*sdsStream{gw, intruder} {
		if st.has("kubernetes://shop/shop-cert") {
			t.Error("another namespace's Secret was served")
		}
	}
	if intruder.has("kubernetes://shop-cert") {
		t.Errorf("the account without the Role was served the key pair (has %v)", intruder.names())
	}
	if sent, failed := srv.SecretAccess.Reviews(); sent != 2 || failed != 0 {
		t.Errorf("%d SubjectAccessReviews (%d failed), want one per account", sent, failed)
	}
	// Both streams' tokens were reviewed once; the metrics say so.
	resp, err := http.Get("http://" + srv.HTTPAddr() + "/metrics")
	must(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	must(t, err)
	for _, want := range []string{"sextant_token_reviews_total 2\n", "sextant_token_review_cache_hits_total 0\n",
		`sextant_secret_access_reviews_total{result="sent"} 2` + "\n", `sextant_secret_access_reviews_total{result="failed"} 0` + "\n"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func selfSignedPEM(t *testing.T, host string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: host},
		DNSNames: []string{host}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	must(t, err)
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	must(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}
