package envoy

import (
	"os"
	"slices"
	"strings"
	"testing"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/store"
)

// rdsPush builds the snapshot of testdata/rds/mesh.yaml.
func rdsPush(t testing.TB) *model.PushContext {
	t.Helper()
	data, err := os.ReadFile("testdata/rds/mesh.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return pushFromYAML(t, data)
}

func pushFromYAML(t testing.TB, data []byte) *model.PushContext {
	t.Helper()
	return model.Build(storeFromYAML(t, data), mesh.Default())
}

// storeFromYAML loads YAML documents into a store, as the file source would.
func storeFromYAML(t testing.TB, data []byte) *store.Store {
	t.Helper()
	docs, err := config.SplitDocuments(data)
	if err != nil {
		t.Fatal(err)
	}
	st := store.New()
	for i, doc := range docs {
		if config.IsEmptyDocument(doc) {
			continue
		}
		c, err := config.Parse(doc, "mesh.yaml", i, "default")
		if err != nil {
			t.Fatal(err)
		}
		st.Upsert(store.LayerFile, c)
	}
	return st
}

// sharedVIPMesh has services a and b on one VIP, a with a VirtualService (including a route Envoy rejects,
// and one TestRouteRejectsNothing gives a regex validation refuses).
const sharedVIPMesh = `
apiVersion: v1
kind: Service
metadata: {name: a, namespace: ns}
spec:
  clusterIP: 10.1.0.1
  ports: [{name: http, port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: b, namespace: ns}
spec:
  clusterIP: 10.1.0.1
  ports: [{name: http, port: 80}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: a, namespace: ns}
spec:
  hosts: [a]
  http:
  - name: bad-regex
    match: [{uri: {regex: "^/admin"}}]
    route: [{destination: {host: a}}]
  - name: bad-code
    match: [{uri: {prefix: /x}}]
    redirect: {uri: /y, redirectCode: 399}
  - name: even
    route:
    - destination: {host: a}
    - destination: {host: b}
`

// generateRoutes runs RDS and decodes the result, checking what every RouteConfiguration must satisfy:
// ValidateAll, the name it was asked under, domains unique within it.
func generateRoutes(t *testing.T, g *Generators, proxy *model.Proxy, push *model.PushContext,
	w *model.WatchedResource) []*route.RouteConfiguration {
	t.Helper()
	res, err := g.ByTypeURL()[RouteType].Generate(proxy, push, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []*route.RouteConfiguration
	for _, r := range res {
		rc := &route.RouteConfiguration{}
		if err := r.Any.UnmarshalTo(rc); err != nil {
			t.Fatal(err)
		}
		if err := rc.ValidateAll(); err != nil {
			t.Errorf("route configuration %s: ValidateAll: %v", rc.Name, err)
		}
		if rc.Name != r.Name {
			t.Errorf("resource %q holds route configuration %q", r.Name, rc.Name)
		}
		if !w.Wildcard && !w.Subscribed(r.Name) {
			t.Errorf("route configuration %q was not asked for", r.Name)
		}
		seen := map[string]string{}
		for _, vh := range rc.VirtualHosts {
			for _, d := range vh.Domains {
				if other, dup := seen[strings.ToLower(d)]; dup {
					t.Errorf("route configuration %s: domain %q in virtual hosts %s and %s", rc.Name, d, other, vh.Name)
				}
				seen[strings.ToLower(d)] = vh.Name
			}
		}
		out = append(out, rc)
	}
	return out
}

func TestRDSGolden(t *testing.T) {
	push := rdsPush(t)
	reviews := &model.Proxy{Type: model.Sidecar, Namespace: "bookinfo", Labels: map[string]string{"app": "reviews"}}
	cases := []struct {
		name   string
		proxy  *model.Proxy
		w      *model.WatchedResource
		byPort bool
	}{
		{"sidecar-bookinfo", reviews, wildcard(RouteType), false},
		// The configurations of the services' own listeners (routes by service), and every service in its
		// port's table (by port, istiod's layout).
		{"sidecar-bookinfo-own", reviews, named(RouteType, "echo.bookinfo.svc.cluster.local:7070", "reviews.bookinfo.svc.cluster.local:9080",
			"web.bookinfo.svc.cluster.local:80", "httpbin.other.svc.cluster.local:8000", "external-api.example.com:80"), false},
		{"sidecar-bookinfo-by-port", reviews, wildcard(RouteType), true},
		{"sidecar-productpage-9080", &model.Proxy{Type: model.Sidecar, Namespace: "bookinfo", Labels: map[string]string{"app": "productpage"}},
			named(RouteType, "9080"), false},
		{"sidecar-other", &model.Proxy{Type: model.Sidecar, Namespace: "other"},
			named(RouteType, "80", "8000", "9080", "12345", "http.80"), false},
		{"gateway", &model.Proxy{Type: model.Router, Namespace: "istio-system", Labels: map[string]string{"istio": "ingressgateway"}},
			wildcard(RouteType), false},
		{"grpc", &model.Proxy{Type: model.GRPC, Namespace: "bookinfo"}, named(RouteType,
			"echo.bookinfo.svc.cluster.local:7070",
			"outbound|9080||reviews.bookinfo.svc.cluster.local",
			"nothere.bookinfo.svc.cluster.local:7070",
			"echo.bookinfo.svc.cluster.local:7071",
			"echo:7070",
		), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{}
			if tc.byPort {
				opts.OutboundHTTPRoutes = RoutesByPort
			}
			golden(t, "rds", tc.name, generateRoutes(t, New(opts), tc.proxy, push, tc.w))
		})
	}
}

func routeNames(rcs []*route.RouteConfiguration) []string {
	var out []string
	for _, rc := range rcs {
		out = append(out, rc.Name)
	}
	return out
}

func virtualHost(t *testing.T, rc *route.RouteConfiguration, name string) *route.VirtualHost {
	t.Helper()
	for _, vh := range rc.VirtualHosts {
		if vh.Name == name {
			return vh
		}
	}
	t.Fatalf("route configuration %s has no virtual host %s", rc.Name, name)
	return nil
}

func TestRouteNames(t *testing.T) {
	push := rdsPush(t)
	g := New(Options{})
	sidecar := &model.Proxy{Type: model.Sidecar, Namespace: "bookinfo"}
	// Every HTTP port, not the TCP port 3306.
	all := generateRoutes(t, g, sidecar, push, wildcard(RouteType))
	if got, want := routeNames(all), []string{"7070", "80", "8000", "9080"}; !slices.Equal(got, want) {
		t.Errorf("wildcard: got %v, want %v", got, want)
	}
	// 8000 is httpbin's HTTP port; web's port 8000 has no known protocol, is proxied as TCP and has no routes.
	for _, vh := range all[2].VirtualHosts {
		if strings.HasPrefix(vh.Name, "web.") {
			t.Errorf("route configuration 8000 has a virtual host for web's port of unknown protocol")
		}
	}
	if got, want := routeNames(generateRoutes(t, g, sidecar, push, named(RouteType, "9080", "3306", "443", "080", "x", "http.80"))),
		[]string{"9080"}; !slices.Equal(got, want) {
		t.Errorf("named: got %v, want %v", got, want)
	}
	gw := &model.Proxy{Type: model.Router, Namespace: "istio-system", Labels: map[string]string{"istio": "ingressgateway"}}
	if got, want := routeNames(generateRoutes(t, g, gw, push, wildcard(RouteType))),
		[]string{"http.80", "https.443.https.bookinfo-gateway.istio-system"}; !slices.Equal(got, want) {
		t.Errorf("gateway: got %v, want %v", got, want)
	}
	other := &model.Proxy{Type: model.Router, Namespace: "istio-system", Labels: map[string]string{"istio": "egress"}}
	if got := generateRoutes(t, g, other, push, named(RouteType, "http.80")); len(got) != 0 {
		t.Errorf("gateway without Gateways: got %v", routeNames(got))
	}
}

func TestRouteSidecarReviews(t *testing.T) {
	push := rdsPush(t)
	g := newByPort()
	rcs := generateRoutes(t, g, &model.Proxy{Type: model.Sidecar, Namespace: "bookinfo"}, push, named(RouteType, "9080"))
	if len(rcs) != 1 {
		t.Fatalf("got %d route configurations", len(rcs))
	}
	vh := virtualHost(t, rcs[0], "reviews.bookinfo.svc.cluster.local:9080")
	// istiod's set: the FQDN also as an absolute name (trailing dot), the short names a pod's DNS search
	// path resolves, the VIP; no "reviews.bookinfo.svc.cluster", which no resolver turns into the service.
	wantDomains := []string{
		"reviews.bookinfo.svc.cluster.local", "reviews.bookinfo.svc.cluster.local:9080",
		"reviews.bookinfo.svc.cluster.local.", "reviews.bookinfo.svc.cluster.local.:9080",
		"reviews", "reviews:9080", "reviews.bookinfo", "reviews.bookinfo:9080",
		"reviews.bookinfo.svc", "reviews.bookinfo.svc:9080",
		"10.0.0.11", "10.0.0.11:9080",
	}
	if !slices.Equal(vh.Domains, wantDomains) {
		t.Errorf("domains: got %v, want %v", vh.Domains, wantDomains)
	}
	if len(vh.Routes) != 2 {
		t.Fatalf("got %d routes, want 2", len(vh.Routes))
	}
	jason := vh.Routes[0]
	if h := jason.Match.Headers; len(h) != 1 || h[0].Name != "end-user" || h[0].GetStringMatch().GetExact() != "jason" {
		t.Errorf("jason match: %v", jason.Match)
	}
	if c := jason.GetRoute().GetCluster(); c != "outbound|9080|v2|reviews.bookinfo.svc.cluster.local" {
		t.Errorf("jason cluster %q", c)
	}
	split := vh.Routes[1].GetRoute().GetWeightedClusters().GetClusters()
	if len(split) != 2 || split[0].Name != "outbound|9080|v1|reviews.bookinfo.svc.cluster.local" || split[0].Weight.GetValue() != 80 ||
		split[1].Name != "outbound|9080|v3|reviews.bookinfo.svc.cluster.local" || split[1].Weight.GetValue() != 20 {
		t.Errorf("split: %v", split)
	}
	if p := vh.Routes[1].GetRoute().GetRetryPolicy(); p.GetRetryOn() != DefaultRetryOn || p.GetNumRetries().GetValue() != 2 {
		t.Errorf("default retry policy: %v", p)
	}
	if to := vh.Routes[1].GetRoute().GetTimeout(); to == nil || to.AsDuration() != 0 {
		t.Errorf("timeout %v, want 0 (disabled)", to)
	}
	last := rcs[0].VirtualHosts[len(rcs[0].VirtualHosts)-1]
	if last.Name != AllowAnyVirtualHost || !slices.Equal(last.Domains, []string{"*"}) ||
		last.Routes[0].GetRoute().GetCluster() != PassthroughCluster {
		t.Errorf("last virtual host: %v", last)
	}

	// From another namespace: no bare name.
	rcs = generateRoutes(t, g, &model.Proxy{Type: model.Sidecar, Namespace: "other"}, push, named(RouteType, "9080"))
	vh = virtualHost(t, rcs[0], "reviews.bookinfo.svc.cluster.local:9080")
	if slices.Contains(vh.Domains, "reviews") || !slices.Contains(vh.Domains, "reviews.bookinfo") {
		t.Errorf("domains from namespace other: %v", vh.Domains)
	}
}

func TestRouteRatingsFeatures(t *testing.T) {
	push := rdsPush(t)
	rcs := generateRoutes(t, newByPort(), &model.Proxy{Type: model.Sidecar, Namespace: "bookinfo"}, push, named(RouteType, "9080"))
	vh := virtualHost(t, rcs[0], "ratings.bookinfo.svc.cluster.local:9080")
	var names []string
	for _, r := range vh.Routes {
		names = append(names, r.Name)
	}
	// other-port only matches port 9999; "unreachable" follows a catch-all.
	if want := []string{"moved", "health", "api.get", "rest"}; !slices.Equal(names, want) {
		t.Fatalf("routes %v, want %v", names, want)
	}
	redirect := vh.Routes[0].GetRedirect()
	if redirect.GetPathRedirect() != "/new" || redirect.GetHostRedirect() != "ratings.example.com" ||
		redirect.GetResponseCode() != route.RedirectAction_FOUND {
		t.Errorf("redirect %v", redirect)
	}
	if dr := vh.Routes[1].GetDirectResponse(); dr.GetStatus() != 200 || dr.GetBody().GetInlineString() != "ok" {
		t.Errorf("direct response %v", dr)
	}
	api := vh.Routes[2]
	a := api.GetRoute()
	if a.GetPrefixRewrite() != "/ratings" || a.GetHostRewriteLiteral() != "ratings-internal" || a.GetTimeout().AsDuration().Seconds() != 10 {
		t.Errorf("api action %v", a)
	}
	if p := a.GetRetryPolicy(); p.GetNumRetries().GetValue() != 3 || p.GetRetryOn() != "5xx,gateway-error,retriable-status-codes" ||
		!slices.Equal(p.GetRetriableStatusCodes(), []uint32{503}) || p.GetPerTryTimeout().AsDuration().Seconds() != 2 ||
		len(p.GetRetryHostPredicate()) != 0 {
		t.Errorf("api retries %v (consistent hash: no previous-hosts predicate)", p)
	}
	if h := a.GetHashPolicy(); len(h) != 1 || h[0].GetHeader().GetHeaderName() != "x-user" {
		t.Errorf("hash policy %v", h)
	}
	if m := a.GetRequestMirrorPolicies(); len(m) != 1 || m[0].Cluster != "outbound|9080|v2|ratings.bookinfo.svc.cluster.local" ||
		m[0].GetRuntimeFraction().GetDefaultValue().GetNumerator() != 500000 {
		t.Errorf("mirror %v", m)
	}
	f := &faultv3.HTTPFault{}
	if err := api.TypedPerFilterConfig[FaultFilterName].UnmarshalTo(f); err != nil {
		t.Fatalf("fault: %v", err)
	}
	if f.GetDelay().GetFixedDelay().AsDuration().Seconds() != 5 || f.GetDelay().GetPercentage().GetNumerator() != 100000 ||
		f.GetAbort().GetHttpStatus() != 503 || f.GetAbort().GetPercentage().GetNumerator() != 55000 {
		t.Errorf("fault %v", f)
	}
	var set []string
	for _, h := range api.RequestHeadersToAdd {
		set = append(set, h.Header.Key+"="+h.Header.Value+":"+h.AppendAction.String())
	}
	if want := []string{"x-set=one:OVERWRITE_IF_EXISTS_OR_ADD", "x-add=two:APPEND_IF_EXISTS_OR_ADD"}; !slices.Equal(set, want) {
		t.Errorf("request headers %v, want %v", set, want)
	}
	if !slices.Equal(api.RequestHeadersToRemove, []string{"x-remove"}) || !slices.Equal(api.ResponseHeadersToRemove, []string{"server"}) {
		t.Errorf("removed headers %v %v", api.RequestHeadersToRemove, api.ResponseHeadersToRemove)
	}
	rest := vh.Routes[3].GetRoute()
	if rest.GetRetryPolicy() != nil {
		t.Errorf("attempts 0 must disable retries: %v", rest.GetRetryPolicy())
	}
	if wc := rest.GetWeightedClusters().GetClusters(); len(wc) != 2 || wc[1].RequestHeadersToAdd[0].Header.Key != "x-version" {
		t.Errorf("weighted clusters %v", wc)
	}
}

func TestRouteGateway(t *testing.T) {
	push := rdsPush(t)
	gw := &model.Proxy{Type: model.Router, Namespace: "istio-system", Labels: map[string]string{"istio": "ingressgateway"}}
	rcs := generateRoutes(t, New(Options{}), gw, push, named(RouteType, "http.80", "https.443.https.bookinfo-gateway.istio-system"))
	if len(rcs) != 2 {
		t.Fatalf("got %v", routeNames(rcs))
	}
	http80 := rcs[0]
	star := virtualHost(t, http80, "*:80")
	if !http80.IgnorePortInHostMatching {
		t.Error("gateway route configuration matches the Host port; istiod ignores it")
	}
	if !slices.Equal(star.Domains, []string{"*"}) || len(star.Routes) != 3 ||
		star.Routes[0].GetRoute().GetCluster() != "outbound|9080||productpage.bookinfo.svc.cluster.local" {
		t.Errorf("* virtual host %v", star)
	}
	host := virtualHost(t, http80, "bookinfo.example.com:80")
	if len(host.Routes) != 2 || host.Routes[0].GetRoute().GetCluster() != "outbound|9080||reviews.bookinfo.svc.cluster.local" ||
		host.Routes[1].GetRedirect().GetSchemeRedirect() != "https" || host.Routes[1].GetRedirect().GetPortRedirect() != 443 {
		t.Errorf("bookinfo.example.com on 80: %v", host.Routes)
	}
	https := rcs[1]
	if len(https.VirtualHosts) != 1 || !slices.Equal(https.VirtualHosts[0].Domains, []string{"bookinfo.example.com"}) ||
		len(https.VirtualHosts[0].Routes) != 5 { // the "*" VirtualService's 3 routes, then bookinfo-tls's 2
		t.Errorf("https: %v", https.VirtualHosts)
	}
}

func TestRouteGRPC(t *testing.T) {
	push := rdsPush(t)
	name := "echo.bookinfo.svc.cluster.local:7070"
	rcs := generateRoutes(t, New(Options{}), &model.Proxy{Type: model.GRPC, Namespace: "bookinfo"}, push,
		named(RouteType, name, "unknown.example.com:80"))
	if len(rcs) != 1 || rcs[0].Name != name {
		t.Fatalf("got %v", routeNames(rcs))
	}
	vh := rcs[0].VirtualHosts[0]
	if len(rcs[0].VirtualHosts) != 1 || !slices.Equal(vh.Domains, []string{name, "echo.bookinfo.svc.cluster.local"}) {
		t.Errorf("virtual hosts %v", rcs[0].VirtualHosts)
	}
	for _, r := range vh.Routes {
		if r.Match.GetPrefix() == "" && r.Match.GetPath() == "" {
			t.Errorf("route %s: gRPC needs a prefix or path match", r.Name)
		}
		if r.GetRoute() == nil {
			t.Errorf("route %s: not a forwarding route", r.Name)
		}
	}
	// A short target, as the client wrote it, resolved from the client's namespace.
	short := generateRoutes(t, New(Options{}), &model.Proxy{Type: model.GRPC, Namespace: "bookinfo"}, push, named(RouteType, "echo:7070"))
	if len(short) != 1 || !slices.Equal(short[0].VirtualHosts[0].Domains,
		[]string{"echo:7070", "echo", name, "echo.bookinfo.svc.cluster.local"}) {
		t.Errorf("short target: %v", short)
	}
	wc := vh.Routes[1].GetRoute().GetWeightedClusters().GetClusters()
	if len(wc) != 2 || wc[0].Weight.GetValue() != 75 || wc[1].Weight.GetValue() != 25 {
		t.Errorf("weighted clusters %v", wc)
	}
	a := vh.Routes[1].GetRoute()
	if a.GetMaxStreamDuration().GetMaxStreamDuration().AsDuration().Seconds() != 2 || a.GetRetryPolicy().GetNumRetries().GetValue() != 2 {
		t.Errorf("timeout / retries %v", a)
	}
}

// Proxies of one namespace share the marshaled configuration unless a VirtualService matches on sourceLabels.
func TestRouteCacheSharing(t *testing.T) {
	push := rdsPush(t)
	g := newByPort()
	gen := g.ByTypeURL()[RouteType]
	get := func(labels map[string]string, name string) *model.Resource {
		t.Helper()
		res, err := gen.Generate(&model.Proxy{Type: model.Sidecar, Namespace: "bookinfo", Labels: labels}, push, named(RouteType, name), nil)
		if err != nil || len(res) != 1 {
			t.Fatalf("%s: %v %v", name, res, err)
		}
		return res[0]
	}
	reviews1 := get(map[string]string{"app": "reviews", "version": "v1"}, "8000")
	pp := get(map[string]string{"app": "productpage"}, "8000")
	if reviews1 != pp {
		t.Errorf("route configuration 8000 does not depend on labels and should be shared")
	}
	// On 80 too, where details (without port 80) gets a virtual host from its VirtualService, as in istiod.
	if get(map[string]string{"app": "reviews", "version": "v1"}, "80") == get(map[string]string{"app": "productpage"}, "80") {
		t.Errorf("route configuration 80: details routes by sourceLabels there too, productpage must get its own")
	}
	reviews1 = get(map[string]string{"app": "reviews", "version": "v1"}, "9080")
	reviews2 := get(map[string]string{"app": "reviews", "version": "v1"}, "9080")
	pp = get(map[string]string{"app": "productpage"}, "9080")
	if reviews1 != reviews2 {
		t.Errorf("same labels: not shared")
	}
	if reviews1 == pp || reviews1.Version == pp.Version {
		t.Errorf("details routes by sourceLabels: productpage must get its own configuration")
	}
	// Served again from the cache, still right.
	if again := get(map[string]string{"app": "productpage"}, "9080"); again != pp {
		t.Errorf("productpage's configuration not cached")
	}
}

// Input Envoy would reject is left out rather than sent: duplicate domains, bad regexes, unsupported codes.
func TestRouteRejectsNothing(t *testing.T) {
	st := storeFromYAML(t, []byte(sharedVIPMesh))
	// Validation refuses a regex RE2 cannot compile, so no source stores one; should one get through, its
	// route is left out rather than the whole route configuration refused.
	vs := st.Get(config.Key{Kind: config.VirtualService, Namespace: "ns", Name: "a"}).Spec.(*networking.VirtualService)
	vs.Http[0].Match[0].Uri.MatchType = &networking.StringMatch_Regex{Regex: "("}
	push := model.Build(st, mesh.Default())
	rcs := generateRoutes(t, newByPort(), &model.Proxy{Type: model.Sidecar, Namespace: "ns"}, push, named(RouteType, "80"))
	if len(rcs) != 1 {
		t.Fatalf("got %v", routeNames(rcs))
	}
	a := virtualHost(t, rcs[0], "a.ns.svc.cluster.local:80")
	if len(a.Routes) != 1 || a.Routes[0].Name != "even" {
		t.Fatalf("routes %v", a.Routes)
	}
	wc := a.Routes[0].GetRoute().GetWeightedClusters().GetClusters()
	if len(wc) != 2 || wc[0].Weight.GetValue() != 1 || wc[1].Weight.GetValue() != 1 {
		t.Errorf("unweighted destinations: want an even split, got %v", wc)
	}
	b := virtualHost(t, rcs[0], "b.ns.svc.cluster.local:80")
	if slices.Contains(b.Domains, "10.1.0.1") || !slices.Contains(a.Domains, "10.1.0.1:80") {
		t.Errorf("a shared VIP belongs to the first service: a %v, b %v", a.Domains, b.Domains)
	}
}
