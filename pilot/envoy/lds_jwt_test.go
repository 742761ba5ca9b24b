package envoy

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	jwtauthn "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/envoy/authpolicy"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/store"
)

const jwtTestJWKS = `{"keys":[{"kty":"EC","crv":"P-256","kid":"k1",` +
	`"x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}`

// jwtReviewsAuthn has everything a rule can say, for the reviews workload of testdata/lds/mesh.yaml.
const jwtReviewsAuthn = `
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: reviews-jwt, namespace: shop}
spec:
  selector: {matchLabels: {app: reviews}}
  jwtRules:
  - issuer: https://issuer.example.com
    audiences: [reviews, shop]
    jwks: '` + jwtTestJWKS + `'
    fromHeaders: [{name: x-jwt, prefix: "Bearer "}]
    fromParams: [token]
    fromCookies: [session]
    forwardOriginalToken: true
    outputPayloadToHeader: x-jwt-payload
    outputClaimToHeaders: [{header: x-jwt-sub, claim: sub}]
    spaceDelimitedClaims: [roles]
`

func httpFilterNames(h *hcm.HttpConnectionManager) []string {
	var names []string
	for _, f := range h.HttpFilters {
		names = append(names, f.Name)
	}
	return names
}

// jwtConfigOf returns the jwt_authn filter of a connection manager, nil without one.
func jwtConfigOf(t *testing.T, h *hcm.HttpConnectionManager) *jwtauthn.JwtAuthentication {
	t.Helper()
	for _, f := range h.HttpFilters {
		if f.Name == jwtAuthnFilter {
			cfg := &jwtauthn.JwtAuthentication{}
			if err := f.GetTypedConfig().UnmarshalTo(cfg); err != nil {
				t.Fatal(err)
			}
			return cfg
		}
	}
	return nil
}

func TestJWTFilterOnSidecarInbound(t *testing.T) {
	push := ldsPush(t, nil, jwtReviewsAuthn)
	ls := ldsGenerate(t, New(Options{}), ldsReviews, push, wildcard(ListenerType))
	in := ldsFind(t, ls, VirtualInboundListener)
	for _, chain := range []string{"inbound_0.0.0.0_9080_tls", "inbound_0.0.0.0_9080_plaintext"} {
		h := ldsHCMOf(t, ldsChain(t, in, chain))
		// After CUSTOM (none here), before the RBAC filters of reviews' ALLOW and DENY policies.
		want := []string{jwtAuthnFilter, httpRBACFilter, httpRBACFilter, ldsFaultFilter, CORSFilterName, ldsRouterFilterName}
		if got := httpFilterNames(h); !slices.Equal(got, want) {
			t.Errorf("%s: http filters %v, want %v", chain, got, want)
		}
	}
	cfg := jwtConfigOf(t, ldsHCMOf(t, ldsChain(t, in, "inbound_0.0.0.0_9080_tls")))
	want := &jwtauthn.JwtAuthentication{
		Providers: map[string]*jwtauthn.JwtProvider{"origins-0": {
			Issuer:               "https://issuer.example.com",
			Audiences:            []string{"reviews", "shop"},
			FromHeaders:          []*jwtauthn.JwtHeader{{Name: "x-jwt", ValuePrefix: "Bearer "}},
			FromParams:           []string{"token"},
			FromCookies:          []string{"session"},
			Forward:              true,
			ForwardPayloadHeader: "x-jwt-payload",
			ClaimToHeaders:       []*jwtauthn.JwtClaimToHeader{{HeaderName: "x-jwt-sub", ClaimName: "sub"}},
			PayloadInMetadata:    "payload",
			NormalizePayloadInMetadata: &jwtauthn.JwtProvider_NormalizePayload{
				SpaceDelimitedClaims: []string{"permission", "roles", "scope"}},
			JwksSourceSpecifier: jwtLocal(jwtTestJWKS),
		}},
		Rules:               jwtRules(jwtAnyOf(jwtRequireProvider("origins-0"), jwtAllowMissing())),
		BypassCorsPreflight: true,
	}
	if !proto.Equal(cfg, want) {
		t.Errorf("jwt_authn\n got %v\nwant %v", cfg, want)
	}
	// Outbound connection managers validate no token; workloads without a RequestAuthentication get none.
	for _, l := range ls {
		if l.Name == VirtualInboundListener {
			continue
		}
		for _, fc := range l.FilterChains {
			if hasJWTFilter(t, fc) {
				t.Errorf("outbound listener %s chain %s has a jwt_authn filter", l.Name, fc.Name)
			}
		}
	}
	front := ldsFind(t, ldsGenerate(t, New(Options{}), ldsFrontend, push, wildcard(ListenerType)), VirtualInboundListener)
	for _, fc := range front.FilterChains {
		if hasJWTFilter(t, fc) {
			t.Errorf("frontend chain %s has a jwt_authn filter", fc.Name)
		}
	}
}

