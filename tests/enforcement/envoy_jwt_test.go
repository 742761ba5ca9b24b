package enforcement

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
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

// envoyRequestAuthn is a RequestAuthentication for the frontend trusting the issuer, its keys given by
// keys: `jwks: ...` inline or `jwksUri: ...`.
func envoyRequestAuthn(keys string) string {
	return `
---
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: {name: jwt, namespace: shop}
spec:
  selector: {matchLabels: {app: frontend}}
  jwtRules:
  - issuer: ` + envoyIssuer + `
    ` + keys + `
`
}

func envoyInlineJWKS(jwks string) string {
	b, _ := json.Marshal(jwks)
	return "jwks: " + string(b)
}

// envoyServeJWKS serves the key set on loopback, counting the fetches.
func envoyServeJWKS(t *testing.T, jwks string, fetches *atomic.Int32) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(jwks))
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/jwks.json"
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
	var fetches atomic.Int32
	served := "jwksUri: " + envoyServeJWKS(t, key.jwks(), &fetches)
	unreachable := "jwksUri: http://127.0.0.1:" + strconv.Itoa(envoyDeadPort(t)) + "/jwks.json"
	for _, tc := range []struct {
		name     string
		keys     string
		policies string
		want     map[string]int // token → HTTP status the request gets, 0 for forwarded
	}{
		{"JWKS on loopback, requestPrincipals required", served, requireAlice, map[string]int{
			"valid": 0, "expired": 401, "wrong issuer": 401, "wrong key": 401, "other subject": 403, "no token": 403}},
		{"JWKS on loopback, authentication only", served, "", map[string]int{
			"valid": 0, "expired": 401, "wrong issuer": 401, "wrong key": 401, "other subject": 0, "no token": 0}},
		{"inline JWKS, requestPrincipals required", envoyInlineJWKS(key.jwks()), requireAlice, map[string]int{
			"valid": 0, "expired": 401, "wrong issuer": 401, "wrong key": 401, "other subject": 403, "no token": 403}},
		// Keys that cannot be fetched reject every token of the issuer, as istiod does.
		{"JWKS unreachable", unreachable, requireAlice, map[string]int{"valid": 401, "no token": 403}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := envoyProxy(t, envoyRequestAuthn(tc.keys)+tc.policies, "", envoyDeadPort(t))
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
	if fetches.Load() == 0 {
		t.Error("the key set on loopback was never fetched")
	}
}
