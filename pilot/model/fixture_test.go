package model_test

import (
	"fmt"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/store"
)

// mesh is a small test mesh built directly from typed objects.
type meshFixture struct {
	t     testing.TB
	store *store.Store
	clock time.Time
	// source is the Source of the objects put from now on ("test" unless a test says otherwise).
	source string
}

func newMesh(t testing.TB) *meshFixture {
	return &meshFixture{t: t, store: store.New(), clock: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), source: "test"}
}

func (m *meshFixture) put(kind config.Kind, ns, name string, labels map[string]string, spec any) *config.Config {
	m.clock = m.clock.Add(time.Second)
	c := &config.Config{Key: config.Key{Kind: kind, Namespace: ns, Name: name}, Labels: labels, CreationTimestamp: m.clock,
		Source: m.source, Spec: spec}
	if err := config.Validate(c); err != nil {
		m.t.Fatalf("fixture %s invalid: %v", c.Key, err)
	}
	m.store.Upsert(store.LayerKube, c)
	return c
}

func (m *meshFixture) del(kind config.Kind, ns, name string) {
	m.store.Delete(store.LayerKube, config.Key{Kind: kind, Namespace: ns, Name: name})
}

func (m *meshFixture) namespace(name string, labels map[string]string) {
	m.put(config.Namespace, "", name, labels, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}})
}

func (m *meshFixture) node(name, region, zone string) {
	labels := map[string]string{"topology.kubernetes.io/region": region, "topology.kubernetes.io/zone": zone}
	m.put(config.Node, "", name, labels, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}})
}

func (m *meshFixture) service(ns, name, clusterIP string, selector map[string]string, annotations map[string]string,
	ports ...corev1.ServicePort) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: annotations},
		Spec: corev1.ServiceSpec{ClusterIP: clusterIP, Selector: selector, Ports: ports}}
	m.clock = m.clock.Add(time.Second)
	c := &config.Config{Key: config.Key{Kind: config.Service, Namespace: ns, Name: name}, Annotations: annotations, CreationTimestamp: m.clock,
		Source: m.source, Spec: svc}
	m.store.Upsert(store.LayerKube, c)
}

func httpPort(port int32) corev1.ServicePort {
	return corev1.ServicePort{Name: "http", Port: port, TargetPort: intstr.FromInt32(port)}
}

func (m *meshFixture) pod(ns, name, ip, node string, ready bool, labels map[string]string) {
	m.podAs(ns, name, ip, node, ready, labels, "sa-"+name)
}

// podAs puts a pod running as service account sa.
func (m *meshFixture) podAs(ns, name, ip, node string, ready bool, labels map[string]string, sa string) {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec:   corev1.PodSpec{NodeName: node, ServiceAccountName: sa},
		Status: corev1.PodStatus{PodIP: ip, Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}}}
	m.put(config.Pod, ns, name, labels, pod)
}

type sliceEndpoint struct {
	ip, pod, node string
	ready         bool
}

func (m *meshFixture) slice(ns, name, service string, portName string, port int32, eps ...sliceEndpoint) {
	labels := map[string]string{discoveryv1.LabelServiceName: service}
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{{Name: &portName, Port: &port}}}
	for _, e := range eps {
		ready := e.ready
		node := e.node
		ep := discoveryv1.Endpoint{Addresses: []string{e.ip}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}, NodeName: &node}
		if e.pod != "" {
			ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: e.pod}
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	m.put(config.EndpointSlice, ns, name, labels, s)
}

func (m *meshFixture) authz(ns, name string, selector map[string]string, action security.AuthorizationPolicy_Action) {
	ap := &security.AuthorizationPolicy{Action: action}
	if selector != nil {
		ap.Selector = &typev1beta1.WorkloadSelector{MatchLabels: selector}
	}
	m.put(config.AuthorizationPolicy, ns, name, nil, ap)
}

func (m *meshFixture) destinationRule(ns, name, host string, exportTo []string, subsets ...string) {
	dr := &networking.DestinationRule{Host: host, ExportTo: exportTo}
	for _, s := range subsets {
		dr.Subsets = append(dr.Subsets, &networking.Subset{Name: s, Labels: map[string]string{"version": s}})
	}
	m.put(config.DestinationRule, ns, name, nil, dr)
}

// bigMesh fills a store with services × endpointsPer pods, spread over namespaces, the shape of the benchmarks.
func bigMesh(tb testing.TB, services, endpointsPer, namespaces int) *meshFixture {
	m := newMesh(tb)
	for n := range namespaces {
		m.namespace(fmt.Sprintf("ns-%d", n), nil)
	}
	for i := range 10 {
		m.node(fmt.Sprintf("node-%d", i), "region", fmt.Sprintf("zone-%d", i%3))
	}
	for s := range services {
		ns := fmt.Sprintf("ns-%d", s%namespaces)
		name := fmt.Sprintf("svc-%d", s)
		labels := map[string]string{"app": name}
		m.service(ns, name, fmt.Sprintf("10.%d.%d.%d", 100+s/65536, (s/256)%256, s%256), labels, nil, httpPort(8080))
		var eps []sliceEndpoint
		for e := range endpointsPer {
			ip := fmt.Sprintf("10.%d.%d.%d", (s*endpointsPer+e)/65536%256, (s*endpointsPer+e)/256%256, (s*endpointsPer+e)%256)
			pod := fmt.Sprintf("%s-%d", name, e)
			node := fmt.Sprintf("node-%d", e%10)
			m.pod(ns, pod, ip, node, true, map[string]string{"app": name, "version": fmt.Sprintf("v%d", e%2)})
			eps = append(eps, sliceEndpoint{ip: ip, pod: pod, node: node, ready: true})
		}
		m.slice(ns, name+"-abcde", name, "http", 8080, eps...)
	}
	return m
}
