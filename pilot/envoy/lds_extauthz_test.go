package envoy

import (
	"slices"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	extauthzhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	rbachttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	extauthznet "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/ext_authz/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rbacnet "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sextantmesh/sextant/pilot/envoy/authpolicy"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/tests/rbactest"
)

// The names of Envoy's authorization filters, and the words of pilot/envoy/authpolicy's notes and rule
// names, that the listeners' tests look for.
const (
	httpRBACFilter     = "envoy.filters.http.rbac"
	tcpRBACFilter      = "envoy.filters.network.rbac"
	httpExtAuthzFilter = "envoy.filters.http.ext_authz"
	tcpExtAuthzFilter  = "envoy.filters.network.ext_authz"
	jwtAuthnFilter     = "envoy.filters.http.jwt_authn"
	// badCustomSuffix ends the rule names of a CUSTOM policy whose provider cannot be used (istiod's).
	badCustomSuffix = "-deny-due-to-bad-CUSTOM-action"
	// failClosedNote begins a note saying that policies deny traffic because they could not be honoured.
	failClosedNote = "fails closed: "
)

// A CUSTOM policy on the frontend (no other policy applies to it) sending /admin to provider PROVIDER, and
// the authorization services the providers below name.
func customPolicy(provider string) string {
	return `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: ext, namespace: shop}
spec:
  selector: {matchLabels: {app: frontend}}
  action: CUSTOM
  provider: {name: ` + provider + `}
  rules: [{to: [{operation: {paths: [/admin]}}]}]
---
apiVersion: v1
kind: Service
metadata: {name: opa, namespace: authz}
spec:
  clusterIP: 10.0.9.1
  selector: {app: opa}
  ports: [{name: grpc, port: 9191}]
---
apiVersion: v1
kind: Service
metadata: {name: oauth2, namespace: authz}
spec:
  clusterIP: 10.0.9.2
  selector: {app: oauth2}
  ports: [{name: http, port: 4180}]
`
}

const customProviders = `
extensionProviders:
- name: opa
  envoyExtAuthzGrpc: {service: authz/opa.authz.svc.cluster.local, port: 9191, timeout: 0.5s, failOpen: true}
- name: oauth
  envoyExtAuthzHttp:
    service: oauth2.authz.svc.cluster.local
    port: 4180
    pathPrefix: /check
    statusOnError: "503"
    includeRequestHeadersInCheck: [authorization, x-auth-*]
    includeAdditionalHeadersInCheck: {x-from: sextant}
    headersToUpstreamOnAllow: [x-user]
- name: tracing
  zipkin: {service: zipkin.istio-system.svc.cluster.local, port: 9411}
- name: missing-svc
  envoyExtAuthzGrpc: {service: nowhere.authz.svc.cluster.local, port: 9191}
`

func customMesh(t *testing.T) *mesh.Config {
	t.Helper()
	m := mesh.Default()
	if err := mesh.Parse([]byte(customProviders), m); err != nil {
		t.Fatal(err)
	}
	return m
}

// frontendAuthz returns the frontend's inbound HTTP filters (before fault and router) and the network
// filters (before tcp_proxy) of its passthrough chain.
func frontendAuthz(t *testing.T, m *mesh.Config, provider string) ([]*hcm.HttpFilter, []*listener.Filter) {
	t.Helper()
	push := ldsPush(t, m, customPolicy(provider))
	in := ldsFind(t, ldsGenerate(t, New(Options{}), ldsFrontend, push, wildcard(ListenerType)), VirtualInboundListener)
	h := ldsHCMOf(t, ldsChain(t, in, "inbound_0.0.0.0_8080_tls")).HttpFilters
	tcp := ldsChain(t, in, "inbound_passthrough_plaintext").Filters
	return h[:len(h)-len(ldsEnvoyHTTPFilters())], tcp[:len(tcp)-1] // without the fault, CORS and router tail
}

