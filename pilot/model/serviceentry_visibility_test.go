package model_test

import (
	"testing"

	meshconfig "istio.io/api/mesh/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
)

// The mesh config's serviceEntryVisibility narrows ServiceEntries by their namespace's labels, and a
// namespace relabelled later moves its entries (the incremental update converts them again).
func TestServiceEntryVisibility(t *testing.T) {
	m := newMesh(t)
	m.namespace("team-a", map[string]string{"visibility": "namespace"})
	m.namespace("team-b", map[string]string{"visibility": "none"})
	m.namespace("team-c", nil)
	for _, ns := range []string{"team-a", "team-b", "team-c"} {
		m.put(config.ServiceEntry, ns, "se", nil, &networking.ServiceEntry{Hosts: []string{ns + ".example.com"},
			Ports: []*networking.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}}, Resolution: networking.ServiceEntry_DNS})
	}
	mc := mesh.Default()
	rule := func(op, value string) []*meshconfig.ServiceEntryVisibility_MatchRule {
		return []*meshconfig.ServiceEntryVisibility_MatchRule{{Matcher: &meshconfig.ServiceEntryVisibility_MatchRule_NamespaceSelector{
			NamespaceSelector: &meshconfig.LabelSelector{MatchExpressions: []*meshconfig.LabelSelectorRequirement{
				{Key: "visibility", Operator: op, Values: []string{value}}}}}}}
	}
	mc.Spec.ServiceEntryVisibility = &meshconfig.ServiceEntryVisibility{ApplyToSidecars: true,
		DefaultVisibility: meshconfig.ServiceEntryVisibility_PUBLIC,
		Policies: []*meshconfig.ServiceEntryVisibility_Policy{
			{Visibility: meshconfig.ServiceEntryVisibility_NAMESPACE, MatchingRules: rule("In", "namespace")},
			{Visibility: meshconfig.ServiceEntryVisibility_NONE, MatchingRules: rule("In", "none")},
		}}
	ps := model.Build(m.store, mc)
	check := func(host, proxyNS string, want bool) {
		t.Helper()
		if got := ps.ServiceForHostname(proxyNS, host) != nil; got != want {
			t.Errorf("%s seen from %s = %v, want %v", host, proxyNS, got, want)
		}
	}
	check("team-a.example.com", "team-a", true)
	check("team-a.example.com", "default", false)
	check("team-b.example.com", "team-b", false)
	check("team-c.example.com", "default", true)

	m.namespace("team-c", map[string]string{"visibility": "none"})
	key := config.Key{Kind: config.Namespace, Name: "team-c"}
	ps, _ = model.Update(ps, m.store, []model.Change{{Key: key, New: m.store.Get(key)}})
	check("team-c.example.com", "default", false)
	check("team-c.example.com", "team-c", false)
	check("team-a.example.com", "team-a", true)

	// Without applyToSidecars the entries keep their exportTo.
	mc.Spec.ServiceEntryVisibility.ApplyToSidecars = false
	ps = model.Build(m.store, mc)
	check("team-a.example.com", "default", true)
	check("team-b.example.com", "default", true)
}
