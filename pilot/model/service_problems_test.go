package model_test

import (
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
