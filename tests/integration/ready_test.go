//go:build integration

package integration

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var apGVR = schema.GroupVersionResource{Group: "security.istio.io", Version: "v1", Resource: "authorizationpolicies"}

// TestRejectedPolicyInClusterKeepsServerNotReady: an AuthorizationPolicy in the cluster that Sextant cannot
// decode when it starts keeps it not ready, naming the policy, until the policy is fixed; then it is ready.
func TestRejectedPolicyInClusterKeepsServerNotReady(t *testing.T) {
	s := startAPIServer(t)
	installIstioCRDs(t, s)
	ctx := context.Background()
	must(t, s.LoosenCRDSpec(ctx, "authorizationpolicies.security.istio.io"))
	_, kubeconfig := leastPrivilege(t, s)
	const ns = "ready"
	s.EnsureNamespace(ns)
	aps := s.Dynamic.Resource(apGVR).Namespace(ns)
	policy := func(action string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "security.istio.io/v1", "kind": "AuthorizationPolicy",
			"metadata": map[string]any{"namespace": ns, "name": "allow-frontend"},
			"spec": map[string]any{"action": action, "rules": []any{map[string]any{"from": []any{map[string]any{
				"source": map[string]any{"principals": []any{"cluster.local/ns/ready/sa/frontend"}}}}}}},
		}}
	}
	// The loosened schema reaches the API server's handlers a moment later; until then the enum is checked.
	eventually(t, 30*time.Second, "the loosened CRD to accept an unknown action", func() bool {
		_, err := aps.Create(ctx, policy("FUTURE_ACTION"), metav1.CreateOptions{})
		return err == nil
	})

	sx := startSextant(t, kubeconfig)
	get := func() (int, string) {
		resp, err := http.Get("http://" + sx.srv.HTTPAddr() + "/ready")
		must(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	time.Sleep(500 * time.Millisecond) // a gate that opened by mistake would have opened by now
	if code, body := get(); code != http.StatusServiceUnavailable || !strings.Contains(body, "AuthorizationPolicy ready/allow-frontend") {
		t.Fatalf("/ready = %d %q, want 503 naming the policy", code, body)
	}

	fixed, err := aps.Get(ctx, "allow-frontend", metav1.GetOptions{})
	must(t, err)
	must(t, unstructured.SetNestedField(fixed.Object, "ALLOW", "spec", "action"))
	_, err = aps.Update(ctx, fixed, metav1.UpdateOptions{})
	must(t, err)
	eventually(t, 10*time.Second, "ready once the policy is fixed", func() bool {
		code, _ := get()
		return code == http.StatusOK
	})
}
