package discovery_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sextantmesh/sextant/pilot/discovery"
)

// A CUSTOM AuthorizationPolicy whose provider the mesh config does not define fails closed in the generated
// config; the server must also say so where operators look (/debug/config_errors), naming the field.
func TestCustomPolicyWithUndefinedProviderIsReported(t *testing.T) {
	dir := t.TempDir()
	policies := `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: ext, namespace: shop}
spec:
  action: CUSTOM
  provider: {name: opa}
  rules: [{to: [{operation: {paths: ["/admin*"]}}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow-all, namespace: shop}
spec:
  rules: [{}]
`
	if err := os.WriteFile(filepath.Join(dir, "authz.yaml"), []byte(policies), 0o644); err != nil {
		t.Fatal(err)
	}
	srv, err := discovery.NewServer(discovery.Args{ConfigDir: dir, GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		DebounceAfter: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); srv.Wait() }()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, w := range srv.Warnings() {
		if w.Kind == "AuthorizationPolicy" {
			found = append(found, w.Error())
			if w.Name != "ext" || w.Field != "spec.provider.name" || !w.Warning || !strings.Contains(w.Message, `"opa" is not defined`) {
				t.Errorf("warning %+v, want one on shop/ext field spec.provider.name saying provider \"opa\" is not defined", w)
			}
		}
	}
	if len(found) != 1 {
		t.Errorf("authorization warnings %q, want exactly one (for shop/ext)", found)
	}
}

// A mesh config field Sextant does not implement is a warning of the server, naming the file and the field.
func TestUnimplementedMeshConfigFieldIsReported(t *testing.T) {
	meshFile := filepath.Join(t.TempDir(), "mesh.yaml")
	if err := os.WriteFile(meshFile, []byte("trustDomain: cluster.local\ndefaultProviders: {metrics: [prometheus]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv, err := discovery.NewServer(discovery.Args{ConfigDir: t.TempDir(), MeshConfigFile: meshFile, GRPCAddr: "127.0.0.1:0",
		HTTPAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range srv.Warnings() {
		if w.Kind == "MeshConfig" {
			got = append(got, w.Error())
			if w.Field != "defaultProviders.metrics" || w.File != meshFile || !w.Warning {
				t.Errorf("warning %+v, want one on field defaultProviders of %s", w, meshFile)
			}
		}
	}
	if len(got) != 1 {
		t.Errorf("mesh config warnings %q, want one", got)
	}
}
