package config_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/sextantmesh/sextant/pilot/config"
)

const requestAuthnHead = "apiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {name: jwt, namespace: shop}\nspec:\n"

const validJWKS = `{"keys":[{"kty":"RSA","e":"AQAB",` +
	`"n":"zHwSpYYsrn0DYO9rIRAYUN59BhccFVwkVuerVymGL_jYaF4HZURe4VNJku6xoLPHXZBH1ZGx7A4rrlKWkZEb6A4"}]}`

// What istiod's validation (and Envoy's jwt_authn filter) refuses is refused, naming the object and field.
func TestRequestAuthenticationErrors(t *testing.T) {
	for _, tc := range []struct{ spec, field, message string }{
		{"  jwtRules: [{audiences: [a]}]\n", "spec.jwtRules[0].issuer", "required unless jwksUri"},
		{"  jwtRules: [{issuer: i, audiences: ['']}]\n", "spec.jwtRules[0].audiences[0]", "empty"},
		{"  jwtRules: [{issuer: i, jwksUri: 'ftp://keys.example.com/k'}]\n", "spec.jwtRules[0].jwksUri", `scheme "ftp"`},
		{"  jwtRules: [{issuer: i, jwksUri: 'https:///keys'}]\n", "spec.jwtRules[0].jwksUri", "no host"},
		{"  jwtRules: [{issuer: i, jwksUri: 'https://k.example.com:99999/keys'}]\n", "spec.jwtRules[0].jwksUri", "not a port"},
		{"  jwtRules: [{issuer: i, jwks: 'not json'}]\n", "spec.jwtRules[0].jwks", "not a JSON Web Key Set"},
		{"  jwtRules: [{issuer: i, jwks: '{\"keys\": []}'}]\n", "spec.jwtRules[0].jwks", "no key"},
		{"  jwtRules: [{issuer: i, jwks: '{\"keys\": [{\"kty\": \"RSA\", \"e\": \"AQAB\"}]}'}]\n", "spec.jwtRules[0].jwks",
			"keys[0]: n is required"},
		{"  jwtRules: [{issuer: i, jwks: '{\"keys\": [{\"kty\": \"XYZ\"}]}'}]\n", "spec.jwtRules[0].jwks", `kty "XYZ"`},
		{"  jwtRules: [{issuer: i, jwks: '{\"keys\": [{\"kty\": \"EC\", \"x\": \"AA\", \"y\": \"AA\"}]}'}]\n",
			"spec.jwtRules[0].jwks", "crv is required"},
		{"  jwtRules: [{issuer: i, jwks: '{\"keys\": [{\"kty\": \"oct\", \"k\": \"#!\"}]}'}]\n", "spec.jwtRules[0].jwks", "not base64url"},
		{"  jwtRules: [{issuer: i, fromHeaders: [{prefix: 'Bearer '}]}]\n", "spec.jwtRules[0].fromHeaders[0].name", "required"},
		{"  jwtRules: [{issuer: i, fromParams: ['']}]\n", "spec.jwtRules[0].fromParams[0]", "empty"},
		{"  jwtRules: [{issuer: i, fromCookies: ['']}]\n", "spec.jwtRules[0].fromCookies[0]", "empty"},
		{"  jwtRules: [{issuer: i, outputPayloadToHeader: 'x payload'}]\n", "spec.jwtRules[0].outputPayloadToHeader", "not a valid header name"},
		{"  jwtRules: [{issuer: i, outputClaimToHeaders: [{header: x-sub}]}]\n", "spec.jwtRules[0].outputClaimToHeaders[0].claim", "required"},
		{"  jwtRules: [{issuer: i, outputClaimToHeaders: [{header: 'x:sub', claim: sub}]}]\n", "spec.jwtRules[0].outputClaimToHeaders[0].header",
			"not a valid header name"},
		{"  jwtRules: [{issuer: i, timeout: 0s}]\n", "spec.jwtRules[0].timeout", "positive"},
		{"  jwtRules: [{issuer: i}, {issuer: j, spaceDelimitedClaims: ['']}]\n", "spec.jwtRules[1].spaceDelimitedClaims[0]", "empty"},
		{"  selector: {matchLabels: {app: a}}\n  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]\n" +
			"  jwtRules: [{issuer: i}]\n",
			"spec.targetRefs", "only one of selector"},
		{"  targetRefs: [{group: apps, kind: Deployment, name: d}]\n  jwtRules: [{issuer: i}]\n", "spec.targetRefs[0].kind", "apps/Deployment"},
	} {
		_, err := parseOne(t, requestAuthnHead+tc.spec)
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Field != tc.field || !strings.Contains(ce.Message, tc.message) ||
			ce.Kind != "RequestAuthentication" || ce.Name != "jwt" || ce.Namespace != "shop" {
			t.Errorf("spec %q: error %v, want field %s with %q", tc.spec, err, tc.field, tc.message)
		}
	}
}

func TestRequestAuthenticationValid(t *testing.T) {
	for _, spec := range []string{
		"  jwtRules: [{issuer: https://idp.example.com}]\n",                   // keys by OpenID discovery
		"  jwtRules: [{jwksUri: 'https://idp.example.com:8443/keys'}]\n",      // any issuer, as istiod allows
		"  jwtRules: [{issuer: i, jwks: '" + validJWKS + "', timeout: 3s}]\n", // inline keys
		"  jwtRules: [{issuer: i, fromHeaders: [{name: x-jwt, prefix: 'Bearer '}], fromParams: [t], fromCookies: [c], outputPayloadToHeader: " +
			"x-payload, outputClaimToHeaders: [{header: x-sub, claim: sub}], presence: REQUIRED}]\n",
		"  targetRef: {group: gateway.networking.k8s.io, kind: Gateway, name: gw}\n  jwtRules: [{issuer: i}]\n",
		"  selector: {matchLabels: {app: a}}\n",
	} {
		if _, err := parseOne(t, requestAuthnHead+spec); err != nil {
			t.Errorf("spec %q: %v", spec, err)
		}
	}
}

// A targetRef to a waypoint's target loads with a warning naming it, as for AuthorizationPolicy.
func TestRequestAuthenticationTargetRefWarnings(t *testing.T) {
	c, err := parseOne(t, requestAuthnHead+
		"  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}, {kind: Service, name: reviews}]\n"+
		"  jwtRules: [{issuer: i}]\n")
	if err != nil {
		t.Fatal(err)
	}
	if got := warningFields(config.Warnings(c)); !slices.Equal(got, []string{"spec.targetRefs[1]"}) {
		t.Errorf("warnings %v", got)
	}
}
