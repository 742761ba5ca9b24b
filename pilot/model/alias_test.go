package model_test

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/store"
)

func (m *meshFixture) externalName(ns, name, target string) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: target, Ports: []corev1.ServicePort{httpPort(80)}}}
	m.clock = m.clock.Add(1)
	m.store.Upsert(store.LayerKube, &config.Config{Key: config.Key{Kind: config.Service, Namespace: ns, Name: name},
		CreationTimestamp: m.clock, Source: m.source, Spec: svc})
}

// An ExternalName Service is an alias of the host it names, through other aliases, as istiod resolves them.
func TestExternalNameAliases(t *testing.T) {
	m := newMesh(t)
	m.service("a", "reviews", "10.0.0.1", nil, nil, httpPort(80))
	m.externalName("b", "direct", "reviews.a.svc.cluster.local")
	m.externalName("a", "chained", "direct.b.svc.cluster.local")
	m.externalName("a", "ext", "api.example.org")
	m.externalName("c", "loop1", "loop2.c.svc.cluster.local")
	m.externalName("c", "loop2", "loop1.c.svc.cluster.local")
	ps := model.Build(m.store, mesh.Default())

	alias := ps.ServiceForHostname("a", "direct.b.svc.cluster.local")
	if alias == nil || alias.Resolution != model.Alias || alias.AliasFor != "reviews.a.svc.cluster.local" {
		t.Fatalf("ExternalName Service: got %+v, want an alias of reviews", alias)
	}
	if eps := ps.EndpointsForPort(alias, 80, nil); len(eps) != 0 {
		t.Errorf("alias endpoints: got %d, want none (no DNS endpoint of the external name)", len(eps))
	}
	want := []string{"chained.a.svc.cluster.local", "direct.b.svc.cluster.local"}
	if got := ps.AliasesOf("reviews.a.svc.cluster.local"); !slices.Equal(got, want) {
		t.Errorf("aliases of reviews: got %v, want %v", got, want)
	}
	if got := ps.AliasesOf("api.example.org"); !slices.Equal(got, []string{"ext.a.svc.cluster.local"}) {
		t.Errorf("aliases of an external host: got %v", got)
	}
	for _, h := range []string{"loop1.c.svc.cluster.local", "loop2.c.svc.cluster.local", "direct.b.svc.cluster.local"} {
		if got := ps.AliasesOf(h); len(got) != 0 {
			t.Errorf("aliases of %s: got %v, want none", h, got)
		}
	}
}
