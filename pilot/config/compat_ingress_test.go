package config

import (
	"maps"
	"slices"
	"testing"
)

// Every entry of the Kubernetes kinds' table names a field the walk of its kind reaches.
func TestCompatK8sTableNamesFields(t *testing.T) {
	for _, k := range CompatK8sKinds() {
		paths := map[string]bool{}
		for _, r := range CompatK8sRows(k) {
			paths[r.Path] = true
		}
		for _, p := range slices.Sorted(maps.Keys(k8sCompatTable[k.Kind])) {
			if !paths[p] {
				t.Errorf("%s: the table names %s, which the spec lacks", k.Kind, p)
			}
			if k8sCompatTable[k.Kind][p].Note == "" {
				t.Errorf("%s %s: no note", k.Kind, p)
			}
		}
	}
}

// k8sCompatCases set the fields the page calls warned or partly: the spec each needs, and the field the
// warning names, lists written [].
var k8sCompatCases = map[Kind]map[string]struct{ spec, warned string }{
	Ingress: {
		"spec.defaultBackend": {"defaultBackend: {service: {name: a, port: {number: 80}}}\n", "spec.defaultBackend"},
		"spec.tls[]":          {"defaultBackend: {service: {name: a, port: {number: 80}}}\n  tls: [{hosts: [a.example.com]}]\n", "spec.tls[]"},
		"spec.rules[]":        {"rules: [{host: a.example.com}]\n", "spec.rules[]"},
		"spec.rules[].http.paths[].backend.resource": {"rules: [{http: {paths: [{path: /, pathType: Prefix, " +
			"backend: {resource: {kind: Bucket, name: b}}}]}}]\n", "spec.rules[].http.paths[].backend.resource"},
	},
	IngressClass: {
		"spec.parameters": {"controller: istio.io/ingress-controller\n  parameters: {kind: P, name: p}\n", "spec.parameters"},
	},
}

// A field the page calls warned (or partly) produces a warning naming it when set; an Ingress and an
// IngressClass setting only honoured fields produce none.
func TestCompatK8sWarnedFieldsWarn(t *testing.T) {
	parse := func(kind Kind, spec string) *Config {
		t.Helper()
		doc := "apiVersion: networking.k8s.io/v1\nkind: " + string(kind) + "\nmetadata: {name: x, namespace: shop}\nspec:\n  " + spec
		c, err := Parse([]byte(doc), "compat.yaml", 0, "shop")
		if err != nil {
			t.Fatalf("%s %q: %v", kind, spec, err)
		}
		return c
	}
	for _, k := range CompatK8sKinds() {
		for _, r := range CompatK8sRows(k) {
			if r.CoveredBy != "" || r.Entry.Status == Honoured {
				continue
			}
			tc, ok := k8sCompatCases[k.Kind][r.Path]
			if !ok {
				t.Errorf("%s %s is %s: add a case that sets it", k.Kind, r.Path, r.Entry.Status)
				continue
			}
			if !slices.ContainsFunc(Warnings(parse(k.Kind, tc.spec)), func(w *FieldError) bool {
				return stripIndices(w.Field) == tc.warned
			}) {
				t.Errorf("%s %s: marked %s, but setting it warns of nothing at %s", k.Kind, r.Path, r.Entry.Status, tc.warned)
			}
		}
	}
	honoured := map[Kind]string{
		Ingress: "ingressClassName: istio\n  tls: [{hosts: [a.example.com], secretName: s}]\n  rules: [{host: a.example.com, http: " +
			"{paths: [{path: /, pathType: Prefix, backend: {service: {name: a, port: {name: http}}}}]}}]\n",
		IngressClass: "controller: istio.io/ingress-controller\n",
	}
	for kind, spec := range honoured {
		if ws := Warnings(parse(kind, spec)); len(ws) != 0 {
			t.Errorf("%s with honoured fields only warns: %v", kind, ws)
		}
	}
}
