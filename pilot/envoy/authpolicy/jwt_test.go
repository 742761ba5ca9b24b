package authpolicy

import (
	"slices"
	"testing"

	"github.com/sextantmesh/sextant/tests/rbactest"
)

// requestPrincipals and request.auth.* conditions match the verified token's claims in the jwt_authn
// metadata, as istiod's matchers do; without a valid token (no metadata) they never match.
func TestJWTClaimsAuthorize(t *testing.T) {
	p := rbacPolicies(t, `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: jwt}
spec:
  action: ALLOW
  rules:
  - from: [{source: {requestPrincipals: [https://idp.example.com/alice]}}]
    to: [{operation: {paths: [/exact]}}]
  - from: [{source: {requestPrincipals: ["*"]}}]
    to: [{operation: {paths: [/any]}}]
  - from: [{source: {requestPrincipals: ["*/bob"]}}]
    to: [{operation: {paths: [/anyissuer]}}]
  - from: [{source: {requestPrincipals: ["https://idp.example.com/*"]}}]
    to: [{operation: {paths: [/anysubject]}}]
  - from: [{source: {requestPrincipals: ["*", ], notRequestPrincipals: ["https://idp.example.com/mallory"]}}]
    to: [{operation: {paths: [/notmallory]}}]
  - to: [{operation: {paths: [/aud]}}]
    when: [{key: request.auth.audiences, values: [shop]}]
  - to: [{operation: {paths: [/azp]}}]
    when: [{key: request.auth.presenter, values: [web-*]}]
  - to: [{operation: {paths: [/group]}}]
    when: [{key: "request.auth.claims[groups]", values: [admins]}]
  - to: [{operation: {paths: [/nested]}}]
    when: [{key: "request.auth.claims[realm][role]", values: [owner]}]
  - to: [{operation: {paths: [/principal]}}]
    when: [{key: request.auth.principal, values: [https://idp.example.com/alice]}]
  - to: [{operation: {paths: [/scope]}}]
    when: [{key: "request.auth.claims[scope]", values: [write]}]
`)
	rules, notes := httpRules(t, p, "")
	if len(notes) > 0 {
		t.Errorf("notes %v", notes)
	}
	alice := map[string]any{"iss": "https://idp.example.com", "sub": "alice", "aud": []any{"reviews", "shop"},
		"azp": "web-app", "groups": []any{"users", "admins"}, "realm": map[string]any{"role": "owner"}, "scope": []any{"read", "write"}}
	bob := map[string]any{"iss": "https://other.example.com", "sub": "bob", "aud": "shop", "groups": "admins",
		"realm": map[string]any{"role": "guest"}}
	mallory := map[string]any{"iss": "https://idp.example.com", "sub": "mallory", "scope": "read write"}
	for _, tc := range []struct {
		path string
		jwt  map[string]any
		want bool
	}{
		{"/exact", alice, true}, {"/exact", bob, false}, {"/exact", nil, false},
		{"/any", bob, true}, {"/any", nil, false},
		{"/anyissuer", bob, true}, {"/anyissuer", alice, false},
		{"/anysubject", alice, true}, {"/anysubject", mallory, true}, {"/anysubject", bob, false},
		{"/notmallory", alice, true}, {"/notmallory", mallory, false}, {"/notmallory", nil, false},
		{"/aud", alice, true}, {"/aud", bob, true}, {"/aud", mallory, false},
		{"/azp", alice, true}, {"/azp", bob, false},
		{"/group", alice, true}, {"/group", bob, true}, {"/group", mallory, false},
		{"/nested", alice, true}, {"/nested", bob, false},
		{"/principal", alice, true}, {"/principal", mallory, false},
		// A space-delimited claim is split into a list by the filter (normalize_payload_in_metadata);
		// the string as such never matches one of its words.
		{"/scope", alice, true}, {"/scope", mallory, false},
	} {
		if got := rbactest.Allowed(t, rules, req{Path: tc.path, JWT: tc.jwt}); got != tc.want {
			t.Errorf("%s with token %v: allowed %v, want %v", tc.path, tc.jwt, got, tc.want)
		}
	}
	// TCP cannot see a token: such an ALLOW rule allows nothing there.
	tcp, _ := tcpRules(t, p, "")
	if len(tcp) != 1 || len(tcp[0].Policies) != 0 {
		t.Errorf("tcp rules %v, want an ALLOW filter without policies", tcp)
	}
}

func TestJWTClaimKey(t *testing.T) {
	for key, want := range map[string][]string{
		"request.auth.claims[groups]":      {"groups"},
		"request.auth.claims[a][b][c]":     {"a", "b", "c"},
		"request.auth.claims[a[b]]":        {"a[b]"},
		"request.auth.claims[]":            nil,
		"request.auth.claims[a]b":          nil,
		"request.auth.claims":              nil,
		"request.auth.claims[https://x/y]": {"https://x/y"},
	} {
		got, ok := jwtClaimKey(key)
		if ok != (want != nil) || !slices.Equal(got, want) {
			t.Errorf("%s: %v %v, want %v", key, got, ok, want)
		}
	}
}
