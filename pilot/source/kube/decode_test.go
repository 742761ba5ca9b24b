package kube

import (
	"encoding/json"
	"testing"

	networking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kjson "sigs.k8s.io/json"

	"github.com/sextantmesh/sextant/pilot/config"
)

// benchDR is a DestinationRule as the API server sends it; applied adds what kubectl apply leaves on it
// (managedFields and the last-applied annotation, a copy of the object).
func benchDR(b *testing.B, applied bool) []byte {
	dr := &networkingv1.DestinationRule{ObjectMeta: meta("reviews", "12345"), Spec: networking.DestinationRule{
		Host: "reviews.default.svc.cluster.local",
		TrafficPolicy: &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{
			LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_LEAST_REQUEST}}},
		Subsets: []*networking.Subset{{Name: "v1", Labels: map[string]string{"version": "v1"}},
			{Name: "v2", Labels: map[string]string{"version": "v2"}}},
	}}
	dr.APIVersion, dr.Kind = "networking.istio.io/v1", "DestinationRule"
	if applied {
		last, err := json.Marshal(dr)
		if err != nil {
			b.Fatal(err)
		}
		dr.Annotations = map[string]string{lastApplied: string(last)}
		dr.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl-client-side-apply", Operation: metav1.ManagedFieldsOperationUpdate,
			APIVersion: "networking.istio.io/v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(
				`{"f:metadata":{"f:annotations":{".":{},"f:kubectl.kubernetes.io/last-applied-configuration":{}}},` +
					`"f:spec":{".":{},"f:host":{},"f:subsets":{},"f:trafficPolicy":{".":{},"f:loadBalancer":{".":{},"f:simple":{}}}}}`)}}}
	}
	data, err := json.Marshal(dr)
	if err != nil {
		b.Fatal(err)
	}
	return data
}

// BenchmarkDecodeDestinationRule compares what one watched DestinationRule costs to decode: typed, as Istio's
// clientset did, and unstructured then converted, as the dynamic informer and crdTransform do.
func BenchmarkDecodeDestinationRule(b *testing.B) {
	for _, applied := range []bool{false, true} {
		name := "plain"
		if applied {
			name = "applied"
		}
		b.Run(name, func(b *testing.B) { benchDecode(b, benchDR(b, applied)) })
	}
}

func benchDecode(b *testing.B, data []byte) {
	b.Run("typed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var dr networkingv1.DestinationRule
			if err := kjson.UnmarshalCaseSensitivePreserveInts(data, &dr); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("dynamic", func(b *testing.B) {
		b.ReportAllocs()
		tf := crdTransform(config.DestinationRule)
		for b.Loop() {
			obj, _, err := unstructured.UnstructuredJSONScheme.Decode(data, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			out, err := tf(obj)
			if err != nil {
				b.Fatal(err)
			}
			if _, ok := out.(*networkingv1.DestinationRule); !ok {
				b.Fatalf("decoded to %T", out)
			}
		}
	})
}

// A WorkloadEntry's status conditions reach the config (a health-checked entry is served by them); a
// status entry that is not a condition is skipped.
func TestWorkloadEntryConditionsDecoded(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.istio.io/v1", "kind": "WorkloadEntry",
		"metadata": map[string]any{"name": "vm", "namespace": "default"},
		"spec":     map[string]any{"address": "10.0.0.7"},
		"status": map[string]any{"conditions": []any{
			map[string]any{"type": "Healthy", "status": "True", "lastProbeTime": "2026-03-01T12:00:00Z"},
			"not a condition",
		}},
	}}
	c, err := toConfig(decodeCRD(config.WorkloadEntry, u))
	if err != nil {
		t.Fatal(err)
	}
	if c.Conditions["Healthy"] != "True" {
		t.Errorf("conditions %v, want Healthy True", c.Conditions)
	}
}
