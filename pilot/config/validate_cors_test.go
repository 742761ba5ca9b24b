package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sextantmesh/sextant/pilot/config"
)

const corsHead = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: web, namespace: shop}\nspec:\n" +
	"  hosts: [web]\n  http:\n  - route: [{destination: {host: web}}]\n    corsPolicy:\n"

// A corsPolicy istiod's validation refuses is refused, naming the VirtualService and the field, so Envoy is
// never sent a policy it rejects (a bad regex NACKs the whole route table).
func TestCORSPolicyErrors(t *testing.T) {
	for _, tc := range []struct{ policy, field, message string }{
		{"      allowOrigins: [{exact: \"\"}]\n", "spec.http[0].corsPolicy.allowOrigins[0].exact", "empty"},
		{"      allowOrigins: [{exact: https://a.example}, {prefix: \"\"}]\n", "spec.http[0].corsPolicy.allowOrigins[1].prefix", "empty"},
		{"      allowOrigins: [{regex: \"(\"}]\n", "spec.http[0].corsPolicy.allowOrigins[0].regex", "not an RE2 regex"},
		{"      allowOrigins: [{regex: \"a(?=b)\"}]\n", "spec.http[0].corsPolicy.allowOrigins[0].regex", "not an RE2 regex"},
		{"      allowOrigins: [{}]\n", "spec.http[0].corsPolicy.allowOrigins[0]", "one of exact, prefix or regex"},
		{"      allowMethods: [GET, FETCH]\n", "spec.http[0].corsPolicy.allowMethods[1]", `"FETCH" is not a supported HTTP method`},
		{"      allowMethods: [get]\n", "spec.http[0].corsPolicy.allowMethods[0]", "not a supported HTTP method"},
		{"      allowHeaders: [\"x custom\"]\n", "spec.http[0].corsPolicy.allowHeaders[0]", "not a valid header name"},
		{"      exposeHeaders: [x-ok, \"\"]\n", "spec.http[0].corsPolicy.exposeHeaders[1]", "not a valid header name"},
		{"      maxAge: 1.5s\n", "spec.http[0].corsPolicy.maxAge", "whole seconds"},
		{"      maxAge: 0s\n", "spec.http[0].corsPolicy.maxAge", "at least 1ms"},
	} {
		_, err := parseOne(t, corsHead+tc.policy)
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Field != tc.field || !strings.Contains(ce.Message, tc.message) || ce.Name != "web" {
			t.Errorf("policy %q: error %v, want VirtualService web, field %s with %q", tc.policy, err, tc.field, tc.message)
		}
	}
}

func TestCORSPolicyAccepted(t *testing.T) {
	c, err := parseOne(t, corsHead+`      allowOrigins: [{exact: "https://a.example"}, {prefix: "https://b."}, `+
		`{regex: "https://.*\\.c\\.example"}]
      allowMethods: [GET, POST, "*"]
      allowHeaders: [x-custom, "*"]
      exposeHeaders: [x-trace]
      maxAge: 24h
      allowCredentials: true
      unmatchedPreflights: IGNORE
`)
	if err != nil {
		t.Fatal(err)
	}
	if ws := config.Warnings(c); len(ws) != 0 {
		t.Errorf("an honoured corsPolicy warns: %v", warningFields(ws))
	}
}
