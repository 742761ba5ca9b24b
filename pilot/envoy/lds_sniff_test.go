package envoy

import (
	"slices"
	"testing"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	rbachttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"

	"github.com/sextantmesh/sextant/pilot/model"
)

// legacy-1 serves the legacy service: port 8000 "admin" has no protocol (sniffed), 9000 is TCP.
const sniffLegacy = `
apiVersion: v1
kind: Pod
metadata: {name: legacy-1, namespace: shop, labels: {app: legacy}}
spec: {serviceAccountName: legacy}
status: {podIP: 10.1.0.9, phase: Running, conditions: [{type: Ready, status: "True"}]}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: legacy-health, namespace: shop}
spec:
  selector: {matchLabels: {app: legacy}}
  rules: [{to: [{operation: {methods: [GET], paths: [/health]}}]}]
`

var ldsLegacy = ldsSidecar("legacy-1", "10.1.0.9", map[string]string{"app": "legacy"})

// sniffPick chooses the chain Envoy would for a connection to port: the most specific destination port,
// then transport protocol, then application protocol (Envoy's filter chain match order), as the
// tls_inspector and http_inspector report them ("" for a protocol neither recognises); nil when no chain
// takes it (Envoy closes the connection).
func sniffPick(t *testing.T, l *listener.Listener, port uint32, transport, alpn string) *listener.FilterChain {
	t.Helper()
	best, bestScore := (*listener.FilterChain)(nil), -1
	for _, fc := range l.FilterChains {
		m := fc.GetFilterChainMatch()
		score := 0
		switch p := m.GetDestinationPort(); {
		case p == nil:
		case p.GetValue() == port:
			score += 4
		default:
			continue
		}
		switch m.GetTransportProtocol() {
		case "":
		case transport:
			score += 2
		default:
			continue
		}
		switch {
		case len(m.GetApplicationProtocols()) == 0:
		case slices.Contains(m.GetApplicationProtocols(), alpn):
			score++
		default:
			continue
		}
		if score > bestScore {
			best, bestScore = fc, score
		}
	}
	return best
}

// sniffMust is sniffPick for a connection some chain must take.
func sniffMust(t *testing.T, l *listener.Listener, port uint32, transport, alpn string) *listener.FilterChain {
	t.Helper()
	fc := sniffPick(t, l, port, transport, alpn)
	if fc == nil {
		t.Fatalf("no chain for port %d transport %q alpn %q", port, transport, alpn)
	}
	return fc
}

