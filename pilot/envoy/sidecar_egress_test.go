package envoy

import (
	"slices"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
)

func egressSidecar(egress string) string {
	return "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: default, namespace: shop}\nspec:\n  egress:\n" + egress
}

// ldsFindOrNil returns the listener named name, nil when there is none.
func ldsFindOrNil(ls []*listener.Listener, name string) *listener.Listener {
	i := slices.IndexFunc(ls, func(l *listener.Listener) bool { return l.Name == name })
	if i < 0 {
		return nil
	}
	return ls[i]
}

func vhostNames(rc *route.RouteConfiguration) []string {
	var out []string
	for _, vh := range rc.VirtualHosts {
		out = append(out, vh.Name)
	}
	return out
}

// An egress listener with a port selects its hosts on that port alone and speaks the port's protocol: reviews'
// 9080 (HTTP) is a TCP listener on its VIP, its 7070 is gone (no listener, no cluster), and the catch-all
// still gives mysql its listener.
func TestSidecarEgressPortSelectsAndSetsProtocol(t *testing.T) {
	push := ldsPush(t, nil, egressSidecar(`  - port: {number: 9080, protocol: TCP, name: tcp}
    hosts: ["./reviews.shop.svc.cluster.local"]
  - hosts: ["./mysql.shop.svc.cluster.local"]
`))
	g := New(Options{})
	ls := ldsGenerate(t, g, ldsFrontend, push, wildcard(ListenerType))
	l := ldsFindOrNil(ls, "10.0.0.11_9080")
	if l == nil {
		t.Fatalf("no listener 10.0.0.11_9080 for reviews' TCP egress port; listeners %v", listenerNames(ls))
	}
	if len(l.FilterChains) != 1 {
		t.Fatalf("10.0.0.11_9080: %d chains", len(l.FilterChains))
	}
	if tp := ldsTCPProxyOf(t, l.FilterChains[0]); tp.GetCluster() != "outbound|9080||reviews.shop.svc.cluster.local" {
		t.Errorf("10.0.0.11_9080 proxies to %q", tp.GetCluster())
	}
	for _, name := range []string{"0.0.0.0_9080", "0.0.0.0_7070", "0.0.0.0_80"} {
		if ldsFindOrNil(ls, name) != nil {
			t.Errorf("listener %s: its port is not the egress listener's, nor a catch-all host's", name)
		}
	}
	if ldsFindOrNil(ls, "10.0.0.20_3306") == nil {
		t.Errorf("the catch-all's mysql has no listener: %v", listenerNames(ls))
	}
	var clusters []string
	for _, c := range generate(t, g, ClusterType, ldsFrontend, push, wildcard(ClusterType),
		func() *cluster.Cluster { return &cluster.Cluster{} }) {
		clusters = append(clusters, c.Name)
	}
	for name, want := range map[string]bool{
		"outbound|9080||reviews.shop.svc.cluster.local": true, "outbound|7070||reviews.shop.svc.cluster.local": false,
		"outbound|3306||mysql.shop.svc.cluster.local": true, "outbound|80||frontend.shop.svc.cluster.local": false,
	} {
		if slices.Contains(clusters, name) != want {
			t.Errorf("cluster %s present %v, want %v", name, !want, want)
		}
	}
}

