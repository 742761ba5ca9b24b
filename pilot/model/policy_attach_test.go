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

// Which proxies a policy with targetRefs reaches, as istiod's WorkloadPolicyMatcher decides for proxies that
// are not waypoints: the pods of the Gateway API Gateway it names in its own namespace, and nothing else.
func TestAuthorizationPolicyTargetRefs(t *testing.T) {
	m := newMesh(t)
	gw := func(name string) *typev1beta1.PolicyTargetReference {
		return &typev1beta1.PolicyTargetReference{Group: config.GatewayAPIGroup, Kind: "Gateway", Name: name}
	}
	put := func(ns, name string, ap *security.AuthorizationPolicy) {
		m.put(config.AuthorizationPolicy, ns, name, nil, ap)
	}
	put("shop", "gw-new", &security.AuthorizationPolicy{TargetRefs: []*typev1beta1.PolicyTargetReference{gw("edge")}})
	put("shop", "gw-legacy", &security.AuthorizationPolicy{TargetRef: gw("edge")})
	put("shop", "gw-second", &security.AuthorizationPolicy{TargetRefs: []*typev1beta1.PolicyTargetReference{gw("other"), gw("edge")}})
	put("shop", "waypoint", &security.AuthorizationPolicy{TargetRefs: []*typev1beta1.PolicyTargetReference{{Kind: "Service", Name: "edge"}}})
	put("istio-system", "root-gw", &security.AuthorizationPolicy{TargetRefs: []*typev1beta1.PolicyTargetReference{gw("edge")}})
	put("elsewhere", "gw-elsewhere", &security.AuthorizationPolicy{TargetRefs: []*typev1beta1.PolicyTargetReference{gw("edge")}})
	m.authz("shop", "ns-wide", nil, security.AuthorizationPolicy_ALLOW)
	m.authz("shop", "by-selector", map[string]string{"app": "edge"}, security.AuthorizationPolicy_ALLOW)
	ps := model.Build(m.store, mesh.Default())

	names := func(ns string, labels map[string]string) []string {
		var out []string
		for _, c := range ps.AuthorizationPolicies(ns, labels).Allow {
			out = append(out, c.Namespace+"/"+c.Name)
		}
		slices.Sort(out)
		return out
	}
	edge := map[string]string{config.GatewayNameLabel: "edge", "app": "edge"}
	for _, tc := range []struct {
		ns     string
		labels map[string]string
		want   []string
	}{
		// A sidecar: selector policies only, whatever its labels say besides.
		{"shop", map[string]string{"app": "edge"}, []string{"shop/by-selector", "shop/ns-wide"}},
		// The Gateway's pods: its three targetRef policies and, as in istiod by default, the selector ones;
		// not the one for a waypoint, nor those of the root or another namespace.
		{"shop", edge, []string{"shop/by-selector", "shop/gw-legacy", "shop/gw-new", "shop/gw-second", "shop/ns-wide"}},
		{"shop", map[string]string{config.GatewayNameLabel: "third"}, []string{"shop/ns-wide"}},
		// A Gateway named edge in another namespace gets only its own namespace's.
		{"elsewhere", edge, []string{"elsewhere/gw-elsewhere"}},
		// Root-namespace targetRef policies reach the root namespace's Gateway only.
		{"istio-system", edge, []string{"istio-system/root-gw"}},
	} {
		if got := names(tc.ns, tc.labels); !slices.Equal(got, tc.want) {
			t.Errorf("%s %v: policies %v, want %v", tc.ns, tc.labels, got, tc.want)
		}
	}
}