// An inbound port of unknown protocol is sniffed: HTTP reaches a connection manager with the HTTP RBAC
// (so a policy on paths and methods applies to it), anything else tcp_proxy with the L4 RBAC, in every
// mTLS mode; the http_inspector runs for that port and the undeclared ones, not for the TCP port.
func TestListenerInboundSniffedPort(t *testing.T) {
	for _, tc := range []struct {
		mode string
		// connections: transport and ALPN as the inspectors report them; "" chain means none may match.
		http, tcp [][2]string
		refused   [][2]string
	}{
		{mode: "PERMISSIVE",
			http: [][2]string{{"tls", "istio-http/1.1"}, {"tls", "istio-h2"}, {"raw_buffer", "http/1.1"}, {"raw_buffer", "h2c"}},
			tcp:  [][2]string{{"tls", "istio"}, {"raw_buffer", ""}, {"raw_buffer", "http/1.0"}}},
		{mode: "STRICT",
			http:    [][2]string{{"tls", "istio-http/1.1"}, {"tls", "istio-h2"}},
			tcp:     [][2]string{{"tls", "istio-peer-exchange"}},
			refused: [][2]string{{"raw_buffer", "http/1.1"}, {"raw_buffer", ""}}},
		{mode: "DISABLE",
			http: [][2]string{{"raw_buffer", "http/1.1"}, {"raw_buffer", "h2c"}},
			tcp:  [][2]string{{"raw_buffer", ""}, {"raw_buffer", "http/1.0"}}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			pa := `
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: legacy, namespace: shop}
spec:
  selector: {matchLabels: {app: legacy}}
  mtls: {mode: ` + tc.mode + `}
`
			push := ldsPush(t, nil, sniffLegacy, pa)
			in := ldsFind(t, ldsGenerate(t, New(Options{}), ldsLegacy, push, wildcard(ListenerType)), VirtualInboundListener)
			for _, c := range tc.http {
				fc := sniffMust(t, in, 8000, c[0], c[1])
				if names := filterNames(fc); !slices.Equal(names, []string{ldsHCMFilter}) {
					t.Errorf("8000 %v: chain %s filters %v, want the connection manager", c, fc.Name, names)
					continue
				}
				if (fc.TransportSocket != nil) != (c[0] == "tls") {
					t.Errorf("8000 %v: chain %s terminates TLS %v", c, fc.Name, fc.TransportSocket != nil)
				}
				h := ldsHCMOf(t, fc)
				if h.HttpFilters[0].Name != httpRBACFilter {
					t.Fatalf("chain %s: http filters start with %s", fc.Name, h.HttpFilters[0].Name)
				}
				r := &rbachttp.RBAC{}
				if err := h.HttpFilters[0].GetTypedConfig().UnmarshalTo(r); err != nil {
					t.Fatal(err)
				}
				if r.Rules.GetAction() != rbacpb.RBAC_ALLOW || r.Rules.GetPolicies()["ns[shop]-policy[legacy-health]-rule[0]"] == nil {
					t.Errorf("chain %s: RBAC %v, want the GET /health rule", fc.Name, r.Rules)
				}
				if got := h.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetCluster(); got != InboundClusterName(8000) {
					t.Errorf("chain %s: routes to %s", fc.Name, got)
				}
			}
			for _, c := range tc.tcp {
				fc := sniffMust(t, in, 8000, c[0], c[1])
				if names := filterNames(fc); !slices.Equal(names, []string{tcpRBACFilter, ldsTCPProxyFilterName}) {
					t.Errorf("8000 %v: chain %s filters %v, want L4 RBAC and tcp_proxy", c, fc.Name, names)
				}
			}
			for _, c := range tc.refused {
				if fc := sniffPick(t, in, 8000, c[0], c[1]); fc != nil {
					t.Errorf("8000 %v: taken by chain %s, want the connection refused", c, fc.Name)
				}
			}
			// The TCP port is not sniffed.
			if fc := sniffPick(t, in, 9000, "raw_buffer", "http/1.1"); fc != nil && slices.Contains(filterNames(fc), ldsHCMFilter) {
				t.Errorf("9000 (TCP) chain %s: a connection manager", fc.Name)
			}
			// The http_inspector runs where a chain matches what it finds: on 8000 and other ports in
			// plaintext modes, nowhere under STRICT (mTLS says HTTP by ALPN), never on the TCP port 9000.
			var inspector *listener.ListenerFilter
			for _, f := range in.ListenerFilters {
				if f.Name == ldsHTTPInspectorFilter {
					inspector = f
				}
			}
			plaintext := tc.mode != "STRICT"
			if (inspector != nil) != plaintext {
				t.Fatalf("http_inspector %v, want one %v", inspector, plaintext)
			}
			if inspector != nil && (!listenerFilterRuns(inspector, 8000) || !listenerFilterRuns(inspector, 12345) ||
				listenerFilterRuns(inspector, 9000)) {
				t.Errorf("http_inspector disabled %v, want on every port but 9000", inspector.GetFilterDisabled())
			}
		})
	}
}

// The outbound sniffed chain's route configuration "HOST:PORT" exists: the service's routes alone,
// answering any Host, for Envoys with and without VHDS; other names of that form do not.
func TestRouteSniffedPort(t *testing.T) {
	push := ldsPush(t, nil, `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: legacy, namespace: shop}
spec:
  hosts: [legacy]
  http:
  - match: [{uri: {prefix: /v2}}]
    route: [{destination: {host: legacy, port: {number: 8000}}}]
    timeout: 3s
`)
	const name = "legacy.shop.svc.cluster.local:8000"
	for _, proxy := range []*model.Proxy{ldsFrontend, envoyProxy("shop", map[string]string{"app": "frontend"}, true, 1, 38)} {
		g := newByPort()
		got := generateRoutes(t, g, proxy, push, named(RouteType, name, "legacy.shop.svc.cluster.local:9000",
			"reviews.shop.svc.cluster.local:9080", "nowhere.shop.svc.cluster.local:8000", "legacy.shop.svc.cluster.local:x"))
		if len(got) != 1 || got[0].Name != name {
			t.Fatalf("delta %v: route configurations %v, want %s alone", proxy.Delta, got, name)
		}
		vh := got[0].VirtualHosts
		if len(vh) != 1 || !slices.Equal(vh[0].Domains, []string{"*"}) || got[0].Vhds != nil {
			t.Fatalf("delta %v: virtual hosts %v, want the service's alone on *", proxy.Delta, vh)
		}
		if r := vh[0].Routes[0]; r.GetMatch().GetPrefix() != "/v2" || r.GetRoute().GetTimeout().AsDuration().Seconds() != 3 ||
			r.GetRoute().GetCluster() != "outbound|8000||legacy.shop.svc.cluster.local" {
			t.Errorf("delta %v: first route %v, want the VirtualService's", proxy.Delta, r)
		}
	}
}
