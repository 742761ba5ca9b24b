package envoy

import (
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	proxyprotocol "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/proxy_protocol/v3"
)

// proxyProtocolOf returns the PROXY protocol version a transport socket sends and the socket it wraps;
// ok is false when it sends none.
func proxyProtocolOf(t *testing.T, ts *core.TransportSocket) (v core.ProxyProtocolConfig_Version, inner *core.TransportSocket, ok bool) {
	t.Helper()
	if ts.GetName() != "envoy.transport_sockets.upstream_proxy_protocol" {
		return 0, nil, false
	}
	pp := &proxyprotocol.ProxyProtocolUpstreamTransport{}
	if err := ts.GetTypedConfig().UnmarshalTo(pp); err != nil {
		t.Fatal(err)
	}
	return pp.GetConfig().GetVersion(), pp.GetTransportSocket(), true
}

// A DestinationRule's proxyProtocol wraps every transport socket the cluster may pick, as istiod's cluster
// builder: under auto mTLS both matches (mTLS and plaintext) send the header before their own bytes.
func TestProxyProtocolWrapsEveryTransportSocket(t *testing.T) {
	cs := policyClusters(t, `
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: default}
spec:
  host: reviews
  trafficPolicy:
    proxyProtocol: {version: V2}
`, map[string]string{"app": "sleep"})
	c := clusterByName(t, cs, reviewsCluster)
	if len(c.TransportSocketMatches) != 2 {
		t.Fatalf("transport socket matches: %v", c.TransportSocketMatches)
	}
	want := map[string]string{"tlsMode-istio": "envoy.transport_sockets.tls", "tlsMode-disabled": "envoy.transport_sockets.raw_buffer"}
	for _, m := range c.TransportSocketMatches {
		v, inner, ok := proxyProtocolOf(t, m.TransportSocket)
		if !ok {
			t.Errorf("%s: socket %s sends no PROXY header", m.Name, m.TransportSocket.GetName())
			continue
		}
		if v != core.ProxyProtocolConfig_V2 {
			t.Errorf("%s: version %v, want V2", m.Name, v)
		}
		if inner.GetName() != want[m.Name] {
			t.Errorf("%s: wraps %s, want %s", m.Name, inner.GetName(), want[m.Name])
		}
	}
}

// Without any TLS (mode DISABLE), the header wraps a raw buffer as the cluster's one socket; a subset's own
// proxyProtocol overrides the rule's, and a subset without one inherits it.
func TestProxyProtocolPlaintextAndSubsets(t *testing.T) {
	cs := policyClusters(t, `
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: default}
spec:
  host: reviews
  trafficPolicy:
    tls: {mode: DISABLE}
    proxyProtocol: {version: V2}
  subsets:
  - name: v1
    labels: {version: v1}
    trafficPolicy:
      proxyProtocol: {version: V1}
  - name: v2
    labels: {version: v2}
`, map[string]string{"app": "sleep"})
	for name, want := range map[string]core.ProxyProtocolConfig_Version{
		reviewsCluster: core.ProxyProtocolConfig_V2,
		"outbound|9080|v1|reviews.default.svc.cluster.local": core.ProxyProtocolConfig_V1,
		"outbound|9080|v2|reviews.default.svc.cluster.local": core.ProxyProtocolConfig_V2,
	} {
		c := clusterByName(t, cs, name)
		if len(c.TransportSocketMatches) != 0 {
			t.Errorf("%s: transport socket matches under DISABLE: %v", name, c.TransportSocketMatches)
		}
		v, inner, ok := proxyProtocolOf(t, c.TransportSocket)
		if !ok {
			t.Errorf("%s: no PROXY header (socket %v)", name, c.TransportSocket)
			continue
		}
		if v != want || inner.GetName() != "envoy.transport_sockets.raw_buffer" {
			t.Errorf("%s: version %v wrapping %s, want %v wrapping raw_buffer", name, v, inner.GetName(), want)
		}
	}
}

// Without proxyProtocol no cluster sends the header.
func TestNoProxyProtocolByDefault(t *testing.T) {
	for _, c := range policyClusters(t, "", map[string]string{"app": "sleep"}) {
		sockets := []*core.TransportSocket{c.TransportSocket}
		for _, m := range c.TransportSocketMatches {
			sockets = append(sockets, m.TransportSocket)
		}
		for _, ts := range sockets {
			if _, _, ok := proxyProtocolOf(t, ts); ok {
				t.Errorf("%s: PROXY header without a DestinationRule asking for it", c.Name)
			}
		}
	}
}
