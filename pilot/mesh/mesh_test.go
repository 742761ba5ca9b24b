package mesh

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadIstioMeshConfig(t *testing.T) {
	// An Istio mesh config with fields Sextant does not read: they are ignored.
	path := filepath.Join(t.TempDir(), "mesh.yaml")
	data := "rootNamespace: mesh-root\ntrustDomain: example.org\naccessLogFile: /dev/stdout\ndefaultConfig:\n  domainSuffix: corp.local\n  proxyMetadata: {}\n"
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RootNamespace != "mesh-root" || cfg.TrustDomain != "example.org" || cfg.DomainSuffix != "corp.local" || cfg.ClusterID != "Kubernetes" {
		t.Errorf("loaded %+v", cfg)
	}
}

func TestDefaultsAndErrors(t *testing.T) {
	cfg, err := Load("")
	if err != nil || *cfg != *Default() || cfg.RootNamespace != "istio-system" || cfg.TrustDomain != "cluster.local" {
		t.Fatalf("defaults = %+v, %v", cfg, err)
	}
	err = Parse([]byte("rootNamespace: Not_Valid\n"), Default())
	if err == nil || !strings.Contains(err.Error(), "field rootNamespace") {
		t.Errorf("invalid root namespace: %v", err)
	}
	if _, err := Load("/does/not/exist"); err == nil {
		t.Error("missing file accepted")
	}
}

func TestOutboundTrafficPolicy(t *testing.T) {
	if got := Default().OutboundTrafficPolicy.Mode; got != AllowAny {
		t.Errorf("default mode %q, want %s", got, AllowAny)
	}
	cfg := Default()
	if err := Parse([]byte("outboundTrafficPolicy:\n  mode: REGISTRY_ONLY\n"), cfg); err != nil || cfg.OutboundTrafficPolicy.Mode != RegistryOnly {
		t.Errorf("REGISTRY_ONLY read as %q, %v", cfg.OutboundTrafficPolicy.Mode, err)
	}
	// A file that does not name the mode keeps what was there.
	if err := Parse([]byte("trustDomain: example.org\n"), cfg); err != nil || cfg.OutboundTrafficPolicy.Mode != RegistryOnly {
		t.Errorf("mode after an overlay without it: %q, %v", cfg.OutboundTrafficPolicy.Mode, err)
	}
	err := Parse([]byte("outboundTrafficPolicy: {mode: ALLOW_SOME}\n"), Default())
	if err == nil || !strings.Contains(err.Error(), "field outboundTrafficPolicy.mode") {
		t.Errorf("unknown mode: %v", err)
	}
}
