//go:build integration

package integration

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/sextantmesh/sextant/pilot/model"
)

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func om(ns, name string, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}
}

func host(ns, name string) string { return name + "." + ns + ".svc.cluster.local" }

func outbound(port int, subset, h string) string {
	return fmt.Sprintf("outbound|%d|%s|%s", port, subset, h)
}

func newService(ns, name string, port int32) *corev1.Service {
	return &corev1.Service{ObjectMeta: om(ns, name, nil), Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": name},
		Ports:    []corev1.ServicePort{{Name: "http", Port: port, TargetPort: intstr.FromInt32(8080)}}}}
}

func createService(t testing.TB, kc kubernetes.Interface, ns, name string, port int32) *corev1.Service {
	t.Helper()
	s, err := kc.CoreV1().Services(ns).Create(context.Background(), newService(ns, name, port), metav1.CreateOptions{})
	must(t, err)
	return s
}

func newSlice(ns, svc, name string, addrs ...string) *discoveryv1.EndpointSlice {
	port, pname, ready := int32(8080), "http", true
	es := &discoveryv1.EndpointSlice{ObjectMeta: om(ns, name, map[string]string{discoveryv1.LabelServiceName: svc}),
		AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{{Name: &pname, Port: &port}}}
	for _, a := range addrs {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{a},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready}})
	}
	return es
}

// kindCase exercises one kind: create, update and delete it through the API server, each time waiting for the
// change in the published PushContext (probe) and, where a sidecar sees it, in a connected xDS client.
type kindCase struct {
	kind   string
	create func(ctx context.Context) error
	update func(ctx context.Context) error
	delete func(ctx context.Context) error
	// probe describes the object as the PushContext holds it; "" when absent.
	probe func(ps *model.PushContext) string
	// wantCreated and wantUpdated must be contained in the probe after create and update.
	wantCreated, wantUpdated string
	// xdsCluster, when set, is a cluster the xDS client must hold after create and lose after delete;
	// xdsUpdated is one it must hold after update.
	xdsCluster, xdsUpdated string
}

func workloadProbe(uid string, f func(w *model.Workload) string) func(ps *model.PushContext) string {
	return func(ps *model.PushContext) string {
		if w := ps.Workload(uid); w != nil {
			return f(w)
		}
		return ""
	}
}

func serviceProbe(h string) func(ps *model.PushContext) string {
	return func(ps *model.PushContext) string {
		var out []string
		for _, s := range ps.ServicesForHostname(h) {
			for _, p := range s.Ports {
				out = append(out, fmt.Sprintf("port=%d", p.Port))
			}
		}
		return strings.Join(out, ",")
	}
}

