package conformance

import (
	"strings"
	"testing"
	"time"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	cors "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
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
		// istiod's gRPC clients'
		{name: "outbound|7070||echo.default.svc.cluster.local", host: "echo.default.svc.cluster.local", port: 7070, ok: true},
		{name: "outbound|7070|v1|echo.default.svc.cluster.local"},
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
	if !strings.Contains(istio, "VirtualService") || !strings.Contains(istio, "PeerAuthentication") ||
		strings.Contains(istio, "kind: Service\n") {
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

// A route's CORS policy compares by what a browser gets: the same policy spelled differently (header lists
// reordered, origins reordered, wrapped in a FilterConfig) normalises equal; each changed setting is one
// difference naming its field.
func TestRouteCORSComparesContent(t *testing.T) {
	hosts := map[string]bool{"r.ns.svc.cluster.local": true}
	policy := func(edit func(*cors.CorsPolicy)) *cors.CorsPolicy {
		p := &cors.CorsPolicy{
			AllowOriginStringMatch: []*matcher.StringMatcher{
				{MatchPattern: &matcher.StringMatcher_Exact{Exact: "https://a.example"}},
				{MatchPattern: &matcher.StringMatcher_Prefix{Prefix: "https://b."}},
			},
			AllowMethods: "GET,POST", AllowHeaders: "x-a,x-b", ExposeHeaders: "x-c", MaxAge: "60",
			AllowCredentials: wrapperspb.Bool(true), ForwardNotMatchingPreflights: wrapperspb.Bool(false),
		}
		if edit != nil {
			edit(p)
		}
		return p
	}
	snapshot := func(cfg proto.Message) Snapshot {
		a, err := anypb.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		r := &route.Route{Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
			Action: &route.Route_Route{
				Route: &route.RouteAction{ClusterSpecifier: &route.RouteAction_Cluster{Cluster: "outbound|80||r.ns.svc.cluster.local"}}},
			TypedPerFilterConfig: map[string]*anypb.Any{corsFilter: a}}
		s := Snapshot{}
		normaliseRoutes(s, []*route.RouteConfiguration{
			{Name: "80", VirtualHosts: []*route.VirtualHost{{Domains: []string{"r"}, Routes: []*route.Route{r}}}}}, hosts)
		return s
	}
	base := snapshot(policy(nil))
	respelled := policy(func(p *cors.CorsPolicy) {
		p.AllowOriginStringMatch[0], p.AllowOriginStringMatch[1] = p.AllowOriginStringMatch[1], p.AllowOriginStringMatch[0]
		p.AllowHeaders, p.AllowMethods = "x-b, x-a", "POST,GET"
	})
	inner, err := anypb.New(respelled)
	if err != nil {
		t.Fatal(err)
	}
	if d := Compare("c", "p", base, snapshot(&route.FilterConfig{Config: inner})); len(d) != 0 {
		t.Fatalf("the same CORS policy, spelled differently, reported as %v", d)
	}
	for _, tc := range []struct {
		field string
		edit  func(*cors.CorsPolicy)
	}{
		{"route#0.cors.origins", func(p *cors.CorsPolicy) { p.AllowOriginStringMatch = p.AllowOriginStringMatch[:1] }},
		{"route#0.cors.methods", func(p *cors.CorsPolicy) { p.AllowMethods = "GET" }},
		{"route#0.cors.allow_headers", func(p *cors.CorsPolicy) { p.AllowHeaders = "x-a" }},
		{"route#0.cors.expose_headers", func(p *cors.CorsPolicy) { p.ExposeHeaders = "" }},
		{"route#0.cors.max_age", func(p *cors.CorsPolicy) { p.MaxAge = "86400" }},
		{"route#0.cors.credentials", func(p *cors.CorsPolicy) { p.AllowCredentials = nil }},
		{"route#0.cors.forward_unmatched_preflights", func(p *cors.CorsPolicy) { p.ForwardNotMatchingPreflights = nil }},
	} {
		d := Compare("c", "p", base, snapshot(policy(tc.edit)))
		if len(d) != 1 || d[0].Field != tc.field {
			t.Errorf("changing %s gave %v, want one difference on it", tc.field, d)
		}
	}
}

// istiod caps grpc-timeout headers with the deprecated max_grpc_timeout, Sextant with
// max_stream_duration.grpc_timeout_header_max: Envoy reads the first only without the second, and both cap
// the header the same way, so they normalise equal; a route with neither ignores the header.
func TestRouteGRPCTimeoutHeaderCapsCompareEqual(t *testing.T) {
	hosts := map[string]bool{"r.ns.svc.cluster.local": true}
	fields := func(a *route.RouteAction) Fields {
		a.ClusterSpecifier = &route.RouteAction_Cluster{Cluster: "outbound|80||r.ns.svc.cluster.local"}
		s := Snapshot{}
		normaliseRoutes(s, []*route.RouteConfiguration{{Name: "80", VirtualHosts: []*route.VirtualHost{{Domains: []string{"r"},
			Routes: []*route.Route{{Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
				Action: &route.Route_Route{Route: a}}}}}}}, hosts)
		for _, f := range s {
			return f
		}
		t.Fatal("no route normalised")
		return nil
	}
	for _, d := range []*durationpb.Duration{durationpb.New(0), durationpb.New(3 * time.Second)} {
		old := fields(&route.RouteAction{MaxGrpcTimeout: d}) //nolint:staticcheck // the field istiod sets
		cur := fields(&route.RouteAction{MaxStreamDuration: &route.RouteAction_MaxStreamDuration{GrpcTimeoutHeaderMax: d}})
		if old["route#0.grpc_timeout_header_max"] != d.AsDuration().String() ||
			cur["route#0.grpc_timeout_header_max"] != old["route#0.grpc_timeout_header_max"] {
			t.Errorf("cap %v: max_grpc_timeout gives %q, grpc_timeout_header_max %q", d.AsDuration(), old["route#0.grpc_timeout_header_max"],
				cur["route#0.grpc_timeout_header_max"])
		}
	}
	if got := fields(&route.RouteAction{})["route#0.grpc_timeout_header_max"]; got != "header ignored" {
		t.Errorf("no cap: %q, want header ignored", got)
	}
}

// A route configuration listed twice (two listeners ask for it) is read once; a destination both a PORT and
// a HOST:PORT configuration serve is compared in each, whichever comes first.
func TestRoutesReadEachConfigurationOnce(t *testing.T) {
	hosts := map[string]bool{"r.ns.svc.cluster.local": true}
	to := func(c string) []*route.Route {
		return []*route.Route{{Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
			Action: &route.Route_Route{Route: &route.RouteAction{ClusterSpecifier: &route.RouteAction_Cluster{Cluster: c}}}}}
	}
	port := &route.RouteConfiguration{Name: "80", VirtualHosts: []*route.VirtualHost{{Domains: []string{"r.ns.svc.cluster.local"},
		Routes: to("outbound|80||r.ns.svc.cluster.local")}}}
	sniffed := &route.RouteConfiguration{Name: "r.ns.svc.cluster.local:80", VirtualHosts: []*route.VirtualHost{{Domains: []string{"*"},
		Routes: to("outbound|80||r.ns.svc.cluster.local")}}}
	sa, sb := Snapshot{}, Snapshot{}
	normaliseRoutes(sa, []*route.RouteConfiguration{port, sniffed, port}, hosts)
	normaliseRoutes(sb, []*route.RouteConfiguration{sniffed, port}, hosts)
	if d := Compare("c", "p", sa, sb); len(d) != 0 {
		t.Fatalf("the same configurations in another order, one listed twice: %v", d)
	}
	key := Key{Kind: KindRoute, Host: "r.ns.svc.cluster.local", Port: 80}
	if sa[key]["duplicate_vhost"] != "" {
		t.Errorf("a configuration listed twice is a duplicate virtual host: %v", sa[key])
	}
	key.Subset = "sniffed"
	if sa[key]["domains"] != "*" {
		t.Errorf("the HOST:PORT configuration's virtual host: %v", sa[key])
	}
}
