package envoy

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	alpn "istio.io/api/envoy/config/filter/http/alpn/v2alpha1"

	"github.com/sextantmesh/sextant/pilot/mesh"
)

// connection is what the listener filters of a listener report about a new connection: its destination,
// and, from its first bytes, the TLS server name and ALPN (a TLS client's) or the HTTP version (plaintext).
type connection struct {
	ip   string
	port uint32
	tls  bool
	sni  string
	alpn []string // offered in the TLS ClientHello
	http string   // "http/1.1", "h2c", or "" for bytes that are not HTTP
}

// envoyChain picks the chain Envoy would for c on l, as Envoy's filter chain manager does: the listener
// filters present decide what is known (without the tls_inspector a TLS connection is raw_buffer with no
// server name, and the http_inspector does not recognise it), then destination port, destination IP
// (longest prefix), server name (exact, then the longest wildcard), transport protocol, application
// protocol; each level takes the most specific chains that match, else those that do not ask, and never
// goes back; a connection left without a chain goes to the default chain, or is closed (nil).
func envoyChain(l *listener.Listener, c connection) *listener.FilterChain {
	var tlsInspector, httpInspector bool
	for _, f := range l.ListenerFilters {
		tlsInspector = tlsInspector || f.Name == ldsTLSInspectorFilter
		httpInspector = httpInspector || f.Name == ldsHTTPInspectorFilter
	}
	transport, sni, protocols := "raw_buffer", "", []string(nil)
	switch {
	case c.tls && tlsInspector:
		transport, sni, protocols = "tls", c.sni, c.alpn
	case !c.tls && httpInspector && c.http != "":
		protocols = []string{c.http}
	}
	dst := netip.MustParseAddr(c.ip)
	cands := l.FilterChains
	narrow := func(score func(m *listener.FilterChainMatch) int) {
		best, out := 0, []*listener.FilterChain(nil)
		for _, fc := range cands {
			s := score(fc.GetFilterChainMatch())
			switch {
			case s < 0:
			case s > best:
				best, out = s, []*listener.FilterChain{fc}
			case s == best:
				out = append(out, fc)
			}
		}
		cands = out
	}
	// Each score: -1 the chain does not match, 0 it does not ask, more the more specific.
	narrow(func(m *listener.FilterChainMatch) int {
		switch p := m.GetDestinationPort(); {
		case p == nil:
			return 0
		case p.GetValue() == c.port:
			return 1
		}
		return -1
	})
	narrow(func(m *listener.FilterChainMatch) int {
		if len(m.GetPrefixRanges()) == 0 {
			return 0
		}
		best := -1
		for _, r := range m.GetPrefixRanges() {
			if p := netip.PrefixFrom(netip.MustParseAddr(r.AddressPrefix), int(r.PrefixLen.GetValue())); p.Contains(dst) {
				best = max(best, 1+p.Bits())
			}
		}
		return best
	})
	narrow(func(m *listener.FilterChainMatch) int {
		if len(m.GetServerNames()) == 0 {
			return 0
		}
		best := -1
		for _, n := range m.GetServerNames() {
			if n == sni && sni != "" {
				return 1 << 20
			}
			if suffix, ok := strings.CutPrefix(n, "*"); ok && sni != "" && strings.HasSuffix(sni, suffix) {
				best = max(best, len(suffix))
			}
		}
		return best
	})
	narrow(func(m *listener.FilterChainMatch) int {
		switch m.GetTransportProtocol() {
		case "":
			return 0
		case transport:
			return 1
		}
		return -1
	})
	narrow(func(m *listener.FilterChainMatch) int {
		if len(m.GetApplicationProtocols()) == 0 {
			return 0
		}
		for _, p := range protocols {
			if slices.Contains(m.GetApplicationProtocols(), p) {
				return 1
			}
		}
		return -1
	})
	if len(cands) == 1 {
		return cands[0]
	}
	return l.DefaultFilterChain
}

