package envoymodel

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"strings"
	"testing"
	"time"
)

// signer makes RS256 tokens with one key, published as a JWKS with kid "k1".
type signer struct {
	key *rsa.PrivateKey
}

func newSigner(t *testing.T) *signer {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return &signer{key: k}
}

func (s *signer) jwks() string {
	b, _ := json.Marshal(map[string]any{"keys": []map[string]string{{
		"kty": "RSA", "kid": "k1", "alg": "RS256",
		"n": base64.RawURLEncoding.EncodeToString(s.key.N.Bytes()),
		"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(s.key.E)).Bytes()),
	}}})
	return string(b)
}

func (s *signer) token(t *testing.T, claims map[string]any) string {
	t.Helper()
	h, _ := json.Marshal(map[string]string{"alg": "RS256", "kid": "k1", "typ": "JWT"})
	p, _ := json.Marshal(claims)
	in := base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(p)
	sum := sha256.Sum256([]byte(in))
	sig, err := rsa.SignPKCS1v15(rand.Reader, s.key, crypto.SHA256, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return in + "." + base64.RawURLEncoding.EncodeToString(sig)
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// jwtFilterConfig is a jwt_authn filter with provider "p" (issuer https://issuer.example, audience
// "shop") and the given extra provider fields and rules.
func jwtFilterConfig(jwks, providerExtra, rules string) string {
	return `{"name": "envoy.filters.http.jwt_authn",
	  "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication",
	  "providers": {"p": {"issuer": "https://issuer.example", "audiences": ["shop"], "payload_in_metadata": "payload",
	    ` + providerExtra + `
	    "local_jwks": {"inline_string": ` + jsonString(jwks) + `}}},
	  "rules": ` + rules + `}}`
}

// Istio's requirement for one rule: the provider, or no token at all.
const providerOrMissing = `[{"match": {"prefix": "/"}, "requires": {"requires_any": {"requirements": [{"provider_name": "p"}, ` +
	`{"allow_missing": {}}]}}}]`

func TestJWTAuthn(t *testing.T) {
	sg, other := newSigner(t), newSigner(t)
	now := time.Unix(1_800_000_000, 0)
	claims := func(over map[string]any) map[string]any {
		c := map[string]any{"iss": "https://issuer.example", "sub": "alice", "aud": "shop",
			"exp": now.Add(time.Hour).Unix(), "scope": "read write"}
		for k, v := range over {
			if v == nil {
				delete(c, k)
			} else {
				c[k] = v
			}
		}
		return c
	}
	bearer := func(tok string) map[string][]string { return map[string][]string{"authorization": {"Bearer " + tok}} }
	required := `[{"match": {"prefix": "/"}, "requires": {"provider_name": "p"}}]`
	for _, tc := range []struct {
		name, extra, rules string
		headers            map[string][]string
		path               string
		status             int
	}{
		{"valid token", "", providerOrMissing, bearer(sg.token(t, claims(nil))), "/", 0},
		{"no token, allow_missing", "", providerOrMissing, nil, "/", 0},
		{"no token, provider required", "", required, nil, "/", 401},
		{"expired", "", providerOrMissing, bearer(sg.token(t, claims(map[string]any{"exp": now.Add(-2 * time.Minute).Unix()}))), "/", 401},
		{"expired within the clock skew", "", providerOrMissing,
			bearer(sg.token(t, claims(map[string]any{"exp": now.Add(-30 * time.Second).Unix()}))), "/", 0},
		{"not yet valid", "", providerOrMissing, bearer(sg.token(t, claims(map[string]any{"nbf": now.Add(5 * time.Minute).Unix()}))), "/", 401},
		{"wrong issuer is not a missing token", "", providerOrMissing,
			bearer(sg.token(t, claims(map[string]any{"iss": "https://evil.example"}))), "/", 401},
		{"signed by another key", "", providerOrMissing, bearer(other.token(t, claims(nil))), "/", 401},
		{"audience not allowed", "", providerOrMissing, bearer(sg.token(t, claims(map[string]any{"aud": "bank"}))), "/", 403},
		{"garbage token", "", providerOrMissing, bearer("not-a-jwt"), "/", 401},
		{"default location: access_token param", "", required, nil, "/?access_token=" + sg.token(t, claims(nil)), 0},
		{"custom header with prefix", `"from_headers": [{"name": "x-jwt", "value_prefix": "Token "}],`, required,
			map[string][]string{"x-jwt": {"Token " + sg.token(t, claims(nil))}}, "/", 0},
		{"custom location only: the Authorization header is not read", `"from_headers": [{"name": "x-jwt"}],`, required,
			bearer(sg.token(t, claims(nil))), "/", 401},
		{"cookie", `"from_cookies": ["session"],`, required, map[string][]string{"cookie": {"a=b; session=" + sg.token(t, claims(nil))}}, "/", 0},
		{"CORS preflight without bypass", "", required,
			map[string][]string{"origin": {"https://a"}, "access-control-request-method": {"GET"}}, "/", 401},
		{"rule does not match: no check", "", `[{"match": {"prefix": "/api"}, "requires": {"provider_name": "p"}}]`, nil, "/", 0},
		{"allow_missing_or_failed lets a bad token by", "", `[{"match": {"prefix": "/"}, "requires": {"allow_missing_or_failed": {}}}]`,
			bearer("x.y.z"), "/", 0},
		{"requires_all needs each", `"forward": true,`,
			`[{"match": {"prefix": "/"}, "requires": {"requires_all": {"requirements": [{"provider_name": "p"}, ` +
				`{"provider_and_audiences": {"provider_name": "p", "audiences": ["bank"]}}]}}}]`,
			bearer(sg.token(t, claims(nil))), "/", 403},
		// Without forward the first verifier removes the token, so the second finds none.
		{"requires_all after the token was removed", "",
			`[{"match": {"prefix": "/"}, "requires": {"requires_all": {"requirements": [{"provider_name": "p"}, {"provider_name": "p"}]}}}]`,
			bearer(sg.token(t, claims(nil))), "/", 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := inbound(t, "", jwtFilterConfig(sg.jwks(), tc.extra, tc.rules))
			p.Now = func() time.Time { return now }
			res := eval(t, p, Request{Path: tc.path, Headers: tc.headers})
			if res.Status != tc.status || res.Allowed() != (tc.status == 0) {
				t.Errorf("got %s, want status %d", res, tc.status)
			}
		})
	}
}

// A verified token's payload lands in the filter's metadata under payload_in_metadata, with the
// space-delimited claims as lists; RBAC can then match it.
func TestJWTPayloadMetadataAndRBAC(t *testing.T) {
	sg := newSigner(t)
	now := time.Unix(1_800_000_000, 0)
	jwt := jwtFilterConfig(sg.jwks(),
		`"normalize_payload_in_metadata": {"space_delimited_claims": ["scope"]}, "forward_payload_header": "x-payload",`, providerOrMissing)
	rbac := rbacFilter(`"rules": {"action": "ALLOW", "policies": {"alice": {"permissions": [{"any": true}],
	  "principals": [{"and_ids": {"ids": [
	  {"metadata": {"filter": "envoy.filters.http.jwt_authn", "path": [{"key": "payload"}, {"key": "iss"}],
	    "value": {"string_match": {"exact": "https://issuer.example"}}}},
	  {"metadata": {"filter": "envoy.filters.http.jwt_authn", "path": [{"key": "payload"}, {"key": "scope"}],
	    "value": {"list_match": {"one_of": {"string_match": {"exact": "write"}}}}}}]}}]}}}`)
	p := inbound(t, "", jwt, rbac)
	p.Now = func() time.Time { return now }
	tok := sg.token(t, map[string]any{"iss": "https://issuer.example", "sub": "alice", "aud": "shop",
		"exp": now.Add(time.Hour).Unix(), "scope": "read write"})
	res := eval(t, p, Request{Headers: map[string][]string{"authorization": {"Bearer " + tok}, "x-payload": {"forged"}}})
	wantAllowed(t, res, true)
	payload := res.MetadataValue(JWTNamespace, "payload").GetStructValue()
	if payload.GetFields()["sub"].GetStringValue() != "alice" || len(payload.GetFields()["scope"].GetListValue().GetValues()) != 2 {
		t.Errorf("payload metadata %v", payload)
	}
	// Without a token the request is let through by jwt_authn and denied by RBAC.
	res = eval(t, p, Request{})
	if res.Status != 403 || !strings.Contains(res.By, "rbac") {
		t.Errorf("no token: %s", res)
	}
}

func TestJWTBypassCORSPreflight(t *testing.T) {
	sg := newSigner(t)
	cfg := strings.Replace(jwtFilterConfig(sg.jwks(), "", `[{"match": {"prefix": "/"}, "requires": {"provider_name": "p"}}]`),
		`"rules":`, `"bypass_cors_preflight": true, "rules":`, 1)
	p := inbound(t, "", cfg)
	preflight := map[string][]string{"origin": {"https://a"}, "access-control-request-method": {"GET"}}
	wantAllowed(t, eval(t, p, Request{Method: "OPTIONS", Headers: preflight}), true)
	wantAllowed(t, eval(t, p, Request{Method: "GET", Headers: preflight}), false)
	wantAllowed(t, eval(t, p, Request{Method: "OPTIONS"}), false)
}