func httpRBACOf(t *testing.T, f *hcm.HttpFilter) *rbachttp.RBAC {
	t.Helper()
	if f.Name != httpRBACFilter {
		t.Fatalf("filter %s, want %s", f.Name, httpRBACFilter)
	}
	r := &rbachttp.RBAC{}
	if err := f.GetTypedConfig().UnmarshalTo(r); err != nil {
		t.Fatal(err)
	}
	return r
}

func tcpRBACOf(t *testing.T, f *listener.Filter) *rbacnet.RBAC {
	t.Helper()
	if f.Name != tcpRBACFilter {
		t.Fatalf("filter %s, want %s", f.Name, tcpRBACFilter)
	}
	r := &rbacnet.RBAC{}
	if err := f.GetTypedConfig().UnmarshalTo(r); err != nil {
		t.Fatal(err)
	}
	return r
}

const customRule = "istio-ext-authz-%s-ns[shop]-policy[ext]-rule[0]"

func customRuleName(provider string) string { return strings.Replace(customRule, "%s", provider, 1) }

// A CUSTOM policy whose provider cannot be used denies what its rules match, on HTTP and TCP, and says why.
func TestCustomWithoutProviderFailsClosed(t *testing.T) {
	for _, tc := range []struct {
		name, provider string
		m              *mesh.Config
		reason         string
	}{
		{"undefined", "opa", mesh.Default(), `provider "opa" is not defined in the mesh config's extensionProviders`},
		{"other kind", "tracing", customMesh(t), `provider "tracing" is of kind zipkin`},
		{"unknown service", "missing-svc", customMesh(t),
			`provider "missing-svc": field envoyExtAuthzGrpc.service: service "nowhere.authz.svc.cluster.local" not found`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			httpFilters, tcpFilters := frontendAuthz(t, tc.m, tc.provider)
			if len(httpFilters) != 1 || len(tcpFilters) != 1 {
				t.Fatalf("http filters %v, tcp filters %v: want one DENY RBAC each", httpFilters, tcpFilters)
			}
			name := customRuleName(tc.provider) + badCustomSuffix
			h := httpRBACOf(t, httpFilters[0]).Rules
			if h.Action != rbacpb.RBAC_DENY || len(h.Policies) != 1 || h.Policies[name] == nil {
				t.Fatalf("http rules %v, want DENY %s", h, name)
			}
			if rbactest.Allowed(t, []*rbacpb.RBAC{h}, rbactest.Request{Path: "/admin"}) ||
				!rbactest.Allowed(t, []*rbacpb.RBAC{h}, rbactest.Request{Path: "/public"}) {
				t.Error("HTTP: want /admin denied and /public allowed")
			}
			// TCP cannot see the path: the rule denies every connection rather than none.
			r := tcpRBACOf(t, tcpFilters[0]).Rules
			if r.Action != rbacpb.RBAC_DENY || r.Policies[name] == nil || rbactest.Allowed(t, []*rbacpb.RBAC{r}, rbactest.Request{}) {
				t.Errorf("tcp rules %v, want a DENY matching every connection", r)
			}

			push := ldsPush(t, tc.m, customPolicy(tc.provider))
			policies := push.AuthorizationPolicies("shop", ldsFrontend.Labels)
			_, notes := authpolicy.HTTPFilters(policies, authpolicy.NewEnv(push, policies, OutboundClusterName))
			if len(notes) != 1 || !strings.Contains(notes[0], failClosedNote+"CUSTOM policies [shop/ext]: "+tc.reason) {
				t.Errorf("notes %q, want one naming shop/ext and %q", notes, tc.reason)
			}
		})
	}
}

// istiod's filter matcher: the ext_authz filter runs when the RBAC shadow rule matched is the provider's.
func wantEnabled(rbacFilter, provider string) *matcher.MetadataMatcher {
	return &matcher.MetadataMatcher{
		Filter: rbacFilter,
		Path: []*matcher.MetadataMatcher_PathSegment{
			{Segment: &matcher.MetadataMatcher_PathSegment_Key{Key: "istio_ext_authz_shadow_effective_policy_id"}}},
		Value: &matcher.ValueMatcher{MatchPattern: &matcher.ValueMatcher_StringMatch{StringMatch: &matcher.StringMatcher{
			MatchPattern: &matcher.StringMatcher_Prefix{Prefix: "istio-ext-authz-" + provider}}}},
	}
}