func hasJWTFilter(t *testing.T, fc *listener.FilterChain) bool {
	t.Helper()
	for _, f := range fc.Filters {
		if f.Name == ldsHCMFilter && jwtConfigOf(t, ldsDecodeHCM(t, f.GetTypedConfig())) != nil {
			return true
		}
	}
	return false
}

func jwtLocal(s string) *jwtauthn.JwtProvider_LocalJwks {
	return &jwtauthn.JwtProvider_LocalJwks{LocalJwks: &core.DataSource{Specifier: &core.DataSource_InlineString{InlineString: s}}}
}

func jwtRequireProvider(name string) *jwtauthn.JwtRequirement {
	return &jwtauthn.JwtRequirement{RequiresType: &jwtauthn.JwtRequirement_ProviderName{ProviderName: name}}
}

func jwtRequireAll(reqs []*jwtauthn.JwtRequirement) *jwtauthn.JwtRequirement {
	return &jwtauthn.JwtRequirement{RequiresType: &jwtauthn.JwtRequirement_RequiresAll{
		RequiresAll: &jwtauthn.JwtRequirementAndList{Requirements: reqs}}}
}

func jwtAllowMissing() *jwtauthn.JwtRequirement {
	return &jwtauthn.JwtRequirement{RequiresType: &jwtauthn.JwtRequirement_AllowMissing{AllowMissing: &emptypb.Empty{}}}
}

func jwtAnyOf(reqs ...*jwtauthn.JwtRequirement) *jwtauthn.JwtRequirement {
	return &jwtauthn.JwtRequirement{RequiresType: &jwtauthn.JwtRequirement_RequiresAny{
		RequiresAny: &jwtauthn.JwtRequirementOrList{Requirements: reqs}}}
}

func jwtRules(r *jwtauthn.JwtRequirement) []*jwtauthn.RequirementRule {
	return []*jwtauthn.RequirementRule{{
		Match:           &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
		RequirementType: &jwtauthn.RequirementRule_Requires{Requires: r},
	}}
}

// A gateway's connection managers get the filter of the RequestAuthentications selecting it (or naming its
// Gateway API Gateway), clearing the route cache; a RequestAuthentication alone, with no AuthorizationPolicy,
// is enough.
func TestJWTFilterOnGateway(t *testing.T) {
	push := ldsPush(t, nil, `
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: edge-jwt, namespace: istio-system}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  jwtRules: [{issuer: https://b.example.com, jwks: '`+jwtTestJWKS+`'}, `+
		`{issuer: https://a.example.com, jwks: '`+jwtTestJWKS+`', presence: REQUIRED}]
`)
	ls := ldsGenerate(t, New(Options{}), ldsGateway, push, wildcard(ListenerType))
	h := ldsHCMOf(t, ldsFind(t, ls, "0.0.0.0_80").FilterChains[0])
	if got, want := httpFilterNames(h), []string{jwtAuthnFilter, ldsALPNFilterName, ldsFaultFilter, CORSFilterName,
		ldsRouterFilterName}; !slices.Equal(got, want) {
		t.Fatalf("http filters %v, want %v", got, want)
	}
	cfg := jwtConfigOf(t, h)
	// Providers sorted by issuer; the REQUIRED one has no allow_missing, and no provider alone suffices.
	if cfg.Providers["origins-0"].GetIssuer() != "https://a.example.com" || cfg.Providers["origins-1"].GetIssuer() != "https://b.example.com" {
		t.Errorf("providers %v", cfg.Providers)
	}
	for name, p := range cfg.Providers {
		if !p.ClearRouteCache {
			t.Errorf("gateway provider %s does not clear the route cache", name)
		}
	}
	want := jwtRequireAll([]*jwtauthn.JwtRequirement{jwtRequireProvider("origins-0"),
		jwtAnyOf(jwtRequireProvider("origins-1"), jwtAllowMissing())})
	if got := cfg.Rules[0].GetRequires(); !proto.Equal(got, want) {
		t.Errorf("requirement\n got %v\nwant %v", got, want)
	}
	for _, name := range []string{"0.0.0.0_443/shop.example.com", "0.0.0.0_443/partners.example.com"} {
		if !hasJWTFilter(t, ldsChain(t, ldsFind(t, ls, "0.0.0.0_443"), name)) {
			t.Errorf("%s: no jwt_authn filter", name)
		}
	}
}

