package model_test

import (
	"strings"
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
	m.put(config.WorkloadEntry, "default", "vm-1", nil,
		&networking.WorkloadEntry{Address: "10.2.0.1", Labels: map[string]string{"app": "vm"}, ServiceAccount: "vm"})
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

// A WorkloadEntry's fields as istiod reads them: the metadata's labels count, over the spec's (selection,
// subsets, tlsMode); without a locality, its labels' (topology.istio.io/locality, then istio-locality, dots
// as slashes); an address that is a hostname serves DNS ServiceEntries only. Before, the metadata's labels
// were ignored (the entry was not selected), so was the locality label, and a STATIC ServiceEntry sent
// Envoy a hostname as a static address.
func TestWorkloadEntryFieldsAsIstiod(t *testing.T) {
	m := newMesh(t)
	for _, res := range []networking.ServiceEntry_Resolution{networking.ServiceEntry_STATIC, networking.ServiceEntry_DNS} {
		name := "vm-" + strings.ToLower(res.String())
		m.put(config.ServiceEntry, "default", name, nil, &networking.ServiceEntry{
			Hosts: []string{name + ".mesh.internal"}, Location: networking.ServiceEntry_MESH_INTERNAL, Resolution: res,
			Ports:            []*networking.ServicePort{{Number: 5000, Name: "tcp-db", Protocol: "TCP"}},
			WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "vm"}},
		})
	}
	m.put(config.WorkloadEntry, "default", "meta", map[string]string{"app": "vm", "version": "v2", model.LabelTLSMode: "istio"},
		&networking.WorkloadEntry{Address: "10.2.0.1", Labels: map[string]string{"version": "v1", "istio-locality": "region3.zone-d"}})
	m.put(config.WorkloadEntry, "default", "topology", nil, &networking.WorkloadEntry{Address: "10.2.0.2",
		Labels: map[string]string{"app": "vm", model.LabelTopologyLocality: "region4.zone-e.sub", "istio-locality": "region3.zone-d"}})
	m.put(config.WorkloadEntry, "default", "named", nil, &networking.WorkloadEntry{Address: "vm3.mesh.internal",
		Labels: map[string]string{"app": "vm"}, Locality: "region5/zone-f"})
	ps := model.Build(m.store, mesh.Default())

	byAddr := func(key string) map[string]*model.Endpoint {
		out := map[string]*model.Endpoint{}
		for _, ep := range ps.Endpoints(key).ByPort[5000] {
			out[ep.Address] = ep
		}
		return out
	}
	static := byAddr("default/vm-static.mesh.internal")
	if _, ok := static["vm3.mesh.internal"]; ok || len(static) != 2 {
		t.Errorf("STATIC endpoints %v, want the two IP addresses only", static)
	}
	if ep := static["10.2.0.1"]; ep == nil {
		t.Error("the WorkloadEntry selected by its metadata's labels is not an endpoint")
	} else {
		if ep.Labels["version"] != "v2" || ep.TLSMode != "istio" || ep.Locality != "region3/zone-d/" {
			t.Errorf("metadata labels: version %q, tlsMode %q, locality %q; want v2, istio, region3/zone-d/",
				ep.Labels["version"], ep.TLSMode, ep.Locality)
		}
	}
	if ep := static["10.2.0.2"]; ep == nil || ep.Locality != "region4/zone-e/sub" {
		t.Errorf("topology.istio.io/locality: %+v, want region4/zone-e/sub", ep)
	}
	dns := byAddr("default/vm-dns.mesh.internal")
	if ep := dns["vm3.mesh.internal"]; ep == nil || ep.Locality != "region5/zone-f/" || len(dns) != 3 {
		t.Errorf("DNS endpoints %v, want all three, the hostname in region5/zone-f/", dns)
	}
	if w := ps.Workload(model.WorkloadUID(mesh.Default().ClusterID,
		config.Key{Kind: config.WorkloadEntry, Namespace: "default", Name: "meta"})); w == nil ||
		w.Labels["version"] != "v2" || w.TLSMode != "istio" || w.Locality != "region3/zone-d" {
		t.Errorf("workload of the entry with metadata labels: %+v", w)
	}

	// Its metadata's app label goes: an update drops it from the service, as a fresh build does.
	key := config.Key{Kind: config.WorkloadEntry, Namespace: "default", Name: "meta"}
	old := m.store.Get(key)
	c := m.put(config.WorkloadEntry, "default", "meta", map[string]string{"version": "v2"}, old.Spec)
	ps, res := model.Update(ps, m.store, []model.Change{{Key: key, Old: old, New: c}})
	if _, ok := res.ServicesUpdated["default/vm-static.mesh.internal"]; !ok {
		t.Errorf("the entry's metadata labels changed: services updated %v", res.ServicesUpdated)
	}
	if _, ok := byAddr("default/vm-static.mesh.internal")["10.2.0.1"]; ok {
		t.Error("the entry is still an endpoint after its metadata's labels stopped matching")
	}
}

// A pod a ServiceEntry selects serves its port on the container port of the same name (TCP, the first of the
// name, native sidecars' too), else the targetPort, as istiod's port map. Before, the named port was ignored.
func TestServiceEntryPodNamedPort(t *testing.T) {
	m := newMesh(t)
	m.put(config.ServiceEntry, "default", "pods", nil, &networking.ServiceEntry{
		Hosts: []string{"pods.mesh.internal"}, Addresses: []string{"240.0.0.8"}, Location: networking.ServiceEntry_MESH_INTERNAL,
		Resolution: networking.ServiceEntry_STATIC,
		Ports: []*networking.ServicePort{{Number: 5000, Name: "tcp-db", Protocol: "TCP", TargetPort: 5500},
			{Number: 5001, Name: "udp-ish", Protocol: "TCP", TargetPort: 5501}, {Number: 5002, Name: "side", Protocol: "TCP"}},
		WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "db"}},
	})
	always := corev1.ContainerRestartPolicyAlways
	pod := &corev1.Pod{
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "db", Ports: []corev1.ContainerPort{
				{Name: "tcp-db", ContainerPort: 7000},
				{Name: "tcp-db", ContainerPort: 7999, Protocol: corev1.ProtocolTCP},
				{Name: "udp-ish", ContainerPort: 7001, Protocol: corev1.ProtocolUDP},
			}}},
			InitContainers: []corev1.Container{{Name: "side", RestartPolicy: &always,
				Ports: []corev1.ContainerPort{{Name: "side", ContainerPort: 7002}}}},
		},
		Status: corev1.PodStatus{PodIP: "10.1.0.9", Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	pod.Name, pod.Namespace, pod.Labels = "db-0", "default", map[string]string{"app": "db"}
	m.put(config.Pod, "default", "db-0", pod.Labels, pod)
	ps := model.Build(m.store, mesh.Default())
	se := ps.Endpoints("default/pods.mesh.internal")
	for port, want := range map[uint32]uint32{5000: 7000, 5001: 5501, 5002: 7002} {
		if eps := se.ByPort[port]; len(eps) != 1 || eps[0].Port != want {
			t.Errorf("port %d: endpoints %v, want one on %d", port, eps, want)
		}
	}
}