// captureMode NONE makes a real listener, on 127.0.0.1 without a bind; a bind under the default capture
// keeps a virtual listener on that address. Both are HTTP listeners without sniffing on route
// configuration PORT, whose virtual hosts are the egress listener's services only: the listener on 80
// selects no service (reviews has no port 80), so route configuration 80, which the catch-all's frontend
// listener asks for too, has none.
func TestSidecarEgressBindAndCaptureMode(t *testing.T) {
	push := ldsPush(t, nil, egressSidecar(`  - port: {number: 9080, protocol: HTTP, name: http}
    captureMode: NONE
    hosts: ["./reviews.shop.svc.cluster.local"]
  - port: {number: 7070, protocol: GRPC, name: grpc}
    bind: 127.0.0.2
    hosts: ["./reviews.shop.svc.cluster.local"]
  - port: {number: 80, protocol: HTTP, name: http-web}
    hosts: ["./reviews.shop.svc.cluster.local"]
  - hosts: ["./*"]
`))
	g := New(Options{})
	ls := ldsGenerate(t, g, ldsFrontend, push, wildcard(ListenerType))
	for _, tc := range []struct {
		name, route string
		real        bool
	}{{"127.0.0.1_9080", "9080", true}, {"127.0.0.2_7070", "7070", false}} {
		l := ldsFindOrNil(ls, tc.name)
		if l == nil {
			t.Errorf("no listener %s: %v", tc.name, listenerNames(ls))
			continue
		}
		if real := l.BindToPort == nil || l.BindToPort.Value; real != tc.real {
			t.Errorf("%s: bind_to_port %v, want %v", tc.name, real, tc.real)
		}
		if l.UseOriginalDst.GetValue() {
			t.Errorf("%s: use_original_dst", tc.name)
		}
		if len(l.FilterChains) != 1 || l.DefaultFilterChain != nil {
			t.Fatalf("%s: chains %d, default chain %v: want the HTTP chain alone", tc.name, len(l.FilterChains), l.DefaultFilterChain != nil)
		}
		if m := l.FilterChains[0].FilterChainMatch; len(m.GetApplicationProtocols()) > 0 || m.GetTransportProtocol() != "" {
			t.Errorf("%s: the HTTP chain sniffs: %v", tc.name, m)
		}
		if rds := ldsHCMOf(t, l.FilterChains[0]).GetRds().GetRouteConfigName(); rds != tc.route {
			t.Errorf("%s: route configuration %q, want %q", tc.name, rds, tc.route)
		}
	}
	// The catch-all's HTTP listeners are on 0.0.0.0, an address the port listeners did not take, so it
	// builds them, as istiod; their route configurations are still the port listeners' (below).
	for _, name := range []string{"0.0.0.0_9080", "0.0.0.0_80"} {
		if ldsFindOrNil(ls, name) == nil {
			t.Errorf("the catch-all's %s is missing: %v", name, listenerNames(ls))
		}
	}
	if ldsFindOrNil(ls, "127.0.0.1_80") != nil || ldsFindOrNil(ls, "0.0.0.0_7070") == nil {
		t.Errorf("listeners %v", listenerNames(ls))
	}
	rcs := generateRoutes(t, g, ldsFrontend, push, named(RouteType, "9080", "7070", "80"))
	if len(rcs) != 3 {
		t.Fatalf("route configurations %d, want 9080, 7070 and 80", len(rcs))
	}
	want := map[string][]string{
		"80":   {AllowAnyVirtualHost}, // reviews has no port 80; frontend is not this listener's
		"7070": {"reviews.shop.svc.cluster.local:7070", AllowAnyVirtualHost},
		"9080": {"reviews.shop.svc.cluster.local:9080", AllowAnyVirtualHost}, // the egress listener's services alone
	}
	for _, rc := range rcs {
		if got := vhostNames(rc); !slices.Equal(got, want[rc.Name]) {
			t.Errorf("route configuration %s: virtual hosts %v, want %v", rc.Name, got, want[rc.Name])
		}
	}
}

// A scope of a Sidecar whose egress listeners changed nothing else is rebuilt when the Sidecar changes:
// the listeners follow captureMode.
func TestSidecarEgressCaptureModeChangeRebuilds(t *testing.T) {
	g := New(Options{})
	egress := func(mode string) string {
		return egressSidecar("  - port: {number: 9080, protocol: HTTP, name: http}\n    captureMode: " + mode +
			"\n    bind: 127.0.0.3\n    hosts: [\"./reviews.shop.svc.cluster.local\"]\n")
	}
	for _, tc := range []struct {
		mode string
		real bool
	}{{"DEFAULT", false}, {"NONE", true}, {"IPTABLES", false}} {
		ls := ldsGenerate(t, g, ldsFrontend, ldsPush(t, nil, egress(tc.mode)), wildcard(ListenerType))
		l := ldsFindOrNil(ls, "127.0.0.3_9080")
		if l == nil {
			t.Fatalf("%s: no listener 127.0.0.3_9080: %v", tc.mode, listenerNames(ls))
		}
		if real := l.BindToPort == nil || l.BindToPort.Value; real != tc.real {
			t.Errorf("captureMode %s: bind_to_port %v, want %v", tc.mode, real, tc.real)
		}
	}
}
