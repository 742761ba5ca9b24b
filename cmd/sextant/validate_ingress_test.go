package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sextantmesh/sextant/tests/debugtest"
)

// An Ingress of the istio class whose paths istiod leaves out: a default backend (warned on the object) and
// a named port the Service lacks (found when converting, beside the Services), and a host whose VirtualService
// takes the name of another's (reviews-example-com-web-...), kept for the first host in order.
const ingressLeftOut = `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web
  namespace: bookinfo
  annotations: {kubernetes.io/ingress.class: istio}
spec:
  defaultBackend: {service: {name: reviews, port: {number: 9080}}}
  rules:
  - host: reviews.example.com
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: reviews, port: {name: grpc}}}}
      - {path: /v1, pathType: Prefix, backend: {service: {name: reviews, port: {name: http}}}}
  - host: reviews-example.com
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: reviews, port: {number: 9080}}}}
`

// The Ingress paths left out of the conversion are warned by validate and in /debug/config_errors alike,
// naming the Ingress and the field; warnings alone exit 0.
func TestValidateWarnsIngressPathsLeftOut(t *testing.T) {
	files := debugtest.Scenario()
	files["70-ingress.yaml"] = ingressLeftOut
	env := debugtest.Start(t, files)
	var serverErrs []struct {
		Kind, Name, Field, Error string
		Warning                  bool
	}
	env.GetJSON(t, "/debug/config_errors", &serverErrs)
	var server []string
	for _, e := range serverErrs {
		if e.Kind == "Ingress" {
			server = append(server, e.Error)
			if e.Name != "web" || !e.Warning {
				t.Errorf("config_errors entry %+v", e)
			}
		}
	}
	fields := []string{"spec.defaultBackend", "spec.rules[0].http.paths[0].backend.service.port.name", "spec.rules[0].host"}
	for _, f := range fields {
		if !slices.ContainsFunc(server, func(e string) bool { return strings.Contains(e, ": field "+f+": ") }) {
			t.Errorf("config_errors lacks %s: %q", f, server)
		}
	}
	if len(server) != len(fields) {
		t.Errorf("config_errors on the Ingress: %q, want %d", server, len(fields))
	}

	out, err := run(t, "validate", "-f", filepath.Join(env.Dir, "10-services.yaml"), "-f", filepath.Join(env.Dir, "70-ingress.yaml"))
	if err != nil {
		t.Fatalf("validate failed on warnings only: %v\n%s", err, out)
	}
	for _, e := range server {
		if !strings.Contains(out, "warning: "+e+"\n") {
			t.Errorf("validate lacks the server's\n  %s\nit says\n%s", e, out)
		}
	}
	want := "(Ingress bookinfo/web): field spec.rules[0].http.paths[0].backend.service.port.name: Service bookinfo/reviews " +
		"has no port named \"grpc\": this path is left out"
	if !strings.Contains(out, want) {
		t.Errorf("validate:\n%s\nlacks %s", out, want)
	}
}
