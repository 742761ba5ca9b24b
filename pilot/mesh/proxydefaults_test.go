package mesh

import (
	"slices"
	"strings"
	"testing"

	meshconfig "istio.io/api/mesh/v1alpha1"
)

// defaultConfig.gatewayTopology is read as istiod reads it, no longer listed as unimplemented; a value istiod
// cannot read fails the mesh config, naming the field.
func TestDefaultGatewayTopology(t *testing.T) {
	cfg := Default()
	if cfg.DefaultProxyConfig() != nil {
		t.Fatalf("default: %v, want none", cfg.DefaultProxyConfig())
	}
	data := "defaultConfig:\n  gatewayTopology:\n    numTrustedProxies: 2\n    forwardClientCertDetails: SANITIZE\n" +
		"    proxyProtocol: {}\n  concurrency: 2\n"
	if err := Parse([]byte(data), cfg); err != nil {
		t.Fatal(err)
	}
	topo := cfg.DefaultProxyConfig().GetGatewayTopology()
	if topo.GetNumTrustedProxies() != 2 || topo.GetForwardClientCertDetails() != meshconfig.ForwardClientCertDetails_SANITIZE ||
		topo.GetProxyProtocol() == nil {
		t.Errorf("gatewayTopology read as %v", topo)
	}
	if !slices.Equal(cfg.Unimplemented, []string{"defaultConfig.concurrency"}) {
		t.Errorf("unimplemented %q, want defaultConfig.concurrency alone", cfg.Unimplemented)
	}
	err := Parse([]byte("defaultConfig:\n  gatewayTopology: {numTrustedProxies: many}\n"), Default())
	if err == nil || !strings.Contains(err.Error(), "field defaultConfig.gatewayTopology") {
		t.Errorf("a bad topology: %v", err)
	}
}