// Two OPTIONAL rules: a token valid for either provider passes, as istiod's OR of each provider with the
// AND of {provider or missing}.
func TestJWTRequirementOfOptionalRules(t *testing.T) {
	push := ldsPush(t, nil, `
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: mesh-jwt, namespace: istio-system}
spec:
  jwtRules: [{issuer: https://b.example.com, jwks: '`+jwtTestJWKS+`'}]
---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: shop-jwt, namespace: shop}
spec:
  jwtRules: [{issuer: https://a.example.com, jwks: '`+jwtTestJWKS+`'}]
`)
	in := ldsFind(t, ldsGenerate(t, New(Options{}), ldsFrontend, push, wildcard(ListenerType)), VirtualInboundListener)
	cfg := jwtConfigOf(t, ldsHCMOf(t, ldsChain(t, in, "inbound_0.0.0.0_8080_plaintext")))
	if cfg == nil {
		t.Fatal("the mesh-wide and namespace RequestAuthentications give frontend no jwt_authn filter")
	}
	p0, p1 := jwtRequireProvider("origins-0"), jwtRequireProvider("origins-1")
	want := jwtAnyOf(p0, p1, jwtRequireAll([]*jwtauthn.JwtRequirement{jwtAnyOf(p0, jwtAllowMissing()), jwtAnyOf(p1, jwtAllowMissing())}))
	if got := cfg.Rules[0].GetRequires(); !proto.Equal(got, want) {
		t.Errorf("requirement\n got %v\nwant %v", got, want)
	}
}

// jwtStorePush builds testdata/lds/mesh.yaml with extra documents and the fetched key sets, returning the
// store too so a test can change it.
func jwtStorePush(t *testing.T, fetched map[config.Key]*config.FetchedKeySet, extra ...string) (*store.Store, *model.PushContext) {
	t.Helper()
	data, err := os.ReadFile("testdata/lds/mesh.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range extra {
		data = append(data, "\n---\n"+e...)
	}
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
		c.CreationTimestamp = time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC)
		st.Upsert(store.LayerFile, c)
	}
	for k, ks := range fetched {
		st.Upsert(store.LayerFile, &config.Config{Key: k, Spec: ks})
	}
	return st, model.Build(st, mesh.Default())
}

const jwtRemoteAuthn = `
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: remote-jwt, namespace: istio-system}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  jwtRules: [{issuer: https://idp.example.com, jwksUri: https://idp.example.com/keys}]
`

const jwtGatewayForTest = `
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: edge, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ["*"]}]
`

// A rule whose keys come from its jwksUri verifies with the key set fetched for it; with none (not fetched
// yet, or every fetch failed) its provider holds a key set nobody can sign for, so its tokens are rejected
// rather than accepted, and the listener changes as soon as the fetched set does.
func TestJWTFetchedKeySets(t *testing.T) {
	key := config.FetchedJWKSKey("https://idp.example.com", "https://idp.example.com/keys")
	g := New(Options{})
	providerKeys := func(push *model.PushContext) string {
		t.Helper()
		ls := ldsGenerate(t, g, ldsGateway, push, wildcard(ListenerType))
		cfg := jwtConfigOf(t, ldsHCMOf(t, ldsFind(t, ls, "0.0.0.0_80").FilterChains[0]))
		return cfg.Providers["origins-0"].GetLocalJwks().GetInlineString()
	}
	st, push := jwtStorePush(t, nil, jwtGatewayForTest, jwtRemoteAuthn)
	if got := providerKeys(push); got != authpolicy.UnmatchableJWKS {
		t.Errorf("no key set fetched: provider keys %s, want the unmatchable set", got)
	}
	env := authpolicy.NewEnv(push, model.AuthorizationPolicies{}, OutboundClusterName)
	env.JWT = authpolicy.NewJWTAuthn(push, ldsGateway.Namespace, ldsGateway.Labels, true)
	if _, notes := authpolicy.HTTPFilters(model.AuthorizationPolicies{}, env); len(notes) != 1 ||
		!strings.Contains(notes[0], failClosedNote+"RequestAuthentication istio-system/remote-jwt spec.jwtRules[0]") {
		t.Errorf("notes %q, want one saying the rule fails closed", notes)
	}

	// Fetched: the set is inlined, and the cached listener is not served any more.
	st.Upsert(store.LayerFile, &config.Config{Key: key, Spec: &config.FetchedKeySet{URI: key.Name, JWKS: jwtTestJWKS}})
	next, _ := model.Update(push, st, []model.Change{{Key: key}})
	if got := providerKeys(next); got != jwtTestJWKS {
		t.Errorf("after the fetch: provider keys %s, want the fetched set", got)
	}
	// A failed refresh keeps the last good set.
	st.Upsert(store.LayerFile, &config.Config{Key: key, Spec: &config.FetchedKeySet{URI: key.Name, JWKS: jwtTestJWKS, Error: "status 503"}})
	next, _ = model.Update(next, st, []model.Change{{Key: key}})
	if got := providerKeys(next); got != jwtTestJWKS {
		t.Errorf("after a failed refresh: provider keys %s, want the last good set", got)
	}
	// Failing with no good set ever: rejected again.
	st.Upsert(store.LayerFile, &config.Config{Key: key, Spec: &config.FetchedKeySet{URI: key.Name, Error: "status 503"}})
	next, _ = model.Update(next, st, []model.Change{{Key: key}})
	if got := providerKeys(next); got != authpolicy.UnmatchableJWKS {
		t.Errorf("every fetch failed: provider keys %s, want the unmatchable set", got)
	}
}
