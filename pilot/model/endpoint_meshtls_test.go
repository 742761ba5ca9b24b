package model_test

import (
	"testing"

	networking "istio.io/api/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
)

// AllAcceptMeshTLS is istiod's test before it sends mesh mTLS to an original-destination cluster: the port
// has endpoints and none has tlsMode disabled (a WorkloadEntry with a service account or a tlsMode label
// other than disabled, a pod labelled tlsMode istio). A headless Service's pods count as a ServiceEntry's
// WorkloadEntries do; a port without endpoints, or with one pod without a sidecar, does not.
func TestAllAcceptMeshTLS(t *testing.T) {
	m := newMesh(t)
	m.put(config.ServiceEntry, "default", "vm", nil, &networking.ServiceEntry{
		Hosts: []string{"vm.mesh.internal"}, Location: networking.ServiceEntry_MESH_INTERNAL, Resolution: networking.ServiceEntry_NONE,
		Ports:            []*networking.ServicePort{{Number: 5000, Name: "tcp-db", Protocol: "TCP"}},
		WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "vm"}},
	})
	m.put(config.WorkloadEntry, "default", "vm-1", nil, &networking.WorkloadEntry{Address: "10.2.0.1", Labels: map[string]string{"app": "vm"}, ServiceAccount: "vm"})
	m.put(config.WorkloadEntry, "default", "vm-2", nil, &networking.WorkloadEntry{Address: "10.2.0.2",
		Labels: map[string]string{"app": "vm", model.LabelTLSMode: "istio"}})
	m.put(config.ServiceEntry, "default", "empty", nil, &networking.ServiceEntry{
		Hosts: []string{"empty.mesh.internal"}, Location: networking.ServiceEntry_MESH_INTERNAL, Resolution: networking.ServiceEntry_NONE,
		Ports:            []*networking.ServicePort{{Number: 5001, Name: "tcp-db", Protocol: "TCP"}},
		WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "nothing"}},
	})
	m.service("default", "db", corev1.ClusterIPNone, map[string]string{"app": "db"}, nil, corev1.ServicePort{Name: "tcp-db", Port: 5432})
	m.pod("default", "db-0", "10.1.0.1", "", true, map[string]string{"app": "db", model.LabelTLSMode: "istio"})
	m.pod("default", "db-1", "10.1.0.2", "", true, map[string]string{"app": "db"})
	m.slice("default", "db-x", "db", "tcp-db", 5432, sliceEndpoint{ip: "10.1.0.1", pod: "db-0"}, sliceEndpoint{ip: "10.1.0.2", pod: "db-1"})
	ps := model.Build(m.store, mesh.Default())

	for _, tc := range []struct {
		key  string
		port uint32
		want bool
	}{
		{"default/vm.mesh.internal", 5000, true},
		{"default/vm.mesh.internal", 5999, false}, // not a port of the service
		{"default/empty.mesh.internal", 5001, false},
		{"default/db.default.svc.cluster.local", 5432, false},
		{"default/none.mesh.internal", 5000, false}, // no such service
	} {
		if got := ps.Endpoints(tc.key).AllAcceptMeshTLS(tc.port); got != tc.want {
			t.Errorf("%s:%d: %v, want %v", tc.key, tc.port, got, tc.want)
		}
	}

	m.put(config.WorkloadEntry, "default", "vm-3", nil, &networking.WorkloadEntry{Address: "10.2.0.3",
		Labels: map[string]string{"app": "vm", model.LabelTLSMode: "disabled"}, ServiceAccount: "vm"})
	ps = model.Build(m.store, mesh.Default())
	if ps.Endpoints("default/vm.mesh.internal").AllAcceptMeshTLS(5000) {
		t.Error("a WorkloadEntry labelled tlsMode disabled (despite its service account) accepts mesh mTLS")
	}
}
