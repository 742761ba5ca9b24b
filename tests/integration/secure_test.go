//go:build integration

package integration

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	pb "istio.io/api/security/v1alpha1"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sextantmesh/sextant/pilot/ca"
	"github.com/sextantmesh/sextant/pilot/discovery"
)

// startSecureSextant runs the discovery server as the least-privilege account with only the secure port.
func startSecureSextant(t *testing.T, kubeconfig string) *discovery.Server {
	t.Helper()
	srv, _ := runSecureSextant(t, kubeconfig)
	return srv
}

// runSecureSextant is startSecureSextant that also returns a function stopping the server, as a
// replica that is shut down (it is stopped at the end of the test otherwise).
func runSecureSextant(t *testing.T, kubeconfig string) (*discovery.Server, func()) {
	t.Helper()
	logger, _ := newLogger(t)
	srv, err := discovery.NewServer(discovery.Args{Kubeconfig: kubeconfig, SecureGRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		TrustedNodeAccounts: discovery.DefaultTrustedNodeAccounts, DebounceAfter: 50 * time.Millisecond,
		DebounceMax: time.Second, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stop := func() { cancel(); srv.Wait() }
	t.Cleanup(stop)
	timer := time.AfterFunc(2*time.Minute, cancel)
	defer timer.Stop()
	if err := srv.Start(ctx); err != nil {
		t.Fatalf("sextant did not start: %v", err)
	}
	return srv, stop
}

func serviceAccountToken(t *testing.T, s *apiServer, ns, sa string, audiences ...string) string {
	t.Helper()
	_, err := s.Kube.CoreV1().ServiceAccounts(ns).Create(context.Background(),
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	exp := int64(3600)
	tr, err := s.Kube.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), sa,
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	must(t, err)
	return tr.Status.Token
}

// expiredToken signs, with the API server's own service-account key, a token for ns/sa of audience
// istio-ca that expired a minute ago: TokenRequest cannot make one shorter than ten minutes.
func expiredToken(t *testing.T, s *apiServer, ns, sa string) string {
	t.Helper()
	acct, err := s.Kube.CoreV1().ServiceAccounts(ns).Get(context.Background(), sa, metav1.GetOptions{})
	must(t, err)
	keyPEM, err := os.ReadFile(filepath.Join(s.Dir, "sa.key"))
	must(t, err)
	block, _ := pem.Decode(keyPEM)
	key, err := x509.ParsePKCS1PrivateKey(block.Bytes)
	must(t, err)
	now := time.Now()
	claims, err := json.Marshal(map[string]any{
		"iss": "https://kubernetes.default.svc.cluster.local", "sub": "system:serviceaccount:" + ns + ":" + sa,
		"aud": []string{"istio-ca"}, "iat": now.Add(-time.Hour).Unix(), "nbf": now.Add(-time.Hour).Unix(), "exp": now.Add(-time.Minute).Unix(),
		"kubernetes.io": map[string]any{"namespace": ns, "serviceaccount": map[string]any{"name": sa, "uid": string(acct.UID)}},
	})
	must(t, err)
	enc := base64.RawURLEncoding.EncodeToString
	signing := enc([]byte(`{"alg":"RS256","typ":"JWT"}`)) + "." + enc(claims)
	digest := sha256.Sum256([]byte(signing))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, digest[:])
	must(t, err)
	return signing + "." + enc(sig)
}

// allowSecretsRead lets the service account list and watch Secrets, which the Kubernetes source reads
// for SDS and manifests/ do not grant yet: without it the source never syncs.
func allowSecretsRead(t *testing.T, s *apiServer) {
	t.Helper()
	ctx := context.Background()
	_, err := s.Kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "test-secrets-read"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch"}}}},
		metav1.CreateOptions{})
	must(t, err)
	_, err = s.Kube.RbacV1().ClusterRoleBindings().Create(ctx,
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "test-secrets-read"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "test-secrets-read"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "istio-system", Name: "sextant"}}}, metav1.CreateOptions{})
	must(t, err)
}

