package ca

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Secrets istiod keeps its CA in: an operator's plugged-in CA, and the self-signed root it creates.
const (
	PluggedSecret    = "cacerts"
	SelfSignedSecret = "istio-ca-secret"
	selfSignedType   = "istio.io/ca-root"
)

// LoadOrCreateSecret returns the CA key material of the cluster, as istiod finds it: the cacerts Secret
// in namespace if there is one, else istio-ca-secret, else a new self-signed root stored as
// istio-ca-secret. Replicas starting together race to create it; the loser uses the winner's, so every
// replica and every restart signs with the same root. from names the Secret used.
func LoadOrCreateSecret(ctx context.Context, client kubernetes.Interface, namespace, trustDomain string, now time.Time) (
	km KeyMaterial, from string, err error) {
	secrets := client.CoreV1().Secrets(namespace)
	for _, name := range []string{PluggedSecret, SelfSignedSecret} {
		s, err := secrets.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return KeyMaterial{}, "", fmt.Errorf("reading Secret %s/%s: %w", namespace, name, err)
		}
		km, err := fromSecret(s)
		return km, namespace + "/" + name, err
	}
	if km, err = GenerateSelfSigned(trustDomain, now); err != nil {
		return KeyMaterial{}, "", err
	}
	_, err = secrets.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: SelfSignedSecret, Namespace: namespace},
		Type:       selfSignedType,
		Data:       map[string][]byte{CertFile: km.Cert, KeyFile: km.Key, ChainFile: km.Chain, RootFile: km.Root},
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		s, err := secrets.Get(ctx, SelfSignedSecret, metav1.GetOptions{})
		if err != nil {
			return KeyMaterial{}, "", fmt.Errorf("reading Secret %s/%s another replica created: %w", namespace, SelfSignedSecret, err)
		}
		km, err := fromSecret(s)
		return km, namespace + "/" + SelfSignedSecret, err
	}
	if err != nil {
		return KeyMaterial{}, "", fmt.Errorf("storing the new CA root as Secret %s/%s: %w", namespace, SelfSignedSecret, err)
	}
	return km, namespace + "/" + SelfSignedSecret + " (created)", nil
}

func fromSecret(s *corev1.Secret) (KeyMaterial, error) {
	km := KeyMaterial{Cert: s.Data[CertFile], Key: s.Data[KeyFile], Chain: s.Data[ChainFile], Root: s.Data[RootFile]}
	if len(km.Root) == 0 && s.Name == SelfSignedSecret {
		// istiod writes its self-signed root as ca-cert.pem only; it is its own root.
		km.Root = km.Cert
	}
	var missing []string
	for _, f := range []struct {
		name string
		data []byte
	}{{CertFile, km.Cert}, {KeyFile, km.Key}, {RootFile, km.Root}} {
		if len(f.data) == 0 {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return KeyMaterial{}, fmt.Errorf("Secret %s/%s: no %v", s.Namespace, s.Name, missing)
	}
	return km, nil
}
