package config

import (
	"slices"
	"testing"
)

// An unknown networking.istio.io/traffic-distribution value is warned, naming the annotation; known ones
// (any case) are not.
func TestTrafficDistributionAnnotationWarning(t *testing.T) {
	const field = "metadata.annotations[networking.istio.io/traffic-distribution]"
	for value, want := range map[string]bool{"PreferClose": false, "prefersamenode": false, "PreferSameZone": false,
		"Nearest": true, "PreferNetwork": true} {
		doc := "apiVersion: v1\nkind: Service\nmetadata: {name: x, namespace: shop, annotations: " +
			"{networking.istio.io/traffic-distribution: " + value + "}}\nspec:\n  ports: [{name: http, port: 80}]\n"
		c, err := Parse([]byte(doc), "svc.yaml", 0, "shop")
		if err != nil {
			t.Fatal(err)
		}
		got := slices.ContainsFunc(Warnings(c), func(w *FieldError) bool { return w.Field == field })
		if got != want {
			t.Errorf("%s: warned %v, want %v", value, got, want)
		}
	}
}

// The annotation on a Namespace, which istiod applies to its Services, is not implemented: it is warned.
func TestTrafficDistributionNamespaceAnnotationWarning(t *testing.T) {
	doc := "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop, annotations: {networking.istio.io/traffic-distribution: PreferClose}}\n"
	c, err := Parse([]byte(doc), "ns.yaml", 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(Warnings(c), func(w *FieldError) bool {
		return w.Field == "metadata.annotations[networking.istio.io/traffic-distribution]"
	}) {
		t.Errorf("no warning: %v", Warnings(c))
	}
}
