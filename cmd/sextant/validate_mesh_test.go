package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// meshFile writes a mesh config file and returns its path.
func meshFile(t *testing.T, data string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "mesh.yaml")
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// A mesh config field Sextant does not honour is warned by path with the compatibility table's reason, a
// honoured one is not, and warnings alone exit 0, as for the kinds.
func TestValidateMeshConfigWarnsUnhonouredFields(t *testing.T) {
	file := meshFile(t, "outboundTrafficPolicy: {mode: REGISTRY_ONLY}\nproxyListenPort: 15101\nproxyInboundListenPort: 15106\n"+
		"defaultConfig:\n  proxyHeaders: {forwardedClientCert: SANITIZE, setCurrentClientCertDetails: {cert: true}}\n"+
		"  tracing:\n    zipkin: {address: zipkin.istio-system:9411}\n")
	out, err := run(t, "validate", "--mesh-config", file)
	if err != nil {
		t.Fatalf("validate failed on warnings only: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := "warning: " + file + ": document 0 (MeshConfig): field defaultConfig.tracing.zipkin.address: " +
		"Sextant does not honour this mesh config field: telemetry: Sextant generates no tracing or access log config"
	if len(lines) != 2 || lines[0] != want || !strings.HasSuffix(lines[1], "0 documents rejected, 1 warning "+
		"(fields accepted but not implemented or without effect)") {
		t.Errorf("validate:\n%s\nwant first\n%s", out, want)
	}
	if strings.Contains(out, "outboundTrafficPolicy") || strings.Contains(out, "ListenPort") || strings.Contains(out, "proxyHeaders") {
		t.Errorf("a honoured field is warned:\n%s", out)
	}

	out, err = run(t, "validate", "--mesh-config", file, "-o", "json")
	var res struct {
		Rejected []any
		Warnings []struct {
			Kind, Field, Message string
			Warning              bool
		}
	}
	if err != nil || json.Unmarshal([]byte(out), &res) != nil || len(res.Rejected) != 0 || len(res.Warnings) != 1 ||
		res.Warnings[0].Field != "defaultConfig.tracing.zipkin.address" || res.Warnings[0].Kind != "MeshConfig" || !res.Warnings[0].Warning {
		t.Errorf("validate json: %v\n%s", err, out)
	}
}

// A bad mesh config file is rejected naming the field, exit status 1, and the objects beside it are still
// checked.
func TestValidateMeshConfigRejectsBadValue(t *testing.T) {
	file := meshFile(t, "trustDomain: example.org\noutboundTrafficPolicy: {mode: SOMETIMES}\n")
	dir := t.TempDir()
	vs := "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: stats, namespace: shop}\n" +
		"spec:\n  hosts: [cart]\n  tcp:\n  - match: [{sourceSubnet: 10.1.0.0/16}]\n    route: [{destination: {host: cart}}]\n"
	if err := os.WriteFile(filepath.Join(dir, "vs.yaml"), []byte(vs), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "validate", "--mesh-config", file, "-f", dir)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err == nil || len(lines) != 3 || !strings.HasPrefix(lines[0], file+": document 0 (MeshConfig): field outboundTrafficPolicy.mode: ") ||
		!strings.Contains(lines[1], "field spec.tcp[0].match[0].sourceSubnet") ||
		!strings.HasPrefix(lines[2], "1 object accepted, 1 document rejected, 1 warning ") {
		t.Errorf("validate: %v\n%s", err, out)
	}
	if _, err := run(t, "validate", "--mesh-config", filepath.Join(dir, "none.yaml")); err == nil {
		t.Error("a missing mesh config file passed")
	}
	if out, err := run(t, "validate"); err == nil || !strings.Contains(err.Error(), "nothing to validate") {
		t.Errorf("no input: %v\n%s", err, out)
	}
}

// translate prints the mesh config's unhonoured fields on stderr beside the output, and refuses a bad file
// naming the field.
func TestTranslateMeshConfig(t *testing.T) {
	proxy := "sidecar~10.1.0.30~reviews-v1-0002.bookinfo~bookinfo.svc.cluster.local"
	translate := func(file string) (string, error) {
		cmd := translateCommand()
		var out, errOut bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&errOut)
		cmd.SetArgs([]string{"-f", "../../examples/bookinfo", "--proxy", proxy, "--type", "cds", "--mesh-config", file})
		err := cmd.Execute()
		return errOut.String(), err
	}
	stderr, err := translate(meshFile(t, "enableTracing: false\nrootNamespace: istio-system\n"))
	want := "(MeshConfig): field enableTracing: Sextant does not honour this mesh config field: telemetry: "
	if err != nil || !strings.Contains(stderr, want) || strings.Contains(stderr, "rootNamespace") {
		t.Errorf("translate: %v\n%s", err, stderr)
	}
	if _, err := translate(meshFile(t, "connectTimeout: soon\n")); err == nil || !strings.Contains(err.Error(), "field connectTimeout") {
		t.Errorf("bad mesh config: %v", err)
	}
}

// The mesh config's cluster traffic policies Sextant honours are not warned.
func TestValidateMeshConfigHonoursClusterPolicies(t *testing.T) {
	file := meshFile(t, "defaultTrafficPolicy: {connectionPool: {tcp: {maxConnections: 100}}, outlierDetection: {consecutive5xxErrors: 7}}\n"+
		"zoneAwareLbSetting: {minClusterSize: 3, failover: [{from: region1, to: region2}]}\n")
	out, err := run(t, "validate", "--mesh-config", file)
	if err != nil || strings.Contains(out, "warning: ") || strings.Contains(out, "defaultTrafficPolicy") ||
		strings.Contains(out, "zoneAwareLbSetting") {
		t.Errorf("validate: %v\n%s", err, out)
	}
}
