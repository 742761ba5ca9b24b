package enforcement

import (
	"encoding/json"
	"testing"
	"time"
)

// envoyJWTRules is a RequestAuthentication for the frontend with the rules given as YAML flow items.
func envoyJWTRules(rules ...string) string {
	out := "\n---\napiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {name: jwt-rules, namespace: shop}\n" +
		"spec:\n  selector: {matchLabels: {app: frontend}}\n  jwtRules:\n"
	for _, r := range rules {
		out += "  - " + r + "\n"
	}
	return out
}

func envoyJWKSValue(k *envoyJWTKey) string {
	b, _ := json.Marshal(k.jwks())
	return string(b)
}

// Keys Sextant could not fetch (here: a jwksUri on a host that does not resolve) make the rule reject every
// token, even one its issuer signed, as istiod's fake key set does; a request without a token still
// reaches authorization. Several rules: a token of any of their issuers passes; presence REQUIRED makes
// its token mandatory.
func TestEnvoyJWTProviders(t *testing.T) {
	keyA, keyB := envoyNewJWTKey(t), envoyNewJWTKey(t)
	const issuerB = "https://accounts.example"
	now := time.Now()
	token := func(k *envoyJWTKey, iss string) string {
		return k.token(t, map[string]any{"iss": iss, "sub": "alice", "exp": now.Add(time.Hour).Unix(), "iat": now.Unix()})
	}
	tokens := map[string]string{
		"issuer A":        token(keyA, envoyIssuer),
		"issuer B":        token(keyB, issuerB),
		"issuer B, key A": token(keyA, issuerB),
		"no token":        "",
	}
	for _, tc := range []struct {
		name  string
		rules []string
		want  map[string]int // token → HTTP status, 0 for forwarded
	}{
		{"keys not fetched", []string{"{issuer: " + envoyIssuer + ", jwksUri: 'https://keys.invalid/jwks'}"},
			map[string]int{"issuer A": 401, "issuer B": 401, "no token": 0}},
		{"two issuers", []string{"{issuer: " + envoyIssuer + ", jwks: " + envoyJWKSValue(keyA) + "}",
			"{issuer: " + issuerB + ", jwks: " + envoyJWKSValue(keyB) + "}"},
			map[string]int{"issuer A": 0, "issuer B": 0, "issuer B, key A": 401, "no token": 0}},
		{"one issuer required", []string{"{issuer: " + envoyIssuer + ", jwks: " + envoyJWKSValue(keyA) + ", presence: REQUIRED}"},
			map[string]int{"issuer A": 0, "issuer B": 401, "no token": 401}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := envoyProxy(t, envoyJWTRules(tc.rules...), "", envoyDeadPort(t))
			for name, status := range tc.want {
				t.Run(name, func(t *testing.T) {
					r := envoyRequest("GET", "/")
					if tok := tokens[name]; tok != "" {
						r.Headers = map[string][]string{"authorization": {"Bearer " + tok}}
					}
					res := envoyEvaluate(t, p, r)
					envoyWant(t, res, status == 0)
					if res.Status != status {
						t.Errorf("status %d, want %d", res.Status, status)
					}
				})
			}
		})
	}
}