// everyKind returns a case for each kind Sextant reads, all in namespace ns; pod and node are related (the pod
// runs on the node), as are the service, its EndpointSlice and its DestinationRule.
func everyKind(t testing.TB, kc kubernetes.Interface, ic istioclient.Interface, ns string) []kindCase {
	t.Helper()
	cm := metav1.CreateOptions{}
	um := metav1.UpdateOptions{}
	dm := metav1.DeleteOptions{}
	core, nw, sec := kc.CoreV1(), ic.NetworkingV1(), ic.SecurityV1()
	const cluster = "Kubernetes"
	svcHost := host(ns, "web")
	seHost := "api.example.com"
	return []kindCase{
		{
			kind: "Namespace",
			create: func(ctx context.Context) error {
				_, err := core.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: om("", ns+"-extra", map[string]string{"v": "1"})}, cm)
				return err
			},
			update: func(ctx context.Context) error {
				n, err := core.Namespaces().Get(ctx, ns+"-extra", metav1.GetOptions{})
				if err != nil {
					return err
				}
				n.Labels["v"] = "2"
				_, err = core.Namespaces().Update(ctx, n, um)
				return err
			},
			delete: func(ctx context.Context) error {
				if err := core.Namespaces().Delete(ctx, ns+"-extra", dm); err != nil {
					return err
				}
				// No namespace controller runs: finalize it as that controller would once it is empty.
				n, err := core.Namespaces().Get(ctx, ns+"-extra", metav1.GetOptions{})
				if err != nil {
					return err
				}
				n.Spec.Finalizers = nil
				_, err = core.Namespaces().Finalize(ctx, n, um)
				return err
			},
			probe: func(ps *model.PushContext) string {
				if n := ps.Namespace(ns + "-extra"); n != nil {
					return "v=" + n.Labels["v"]
				}
				return ""
			},
			wantCreated: "v=1", wantUpdated: "v=2",
		},
		{
			kind: "Service",
			create: func(ctx context.Context) error {
				_, err := core.Services(ns).Create(ctx, newService(ns, "web", 80), cm)
				return err
			},
			update:      func(ctx context.Context) error { return updateServicePort(ctx, kc, ns, "web", 81) },
			delete:      func(ctx context.Context) error { return core.Services(ns).Delete(ctx, "web", dm) },
			probe:       serviceProbe(svcHost),
			wantCreated: "port=80", wantUpdated: "port=81",
			xdsCluster: outbound(80, "", svcHost), xdsUpdated: outbound(81, "", svcHost),
		},
		{
			kind: "Node",
			create: func(ctx context.Context) error {
				_, err := core.Nodes().Create(ctx, &corev1.Node{ObjectMeta: om("", ns+"-node", map[string]string{
					"topology.kubernetes.io/region": "r1", "topology.kubernetes.io/zone": "z1"})}, cm)
				if err != nil {
					return err
				}
				// A node shows as the locality of the pods on it.
				p, err := core.Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: om(ns, "node-pod", map[string]string{"app": "other"}),
					Spec: corev1.PodSpec{NodeName: ns + "-node", Containers: []corev1.Container{{Name: "app", Image: "app"}}}}, cm)
				if err != nil {
					return err
				}
				return setPodRunning(ctx, kc, p, "10.1.9.9")
			},
			update: func(ctx context.Context) error {
				n, err := core.Nodes().Get(ctx, ns+"-node", metav1.GetOptions{})
				if err != nil {
					return err
				}
				n.Labels["topology.kubernetes.io/region"] = "r2"
				_, err = core.Nodes().Update(ctx, n, um)
				return err
			},
			delete: func(ctx context.Context) error { return core.Nodes().Delete(ctx, ns+"-node", dm) },
			probe: workloadProbe(cluster+"//Pod/"+ns+"/node-pod", func(w *model.Workload) string {
				if w.Locality == "" {
					return ""
				}
				return "locality=" + w.Locality
			}),
			wantCreated: "locality=r1/z1", wantUpdated: "locality=r2/z1",
		},
		{
			kind: "Pod",
			create: func(ctx context.Context) error {
				p, err := core.Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: om(ns, "web-1", map[string]string{"app": "web", "v": "1"}),
					Spec: corev1.PodSpec{NodeName: ns + "-node", Containers: []corev1.Container{{Name: "app", Image: "app"}}}}, cm)
				if err != nil {
					return err
				}
				return setPodRunning(ctx, kc, p, "10.1.2.3")
			},
			update: func(ctx context.Context) error {
				p, err := core.Pods(ns).Get(ctx, "web-1", metav1.GetOptions{})
				if err != nil {
					return err
				}
				p.Labels["v"] = "2"
				_, err = core.Pods(ns).Update(ctx, p, um)
				return err
			},
			delete: func(ctx context.Context) error { // no kubelet to finish a graceful delete
				return core.Pods(ns).Delete(ctx, "web-1", metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
			},
			probe: workloadProbe(cluster+"//Pod/"+ns+"/web-1",
				func(w *model.Workload) string { return fmt.Sprintf("ip=%v v=%s", w.Addresses, w.Labels["v"]) }),
			wantCreated: "ip=[10.1.2.3] v=1", wantUpdated: "v=2",
		},
		{
			kind: "EndpointSlice",
			create: func(ctx context.Context) error {
				// The Service case deleted "web": the slice needs its service.
				if _, err := core.Services(ns).Create(ctx, newService(ns, "web", 80), cm); err != nil {
					return err
				}
				_, err := kc.DiscoveryV1().EndpointSlices(ns).Create(ctx, newSlice(ns, "web", "web-abc", "10.1.2.3"), cm)
				return err
			},
			update: func(ctx context.Context) error {
				_, err := kc.DiscoveryV1().EndpointSlices(ns).Update(ctx, withRV(ctx, kc, newSlice(ns, "web", "web-abc", "10.1.2.3", "10.1.2.4")), um)
				return err
			},
			delete: func(ctx context.Context) error { return kc.DiscoveryV1().EndpointSlices(ns).Delete(ctx, "web-abc", dm) },
			probe: func(ps *model.PushContext) string {
				var out []string
				if se := ps.Endpoints(ns + "/" + svcHost); se != nil {
					for _, eps := range se.ByPort {
						for _, e := range eps {
							out = append(out, e.Address)
						}
					}
				}
				sort.Strings(out)
				return strings.Join(out, ",")
			},
			wantCreated: "10.1.2.3", wantUpdated: "10.1.2.3,10.1.2.4",
		},
		{
			kind: "ServiceEntry",
			create: func(ctx context.Context) error {
				_, err := nw.ServiceEntries(ns).Create(ctx, &networkingv1.ServiceEntry{ObjectMeta: om(ns, "api", nil),
					Spec: networking.ServiceEntry{Hosts: []string{seHost}, Location: networking.ServiceEntry_MESH_EXTERNAL,
						Resolution: networking.ServiceEntry_DNS, Ports: []*networking.ServicePort{{Number: 443, Name: "tls", Protocol: "TLS"}}}}, cm)
				return err
			},
			update: func(ctx context.Context) error {
				se, err := nw.ServiceEntries(ns).Get(ctx, "api", metav1.GetOptions{})
				if err != nil {
					return err
				}
				se.Spec.Ports[0].Number = 8443
				_, err = nw.ServiceEntries(ns).Update(ctx, se, um)
				return err
			},
			delete:      func(ctx context.Context) error { return nw.ServiceEntries(ns).Delete(ctx, "api", dm) },
			probe:       serviceProbe(seHost),
			wantCreated: "port=443", wantUpdated: "port=8443",
			xdsCluster: outbound(443, "", seHost), xdsUpdated: outbound(8443, "", seHost),
		},
		{
			kind: "WorkloadEntry",
			create: func(ctx context.Context) error {
				_, err := nw.WorkloadEntries(ns).Create(ctx, &networkingv1.WorkloadEntry{ObjectMeta: om(ns, "vm-1", nil),
					Spec: networking.WorkloadEntry{Address: "10.9.0.1", Labels: map[string]string{"app": "vm", "v": "1"}}}, cm)
				return err
			},
			update: func(ctx context.Context) error {
				we, err := nw.WorkloadEntries(ns).Get(ctx, "vm-1", metav1.GetOptions{})
				if err != nil {
					return err
				}
				we.Spec.Labels["v"] = "2"
				_, err = nw.WorkloadEntries(ns).Update(ctx, we, um)
				return err
			},
			delete: func(ctx context.Context) error { return nw.WorkloadEntries(ns).Delete(ctx, "vm-1", dm) },
			probe: workloadProbe(cluster+"/networking.istio.io/WorkloadEntry/"+ns+"/vm-1",
				func(w *model.Workload) string { return fmt.Sprintf("ip=%v v=%s", w.Addresses, w.Labels["v"]) }),
			wantCreated: "ip=[10.9.0.1] v=1", wantUpdated: "v=2",
		},
		{
			kind: "DestinationRule",
			create: func(ctx context.Context) error {
				_, err := nw.DestinationRules(ns).Create(ctx, &networkingv1.DestinationRule{ObjectMeta: om(ns, "api", nil),
					Spec: networking.DestinationRule{Host: seHost, Subsets: []*networking.Subset{{Name: "v1", Labels: map[string]string{"v": "1"}}}}}, cm)
				return err
			},
			update: func(ctx context.Context) error {
				dr, err := nw.DestinationRules(ns).Get(ctx, "api", metav1.GetOptions{})
				if err != nil {
					return err
				}
				dr.Spec.Subsets = append(dr.Spec.Subsets, &networking.Subset{Name: "v2", Labels: map[string]string{"v": "2"}})
				_, err = nw.DestinationRules(ns).Update(ctx, dr, um)
				return err
			},
			delete: func(ctx context.Context) error { return nw.DestinationRules(ns).Delete(ctx, "api", dm) },
			probe: func(ps *model.PushContext) string {
				for _, s := range ps.ServicesForHostname(seHost) {
					if dr := ps.DestinationRule(ns, s); dr != nil {
						var names []string
						for _, ss := range dr.Spec.Subsets {
							names = append(names, "subset="+ss.Name)
						}
						return strings.Join(names, ",")
					}
				}
				return ""
			},
			wantCreated: "subset=v1", wantUpdated: "subset=v2",
			xdsCluster: outbound(8443, "v1", seHost), xdsUpdated: outbound(8443, "v2", seHost),
		},
		{
			kind: "VirtualService",
			create: func(ctx context.Context) error {
				_, err := nw.VirtualServices(ns).Create(ctx, &networkingv1.VirtualService{ObjectMeta: om(ns, "web", nil),
					Spec: networking.VirtualService{Hosts: []string{"web"}, Http: []*networking.HTTPRoute{{
						Timeout: nil, Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "web"}}}}}}}, cm)
				return err
			},
			update: func(ctx context.Context) error {
				vs, err := nw.VirtualServices(ns).Get(ctx, "web", metav1.GetOptions{})
				if err != nil {
					return err
				}
				vs.Spec.Hosts = append(vs.Spec.Hosts, "web2")
				_, err = nw.VirtualServices(ns).Update(ctx, vs, um)
				return err
			},
			delete: func(ctx context.Context) error { return nw.VirtualServices(ns).Delete(ctx, "web", dm) },
			probe: func(ps *model.PushContext) string {
				for _, vs := range ps.VirtualServices(ns, model.MeshGateway) {
					if vs.Name == "web" && vs.Namespace == ns {
						return "hosts=" + strings.Join(vs.Spec.Hosts, ",")
					}
				}
				return ""
			},
			wantCreated: "hosts=web", wantUpdated: "hosts=web,web2",
		},
		{
			kind: "Gateway",
			create: func(ctx context.Context) error {
				_, err := nw.Gateways(ns).Create(ctx, &networkingv1.Gateway{ObjectMeta: om(ns, "gw", nil),
					Spec: networking.Gateway{Selector: map[string]string{"istio": "ingressgateway-" + ns}, Servers: []*networking.Server{{
						Port: &networking.Port{Number: 80, Name: "http", Protocol: "HTTP"}, Hosts: []string{"*"}}}}}, cm)
				return err
			},
			update: func(ctx context.Context) error {
				g, err := nw.Gateways(ns).Get(ctx, "gw", metav1.GetOptions{})
				if err != nil {
					return err
				}
				g.Spec.Servers[0].Port.Number = 8080
				_, err = nw.Gateways(ns).Update(ctx, g, um)
				return err
			},
			delete: func(ctx context.Context) error { return nw.Gateways(ns).Delete(ctx, "gw", dm) },
			probe: func(ps *model.PushContext) string {
				for _, g := range ps.Gateways(map[string]string{"istio": "ingressgateway-" + ns}) {
					return fmt.Sprintf("port=%d", g.Spec.(*networking.Gateway).Servers[0].Port.Number)
				}
				return ""
			},
			wantCreated: "port=80", wantUpdated: "port=8080",
		},
		{
			kind: "Sidecar",
			create: func(ctx context.Context) error {
				_, err := nw.Sidecars(ns).Create(ctx, &networkingv1.Sidecar{ObjectMeta: om(ns, "default", nil),
					Spec: networking.Sidecar{Egress: []*networking.IstioEgressListener{{Hosts: []string{"./*", "istio-system/*"}}}}}, cm)
				return err
			},
			update: func(ctx context.Context) error {
				sc, err := nw.Sidecars(ns).Get(ctx, "default", metav1.GetOptions{})
				if err != nil {
					return err
				}
				sc.Spec.Egress[0].Hosts = []string{"*/*"}
				_, err = nw.Sidecars(ns).Update(ctx, sc, um)
				return err
			},
			delete: func(ctx context.Context) error { return nw.Sidecars(ns).Delete(ctx, "default", dm) },
			probe: func(ps *model.PushContext) string {
				if c := ps.Sidecar(ns, nil); c != nil && c.Namespace == ns {
					return "egress=" + strings.Join(c.Spec.(*networking.Sidecar).Egress[0].Hosts, ",")
				}
				return ""
			},
			wantCreated: "egress=./*,istio-system/*", wantUpdated: "egress=*/*",
		},
		{
			kind: "AuthorizationPolicy",
			create: func(ctx context.Context) error {
				_, err := sec.AuthorizationPolicies(ns).Create(ctx, &securityv1.AuthorizationPolicy{ObjectMeta: om(ns, "deny-all", nil),
					Spec: security.AuthorizationPolicy{Action: security.AuthorizationPolicy_DENY, Rules: []*security.Rule{{}}}}, cm)
				return err
			},
			update: func(ctx context.Context) error {
				ap, err := sec.AuthorizationPolicies(ns).Get(ctx, "deny-all", metav1.GetOptions{})
				if err != nil {
					return err
				}
				ap.Spec.Selector = &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "web"}}
				_, err = sec.AuthorizationPolicies(ns).Update(ctx, ap, um)
				return err
			},
			delete: func(ctx context.Context) error { return sec.AuthorizationPolicies(ns).Delete(ctx, "deny-all", dm) },
			probe: func(ps *model.PushContext) string {
				for _, c := range ps.AuthorizationPoliciesInNamespace(ns) {
					ap := c.Spec.(*security.AuthorizationPolicy)
					return fmt.Sprintf("action=%s selector=%v", ap.Action, ap.GetSelector().GetMatchLabels())
				}
				return ""
			},
			wantCreated: "action=DENY selector=map[]", wantUpdated: "selector=map[app:web]",
		},
		{
			kind: "PeerAuthentication",
			create: func(ctx context.Context) error {
				_, err := sec.PeerAuthentications(ns).Create(ctx, &securityv1.PeerAuthentication{ObjectMeta: om(ns, "default", nil),
					Spec: security.PeerAuthentication{
						Mtls: &security.PeerAuthentication_MutualTLS{Mode: security.PeerAuthentication_MutualTLS_STRICT}}}, cm)
				return err
			},
			update: func(ctx context.Context) error {
				pa, err := sec.PeerAuthentications(ns).Get(ctx, "default", metav1.GetOptions{})
				if err != nil {
					return err
				}
				pa.Spec.Mtls.Mode = security.PeerAuthentication_MutualTLS_DISABLE
				_, err = sec.PeerAuthentications(ns).Update(ctx, pa, um)
				return err
			},
			delete: func(ctx context.Context) error { return sec.PeerAuthentications(ns).Delete(ctx, "default", dm) },
			probe: func(ps *model.PushContext) string {
				e := ps.PeerAuthentication(ns, nil)
				if len(e.Sources) == 0 {
					return ""
				}
				return fmt.Sprintf("mode=%v", e.Mode)
			},
			wantCreated: "mode=STRICT", wantUpdated: "mode=DISABLE",
		},
	}
}

func updateServicePort(ctx context.Context, kc kubernetes.Interface, ns, name string, port int32) error {
	s, err := kc.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	s.Spec.Ports[0].Port = port
	_, err = kc.CoreV1().Services(ns).Update(ctx, s, metav1.UpdateOptions{})
	return err
}

func withRV(ctx context.Context, kc kubernetes.Interface, es *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	if cur, err := kc.DiscoveryV1().EndpointSlices(es.Namespace).Get(ctx, es.Name, metav1.GetOptions{}); err == nil {
		es.ResourceVersion = cur.ResourceVersion
	}
	return es
}

// setPodRunning does what the kubelet would: gives the pod an IP and marks it Ready.
func setPodRunning(ctx context.Context, kc kubernetes.Interface, p *corev1.Pod, ip string) error {
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	_, err := kc.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}