func TestCustomGRPCProvider(t *testing.T) {
	httpFilters, tcpFilters := frontendAuthz(t, customMesh(t), "opa")
	if len(httpFilters) != 2 || httpFilters[1].Name != httpExtAuthzFilter || len(tcpFilters) != 2 || tcpFilters[1].Name != tcpExtAuthzFilter {
		t.Fatalf("http filters %v, tcp filters %v: want RBAC shadow rules then ext_authz", httpFilters, tcpFilters)
	}
	shadow := httpRBACOf(t, httpFilters[0])
	if shadow.Rules != nil || shadow.ShadowRulesStatPrefix != "istio_ext_authz_" || shadow.ShadowRules.Action != rbacpb.RBAC_DENY ||
		len(shadow.ShadowRules.Policies) != 1 || shadow.ShadowRules.Policies[customRuleName("opa")] == nil {
		t.Fatalf("http RBAC %v, want only shadow rules %s", shadow, customRuleName("opa"))
	}
	// The shadow rule marks /admin, and only /admin, for the provider.
	p := shadow.ShadowRules.Policies[customRuleName("opa")]
	if !rbactest.Permits(t, p.Permissions[0], rbactest.Request{Path: "/admin"}) ||
		rbactest.Permits(t, p.Permissions[0], rbactest.Request{Path: "/public"}) {
		t.Error("the shadow rule does not match exactly /admin")
	}
	grpc := &core.GrpcService{
		TargetSpecifier: &core.GrpcService_EnvoyGrpc_{EnvoyGrpc: &core.GrpcService_EnvoyGrpc{
			ClusterName: "outbound|9191||opa.authz.svc.cluster.local", Authority: "opa.authz.svc.cluster.local"}},
		Timeout: durationpb.New(500_000_000),
	}
	want := &extauthzhttp.ExtAuthz{
		FailureModeAllow:      true,
		Services:              &extauthzhttp.ExtAuthz_GrpcService{GrpcService: grpc},
		FilterEnabledMetadata: wantEnabled("envoy.filters.http.rbac", "opa"),
		TransportApiVersion:   core.ApiVersion_V3,
	}
	got := &extauthzhttp.ExtAuthz{}
	if err := httpFilters[1].GetTypedConfig().UnmarshalTo(got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, want) {
		t.Errorf("http ext_authz\n got %v\nwant %v", got, want)
	}
	tcpShadow := tcpRBACOf(t, tcpFilters[0])
	if tcpShadow.Rules != nil || tcpShadow.ShadowRules.Policies[customRuleName("opa")] == nil ||
		tcpShadow.ShadowRulesStatPrefix != "istio_ext_authz_" {
		t.Errorf("tcp RBAC %v", tcpShadow)
	}
	wantTCP := &extauthznet.ExtAuthz{StatPrefix: "tcp.", FailureModeAllow: true, TransportApiVersion: core.ApiVersion_V3, GrpcService: grpc,
		FilterEnabledMetadata: wantEnabled("envoy.filters.network.rbac", "opa")}
	gotTCP := &extauthznet.ExtAuthz{}
	if err := tcpFilters[1].GetTypedConfig().UnmarshalTo(gotTCP); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(gotTCP, wantTCP) {
		t.Errorf("tcp ext_authz\n got %v\nwant %v", gotTCP, wantTCP)
	}
}

