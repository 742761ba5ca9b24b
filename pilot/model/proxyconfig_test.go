package model_test

import (
	"slices"
	"strings"
	"testing"

	meshconfig "istio.io/api/mesh/v1alpha1"

	"github.com/sextantmesh/sextant/pilot/model"
)

// PROXY_CONFIG is read as istiod reads it (protobuf JSON, unknown fields ignored); the fields istiod's
// generators read and Sextant does not are noted, the agent's own fields are not.
func TestParseProxyConfigMetadata(t *testing.T) {
	md := map[string]any{"PROXY_CONFIG": map[string]any{
		"concurrency": 2.0, "drainDuration": "45s", "futureField": "x",
		"gatewayTopology": map[string]any{"numTrustedProxies": 2.0, "forwardClientCertDetails": "APPEND_FORWARD",
			"proxyProtocol": map[string]any{}},
		"proxyHeaders": map[string]any{"server": map[string]any{"disabled": true}},
	}}
	p, err := model.ParseProxy(node("router~10.0.0.1~gw.istio-system~istio-system.svc.cluster.local", md))
	must(t, err)
	topo := p.ProxyConfig.GetGatewayTopology()
	if topo.GetNumTrustedProxies() != 2 || topo.GetForwardClientCertDetails() != meshconfig.ForwardClientCertDetails_APPEND_FORWARD ||
		topo.GetProxyProtocol() == nil || p.ProxyConfig.GetConcurrency().GetValue() != 2 {
		t.Fatalf("PROXY_CONFIG read as %v", p.ProxyConfig)
	}
	if len(p.MetadataNotes) != 1 || !strings.Contains(p.MetadataNotes[0], "PROXY_CONFIG field proxyHeaders is not honoured") {
		t.Errorf("notes %q, want one for proxyHeaders", p.MetadataNotes)
	}
	def := &meshconfig.ProxyConfig{GatewayTopology: &meshconfig.Topology{NumTrustedProxies: 5}}
	if got := p.ProxyConfigOr(def); got != p.ProxyConfig {
		t.Errorf("ProxyConfigOr gave the mesh default over PROXY_CONFIG")
	}
	bare, err := model.ParseProxy(node("router~10.0.0.1~gw.istio-system~istio-system.svc.cluster.local", nil))
	must(t, err)
	if bare.ProxyConfig != nil || bare.ProxyConfigOr(def) != def {
		t.Errorf("without PROXY_CONFIG: %v, default not used", bare.ProxyConfig)
	}
}

// A PROXY_CONFIG istiod cannot read refuses the node, as istiod refuses it.
func TestParseProxyConfigMetadataErrors(t *testing.T) {
	for name, v := range map[string]any{
		"not an object": "concurrency: 2",
		"wrong type":    map[string]any{"gatewayTopology": map[string]any{"numTrustedProxies": "two"}},
		"bad enum":      map[string]any{"gatewayTopology": map[string]any{"forwardClientCertDetails": 2.5}},
	} {
		_, err := model.ParseProxy(node("router~10.0.0.1~gw.ns~ns.svc.cluster.local", map[string]any{"PROXY_CONFIG": v}))
		if err == nil || !strings.Contains(err.Error(), "metadata PROXY_CONFIG") {
			t.Errorf("%s: got %v, want an error naming PROXY_CONFIG", name, err)
		}
	}
	p, err := model.ParseProxy(node("router~10.0.0.1~gw.ns~ns.svc.cluster.local",
		map[string]any{"PROXY_CONFIG": map[string]any{"gatewayTopology": map[string]any{"forwardClientCertDetails": 9.0}}}))
	must(t, err)
	if !slices.ContainsFunc(p.MetadataNotes, func(n string) bool { return strings.Contains(n, "read as SANITIZE_SET") }) {
		t.Errorf("an unknown forwardClientCertDetails value: notes %q", p.MetadataNotes)
	}
}
