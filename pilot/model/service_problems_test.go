package model_test

import (
	"fmt"
	"strings"
	"testing"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
)

// ServiceEntries of one namespace that name the same host are served as the oldest alone, where istiod
// merges their ports: each younger one is reported, naming the older one and the ports left out. The same
// host in another namespace is no conflict.
func TestServiceHostProblems(t *testing.T) {
	m := newMesh(t)
	entry := func(ns, name string, port uint32, proto string) {
		m.put(config.ServiceEntry, ns, name, nil, &networking.ServiceEntry{Hosts: []string{"api.example.com"},
			Location: networking.ServiceEntry_MESH_EXTERNAL, Resolution: networking.ServiceEntry_DNS,
			Ports: []*networking.ServicePort{{Number: port, Name: strings.ToLower(proto), Protocol: proto}}})
	}
	entry("default", "api-https", 443, "TLS")
	entry("default", "api-http", 80, "HTTP")
	entry("default", "api-https-again", 443, "TLS")
	entry("other", "api-http", 80, "HTTP")
	ps := model.Build(m.store, mesh.Default())
	got := ps.ServiceHostProblems()
	if len(got) != 2 {
		t.Fatalf("%d warnings, want 2 (default/api-http and default/api-https-again): %v", len(got), got)
	}
	for i, want := range []struct{ name, says string }{
		{"api-http", "port(s) 80 are not served"},
		{"api-https-again", "its ports, resolution and endpoints are not served"},
	} {
		w := got[i]
		if !w.Warning || w.Namespace != "default" || w.Name != want.name || w.Field != "spec.hosts" ||
			!strings.Contains(w.Message, "ServiceEntry api-https,") || !strings.Contains(w.Message, want.says) {
			t.Errorf("warning %d: %+v, want default/%s naming api-https and saying %q", i, w, want.name, want.says)
		}
	}
}

// When two ServiceEntries of one namespace name the same host, the key's endpoints are the served (oldest)
// entry's, in a full build and through changes: before, the younger entry's endpoints replaced the older's
// (its STATIC cluster went empty) and deleting the younger one deleted the older's endpoints.
func TestSharedHostEndpointsAreTheServedEntrys(t *testing.T) {
	m := newMesh(t)
	entry := func(name string, port uint32, address string) *config.Config {
		return m.put(config.ServiceEntry, "default", name, nil, &networking.ServiceEntry{Hosts: []string{"db.internal"},
			Addresses: []string{"240.0.0.10"}, Location: networking.ServiceEntry_MESH_EXTERNAL, Resolution: networking.ServiceEntry_STATIC,
			Ports:     []*networking.ServicePort{{Number: port, Name: fmt.Sprintf("tcp-%d", port), Protocol: "TCP"}},
			Endpoints: []*networking.WorkloadEntry{{Address: address}}})
	}
	const key = "default/db.internal"
	addressOn := func(ps *model.PushContext, port uint32) string {
		se := ps.Endpoints(key)
		if se == nil || len(se.ByPort[port]) != 1 {
			return "none"
		}
		return se.ByPort[port][0].Address
	}
	a := entry("db-a", 5432, "10.9.0.1")
	ps := model.Build(m.store, mesh.Default())
	b := entry("db-b", 6432, "10.9.0.2")
	if got := addressOn(model.Build(m.store, mesh.Default()), 5432); got != "10.9.0.1" {
		t.Errorf("full build: port 5432 endpoint %s, want db-a's 10.9.0.1", got)
	}
	ps, _ = model.Update(ps, m.store, []model.Change{{Key: b.Key, New: b}})
	if got := addressOn(ps, 5432); got != "10.9.0.1" {
		t.Errorf("db-b added: port 5432 endpoint %s, want db-a's 10.9.0.1", got)
	}
	m.del(config.ServiceEntry, "default", "db-b")
	ps, _ = model.Update(ps, m.store, []model.Change{{Key: b.Key, Old: b}})
	if got := addressOn(ps, 5432); got != "10.9.0.1" {
		t.Errorf("db-b deleted: port 5432 endpoint %s, want db-a's 10.9.0.1", got)
	}
	b = entry("db-b", 6432, "10.9.0.2")
	ps, _ = model.Update(ps, m.store, []model.Change{{Key: b.Key, New: b}})
	m.del(config.ServiceEntry, "default", "db-a")
	ps, _ = model.Update(ps, m.store, []model.Change{{Key: a.Key, Old: a}})
	if got := addressOn(ps, 6432); got != "10.9.0.2" {
		t.Errorf("db-a deleted: port 6432 endpoint %s, want db-b's 10.9.0.2, now the one served", got)
	}
}
