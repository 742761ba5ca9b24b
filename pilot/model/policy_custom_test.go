package model_test

import (
	"strings"
	"testing"

	security "istio.io/api/security/v1beta1"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
)

func TestCustomProviderProblem(t *testing.T) {
	m := mesh.Default()
	if err := mesh.Parse([]byte(`
extensionProviders:
- {name: opa, envoyExtAuthzGrpc: {service: opa.authz.svc.cluster.local, port: 9191}}
- {name: tracing, zipkin: {service: zipkin.istio-system.svc.cluster.local, port: 9411}}
`), m); err != nil {
		t.Fatal(err)
	}
	policy := func(action security.AuthorizationPolicy_Action, provider string) *config.Config {
		ap := &security.AuthorizationPolicy{Action: action}
		if provider != "" {
			ap.ActionDetail = &security.AuthorizationPolicy_Provider{Provider: &security.AuthorizationPolicy_ExtensionProvider{Name: provider}}
		}
		return &config.Config{Key: config.Key{Kind: config.AuthorizationPolicy, Namespace: "shop", Name: "p"}, Spec: ap}
	}
	for _, tc := range []struct {
		c    *config.Config
		want string
	}{
		{policy(security.AuthorizationPolicy_CUSTOM, "opa"), ""},
		{policy(security.AuthorizationPolicy_ALLOW, ""), ""},
		{policy(security.AuthorizationPolicy_CUSTOM, "nope"), `provider "nope" is not defined`},
		{policy(security.AuthorizationPolicy_CUSTOM, "tracing"), `provider "tracing" is of kind "zipkin"`},
		{policy(security.AuthorizationPolicy_CUSTOM, ""), "names no provider"},
	} {
		got := model.CustomProviderProblem(tc.c, m)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%v: %q, want %q", tc.c.Spec, got, tc.want)
		}
	}
}
