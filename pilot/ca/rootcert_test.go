package ca

import (
	"context"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRootPublisherKeepsTheRootInEveryNamespace(t *testing.T) {
	root := []byte("-----BEGIN CERTIFICATE-----\nroot\n-----END CERTIFICATE-----\n")
	client := fake.NewClientset(namespace("istio-system"), namespace("shop"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, id := range []string{"replica-1", "replica-2"} {
		p := NewRootPublisher(RootPublisherOptions{Client: client, RootPEM: root, LeaseNamespace: "istio-system", LeaseName: "sextant-ca-root",
			Identity: id, Resync: 100 * time.Millisecond, LeaseDuration: 2 * time.Second, RenewDeadline: time.Second,
			RetryPeriod: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
		go p.Run(ctx)
	}
	cms := func(ns string) (*corev1.ConfigMap, error) {
		return client.CoreV1().ConfigMaps(ns).Get(context.Background(), RootConfigMap, metav1.GetOptions{})
	}
	hasRoot := func(ns string) func() bool {
		return func() bool {
			cm, err := cms(ns)
			return err == nil && cm.Data[RootConfigMapKey] == string(root)
		}
	}
	eventually(t, 5*time.Second, "root in the namespaces present at start",
		func() bool { return hasRoot("istio-system")() && hasRoot("shop")() })

	start := time.Now()
	if _, err := client.CoreV1().Namespaces().Create(context.Background(), namespace("late"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "root in a namespace created after start", hasRoot("late"))
	t.Logf("root published in a new namespace %s after it was created", time.Since(start).Round(time.Millisecond))

	// An edit or a deletion is repaired at the next resync.
	cm, _ := cms("shop")
	cm.Data[RootConfigMapKey] = "tampered"
	if _, err := client.CoreV1().ConfigMaps("shop").Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.CoreV1().ConfigMaps("late").Delete(context.Background(), RootConfigMap, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "tampered and deleted ConfigMaps repaired", func() bool { return hasRoot("shop")() && hasRoot("late")() })

	lease, err := client.CoordinationV1().Leases("istio-system").Get(context.Background(), "sextant-ca-root", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil {
		t.Fatalf("lease: %v", err)
	}
	if h := *lease.Spec.HolderIdentity; h != "replica-1" && h != "replica-2" {
		t.Errorf("lease held by %q", h)
	}
}
