package xds

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const (
	module = "github.com/sextantmesh/sextant"
	// discoveryPackage is the one Envoy package the transport serves: the xDS protocol itself.
	discoveryPackage = "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// deps returns the packages pkg depends on, itself included (go list -deps).
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list dependencies: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

// The transport knows the xDS protocol and nothing of Envoy's config: of go-control-plane it depends on the
// discovery service and what that depends on only. The generators do not depend on the transport.
func TestTransportKnowsNoEnvoyConfig(t *testing.T) {
	allowed := deps(t, discoveryPackage)
	for _, p := range deps(t, module+"/pilot/xds") {
		if strings.HasPrefix(p, "github.com/envoyproxy/") && !slices.Contains(allowed, p) {
			t.Errorf("pilot/xds depends on %s, which the discovery service does not", p)
		}
	}
	for _, gen := range []string{"pilot/envoy", "pilot/ztunnel"} {
		if slices.Contains(deps(t, module+"/"+gen), module+"/pilot/xds") {
			t.Errorf("%s depends on pilot/xds", gen)
		}
	}
}

// No type URL of Envoy's config is named in the transport: the rules per type come from model.TypePolicy.
func TestTransportNamesNoEnvoyType(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{"envoy.config.", "envoy.extensions.", "type.googleapis.com/"} {
			if strings.Contains(string(b), s) {
				t.Errorf("%s names %q", f, s)
			}
		}
	}
}