// TestSecurePortWithTheRealAPIServer: tokens are checked with the real TokenReview API, the CA's root
// is kept in istio-ca-secret and shared by a second replica, the root is published to namespaces, all
// as the least-privilege service account of manifests/.
func TestSecurePortWithTheRealAPIServer(t *testing.T) {
	s := startAPIServer(t)
	_, kubeconfig := leastPrivilege(t, s)
	allowSecretsRead(t, s)
	s.EnsureNamespace("shop")
	srv, stopFirst := runSecureSextant(t, kubeconfig)
	ctx := context.Background()

	secret, err := s.Kube.CoreV1().Secrets("istio-system").Get(ctx, ca.SelfSignedSecret, metav1.GetOptions{})
	must(t, err)
	root := secret.Data[ca.RootFile]
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(root) {
		t.Fatal("istio-ca-secret holds no root")
	}
	cc, err := grpc.NewClient(srv.SecureGRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs: pool, ServerName: "istiod.istio-system.svc"})))
	must(t, err)
	t.Cleanup(func() { cc.Close() })
	certs := pb.NewIstioCertificateServiceClient(cc)
	bearer := func(token string) context.Context {
		if token == "" {
			return ctx
		}
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	must(t, err)
	csr := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))

	cart := serviceAccountToken(t, s, "shop", "cart", "istio-ca")
	resp, err := certs.CreateCertificate(bearer(cart), &pb.IstioCertificateRequest{Csr: csr})
	if err != nil {
		t.Fatalf("certificate with a real token: %v", err)
	}
	block, _ := pem.Decode([]byte(resp.GetCertChain()[0]))
	leaf, err := x509.ParseCertificate(block.Bytes)
	must(t, err)
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != "spiffe://cluster.local/ns/shop/sa/cart" {
		t.Errorf("certificate for %v", leaf.URIs)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("leaf does not verify against istio-ca-secret's root: %v", err)
	}

	// A token of the API server's own audience, a revoked token (its service account deleted) and none.
	otherAudience := serviceAccountToken(t, s, "shop", "cart", "https://kubernetes.default.svc")
	revoked := serviceAccountToken(t, s, "shop", "gone", "istio-ca")
	expired := expiredToken(t, s, "shop", "cart")
	must(t, s.Kube.CoreV1().ServiceAccounts("shop").Delete(ctx, "gone", metav1.DeleteOptions{}))
	for name, tc := range map[string]struct{ token, want string }{
		"other audience": {otherAudience, "is invalid for the target audiences [\"istio-ca\"]"},
		"revoked":        {revoked, "rejected by the Kubernetes API server"},
		"expired":        {expired, "service account token has expired"},
		"no token":       {"", "no credentials"},
	} {
		_, err := certs.CreateCertificate(bearer(tc.token), &pb.IstioCertificateRequest{Csr: csr})
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want Unauthenticated saying %q", name, err, tc.want)
		}
	}

	// xDS with the token: the node must be in the token's namespace.
	ads := discoverypb.NewAggregatedDiscoveryServiceClient(cc)
	stream := func(nodeID string) error {
		st, err := ads.StreamAggregatedResources(bearer(cart))
		if err != nil {
			return err
		}
		if err := st.Send(&discoverypb.DiscoveryRequest{Node: &core.Node{Id: nodeID},
			TypeUrl: "type.googleapis.com/envoy.config.cluster.v3.Cluster"}); err != nil {
			return err
		}
		_, err = st.Recv()
		return err
	}
	if err := stream("sidecar~10.1.0.1~cart-1.shop~shop.svc.cluster.local"); err != nil {
		t.Errorf("xDS with its own namespace: %v", err)
	}
	if err := stream("sidecar~10.1.0.1~cart-1.bank~bank.svc.cluster.local"); status.Code(err) != codes.PermissionDenied {
		t.Errorf("xDS claiming another namespace: %v, want PermissionDenied", err)
	}
	if err := stream("ztunnel~10.1.0.1~ztunnel-x.shop~shop.svc.cluster.local"); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a forged ztunnel: %v, want PermissionDenied", err)
	}

	// The root in a namespace created now, within 5 s.
	s.EnsureNamespace("late")
	created := time.Now()
	eventually(t, 5*time.Second, "istio-ca-root-cert in a new namespace", func() bool {
		cm, err := s.Kube.CoreV1().ConfigMaps("late").Get(ctx, ca.RootConfigMap, metav1.GetOptions{})
		return err == nil && cm.Data[ca.RootConfigMapKey] == string(root)
	})
	t.Logf("istio-ca-root-cert in a new namespace %s after it was created", time.Since(created).Round(time.Millisecond))

	// A second replica signs with the same root.
	second, stopSecond := runSecureSextant(t, kubeconfig)
	if string(second.CA.RootPEM()) != string(root) || string(srv.CA.RootPEM()) != string(root) {
		t.Error("the second replica has another root")
	}
	rootIn := func(ns string, within time.Duration) {
		t.Helper()
		s.EnsureNamespace(ns)
		created := time.Now()
		eventually(t, within, "istio-ca-root-cert in namespace "+ns, func() bool {
			cm, err := s.Kube.CoreV1().ConfigMaps(ns).Get(ctx, ca.RootConfigMap, metav1.GetOptions{})
			return err == nil && cm.Data[ca.RootConfigMapKey] == string(root)
		})
		t.Logf("istio-ca-root-cert in namespace %s %s after it was created", ns, time.Since(created).Round(time.Millisecond))
	}
	// The first replica (the publisher) shuts down and releases the Lease: the second publishes the root
	// once it has taken the Lease, at its next try (every 2 s).
	stopFirst()
	rootIn("after-failover", 10*time.Second)
	// Every replica restarts: the root is still istio-ca-secret's, and it is published.
	stopSecond()
	restarted := startSecureSextant(t, kubeconfig)
	if string(restarted.CA.RootPEM()) != string(root) {
		t.Error("after a restart the CA has another root")
	}
	secret, err = s.Kube.CoreV1().Secrets("istio-system").Get(ctx, ca.SelfSignedSecret, metav1.GetOptions{})
	must(t, err)
	if string(secret.Data[ca.RootFile]) != string(root) {
		t.Error("istio-ca-secret was replaced on restart")
	}
	rootIn("after-restart", 5*time.Second)
}
