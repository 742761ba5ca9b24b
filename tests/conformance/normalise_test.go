package conformance

import (
	"strings"
	"testing"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestRouteConfigTarget(t *testing.T) {
	for _, tc := range []struct {
		name    string
		host    string
		port    uint32
		gateway bool
		ok      bool
	}{
		{name: "9080", port: 9080, ok: true},
		{name: "echo.default.svc.cluster.local:8081", host: "echo.default.svc.cluster.local", port: 8081, ok: true},
		{name: "http.8080", port: 8080, gateway: true, ok: true},
		{name: "https.443.https.public.istio-system", port: 443, gateway: true, ok: true},
		{name: "InboundPassthroughCluster"},
	} {
		host, port, gateway, ok := routeConfigTarget(tc.name)
		if host != tc.host || port != tc.port || gateway != tc.gateway || ok != tc.ok {
			t.Errorf("%s: got (%q, %d, %v, %v), want (%q, %d, %v, %v)", tc.name, host, port, gateway, ok,
				tc.host, tc.port, tc.gateway, tc.ok)
		}
	}
}

// Two route configurations that send the same traffic the same way, spelled differently (port forms of the
// domains, a one-destination split, weighted order), normalise equal; a changed weight does not.
func TestRoutesCompareByBehaviour(t *testing.T) {
	hosts := map[string]bool{"r.ns.svc.cluster.local": true}
	split := func(a, b uint32) *route.Route {
		return &route.Route{Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
			Action: &route.Route_Route{Route: &route.RouteAction{ClusterSpecifier: &route.RouteAction_WeightedClusters{
				WeightedClusters: &route.WeightedCluster{Clusters: []*route.WeightedCluster_ClusterWeight{
					{Name: "outbound|80|v1|r.ns.svc.cluster.local", Weight: wrapperspb.UInt32(a)},
					{Name: "outbound|80|v2|r.ns.svc.cluster.local", Weight: wrapperspb.UInt32(b)},
				}}}}}}
	}
	single := &route.Route{Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/api"}},
		Action: &route.Route_Route{Route: &route.RouteAction{ClusterSpecifier: &route.RouteAction_Cluster{
			Cluster: "outbound|80|v1|r.ns.svc.cluster.local"}}}}
	zeroSplit := &route.Route{Match: single.Match, Action: &route.Route_Route{Route: &route.RouteAction{
		ClusterSpecifier: &route.RouteAction_WeightedClusters{WeightedClusters: &route.WeightedCluster{
			Clusters: []*route.WeightedCluster_ClusterWeight{
				{Name: "outbound|80|v1|r.ns.svc.cluster.local", Weight: wrapperspb.UInt32(100)},
				{Name: "outbound|80|v2|r.ns.svc.cluster.local", Weight: wrapperspb.UInt32(0)},
			}}}}}}
	a := []*route.RouteConfiguration{{Name: "80", IgnorePortInHostMatching: true, VirtualHosts: []*route.VirtualHost{{
		Domains: []string{"r.ns.svc.cluster.local", "r"}, Routes: []*route.Route{single, split(75, 25)}}}}}
	b := []*route.RouteConfiguration{{Name: "80", VirtualHosts: []*route.VirtualHost{{
		Domains: []string{"r:80", "r.ns.svc.cluster.local:80", "r", "r.ns.svc.cluster.local"},
		Routes:  []*route.Route{zeroSplit, split(3, 1)}}}}}
	sa, sb := Snapshot{}, Snapshot{}
	normaliseRoutes(sa, a, hosts)
	normaliseRoutes(sb, b, hosts)
	if d := Compare("c", "p", sa, sb); len(d) != 0 {
		t.Fatalf("same behaviour, different spelling, reported as %v", d)
	}
	b[0].VirtualHosts[0].Routes[1] = split(50, 50)
	sb = Snapshot{}
	normaliseRoutes(sb, b, hosts)
	d := Compare("c", "p", sa, sb)
	if len(d) != 1 || d[0].Field != "route#1.to" || !strings.Contains(d[0].Sextant, "50.00%") {
		t.Fatalf("a changed split gave %v, want one difference on route#1.to", d)
	}
}

func TestSplitConfigSeparatesIstioFromKubernetes(t *testing.T) {
	all := `# comment only
---
apiVersion: v1
kind: Service
metadata: {name: a}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: a}
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: b}
`
	kube, istio, err := splitConfig(all)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(kube, "kind: Service") || strings.Contains(kube, "istio.io") {
		t.Errorf("kubernetes part: %q", kube)
	}
	if !strings.Contains(istio, "VirtualService") || !strings.Contains(istio, "PeerAuthentication") || strings.Contains(istio, "kind: Service\n") {
		t.Errorf("istio part: %q", istio)
	}
}

// A "*" domain takes every Host, with a port or without, whether or not the configuration ignores ports.
func TestWildcardDomainTakesBothHostForms(t *testing.T) {
	if got, want := domainsText([]string{"*"}, 8081, false), domainsText([]string{"*"}, 8081, true); got != want || got != "*" {
		t.Errorf("domains %q without ignore_port_in_host_matching, %q with it; want both \"*\"", got, want)
	}
	if got := domainsText([]string{"r"}, 80, false); got != "r(without port only)" {
		t.Errorf("a plain name is still marked: %q", got)
	}
}
