package envoy

import (
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	envoytype "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sextantmesh/sextant/pilot/model"
)

const corsMesh = `
apiVersion: v1
kind: Service
metadata: {name: web, namespace: ns}
spec:
  clusterIP: 10.1.0.1
  ports: [{name: http, port: 80}]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: ns}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 80, name: http, protocol: HTTP}
    hosts: ["web.example.com"]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: web, namespace: ns}
spec:
  hosts: [web, web.example.com]
  gateways: [mesh, gw]
  http:
  - name: api
    match: [{uri: {prefix: /api}}]
    corsPolicy:
      allowOrigins:
      - exact: https://example.com
      - prefix: https://app.
      - regex: "https://.*\\.example\\.org"
      allowMethods: [GET, POST]
      allowHeaders: [x-custom, authorization]
      exposeHeaders: [x-trace]
      maxAge: 24h
      allowCredentials: true
      unmatchedPreflights: IGNORE
    route: [{destination: {host: web}}]
  - name: legacy
    corsPolicy:
      allowOrigin: [https://old.example.com]
    route: [{destination: {host: web}}]
`

// The CORS policy istiod's TranslateCORSPolicy writes for the "api" route of corsMesh.
func wantAPICORS() *corsv3.CorsPolicy {
	return &corsv3.CorsPolicy{
		AllowOriginStringMatch: []*matcher.StringMatcher{
			{MatchPattern: &matcher.StringMatcher_Exact{Exact: "https://example.com"}},
			{MatchPattern: &matcher.StringMatcher_Prefix{Prefix: "https://app."}},
			{MatchPattern: &matcher.StringMatcher_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: `https://.*\.example\.org`}}},
		},
		AllowMethods:                 "GET,POST",
		AllowHeaders:                 "x-custom,authorization",
		ExposeHeaders:                "x-trace",
		MaxAge:                       "86400",
		AllowCredentials:             wrapperspb.Bool(true),
		ForwardNotMatchingPreflights: wrapperspb.Bool(false),
		FilterEnabled: &core.RuntimeFractionalPercent{DefaultValue: &envoytype.FractionalPercent{
			Numerator: 100, Denominator: envoytype.FractionalPercent_HUNDRED}},
	}
}

func routeCORS(t *testing.T, r *route.Route) *corsv3.CorsPolicy {
	t.Helper()
	a := r.GetTypedPerFilterConfig()[CORSFilterName]
	if a == nil {
		t.Fatalf("route %s: no %s config (per-filter configs: %v)", r.Name, CORSFilterName, r.GetTypedPerFilterConfig())
	}
	p := &corsv3.CorsPolicy{}
	if err := a.UnmarshalTo(p); err != nil {
		t.Fatal(err)
	}
	if err := p.ValidateAll(); err != nil {
		t.Errorf("route %s: CORS policy: ValidateAll: %v", r.Name, err)
	}
	return p
}

func TestRouteCORSPolicy(t *testing.T) {
	push := pushFromYAML(t, []byte(corsMesh))
	g := newByPort()
	sidecar := generateRoutes(t, g, &model.Proxy{Type: model.Sidecar, Namespace: "ns"}, push, named(RouteType, "80"))
	gateway := generateRoutes(t, g, &model.Proxy{Type: model.Router, Namespace: "ns", Labels: map[string]string{"istio": "ingressgateway"}},
		push, named(RouteType, "http.80"))
	if len(sidecar) != 1 || len(gateway) != 1 {
		t.Fatalf("got %d sidecar and %d gateway route configurations, want 1 each", len(sidecar), len(gateway))
	}
	for _, vh := range []*route.VirtualHost{virtualHost(t, sidecar[0], "web.ns.svc.cluster.local:80"),
		virtualHost(t, gateway[0], "web.example.com:80")} {
		if len(vh.Routes) != 2 {
			t.Fatalf("virtual host %s: %d routes, want 2", vh.Name, len(vh.Routes))
		}
		if got, want := routeCORS(t, vh.Routes[0]), wantAPICORS(); !proto.Equal(got, want) {
			t.Errorf("virtual host %s, route api: CORS policy\n got %v\nwant %v", vh.Name, got, want)
		}
		// The deprecated allowOrigin lists exact origins; unmatched preflights are forwarded by default.
		legacy := routeCORS(t, vh.Routes[1])
		want := &corsv3.CorsPolicy{
			AllowOriginStringMatch:       []*matcher.StringMatcher{{MatchPattern: &matcher.StringMatcher_Exact{Exact: "https://old.example.com"}}},
			ForwardNotMatchingPreflights: wrapperspb.Bool(true),
			FilterEnabled:                wantAPICORS().FilterEnabled,
		}
		if !proto.Equal(want, legacy) {
			t.Errorf("virtual host %s, route legacy: CORS policy %v, want %v", vh.Name, legacy, want)
		}
	}
}

// A route without corsPolicy carries no CORS config, so the connection managers' CORS filter leaves its
// requests alone.
func TestRouteWithoutCORSPolicyHasNoCORSConfig(t *testing.T) {
	push := rdsPush(t)
	for _, rc := range generateRoutes(t, New(Options{}), &model.Proxy{Type: model.Sidecar, Namespace: "bookinfo"}, push, wildcard(RouteType)) {
		for _, vh := range rc.VirtualHosts {
			for _, r := range vh.Routes {
				if _, ok := r.GetTypedPerFilterConfig()[CORSFilterName]; ok {
					t.Errorf("%s / %s / %s: CORS config without a corsPolicy", rc.Name, vh.Name, r.Name)
				}
			}
		}
	}
}

// Proxyless gRPC has no CORS filter and rejects a route that configures one: the policy is left out there.
func TestRouteCORSPolicyNotSentToProxylessGRPC(t *testing.T) {
	push := pushFromYAML(t, []byte(corsMesh))
	rcs := generateRoutes(t, New(Options{}), &model.Proxy{Type: model.GRPC, Namespace: "ns"},
		push, named(RouteType, "web.ns.svc.cluster.local:80"))
	if len(rcs) != 1 {
		t.Fatalf("got %d route configurations, want 1", len(rcs))
	}
	for _, vh := range rcs[0].VirtualHosts {
		if len(vh.Routes) != 2 {
			t.Fatalf("gRPC virtual host %s: %d routes, want the VirtualService's 2", vh.Name, len(vh.Routes))
		}
		for _, r := range vh.Routes {
			if _, ok := r.GetTypedPerFilterConfig()[CORSFilterName]; ok {
				t.Errorf("gRPC route %s carries a CORS config", r.Name)
			}
		}
	}
}