// An HTTP port's outbound listener takes what the http_inspector finds to be plaintext HTTP into the port's
// routes, and passes anything else to an address outside the mesh (TLS, other protocols) through, or
// refuses it under REGISTRY_ONLY, as istiod's: before, the connection manager took every connection, so a
// client's TLS or a database protocol to an outside host on port 80 failed.
func TestOutboundHTTPPortPassesOtherTraffic(t *testing.T) {
	registryOnly := mesh.Default()
	registryOnly.OutboundTrafficPolicy.Mode = mesh.RegistryOnly
	g := New(Options{}) // one generator for all: the cached listeners must follow the policy
	sidecar := func(mode string) string {
		return `
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: shop}
spec:
  outboundTrafficPolicy: {mode: ` + mode + "}\n"
	}
	for _, tc := range []struct {
		name  string
		mesh  *mesh.Config
		extra []string
		want  string
	}{
		{"ALLOW_ANY", nil, nil, PassthroughCluster},
		{"REGISTRY_ONLY", registryOnly, nil, BlackHoleCluster},
		{"Sidecar ALLOW_ANY", nil, []string{sidecar("ALLOW_ANY")}, PassthroughCluster},
		{"Sidecar REGISTRY_ONLY", nil, []string{sidecar("REGISTRY_ONLY")}, BlackHoleCluster},
	} {
		t.Run(tc.name, func(t *testing.T) {
			push := ldsPush(t, tc.mesh, tc.extra...)
			l := ldsFind(t, ldsGenerate(t, g, ldsFrontend, push, wildcard(ListenerType)), "0.0.0.0_9080")
			if got := listenerFilterNames(l); !slices.Equal(got, []string{ldsHTTPInspectorFilter}) {
				t.Errorf("listener filters %v, want the http_inspector alone", got)
			}
			if l.ListenerFiltersTimeout == nil || l.ListenerFiltersTimeout.AsDuration() != 0 || !l.ContinueOnListenerFiltersTimeout {
				t.Errorf("listener filters timeout %v continue %v, want none (0) as istiod", l.ListenerFiltersTimeout,
					l.ContinueOnListenerFiltersTimeout)
			}
			for _, c := range []connection{
				{ip: "203.0.113.9", port: 9080, http: "http/1.1"},
				{ip: "203.0.113.9", port: 9080, http: "http/1.0"},
				{ip: "10.0.0.11", port: 9080, http: "h2c"},
			} {
				fc := envoyChain(l, c)
				if fc == nil || !slices.Equal(filterNames(fc), []string{ldsHCMFilter}) || ldsHCMOf(t, fc).GetRds().GetRouteConfigName() != "9080" {
					t.Errorf("%+v: chain %v, want the connection manager of routes 9080", c, fc)
				}
			}
			for _, c := range []connection{
				{ip: "203.0.113.9", port: 9080},
				{ip: "203.0.113.9", port: 9080, tls: true, sni: "api.example.org", alpn: []string{"h2", "http/1.1"}},
				{ip: "203.0.113.9", port: 9080, tls: true},
			} {
				fc := envoyChain(l, c)
				if fc == nil {
					t.Errorf("%+v: no chain: the connection is closed", c)
					continue
				}
				if tp := ldsTCPProxyOf(t, fc); tp.GetCluster() != tc.want || tp.StatPrefix != tc.want {
					t.Errorf("%+v: chain %s to %q (stat prefix %q), want %s", c, fc.Name, tp.GetCluster(), tp.StatPrefix, tc.want)
				}
			}
		})
	}
}

// A TCP ServiceEntry without addresses on a port a service serves as HTTP takes the port's non-HTTP
// traffic, as istiod merges its chain into the HTTP port's listener; before, the HTTP chain kept the port
// and the entry had no chain at all.
func TestOutboundHTTPPortSharedWithAddresslessTCP(t *testing.T) {
	push := ldsPush(t, nil, `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ldap, namespace: shop}
spec:
  hosts: [ldap.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{number: 9080, name: tcp-ldap, protocol: TCP}]
`)
	l := ldsFind(t, ldsGenerate(t, New(Options{}), ldsFrontend, push, wildcard(ListenerType)), "0.0.0.0_9080")
	if fc := envoyChain(l, connection{ip: "203.0.113.9", port: 9080, http: "http/1.1"}); fc == nil ||
		ldsHCMOf(t, fc).GetRds().GetRouteConfigName() != "9080" {
		t.Errorf("HTTP: chain %v, want the connection manager of routes 9080", fc)
	}
	fc := envoyChain(l, connection{ip: "203.0.113.9", port: 9080})
	if fc == nil {
		t.Fatal("TCP: no chain")
	}
	if got := ldsTCPProxyOf(t, fc).GetCluster(); got != "outbound|9080||ldap.example.com" {
		t.Errorf("TCP: chain %s to %q, want the ServiceEntry's cluster", fc.Name, got)
	}
}

