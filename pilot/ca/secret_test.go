package ca

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestLoadOrCreateSecretCreatesOnceAndReuses(t *testing.T) {
	client := fake.NewClientset()
	ctx := context.Background()
	first, from, err := LoadOrCreateSecret(ctx, client, "istio-system", "cluster.local", t0)
	if err != nil || from != "istio-system/istio-ca-secret (created)" {
		t.Fatalf("first start: %q, %v", from, err)
	}
	s, err := client.CoreV1().Secrets("istio-system").Get(ctx, SelfSignedSecret, metav1.GetOptions{})
	if err != nil || string(s.Type) != "istio.io/ca-root" {
		t.Fatalf("secret: %v %v", s, err)
	}
	// A restart, or a second replica, uses the same root.
	second, from, err := LoadOrCreateSecret(ctx, client, "istio-system", "cluster.local", t0)
	if err != nil || from != "istio-system/istio-ca-secret" || !bytes.Equal(first.Root, second.Root) || !bytes.Equal(first.Key, second.Key) {
		t.Fatalf("restart: %q, %v, same root %v", from, err, bytes.Equal(first.Root, second.Root))
	}
	if _, err := New(second, Options{TrustDomain: "cluster.local", Now: func() time.Time { return t0 }}); err != nil {
		t.Error(err)
	}
}

func TestLoadOrCreateSecretPrefersPluggedInCerts(t *testing.T) {
	plugged, _ := intermediateMaterial(t)
	client := fake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cacerts", Namespace: "istio-system"},
		Data: map[string][]byte{CertFile: plugged.Cert, KeyFile: plugged.Key, ChainFile: plugged.Chain, RootFile: plugged.Root}})
	km, from, err := LoadOrCreateSecret(context.Background(), client, "istio-system", "cluster.local", t0)
	if err != nil || from != "istio-system/cacerts" || !bytes.Equal(km.Cert, plugged.Cert) {
		t.Fatalf("%q, %v", from, err)
	}
	if _, err := client.CoreV1().Secrets("istio-system").Get(context.Background(), SelfSignedSecret,
		metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("istio-ca-secret created although cacerts is plugged in: %v", err)
	}
}

func TestLoadOrCreateSecretReadsIstiodsSecret(t *testing.T) {
	// istiod stores its self-signed root in ca-cert.pem and ca-key.pem only.
	istiod := selfSigned(t)
	client := fake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "istio-ca-secret", Namespace: "istio-system"},
		Type: "istio.io/ca-root", Data: map[string][]byte{CertFile: istiod.Cert, KeyFile: istiod.Key, ChainFile: nil,
			RootFile: nil, "key.pem": nil}})
	km, _, err := LoadOrCreateSecret(context.Background(), client, "istio-system", "cluster.local", t0)
	if err != nil || !bytes.Equal(km.Root, istiod.Cert) {
		t.Fatalf("istiod's secret: %v", err)
	}
	a, err := New(km, Options{TrustDomain: "cluster.local", Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	if _, chain, err := a.SignCSR(newCSR(t), workload, 0); err != nil || chain[len(chain)-1] != string(istiod.Cert) {
		t.Errorf("signing with istiod's root: %v", err)
	}
}

func TestLoadOrCreateSecretLosesTheRaceGracefully(t *testing.T) {
	winner := selfSigned(t)
	client := fake.NewClientset()
	// Another replica creates the Secret between this one's Get and Create.
	client.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		_ = client.Tracker().Add(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: SelfSignedSecret, Namespace: "istio-system"},
			Data: map[string][]byte{CertFile: winner.Cert, KeyFile: winner.Key, RootFile: winner.Root}})
		return true, nil, apierrors.NewAlreadyExists(schema.GroupResource{Resource: "secrets"}, SelfSignedSecret)
	})
	km, from, err := LoadOrCreateSecret(context.Background(), client, "istio-system", "cluster.local", t0)
	if err != nil || from != "istio-system/istio-ca-secret" || !bytes.Equal(km.Root, winner.Root) {
		t.Fatalf("%q, %v: want the winner's root", from, err)
	}
}

func TestLoadOrCreateSecretRefusesAnIncompleteSecret(t *testing.T) {
	client := fake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cacerts", Namespace: "istio-system"},
		Data: map[string][]byte{CertFile: []byte("x")}})
	if _, _, err := LoadOrCreateSecret(context.Background(), client, "istio-system", "cluster.local", t0); err == nil ||
		!strings.Contains(err.Error(), "cacerts: no [ca-key.pem root-cert.pem]") {
		t.Errorf("%v", err)
	}
}
