package model_test

import (
	"testing"

	networking "istio.io/api/networking/v1alpha3"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
)

// A DestinationRule with a workloadSelector applies only to the selected workloads of its namespace, ahead
// of the rule without selector; it is never exported, and when only selector rules name the host in the
// proxy's namespace and none selects the proxy, no rule applies (istiod does not look further).
func TestDestinationRuleWorkloadSelector(t *testing.T) {
	m := newMesh(t)
	m.service("shop", "reviews", "10.0.0.1", nil, nil, httpPort(80))
	m.service("shop", "ratings", "10.0.0.2", nil, nil, httpPort(80))
	selected := func(name, host string, labels map[string]string, subset string) {
		m.put(config.DestinationRule, "shop", name, nil, &networking.DestinationRule{Host: host,
			WorkloadSelector: &typev1beta1.WorkloadSelector{MatchLabels: labels},
			Subsets:          []*networking.Subset{{Name: subset, Labels: map[string]string{"version": subset}}}})
	}
	m.destinationRule("shop", "all", "reviews", nil, "all")
	selected("for-productpage", "reviews", map[string]string{"app": "productpage"}, "pp")
	selected("ratings-pp", "ratings", map[string]string{"app": "productpage"}, "pp")
	m.destinationRule("istio-system", "root", "*.svc.cluster.local", nil, "root")
	ps := model.Build(m.store, mesh.Default())
	reviews := ps.ServiceForHostname("shop", "reviews.shop.svc.cluster.local")
	ratings := ps.ServiceForHostname("shop", "ratings.shop.svc.cluster.local")
	productpage, sleep := map[string]string{"app": "productpage", "version": "v1"}, map[string]string{"app": "sleep"}

	subset := func(dr *model.DestinationRule) string {
		if dr == nil {
			return "<none>"
		}
		return dr.Spec.Subsets[0].Name
	}
	cases := []struct {
		ns     string
		labels map[string]string
		svc    *model.Service
		want   string
	}{
		{"shop", productpage, reviews, "pp"},   // selected: the selector rule wins
		{"shop", sleep, reviews, "all"},        // not selected: the rule without selector
		{"shop", nil, reviews, "all"},          // no labels
		{"other", productpage, reviews, "all"}, // another namespace's workload: the exported rule only
		{"shop", sleep, ratings, "<none>"},     // only a selector rule in the namespace, not selecting: none
		{"shop", productpage, ratings, "pp"},
		{"other", productpage, ratings, "root"}, // the selector rule is not exported
	}
	for _, c := range cases {
		if got := subset(ps.DestinationRuleFor(c.ns, c.labels, c.svc)); got != c.want {
			t.Errorf("proxy %s %v, host %s: rule %s, want %s", c.ns, c.labels, c.svc.Hostname, got, c.want)
		}
	}
	if ps.DestinationRuleSelection("shop", sleep) != "" || ps.DestinationRuleSelection("other", productpage) != "" {
		t.Error("a selection for proxies no selector selects")
	}
	if a, b := ps.DestinationRuleSelection("shop", productpage),
		ps.DestinationRuleSelection("shop", map[string]string{"app": "productpage"}); a == "" || a != b {
		t.Errorf("selection %q and %q: proxies selected by the same rules must share it", a, b)
	}
}
