package enforcement

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"testing"
	"time"

	"github.com/sextantmesh/sextant/tests/envoymodel"
)

const envoyIssuer = "https://issuer.example"

// envoyJWTKey signs RS256 tokens and publishes its public key as a JWKS.
type envoyJWTKey struct{ key *rsa.PrivateKey }

func envoyNewJWTKey(t *testing.T) *envoyJWTKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return &envoyJWTKey{key: k}
}

func (k *envoyJWTKey) jwks() string {
	b, _ := json.Marshal(map[string]any{"keys": []map[string]string{{"kty": "RSA", "kid": "k1", "alg": "RS256", "use": "sig",
		"n": base64.RawURLEncoding.EncodeToString(k.key.N.Bytes()),
		"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(k.key.E)).Bytes())}}})
	return string(b)
}

func (k *envoyJWTKey) token(t *testing.T, claims map[string]any) string {
	t.Helper()
	h, _ := json.Marshal(map[string]string{"alg": "RS256", "kid": "k1", "typ": "JWT"})
	p, _ := json.Marshal(claims)
	in := base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(p)
	sum := sha256.Sum256([]byte(in))
	sig, err := rsa.SignPKCS1v15(rand.Reader, k.key, crypto.SHA256, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return in + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// envoyRequestAuthn is a RequestAuthentication for the frontend trusting the issuer with the key set.
func envoyRequestAuthn(jwks string) string {
	b, _ := json.Marshal(jwks)
	return `
---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: shop}
spec:
  selector: {matchLabels: {app: frontend}}
  jwtRules:
  - issuer: ` + envoyIssuer + `
    jwks: ` + string(b) + `
`
}

// JWT: with a RequestAuthentication, a request carrying an invalid token is rejected (401) and one with
// none passes authentication; an AuthorizationPolicy with requestPrincipals then admits only requests
// with a valid token of a matching principal.
func TestEnvoyJWT(t *testing.T) {
	key, otherKey := envoyNewJWTKey(t), envoyNewJWTKey(t)
	now := time.Now()
	claims := func(iss, sub string, exp time.Time) map[string]any {
		return map[string]any{"iss": iss, "sub": sub, "exp": exp.Unix(), "iat": now.Unix()}
	}
	valid := key.token(t, claims(envoyIssuer, "alice", now.Add(time.Hour)))
	tokens := map[string]string{
		"valid":         valid,
		"expired":       key.token(t, claims(envoyIssuer, "alice", now.Add(-time.Hour))),
		"wrong issuer":  key.token(t, claims("https://other.example", "alice", now.Add(time.Hour))),
		"wrong key":     otherKey.token(t, claims(envoyIssuer, "alice", now.Add(time.Hour))),
		"other subject": key.token(t, claims(envoyIssuer, "bob", now.Add(time.Hour))),
		"no token":      "",
	}
	requireAlice := envoyPolicy("alice-only", "ALLOW", "", `[{from: [{source: {requestPrincipals: ["`+envoyIssuer+`/alice"]}}]}]`)
	for _, tc := range []struct {
		name     string
		policies string
		want     map[string]int // token → HTTP status the request gets, 0 for forwarded
	}{
		{"requestPrincipals required", requireAlice, map[string]int{
			"valid": 0, "expired": 401, "wrong issuer": 401, "wrong key": 401, "other subject": 403, "no token": 403}},
		{"authentication only", "", map[string]int{
			"valid": 0, "expired": 401, "wrong issuer": 401, "wrong key": 401, "other subject": 0, "no token": 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := envoyProxy(t, envoyRequestAuthn(key.jwks())+tc.policies, "", envoyDeadPort(t))
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
					if status == 0 && tokens[name] != "" {
						if sub := res.MetadataValue(envoymodel.JWTNamespace, "payload").GetStructValue().GetFields()["sub"].GetStringValue(); sub == "" {
							t.Errorf("no payload metadata for a verified token: %v", res.Metadata)
						}
					}
				})
			}
		})
	}
}
