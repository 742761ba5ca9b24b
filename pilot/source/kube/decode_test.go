package kube

import (
	"encoding/json"
	"testing"

	networking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kjson "sigs.k8s.io/json"

	"github.com/sextantmesh/sextant/pilot/config"
)

// benchDR is a DestinationRule as the API server sends it.
func benchDR(b *testing.B) []byte {
	dr := &networkingv1.DestinationRule{ObjectMeta: meta("reviews", "12345"), Spec: networking.DestinationRule{
		Host: "reviews.default.svc.cluster.local",
		TrafficPolicy: &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{
			LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_LEAST_REQUEST}}},
		Subsets: []*networking.Subset{{Name: "v1", Labels: map[string]string{"version": "v1"}}, {Name: "v2", Labels: map[string]string{"version": "v2"}}},
	}}
	dr.APIVersion, dr.Kind = "networking.istio.io/v1", "DestinationRule"
	data, err := json.Marshal(dr)
	if err != nil {
		b.Fatal(err)
	}
	return data
}

// BenchmarkDecodeDestinationRule compares what one watched DestinationRule costs to decode: typed, as Istio's
// clientset did, and unstructured then converted, as the dynamic informer and crdTransform do.
func BenchmarkDecodeDestinationRule(b *testing.B) {
	data := benchDR(b)
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