func TestCustomHTTPProvider(t *testing.T) {
	httpFilters, tcpFilters := frontendAuthz(t, customMesh(t), "oauth")
	if len(httpFilters) != 2 || httpFilters[1].Name != httpExtAuthzFilter {
		t.Fatalf("http filters %v", httpFilters)
	}
	ci := func(m *matcher.StringMatcher) *matcher.StringMatcher { m.IgnoreCase = true; return m }
	want := &extauthzhttp.ExtAuthz{
		StatusOnError:       &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable},
		TransportApiVersion: core.ApiVersion_V3,
		Services: &extauthzhttp.ExtAuthz_HttpService{HttpService: &extauthzhttp.HttpService{
			PathPrefix: "/check",
			ServerUri: &core.HttpUri{Uri: "http://oauth2.authz.svc.cluster.local", Timeout: durationpb.New(mesh.DefaultExtAuthzTimeout),
				HttpUpstreamType: &core.HttpUri_Cluster{Cluster: "outbound|4180||oauth2.authz.svc.cluster.local"}},
			AuthorizationRequest: &extauthzhttp.AuthorizationRequest{HeadersToAdd: []*core.HeaderValue{{Key: "x-from", Value: "sextant"}}},
			AuthorizationResponse: &extauthzhttp.AuthorizationResponse{AllowedUpstreamHeaders: &matcher.ListStringMatcher{
				Patterns: []*matcher.StringMatcher{ci(&matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: "x-user"}})}}},
		}},
		FilterEnabledMetadata: wantEnabled("envoy.filters.http.rbac", "oauth"),
		AllowedHeaders: &matcher.ListStringMatcher{Patterns: []*matcher.StringMatcher{
			ci(&matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: "authorization"}}),
			ci(&matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Prefix{Prefix: "x-auth-"}}),
		}},
	}
	got := &extauthzhttp.ExtAuthz{}
	if err := httpFilters[1].GetTypedConfig().UnmarshalTo(got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, want) {
		t.Errorf("http ext_authz\n got %v\nwant %v", got, want)
	}
	// An HTTP service cannot check a TCP connection: the TCP chains deny what the rules match (all of it,
	// as the path is not visible there) rather than letting it through unchecked.
	if len(tcpFilters) != 1 {
		t.Fatalf("tcp filters %v", tcpFilters)
	}
	if r := tcpRBACOf(t, tcpFilters[0]).Rules; r.Action != rbacpb.RBAC_DENY || r.Policies[customRuleName("oauth")+badCustomSuffix] == nil {
		t.Errorf("tcp rules %v", r)
	}
}

// Two providers on one proxy: istiod refuses it, and both policies deny what they match.
func TestCustomTwoProvidersFailClosed(t *testing.T) {
	second := strings.NewReplacer("name: ext,", "name: ext2,", "provider: {name: opa}", "provider: {name: oauth}").Replace(customPolicy("opa"))
	push := ldsPush(t, customMesh(t), customPolicy("opa"), second[:strings.Index(second, "---")])
	policies := push.AuthorizationPolicies("shop", ldsFrontend.Labels)
	filters, notes := authpolicy.HTTPFilters(policies, authpolicy.NewEnv(push, policies, OutboundClusterName))
	if len(filters) != 2 || !slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, "one proxy can use only one") }) {
		t.Fatalf("filters %v notes %q", filters, notes)
	}
	for _, f := range filters {
		if r := httpRBACOf(t, f); r.Rules.GetAction() != rbacpb.RBAC_DENY || r.ShadowRules != nil {
			t.Errorf("rules %v, want DENY", r)
		}
	}
}

// CUSTOM on a gateway: the connection manager gets the shadow rules and ext_authz ahead of the router.
func TestCustomOnGateway(t *testing.T) {
	push := ldsPush(t, customMesh(t), strings.NewReplacer("namespace: shop}\nspec:\n  selector: {matchLabels: {app: frontend}}",
		"namespace: istio-system}\nspec:\n  selector: {matchLabels: {istio: ingressgateway}}").Replace(customPolicy("opa")))
	ls := ldsGenerate(t, New(Options{}), ldsGateway, push, wildcard(ListenerType))
	var names []string
	for _, f := range ldsHCMOf(t, ldsFind(t, ls, "0.0.0.0_80").FilterChains[0]).HttpFilters {
		names = append(names, f.Name)
	}
	if want := []string{httpRBACFilter, httpExtAuthzFilter, ldsALPNFilterName, ldsFaultFilter, CORSFilterName,
		ldsRouterFilterName}; !slices.Equal(names, want) {
		t.Errorf("gateway http filters %v, want %v", names, want)
	}
}
