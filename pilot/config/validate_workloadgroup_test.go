package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sextantmesh/sextant/pilot/config"
)

func workloadGroupDoc(spec string) string {
	return "apiVersion: networking.istio.io/v1\nkind: WorkloadGroup\nmetadata: {name: vms, namespace: shop}\nspec:\n" + spec
}

// istiod's validation of the kind: a template, Kubernetes labels, and a sound probe.
func TestValidateWorkloadGroup(t *testing.T) {
	for _, tc := range []struct{ spec, field, msg string }{
		{"  metadata: {labels: {app: a}}\n", "spec.template", "required"},
		{"  template: {}\n  metadata: {labels: {'a b': x}}\n", "spec.metadata.labels", `invalid key "a b"`},
		{"  template: {}\n  metadata: {labels: {app: 'x/y'}}\n", "spec.metadata.labels", `invalid value "x/y"`},
		{"  template: {ports: {http: 70000}}\n", "spec.template.ports.http", "not a valid port"},
		{"  template: {}\n  probe: {periodSeconds: -1, tcpSocket: {port: 80}}\n", "spec.probe.periodSeconds", "must be non-negative"},
		{"  template: {}\n  probe: {httpGet: {port: 0}}\n", "spec.probe.httpGet.port", "not a valid port"},
		{"  template: {}\n  probe: {httpGet: {port: 80, scheme: FTP}}\n", "spec.probe.httpGet.scheme", "must be HTTP or HTTPS"},
		{"  template: {}\n  probe: {httpGet: {port: 80, httpHeaders: [{name: 'a b'}]}}\n", "spec.probe.httpGet.httpHeaders[0].name",
			"not a valid header name"},
		{"  template: {}\n  probe: {exec: {}}\n", "spec.probe.exec.command", "required"},
		{"  template: {}\n  probe: {grpc: {port: 80}}\n", "spec.probe", "httpGet, tcpSocket or exec is required"},
	} {
		_, err := config.Parse([]byte(workloadGroupDoc(tc.spec)), "f.yaml", 0, "shop")
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Kind != "WorkloadGroup" || ce.Name != "vms" || ce.Field != tc.field ||
			!strings.Contains(ce.Message, tc.msg) {
			t.Errorf("%q: got %v, want %s: %s", tc.spec, err, tc.field, tc.msg)
		}
	}
	if _, err := config.Parse([]byte(workloadGroupDoc("  metadata: {labels: {app: a}, annotations: {x: 'a/b'}}\n"+
		"  template: {serviceAccount: a, ports: {http: 80}}\n  probe: {httpGet: {port: 80, path: /ready}}\n")), "f.yaml", 0, "shop"); err != nil {
		t.Errorf("valid group: %v", err)
	}
}

// The probe is agent-side: warned, naming the field; a group without one warns nothing.
func TestWorkloadGroupWarnings(t *testing.T) {
	for spec, want := range map[string]string{
		"  template: {}\n  probe: {tcpSocket: {port: 80}}\n": "spec.probe",
		"  template: {}\n": "",
	} {
		c, err := config.Parse([]byte(workloadGroupDoc(spec)), "f.yaml", 0, "shop")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, w := range config.Warnings(c) {
			got = append(got, w.Field)
		}
		if want == "" && len(got) > 0 || want != "" && (len(got) != 1 || got[0] != want) {
			t.Errorf("%q: warnings at %v, want %q", spec, got, want)
		}
	}
}
