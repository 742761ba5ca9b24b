package model_test

import (
	"slices"
	"testing"

	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
)

// RequestAuthentications attach as AuthorizationPolicies do: namespace-wide, by selector, mesh-wide from the
// root namespace (by selector there too), and by targetRefs to a Gateway API Gateway's pods only.
func TestRequestAuthenticationsForWorkload(t *testing.T) {
	m := newMesh(t)
	rule := []*security.JWTRule{{Issuer: "https://idp.example.com", JwksUri: "https://idp.example.com/keys"}}
	put := func(ns, name string, ra *security.RequestAuthentication) {
		ra.JwtRules = rule
		m.put(config.RequestAuthentication, ns, name, nil, ra)
	}
	sel := func(labels map[string]string) *typev1beta1.WorkloadSelector {
		return &typev1beta1.WorkloadSelector{MatchLabels: labels}
	}
	gw := []*typev1beta1.PolicyTargetReference{{Group: config.GatewayAPIGroup, Kind: "Gateway", Name: "edge"}}
	put("istio-system", "mesh-wide", &security.RequestAuthentication{})
	put("istio-system", "mesh-reviews", &security.RequestAuthentication{Selector: sel(map[string]string{"app": "reviews"})})
	put("shop", "ns-wide", &security.RequestAuthentication{})
	put("shop", "reviews", &security.RequestAuthentication{Selector: sel(map[string]string{"app": "reviews"})})
	put("shop", "edge", &security.RequestAuthentication{TargetRefs: gw})
	put("other", "other-ns", &security.RequestAuthentication{})
	ps := model.Build(m.store, mesh.Default())

	names := func(ns string, labels map[string]string) []string {
		var out []string
		for _, c := range ps.RequestAuthentications(ns, labels) {
			out = append(out, c.Namespace+"/"+c.Name)
		}
		return out
	}
	for _, tc := range []struct {
		ns     string
		labels map[string]string
		want   []string
	}{
		{"shop", map[string]string{"app": "reviews"},
			[]string{"istio-system/mesh-wide", "istio-system/mesh-reviews", "shop/ns-wide", "shop/reviews"}},
		{"shop", map[string]string{"app": "frontend"}, []string{"istio-system/mesh-wide", "shop/ns-wide"}},
		// A sidecar labelled like the Gateway's pods but without its gateway-name label: no targetRef policy.
		{"shop", map[string]string{"app": "edge"}, []string{"istio-system/mesh-wide", "shop/ns-wide"}},
		{"shop", map[string]string{config.GatewayNameLabel: "edge"}, []string{"istio-system/mesh-wide", "shop/ns-wide", "shop/edge"}},
		{"istio-system", nil, []string{"istio-system/mesh-wide"}},
		{"other", map[string]string{"app": "reviews"}, []string{"istio-system/mesh-wide", "istio-system/mesh-reviews", "other/other-ns"}},
	} {
		if got := names(tc.ns, tc.labels); !slices.Equal(got, tc.want) {
			t.Errorf("%s %v: %v, want %v", tc.ns, tc.labels, got, tc.want)
		}
	}
}

// A rule's key set: inline, else the one fetched for its jwksUri or its issuer's discovery; a change of
// either kind rebuilds the index (and so changes PoliciesID, on which listener caches key).
func TestRequestAuthnKeySets(t *testing.T) {
	m := newMesh(t)
	inline := &security.JWTRule{Issuer: "https://a.example.com", Jwks: `{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`}
	remote := &security.JWTRule{Issuer: "https://b.example.com", JwksUri: "https://b.example.com/keys"}
	discovered := &security.JWTRule{Issuer: "https://c.example.com"}
	m.put(config.RequestAuthentication, "shop", "jwt", nil,
		&security.RequestAuthentication{JwtRules: []*security.JWTRule{inline, remote, discovered}})
	ps := model.Build(m.store, mesh.Default())
	if keys, ok, problem := ps.JWKS(inline); !ok || keys != inline.Jwks || problem != "" {
		t.Errorf("inline: %q %v %q", keys, ok, problem)
	}
	if _, ok, problem := ps.JWKS(remote); ok || problem == "" {
		t.Errorf("remote before any fetch: ok %v, problem %q", ok, problem)
	}
	fetched := `{"keys":[{"kty":"oct","k":"b3RoZXI"}]}`
	remoteKey := config.FetchedJWKSKey(remote.Issuer, remote.JwksUri)
	m.put(config.FetchedJWKS, "", remoteKey.Name, nil, &config.FetchedKeySet{URI: remote.JwksUri, JWKS: fetched, Error: "status 500"})
	discKey := config.FetchedJWKSKey(discovered.Issuer, "")
	m.put(config.FetchedJWKS, "", discKey.Name, nil, &config.FetchedKeySet{Issuer: discovered.Issuer, Error: "no jwks_uri"})
	next, res := model.Update(ps, m.store, []model.Change{{Key: remoteKey}, {Key: discKey}})
	if !res.Full || !slices.Contains(next.Rebuilt, model.IndexRequestAuthn) || next.PoliciesID() == ps.PoliciesID() {
		t.Errorf("fetched key sets did not rebuild the index: full %v, rebuilt %v", res.Full, next.Rebuilt)
	}
	if keys, ok, problem := next.JWKS(remote); !ok || keys != fetched || problem != "status 500" {
		t.Errorf("remote, last good kept: %q %v %q", keys, ok, problem)
	}
	if _, ok, problem := next.JWKS(discovered); ok || problem != "no jwks_uri" {
		t.Errorf("discovered: ok %v, problem %q", ok, problem)
	}
}