// Sidecar outbound and gateway connection managers carry istiod's istio.alpn filter, so the upstream mTLS
// connection offers the request's HTTP version in Istio's ALPN (istio-http/1.1, istio-h2): the server's
// sidecar tells HTTP from TCP on a port of unknown protocol by it, and applies its HTTP policies. Inbound
// and proxyless gRPC connection managers do not (their upstream is not a sidecar).
func TestListenerALPNOverride(t *testing.T) {
	push := ldsPush(t, nil)
	g := New(Options{})
	want := &alpn.FilterConfig{AlpnOverride: []*alpn.FilterConfig_AlpnOverride{
		{UpstreamProtocol: alpn.FilterConfig_HTTP10, AlpnOverride: []string{"istio-http/1.0", "istio", "http/1.0"}},
		{UpstreamProtocol: alpn.FilterConfig_HTTP11, AlpnOverride: []string{"istio-http/1.1", "istio", "http/1.1"}},
		{UpstreamProtocol: alpn.FilterConfig_HTTP2, AlpnOverride: []string{"istio-h2", "istio", "h2"}},
	}}
	check := func(where string, h *hcm.HttpConnectionManager, wantFilter bool) {
		t.Helper()
		i := slices.IndexFunc(h.HttpFilters, func(f *hcm.HttpFilter) bool { return f.Name == "istio.alpn" })
		if (i >= 0) != wantFilter {
			t.Errorf("%s: istio.alpn present %v, want %v", where, i >= 0, wantFilter)
			return
		}
		if i < 0 {
			return
		}
		if next := h.HttpFilters[i+1].Name; next != ldsFaultFilter {
			t.Errorf("%s: istio.alpn followed by %s, want it before the fault filter as istiod", where, next)
		}
		got := &alpn.FilterConfig{}
		if err := h.HttpFilters[i].GetTypedConfig().UnmarshalTo(got); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if !proto.Equal(got, want) {
			t.Errorf("%s: istio.alpn config %v, want %v", where, got, want)
		}
	}
	hcmsOf := func(l *listener.Listener) []*hcm.HttpConnectionManager {
		var out []*hcm.HttpConnectionManager
		for _, fc := range append(slices.Clone(l.FilterChains), l.DefaultFilterChain) {
			for _, f := range fc.GetFilters() {
				if f.Name == ldsHCMFilter {
					out = append(out, ldsDecodeHCM(t, f.GetTypedConfig()))
				}
			}
		}
		return out
	}
	outbound := 0
	for _, l := range ldsGenerate(t, g, ldsReviews, push, wildcard(ListenerType)) {
		for _, h := range hcmsOf(l) {
			check(l.Name, h, l.Name != VirtualInboundListener)
			if l.Name != VirtualInboundListener {
				outbound++
			}
		}
	}
	if outbound < 4 { // 80, 9080, 7070 and the sniffed 8000
		t.Errorf("%d outbound connection managers checked", outbound)
	}
	gateways := 0
	for _, l := range ldsGenerate(t, g, ldsGateway, push, wildcard(ListenerType)) {
		for _, h := range hcmsOf(l) {
			check("gateway "+l.Name, h, true)
			gateways++
		}
	}
	if gateways < 3 { // http.80 and the two terminated HTTPS servers
		t.Errorf("%d gateway connection managers checked", gateways)
	}
	for _, l := range ldsGenerate(t, g, ldsGRPCClient, push, wildcard(ListenerType)) {
		check("grpc "+l.Name, ldsDecodeHCM(t, l.ApiListener.ApiListener), false)
	}
}

// A cluster with TLS of its own (SIMPLE, MUTUAL) keeps its ALPN: istiod's cluster metadata
// istio.alpn_override "false" tells the istio.alpn filter so, and an HTTP/2 one offers h2. Mesh mTLS
// clusters (auto or ISTIO_MUTUAL) let the filter set Istio's ALPN.
func TestClusterALPNOverrideMetadata(t *testing.T) {
	for _, tc := range []struct {
		name, extra string
		off         bool
		alpn        []string
	}{
		{"auto mTLS", "", false, nil},
		{"ISTIO_MUTUAL", "tls: {mode: ISTIO_MUTUAL}", false, []string{"istio-peer-exchange", "istio"}},
		{"SIMPLE", "tls: {mode: SIMPLE}", true, nil},
		{"MUTUAL", "tls: {mode: MUTUAL, clientCertificate: /c.pem, privateKey: /k.pem}", true, nil},
		{"SIMPLE over HTTP/2", "tls: {mode: SIMPLE}\n    connectionPool: {http: {h2UpgradePolicy: UPGRADE}}", true, []string{"h2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			extra := ""
			if tc.extra != "" {
				extra = `
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: default}
spec:
  host: reviews
  trafficPolicy:
    ` + tc.extra + "\n"
			}
			c := clusterByName(t, policyClusters(t, extra, map[string]string{"app": "sleep"}), reviewsCluster)
			got := c.GetMetadata().GetFilterMetadata()["istio"].GetFields()["alpn_override"]
			if off := got.GetStringValue() == "false"; off != tc.off || (!tc.off && got != nil) {
				t.Errorf("istio.alpn_override = %v, want \"false\" %v", got, tc.off)
			}
			if c.GetMetadata().GetFilterMetadata()["istio"].GetFields()["services"] == nil {
				t.Error("the cluster's services metadata is gone")
			}
			if tc.alpn != nil {
				ctx := &tlsv3.UpstreamTlsContext{}
				if err := c.GetTransportSocket().GetTypedConfig().UnmarshalTo(ctx); err != nil {
					t.Fatal(err)
				}
				if got := ctx.GetCommonTlsContext().GetAlpnProtocols(); !slices.Equal(got, tc.alpn) {
					t.Errorf("ALPN %v, want %v", got, tc.alpn)
				}
			}
		})
	}
}
