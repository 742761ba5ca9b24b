package config

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// jwkMembers are the members a public JWK of each key type needs (RFC 7518 section 6), base64url-encoded:
// what Envoy's JWKS parser (jwt_verify_lib) reads.
var jwkMembers = map[string][]string{
	"RSA": {"n", "e"},
	"EC":  {"x", "y"},
	"oct": {"k"},
	"OKP": {"x"},
}

// ValidateJWKS checks that s is a JSON Web Key Set as Envoy's jwt_authn filter reads one: an object with a
// non-empty "keys" array whose keys each have a known "kty" and that type's members. A set Envoy would refuse
// is refused here, naming the key at fault.
func ValidateJWKS(s string) error {
	var set struct {
		Keys *[]map[string]any `json:"keys"`
	}
	if err := json.Unmarshal([]byte(s), &set); err != nil {
		return fmt.Errorf("not a JSON Web Key Set: %v", err)
	}
	if set.Keys == nil {
		return fmt.Errorf(`not a JSON Web Key Set: no "keys" array`)
	}
	if len(*set.Keys) == 0 {
		return fmt.Errorf("the key set holds no key")
	}
	for i, k := range *set.Keys {
		kty, _ := k["kty"].(string)
		members, known := jwkMembers[kty]
		if !known {
			return fmt.Errorf(`keys[%d]: kty %q is not one of RSA, EC, oct, OKP`, i, kty)
		}
		if kty == "EC" || kty == "OKP" {
			if crv, _ := k["crv"].(string); crv == "" {
				return fmt.Errorf("keys[%d]: crv is required for kty %s", i, kty)
			}
		}
		for _, m := range members {
			v, _ := k[m].(string)
			if v == "" {
				return fmt.Errorf("keys[%d]: %s is required for kty %s", i, m, kty)
			}
			if _, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(v, "=")); err != nil {
				return fmt.Errorf("keys[%d]: %s is not base64url", i, m)
			}
		}
	}
	return nil
}

// FetchedKeySet is the Spec of a FetchedJWKS object: the key set behind one jwksUri (or behind an issuer's
// OpenID discovery, for a rule without jwksUri), as last fetched.
type FetchedKeySet struct {
	// Issuer is set for a key set found through the issuer's OpenID discovery; URI is then the jwks_uri
	// discovery named (empty until it did).
	Issuer string
	URI    string
	// JWKS is the last key set fetched and validated; empty while none ever was.
	JWKS string
	// FetchedAt is when JWKS was fetched.
	FetchedAt time.Time
	// Error says why the latest fetch failed; empty after a success. JWKS is then the last good set, if any.
	Error string
}

// FetchedJWKSKey is the key of the FetchedJWKS object for a rule's jwksUri, or, without one, for its
// issuer's OpenID discovery.
func FetchedJWKSKey(issuer, jwksURI string) Key {
	if jwksURI != "" {
		return Key{Kind: FetchedJWKS, Name: jwksURI}
	}
	return Key{Kind: FetchedJWKS, Name: "openid-discovery:" + issuer}
}
