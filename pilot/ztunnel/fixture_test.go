package ztunnel_test

import (
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/store"
)

// fixture is a mesh built from typed objects in a store, with the change list model.Update needs.
type fixture struct {
	t       testing.TB
	store   *store.Store
	clock   time.Time
	mesh    *mesh.Config
	changes []model.Change
}

func newFixture(t testing.TB) *fixture {
	f := &fixture{t: t, store: store.New(), clock: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), mesh: mesh.Default()}
	f.store.AddHandler(func(ev store.Event) {
		f.changes = append(f.changes, model.Change{Key: ev.Key(), Old: ev.Old, New: ev.New})
	})
	return f
}

func (f *fixture) put(kind config.Kind, ns, name string, labels, annotations map[string]string, spec any) *config.Config {
	f.clock = f.clock.Add(time.Second)
	c := &config.Config{Key: config.Key{Kind: kind, Namespace: ns, Name: name}, Labels: labels, Annotations: annotations,
		CreationTimestamp: f.clock, Source: "test", Spec: spec}
	if err := config.Validate(c); err != nil {
		f.t.Fatalf("fixture %s invalid: %v", c.Key, err)
	}
	f.store.Upsert(store.LayerKube, c)
	return c
}

func (f *fixture) del(kind config.Kind, ns, name string) {
	f.store.Delete(store.LayerKube, config.Key{Kind: kind, Namespace: ns, Name: name})
}

// build returns a fresh snapshot of everything in the store.
func (f *fixture) build() *model.PushContext {
	f.changes = nil
	return model.Build(f.store, f.mesh)
}

// update applies the changes since the last build or update to prev, as the push pipeline does.
func (f *fixture) update(prev *model.PushContext) (*model.PushContext, *model.PushRequest) {
	changes := f.changes
	f.changes = nil
	next, res := model.Update(prev, f.store, changes)
	req := &model.PushRequest{Full: res.Full, ServicesUpdated: res.ServicesUpdated, WorkloadsUpdated: res.WorkloadsUpdated,
		ConfigsUpdated: map[config.Key]struct{}{}, Push: next}
	for _, ch := range changes {
		req.ConfigsUpdated[ch.Key] = struct{}{}
	}
	return next, req
}

func (f *fixture) namespace(name string, labels map[string]string) {
	f.put(config.Namespace, "", name, labels, nil, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}})
}

func (f *fixture) node(name, region, zone string) {
	labels := map[string]string{"topology.kubernetes.io/region": region, "topology.kubernetes.io/zone": zone}
	f.put(config.Node, "", name, labels, nil, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}})
}

type podSpec struct {
	ns, name, ip, node, sa string
	ready                  bool
	labels                 map[string]string
	ports                  map[string]int32 // named container ports
	hostNetwork            bool
}

func (f *fixture) pod(p podSpec) {
	status := corev1.ConditionFalse
	if p.ready {
		status = corev1.ConditionTrue
	}
	ctr := corev1.Container{Name: "app"}
	for n, port := range p.ports {
		ctr.Ports = append(ctr.Ports, corev1.ContainerPort{Name: n, ContainerPort: port})
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: p.ns, Labels: p.labels},
		Spec: corev1.PodSpec{NodeName: p.node, ServiceAccountName: p.sa, Containers: []corev1.Container{ctr}, HostNetwork: p.hostNetwork},
		Status: corev1.PodStatus{PodIP: p.ip, Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}}}
	f.put(config.Pod, p.ns, p.name, p.labels, nil, pod)
}

func (f *fixture) service(ns, name, clusterIP string, labels, selector, annotations map[string]string, ports ...corev1.ServicePort) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, Annotations: annotations},
		Spec: corev1.ServiceSpec{ClusterIP: clusterIP, ClusterIPs: []string{clusterIP}, Selector: selector, Ports: ports}}
	f.put(config.Service, ns, name, labels, annotations, svc)
}

func namedTarget(name string, port int32, target string) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: port, TargetPort: intstr.FromString(target)}
}

func numTarget(name string, port, target int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: port, TargetPort: intstr.FromInt32(target)}
}

func (f *fixture) serviceEntry(ns, name string, se *networking.ServiceEntry) {
	f.put(config.ServiceEntry, ns, name, nil, nil, se)
}

func (f *fixture) workloadEntry(ns, name string, we *networking.WorkloadEntry) {
	f.put(config.WorkloadEntry, ns, name, nil, nil, we)
}
