package model

import (
	"testing"

	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/store"
)

// These tests look inside the snapshot on purpose: the claim under test is that unchanged indexes are
// shared by pointer, which no public method can show.

func shareFixture(t *testing.T) (*store.Store, *PushContext) {
	st := store.New()
	put := func(kind config.Kind, ns, name string, spec any) {
		st.Upsert(store.LayerKube, &config.Config{Key: config.Key{Kind: kind, Namespace: ns, Name: name}, Spec: spec})
	}
	put(config.Service, "ns", "api", &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: "ns"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.1", Selector: map[string]string{"app": "api"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}})
	name, port, ready := "http", int32(8080), true
	put(config.EndpointSlice, "ns", "api-1",
		&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{discoveryv1.LabelServiceName: "api"}},
			AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.1.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}}})
	put(config.AuthorizationPolicy, "ns", "allow",
		&security.AuthorizationPolicy{Selector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "api"}}})
	return st, Build(st, mesh.Default())
}

func TestAuthorizationPolicyChangeSharesOtherIndexes(t *testing.T) {
	st, ps := shareFixture(t)
	key := config.Key{Kind: config.AuthorizationPolicy, Namespace: "ns", Name: "deny"}
	st.Upsert(store.LayerKube, &config.Config{Key: key, Spec: &security.AuthorizationPolicy{Action: security.AuthorizationPolicy_DENY}})
	next, res := Update(ps, st, []Change{{Key: key, New: st.Get(key)}})
	if !res.Full {
		t.Error("a policy change must push config")
	}
	if next.authorization == ps.authorization {
		t.Error("authorization index not rebuilt")
	}
	shared := map[string]bool{
		"services":         next.services == ps.services,
		"servicesBySource": next.servicesBySource == ps.servicesBySource,
		"endpoints":        next.endpoints == ps.endpoints,
		"workloads":        next.workloads == ps.workloads,
		"destinationRules": next.destinationRules == ps.destinationRules,
		"virtualServices":  next.virtualServices == ps.virtualServices,
		"sidecars":         next.sidecars == ps.sidecars,
		"peerAuthn":        next.peerAuthn == ps.peerAuthn,
		"sortedServices":   next.sortedServices == ps.sortedServices,
	}
	for name, same := range shared {
		if !same {
			t.Errorf("%s rebuilt by an AuthorizationPolicy change", name)
		}
	}
	if len(next.Rebuilt) != 1 || next.Rebuilt[0] != IndexAuthorization {
		t.Errorf("Rebuilt = %v", next.Rebuilt)
	}
	if got := next.AuthorizationPolicies("ns", map[string]string{"app": "api"}); len(got.Deny) != 1 || len(got.Allow) != 1 {
		t.Errorf("policies after change = %+v", got)
	}
}

func TestEndpointChangeRebuildsNothing(t *testing.T) {
	st, ps := shareFixture(t)
	key := config.Key{Kind: config.EndpointSlice, Namespace: "ns", Name: "api-1"}
	old := st.Get(key)
	s := old.Spec.(*discoveryv1.EndpointSlice).DeepCopy()
	s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.1.0.2"}})
	st.Upsert(store.LayerKube, &config.Config{Key: key, Spec: s})
	next, res := Update(ps, st, []Change{{Key: key, Old: old, New: st.Get(key)}})
	if res.Full || len(next.Rebuilt) != 0 {
		t.Fatalf("endpoint change: full=%v rebuilt=%v", res.Full, next.Rebuilt)
	}
	if next.endpoints == ps.endpoints {
		t.Error("endpoints not replaced")
	}
	if next.services != ps.services || next.authorization != ps.authorization || next.destinationRules != ps.destinationRules ||
		next.virtualServices != ps.virtualServices || next.sidecars != ps.sidecars || next.peerAuthn != ps.peerAuthn ||
		next.workloads != ps.workloads {
		t.Error("an endpoint change replaced an index it does not touch")
	}
}
