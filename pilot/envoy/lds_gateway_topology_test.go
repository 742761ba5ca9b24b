package envoy

import (
	"testing"

	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	meshconfig "istio.io/api/mesh/v1alpha1"

	"github.com/sextantmesh/sextant/pilot/model"
)

// A gateway's PROXY_CONFIG gatewayTopology shapes its listeners as istiod's: trusted X-Forwarded-For hops,
// client certificate forwarding (details added only where the header is set from the certificate), and the
// PROXY protocol read before anything else. Two pods of one Gateway with different topologies share nothing.
func TestGatewayTopology(t *testing.T) {
	push := ldsPush(t, nil)
	g := New(Options{})
	bare := ldsGenerate(t, g, ldsGateway, push, wildcard(ListenerType))

	// Another pod of the same Gateway (built anew: a Proxy is not copied).
	behind := &model.Proxy{Type: model.Router, NodeID: ldsGateway.NodeID, ID: ldsGateway.ID, Namespace: ldsGateway.Namespace,
		IPAddresses: ldsGateway.IPAddresses, Labels: ldsGateway.Labels}
	behind.ProxyConfig = &meshconfig.ProxyConfig{GatewayTopology: &meshconfig.Topology{NumTrustedProxies: 2,
		ForwardClientCertDetails: meshconfig.ForwardClientCertDetails_FORWARD_ONLY,
		ProxyProtocol:            &meshconfig.Topology_ProxyProtocolConfiguration{}}}
	ls := ldsGenerate(t, g, behind, push, wildcard(ListenerType))

	for _, c := range []struct {
		name, chain string
	}{{"0.0.0.0_80", "0.0.0.0_80"}, {"0.0.0.0_443", "0.0.0.0_443/partners.example.com"}} {
		hc := ldsHCMOf(t, ldsChain(t, ldsFind(t, ls, c.name), c.chain))
		if hc.XffNumTrustedHops != 2 || hc.ForwardClientCertDetails != hcm.HttpConnectionManager_FORWARD_ONLY ||
			hc.SetCurrentClientCertDetails != nil {
			t.Errorf("%s: hops %d, fcc %s, current cert details %v", c.chain, hc.XffNumTrustedHops, hc.ForwardClientCertDetails,
				hc.SetCurrentClientCertDetails)
		}
		def := ldsHCMOf(t, ldsChain(t, ldsFind(t, bare, c.name), c.chain))
		if def.XffNumTrustedHops != 0 || def.ForwardClientCertDetails != hcm.HttpConnectionManager_SANITIZE_SET ||
			!def.GetSetCurrentClientCertDetails().GetCert() {
			t.Errorf("%s without PROXY_CONFIG: hops %d, fcc %s, current cert details %v", c.chain, def.XffNumTrustedHops,
				def.ForwardClientCertDetails, def.SetCurrentClientCertDetails)
		}
	}
	for _, l := range ls {
		if len(l.ListenerFilters) == 0 || l.ListenerFilters[0].Name != ldsProxyProtocolFilter {
			t.Errorf("%s: listener filters %v, want the PROXY protocol first", l.Name, l.ListenerFilters)
		}
	}
	for _, l := range bare {
		for _, f := range l.ListenerFilters {
			if f.Name == ldsProxyProtocolFilter {
				t.Errorf("%s without PROXY_CONFIG reads the PROXY protocol", l.Name)
			}
		}
	}
	https := ldsFind(t, ls, "0.0.0.0_443")
	if len(https.ListenerFilters) != 2 || https.ListenerFilters[1].Name != ldsTLSInspectorFilter {
		t.Errorf("https listener filters %v, want the PROXY protocol then the TLS inspector", https.ListenerFilters)
	}
}

// The topology is read from PROXY_CONFIG when the proxy sent one, else from the mesh's defaultConfig; the two
// are not merged. APPEND_FORWARD keeps the certificate details, as SANITIZE_SET does.
func TestGatewayTopologyOf(t *testing.T) {
	def := &meshconfig.ProxyConfig{GatewayTopology: &meshconfig.Topology{NumTrustedProxies: 1,
		ForwardClientCertDetails: meshconfig.ForwardClientCertDetails_APPEND_FORWARD}}
	if got := gatewayTopologyOf(&model.Proxy{}, def); got.trustedHops != 1 || got.fcc != hcm.HttpConnectionManager_APPEND_FORWARD {
		t.Errorf("mesh default: %s", got)
	}
	own := &model.Proxy{ProxyConfig: &meshconfig.ProxyConfig{}}
	if got := gatewayTopologyOf(own, def); got != (gatewayTopology{fcc: hcm.HttpConnectionManager_SANITIZE_SET}) {
		t.Errorf("PROXY_CONFIG without a topology: %s, want the defaults", got)
	}
	hc := &hcm.HttpConnectionManager{}
	gatewayTopologyOf(&model.Proxy{}, def).applyHTTP(hc)
	if !hc.GetSetCurrentClientCertDetails().GetUri() {
		t.Errorf("APPEND_FORWARD: current certificate details %v", hc.SetCurrentClientCertDetails)
	}
	unknown := &model.Proxy{ProxyConfig: &meshconfig.ProxyConfig{GatewayTopology: &meshconfig.Topology{ForwardClientCertDetails: 9}}}
	if got := gatewayTopologyOf(unknown, nil); got.fcc != hcm.HttpConnectionManager_SANITIZE_SET {
		t.Errorf("an unknown value: %s, want SANITIZE_SET", got)
	}
}
