package agent

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pkiutil "istio.io/istio/security/pkg/pki/util"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sextantmesh/sextant/pilot/discovery"
	"github.com/sextantmesh/sextant/tests/kubeenv"
)

// startAPIServer runs etcd and kube-apiserver for the test and returns them with an admin kubeconfig.
func startAPIServer(t *testing.T) (*kubeenv.Server, string) {
	t.Helper()
	kubeenv.SkipIfMissing(t)
	api, err := kubeenv.Start(kubeenv.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Stop)
	kubeconfig, err := api.WriteKubeconfig(api.Admin, "admin")
	if err != nil {
		t.Fatal(err)
	}
	return api, kubeconfig
}

// ensureServiceAccount creates namespace ns and its service account sa unless they exist.
func ensureServiceAccount(t *testing.T, api *kubeenv.Server, ns, sa string) {
	t.Helper()
	if err := api.EnsureNamespace(ns); err != nil {
		t.Fatal(err)
	}
	_, err := api.Kube.CoreV1().ServiceAccounts(ns).Create(context.Background(),
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}},
		metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// createPod creates a pod scheduled on node running as sa; with ip, its status says it runs there.
func createPod(t *testing.T, api *kubeenv.Server, ns, name, sa, node, ip string, phase corev1.PodPhase) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	ensureServiceAccount(t, api, ns, sa)
	pod, err := api.Kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: sa,
			Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = phase
	if ip != "" {
		pod.Status.PodIP, pod.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	}
	if pod, err = api.Kube.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return pod
}

// podToken is the token the kubelet projects into pod: for its service account, of audience, bound to
// the pod (the API server refuses it once the pod is gone, and TokenReview names the pod).
func podToken(t *testing.T, api *kubeenv.Server, pod *corev1.Pod, audience string) string {
	t.Helper()
	exp := int64(3600)
	tr, err := api.Kube.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(context.Background(), pod.Spec.ServiceAccountName,
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: &exp,
			BoundObjectRef: &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// aged returns token as the API server would have issued it two hours ago for one hour: the same header
// (key id) and claims (subject, audience, bound pod, token id), with iat, nbf and exp moved back, signed
// again with the API server's own service-account key. TokenRequest cannot issue a token that expires in
// less than ten minutes; to the API server this one differs from one it issued only in having expired.
func aged(t *testing.T, api *kubeenv.Server, token string) string {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatal("not a JWT")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims map[string]any
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	if err := dec.Decode(&claims); err != nil {
		t.Fatal(err)
	}
	issued := time.Now().Add(-2 * time.Hour)
	claims["iat"], claims["nbf"], claims["exp"] = issued.Unix(), issued.Unix(), issued.Add(time.Hour).Unix()
	if payload, err = json.Marshal(claims); err != nil {
		t.Fatal(err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(api.Dir, "sa.key"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(keyPEM)
	key, err := x509.ParsePKCS1PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	signing := parts[0] + "." + base64.RawURLEncoding.EncodeToString(payload)
	digest := sha256.Sum256([]byte(signing))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	return signing + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// TestIstioAgentRefusedWithTheReasonWithTheRealAPIServer: Istio's agent with a token the real API
// server's TokenReview rejects (expired, for another audience, bound to a pod that is gone) or with an
// empty token file gets neither a certificate nor xDS, and both its CA client and its xDS proxy report
// Sextant's reason.
func TestIstioAgentRefusedWithTheReasonWithTheRealAPIServer(t *testing.T) {
	api, kubeconfig := startAPIServer(t)
	ctx := context.Background()
	pod := createPod(t, api, "bookinfo", "productpage-v1-0000", "bookinfo-productpage", "node-a", "127.0.0.1", corev1.PodRunning)
	gone := createPod(t, api, "bookinfo", "productpage-v1-0001", "bookinfo-productpage", "node-a", "127.0.0.2", corev1.PodRunning)
	good := podToken(t, api, pod, "istio-ca")
	revoked := podToken(t, api, gone, "istio-ca")
	// Gone for good, as once its kubelet confirms it stopped (there is none here to do so).
	if err := api.Kube.CoreV1().Pods("bookinfo").Delete(ctx, gone.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	s := startSextantArgs(t, discovery.Args{Kubeconfig: kubeconfig})

	// The same token, unaged, is accepted: what the cases below change is the reason they are refused.
	csrPEM, _, err := pkiutil.GenCSR(pkiutil.CertOptions{Host: productpage.String(), RSAKeySize: 2048})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.citadelClient(t, good).CSRSign(csrPEM, 3600); err != nil {
		t.Fatalf("the pod's own token: %v", err)
	}
	for _, tc := range []struct{ name, token, want string }{
		{"expired", aged(t, api, good), "service account token has expired"},
		{"another audience", podToken(t, api, pod, "https://kubernetes.default.svc.cluster.local"),
			`is invalid for the target audiences ["istio-ca"]`},
		{"bound to a deleted pod", revoked, "service account token has been invalidated"},
		{"empty token file", "", "no credentials"},
	} {
		// The CA client wraps the status in text of its own.
		_, err := s.citadelClient(t, tc.token).CSRSign(csrPEM, 3600)
		t.Logf("%s: the agent's CA client: %v", tc.name, err)
		if err == nil || !strings.Contains(err.Error(), "code = Unauthenticated") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: the agent's CA client: %v, want Unauthenticated saying %q", tc.name, err, tc.want)
		}
		dir, bootstrap := runIstioAgent(t, s, tc.token)
		_, err = askListener(t, dir, bootstrapNode(t, bootstrap), "productpage.bookinfo.svc.cluster.local:9080")
		t.Logf("%s: xDS through the agent: %v", tc.name, err)
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: xDS through the agent: %v, want Unauthenticated saying %q", tc.name, err, tc.want)
		}
		if _, err := os.Stat(filepath.Join(dir, "certs", "cert-chain.pem")); err == nil {
			t.Errorf("%s: the agent wrote a certificate", tc.name)
		}
	}
}
