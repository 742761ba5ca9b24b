package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
	networkingapiv1beta1 "istio.io/api/networking/v1beta1"
	security "istio.io/api/security/v1beta1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	networkingv1beta1 "istio.io/client-go/pkg/apis/networking/v1beta1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingk8s "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/store"
)

const ns = "default"

// lockedDiscovery lets a test change the fake discovery's resources while the source polls it.
type lockedDiscovery struct {
	mu sync.Mutex
	d  *fakediscovery.FakeDiscovery
}

func (l *lockedDiscovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.d.ServerResourcesForGroupVersion(gv)
}

func (l *lockedDiscovery) set(r []*metav1.APIResourceList) {
	l.mu.Lock()
	l.d.Resources = r
	l.mu.Unlock()
}

// crdResources lists the Istio resources a cluster with every CRD serves, less the kinds in omit.
func crdResources(omit ...config.Kind) []*metav1.APIResourceList {
	byGV := map[string]*metav1.APIResourceList{}
	var out []*metav1.APIResourceList
	for _, ki := range config.Kinds() {
		if !isCRD(ki) {
			continue
		}
		gv := ki.APIVersion()
		l := byGV[gv]
		if l == nil {
			l = &metav1.APIResourceList{GroupVersion: gv}
			byGV[gv] = l
			out = append(out, l)
		}
		skip := false
		for _, k := range omit {
			skip = skip || k == ki.Kind
		}
		if !skip {
			l.APIResources = append(l.APIResources, metav1.APIResource{Name: ki.Plural, Kind: string(ki.Kind), Namespaced: true})
		}
	}
	return out
}

// syncBuffer collects log output written from informer goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type harness struct {
	t     *testing.T
	ctx   context.Context
	kube  *kubefake.Clientset
	istio *dynamicfake.FakeDynamicClient
	disc  *lockedDiscovery
	store *store.Store
	src   *Source
	logs  *syncBuffer
}

type harnessOpts struct {
	kube, istio []runtime.Object
	resources   []*metav1.APIResourceList // nil: every CRD
	resync      time.Duration
	// unread are objects of kinds Sextant does not read; their resources are added to discovery.
	unread []*unstructured.Unstructured
	// selectors are the mesh config's discoverySelectors.
	selectors []metav1.LabelSelector
}

func newHarness(t *testing.T, o harnessOpts) *harness {
	t.Helper()
	// The fakes have no streaming list; without this the reflector would wait for it forever.
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, false)
	h := &harness{
		t:     t,
		kube:  kubefake.NewClientset(),
		istio: newDynamicFake(),
		store: store.New(),
		logs:  &syncBuffer{},
	}
	seed(t, h.kube.Tracker(), o.kube)
	seed(t, h.istio.Tracker(), o.istio)
	for _, u := range o.unread {
		gvr := unreadGVR(t, u)
		if err := h.istio.Tracker().Create(gvr, u, u.GetNamespace()); err != nil {
			t.Fatal(err)
		}
		o.resources = append(o.resources, &metav1.APIResourceList{GroupVersion: u.GetAPIVersion(),
			APIResources: []metav1.APIResource{{Name: gvr.Resource, Kind: u.GetKind(), Namespaced: true}}})
	}
	h.disc = &lockedDiscovery{d: h.kube.Discovery().(*fakediscovery.FakeDiscovery)}
	if o.resources == nil {
		o.resources = crdResources()
	}
	h.disc.set(o.resources)
	src, err := New(Options{
		KubeClient:         h.kube,
		Dynamic:            h.istio,
		Store:              h.store,
		Logger:             slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Discovery:          h.disc,
		ResyncPeriod:       o.resync,
		CRDPollInterval:    20 * time.Millisecond,
		DiscoverySelectors: o.selectors,
	})
	if err != nil {
		t.Fatal(err)
	}
	h.src = src
	ctx, cancel := context.WithCancel(context.Background())
	h.ctx = ctx
	done := make(chan struct{})
	go func() { src.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := src.WaitForSync(wctx); err != nil {
		t.Fatalf("%v\nlogs:\n%s", err, h.logs)
	}
	return h
}

// newDynamicFake is a dynamic client that serves every Istio kind Sextant watches, as unstructured objects.
func newDynamicFake() *dynamicfake.FakeDynamicClient {
	lists := map[schema.GroupVersionResource]string{}
	for kind := range crdTypes {
		ki, _ := config.Info(kind)
		lists[crdGVR(ki)] = string(kind) + "List"
	}
	for _, ki := range config.UnreadKinds() {
		for _, v := range ki.Versions {
			lists[schema.GroupVersionResource{Group: ki.Group, Version: v, Resource: ki.Plural}] = string(ki.Kind) + "List"
		}
	}
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), lists)
}

// unreadGVR is the resource of u, an object of a kind Sextant does not read.
func unreadGVR(t *testing.T, u *unstructured.Unstructured) schema.GroupVersionResource {
	gvk := u.GroupVersionKind()
	for _, ki := range config.UnreadKinds() {
		if string(ki.Kind) == gvk.Kind && ki.Group == gvk.Group {
			return schema.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: ki.Plural}
		}
	}
	t.Fatalf("%s is not an unread kind", gvk)
	return schema.GroupVersionResource{}
}

// seed adds objects under the resource names Sextant watches. The fakes' constructors guess the
// resource from the kind and get some wrong ("gatewaies"), so the informers would never see them.
// Istio objects are stored as the API server stores them, as JSON (unstructured).
func seed(t *testing.T, tracker k8stesting.ObjectTracker, objs []runtime.Object) {
	t.Helper()
	for _, obj := range objs {
		kind := config.Kind(obj.GetObjectKind().GroupVersionKind().Kind) // set on unstructured objects only
		if _, raw := obj.(*unstructured.Unstructured); !raw {
			c, err := toConfig(obj)
			if err != nil {
				t.Fatal(err)
			}
			kind = c.Kind
			if _, ok := crdTypes[kind]; ok {
				if obj, err = toUnstructured(obj); err != nil {
					t.Fatal(err)
				}
			}
		}
		ki, _ := config.Info(kind)
		m := obj.(metav1.Object)
		if err := tracker.Create(crdGVR(ki), obj, m.GetNamespace()); err != nil {
			t.Fatalf("seed %s %s/%s: %v", kind, m.GetNamespace(), m.GetName(), err)
		}
	}
}

// toUnstructured encodes a typed Istio object as the API server would serve it.
func toUnstructured(obj runtime.Object) (*unstructured.Unstructured, error) {
	c, err := toConfig(obj)
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal(data, &u.Object); err != nil {
		return nil, err
	}
	ki, _ := config.Info(c.Kind)
	u.SetAPIVersion(ki.APIVersion())
	u.SetKind(string(c.Kind))
	// encoding/json decodes numbers as float64, which Unstructured's int64 getters do not read.
	u.SetGeneration(c.Generation)
	return u, nil
}

// crd is the dynamic client for kind's resource in the test namespace.
func (h *harness) crd(kind config.Kind) dynamic.ResourceInterface {
	ki, _ := config.Info(kind)
	return h.istio.Resource(crdGVR(ki)).Namespace(ns)
}

// createCRD and updateCRD write a typed Istio object; createRaw and updateRaw write one as given, which may
// be what Sextant's types cannot decode.
func (h *harness) createCRD(obj runtime.Object) error {
	u, err := toUnstructured(obj)
	if err != nil {
		return err
	}
	return h.createRaw(u)
}

func (h *harness) updateCRD(obj runtime.Object) error {
	u, err := toUnstructured(obj)
	if err != nil {
		return err
	}
	return h.updateRaw(u)
}

func (h *harness) createRaw(u *unstructured.Unstructured) error {
	_, err := h.crd(config.Kind(u.GetKind())).Create(h.ctx, u, metav1.CreateOptions{})
	return err
}

func (h *harness) updateRaw(u *unstructured.Unstructured) error {
	_, err := h.crd(config.Kind(u.GetKind())).Update(h.ctx, u, metav1.UpdateOptions{})
	return err
}

func (h *harness) deleteCRD(kind config.Kind, name string) error {
	return h.crd(kind).Delete(h.ctx, name, metav1.DeleteOptions{})
}

// eventually polls cond until it holds or a deadline passes.
func (h *harness) eventually(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s\nlogs:\n%s", what, h.logs)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (h *harness) get(kind config.Kind, namespace, name string) *config.Config {
	return h.store.Get(config.Key{Kind: kind, Namespace: namespace, Name: name})
}

func meta(name, rv string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: ns, ResourceVersion: rv, UID: types.UID("uid-" + name),
		Labels: map[string]string{"app": name}}
}

func newService(name, rv string) *corev1.Service {
	return &corev1.Service{ObjectMeta: meta(name, rv), Spec: corev1.ServiceSpec{
		ClusterIP: "10.0.0.10",
		Ports:     []corev1.ServicePort{{Name: "http", Port: 9080, Protocol: corev1.ProtocolTCP}},
	}}
}

func newPod(name, rv string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: meta(name, rv),
		Spec: corev1.PodSpec{
			NodeName:           "node-1",
			ServiceAccountName: "reviews",
			Containers: []corev1.Container{{
				Name:         "app",
				Image:        "example/reviews:1",
				Env:          []corev1.EnvVar{{Name: "SECRET", Value: "x"}},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
				Ports:        []corev1.ContainerPort{{Name: "http", ContainerPort: 9080, Protocol: corev1.ProtocolTCP, HostPort: 80}},
			}},
			Volumes: []corev1.Volume{{Name: "data"}},
		},
		Status: corev1.PodStatus{
			Phase:             corev1.PodRunning,
			PodIP:             "10.1.0.5",
			PodIPs:            []corev1.PodIP{{IP: "10.1.0.5"}},
			HostIP:            "192.0.2.1",
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Image: "example/reviews:1"}},
		},
	}
}

func newNode(name string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1", Labels: map[string]string{"topology.kubernetes.io/zone": "z1"}},
		Status: corev1.NodeStatus{
			Images:     []corev1.ContainerImage{{Names: []string{"example/big:1"}, SizeBytes: 1 << 30}},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
}

func newSlice(name, rv, addr string) *discoveryv1.EndpointSlice {
	m := meta(name, rv)
	m.Labels[discoveryv1.LabelServiceName] = "reviews"
	port, proto := int32(9080), corev1.ProtocolTCP
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  m,
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}}},
		Ports:       []discoveryv1.EndpointPort{{Port: &port, Protocol: &proto}},
	}
}

func newVirtualService(name, rv string, hosts ...string) *networkingv1.VirtualService {
	return &networkingv1.VirtualService{ObjectMeta: meta(name, rv), Spec: networking.VirtualService{
		Hosts: hosts,
		Http:  []*networking.HTTPRoute{{Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "reviews"}}}}},
	}}
}

// invalidVirtualService routes to a destination without a host, which validation refuses.
func invalidVirtualService(name, rv string) *networkingv1.VirtualService {
	return &networkingv1.VirtualService{ObjectMeta: meta(name, rv), Spec: networking.VirtualService{
		Hosts: []string{"reviews"},
		Http:  []*networking.HTTPRoute{{Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Subset: "v1"}}}}},
	}}
}

func newAuthorizationPolicy(name, rv string, action security.AuthorizationPolicy_Action) *securityv1.AuthorizationPolicy {
	return &securityv1.AuthorizationPolicy{ObjectMeta: meta(name, rv), Spec: security.AuthorizationPolicy{
		Action: action,
		Rules:  []*security.Rule{{To: []*security.Rule_To{{Operation: &security.Operation{Ports: []string{"9080"}}}}}},
	}}
}

func newIngress(name, rv string) *networkingk8s.Ingress {
	prefix := networkingk8s.PathTypePrefix
	backend := networkingk8s.IngressBackend{Service: &networkingk8s.IngressServiceBackend{
		Name: "reviews", Port: networkingk8s.ServiceBackendPort{Number: 9080}}}
	return &networkingk8s.Ingress{ObjectMeta: meta(name, rv), Spec: networkingk8s.IngressSpec{Rules: []networkingk8s.IngressRule{{
		Host: "web.example.com",
		IngressRuleValue: networkingk8s.IngressRuleValue{HTTP: &networkingk8s.HTTPIngressRuleValue{
			Paths: []networkingk8s.HTTPIngressPath{{Path: "/", PathType: &prefix, Backend: backend}},
		}},
	}}}}
}

// everyKind returns one valid object of each kind, split by clientset.
func everyKind() (kube, istio []runtime.Object) {
	kube = []runtime.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, ResourceVersion: "1"}},
		newService("reviews", "1"),
		newPod("reviews-1", "1"),
		newNode("node-1"),
		newSlice("reviews-abc", "1", "10.1.0.5"),
		&corev1.Secret{ObjectMeta: meta("ingress-cert", "1"), Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.crt": []byte("cert"), "tls.key": []byte("key")}},
		newIngress("web", "1"),
		&networkingk8s.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: "istio", ResourceVersion: "1"},
			Spec: networkingk8s.IngressClassSpec{Controller: "istio.io/ingress-controller"}},
	}
	istio = []runtime.Object{
		&networkingv1.ServiceEntry{ObjectMeta: meta("external", "1"), Spec: networking.ServiceEntry{
			Hosts: []string{"api.example.com"},
			Ports: []*networking.ServicePort{{Number: 443, Name: "https", Protocol: "TLS"}},
		}},
		&networkingv1.WorkloadEntry{ObjectMeta: meta("vm-1", "1"), Spec: networking.WorkloadEntry{Address: "10.2.0.1"}},
		&networkingv1.DestinationRule{ObjectMeta: meta("reviews", "1"), Spec: networking.DestinationRule{Host: "reviews"}},
		newVirtualService("reviews", "1", "reviews"),
		&networkingv1.Gateway{ObjectMeta: meta("ingress", "1"), Spec: networking.Gateway{Servers: []*networking.Server{{
			Port:  &networking.Port{Number: 80, Name: "http", Protocol: "HTTP"},
			Hosts: []string{"*"},
		}}}},
		&networkingv1.Sidecar{ObjectMeta: meta("default", "1"),
			Spec: networking.Sidecar{Egress: []*networking.IstioEgressListener{{Hosts: []string{"./*"}}}}},
		newAuthorizationPolicy("allow", "1", security.AuthorizationPolicy_ALLOW),
		&securityv1.PeerAuthentication{ObjectMeta: meta("strict", "1"), Spec: security.PeerAuthentication{
			Mtls: &security.PeerAuthentication_MutualTLS{Mode: security.PeerAuthentication_MutualTLS_STRICT},
		}},
		&securityv1.RequestAuthentication{ObjectMeta: meta("jwt", "1"), Spec: security.RequestAuthentication{
			JwtRules: []*security.JWTRule{{Issuer: "https://issuer.example.com", JwksUri: "https://issuer.example.com/jwks"}},
		}},
		&networkingv1beta1.ProxyConfig{ObjectMeta: meta("workers", "1"), Spec: networkingapiv1beta1.ProxyConfig{
			Concurrency: wrapperspb.Int32(2),
		}},
		&networkingv1.WorkloadGroup{ObjectMeta: meta("vms", "1"), Spec: networking.WorkloadGroup{
			Template: &networking.WorkloadEntry{ServiceAccount: "vm"},
		}},
	}
	return kube, istio
}

// Secrets are listed without the two common large kinds no credentialName can name, and cached with only
// the entries a certificate is read from.
func TestSecretsListedByTypeAndSlimmed(t *testing.T) {
	secret := &corev1.Secret{ObjectMeta: meta("ingress-cert", "1"), Type: corev1.SecretTypeTLS, Data: map[string][]byte{
		"tls.crt": []byte("cert"), "tls.key": []byte("key"), "ca.crt": []byte("ca"), "bundle.tar": make([]byte, 1<<20)}}
	secret.Annotations = map[string]string{"note": "x"}
	h := newHarness(t, harnessOpts{kube: []runtime.Object{secret}})

	c := h.store.Get(config.Key{Kind: config.Secret, Namespace: ns, Name: "ingress-cert"})
	if c == nil {
		t.Fatalf("Secret not in store\n%s", h.logs)
	}
	got := c.Spec.(*corev1.Secret)
	if string(got.Data["tls.crt"]) != "cert" || string(got.Data["tls.key"]) != "key" || string(got.Data["ca.crt"]) != "ca" {
		t.Errorf("certificate entries = %q", got.Data)
	}
	if v, ok := got.Data["bundle.tar"]; !ok || v != nil {
		t.Errorf("bundle.tar: present %v, %d bytes; want its name kept without its value", ok, len(v))
	}
	if got.Annotations != nil || got.Type != corev1.SecretTypeTLS {
		t.Errorf("annotations %v, type %q", got.Annotations, got.Type)
	}
	var selector string
	for _, a := range h.kube.Actions() {
		if l, ok := a.(k8stesting.ListAction); ok && a.GetResource().Resource == "secrets" {
			selector = l.GetListRestrictions().Fields.String()
		}
	}
	for _, want := range []string{"type!=helm.sh/release.v1", "type!=kubernetes.io/service-account-token"} {
		if !strings.Contains(selector, want) {
			t.Errorf("secrets listed with field selector %q, want it to hold %q", selector, want)
		}
	}
}

func TestInitialSyncEveryKind(t *testing.T) {
	kube, istio := everyKind()
	h := newHarness(t, harnessOpts{kube: kube, istio: istio})

	// Synced means every handler has seen its initial list, so no polling is needed here.
	for _, ki := range config.Kinds() {
		if n := h.store.Count(ki.Kind); n != 1 {
			t.Errorf("%s: %d objects in store, want 1; rejected %v\n%s", ki.Kind, n, h.src.Rejected(), h.logs)
		}
	}
	if !h.src.HasSynced() {
		t.Error("HasSynced false after WaitForSync")
	}
	if m := h.src.MissingCRDs(); len(m) != 0 {
		t.Errorf("MissingCRDs = %v, want none", m)
	}
	if r := h.src.Rejected(); len(r) != 0 {
		t.Errorf("Rejected = %v, want none", r)
	}

	vs := h.get(config.VirtualService, ns, "reviews")
	if vs == nil {
		t.Fatal("VirtualService missing")
	}
	spec, ok := vs.Spec.(*networking.VirtualService)
	if !ok {
		t.Fatalf("VirtualService spec is %T, want *v1alpha3.VirtualService", vs.Spec)
	}
	if vs.Source != "kube" || vs.ResourceVersion != "1" || vs.UID != "uid-reviews" || vs.Labels["app"] != "reviews" ||
		spec.Hosts[0] != "reviews" {
		t.Errorf("VirtualService config = %+v, hosts %v", vs, spec.Hosts)
	}
	if _, ok := h.get(config.AuthorizationPolicy, ns, "allow").Spec.(*security.AuthorizationPolicy); !ok {
		t.Error("AuthorizationPolicy spec is not *v1beta1.AuthorizationPolicy")
	}
	if _, ok := h.get(config.Service, ns, "reviews").Spec.(*corev1.Service); !ok {
		t.Error("Service spec is not *corev1.Service")
	}
	if n := h.get(config.Node, "", "node-1"); n == nil || n.Namespace != "" {
		t.Errorf("Node = %v, want cluster-scoped node-1", n)
	}
}

// crud drives one kind through create, update and delete against the fake clients.
type crud struct {
	kind     config.Kind
	name     string
	create   func(ctx context.Context, h *harness) error
	update   func(ctx context.Context, h *harness) error
	updated  func(c *config.Config) bool
	deleteFn func(ctx context.Context, h *harness) error
}

func TestAddUpdateDelete(t *testing.T) {
	cases := []crud{
		{
			kind: config.Service, name: "reviews",
			create: func(ctx context.Context, h *harness) error {
				_, err := h.kube.CoreV1().Services(ns).Create(ctx, newService("reviews", "1"), metav1.CreateOptions{})
				return err
			},
			update: func(ctx context.Context, h *harness) error {
				s := newService("reviews", "2")
				s.Spec.Ports[0].Port = 9081
				_, err := h.kube.CoreV1().Services(ns).Update(ctx, s, metav1.UpdateOptions{})
				return err
			},
			updated: func(c *config.Config) bool { return c.Spec.(*corev1.Service).Spec.Ports[0].Port == 9081 },
			deleteFn: func(ctx context.Context, h *harness) error {
				return h.kube.CoreV1().Services(ns).Delete(ctx, "reviews", metav1.DeleteOptions{})
			},
		},
		{
			kind: config.Pod, name: "reviews-1",
			create: func(ctx context.Context, h *harness) error {
				_, err := h.kube.CoreV1().Pods(ns).Create(ctx, newPod("reviews-1", "1"), metav1.CreateOptions{})
				return err
			},
			update: func(ctx context.Context, h *harness) error {
				p := newPod("reviews-1", "2")
				p.Status.PodIP = "10.1.0.6"
				_, err := h.kube.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{})
				return err
			},
			updated: func(c *config.Config) bool { return c.Spec.(*corev1.Pod).Status.PodIP == "10.1.0.6" },
			deleteFn: func(ctx context.Context, h *harness) error {
				return h.kube.CoreV1().Pods(ns).Delete(ctx, "reviews-1", metav1.DeleteOptions{})
			},
		},
		{
			kind: config.EndpointSlice, name: "reviews-abc",
			create: func(ctx context.Context, h *harness) error {
				_, err := h.kube.DiscoveryV1().EndpointSlices(ns).Create(ctx, newSlice("reviews-abc", "1", "10.1.0.5"), metav1.CreateOptions{})
				return err
			},
			update: func(ctx context.Context, h *harness) error {
				_, err := h.kube.DiscoveryV1().EndpointSlices(ns).Update(ctx, newSlice("reviews-abc", "2", "10.1.0.7"), metav1.UpdateOptions{})
				return err
			},
			updated: func(c *config.Config) bool {
				return c.Spec.(*discoveryv1.EndpointSlice).Endpoints[0].Addresses[0] == "10.1.0.7"
			},
			deleteFn: func(ctx context.Context, h *harness) error {
				return h.kube.DiscoveryV1().EndpointSlices(ns).Delete(ctx, "reviews-abc", metav1.DeleteOptions{})
			},
		},
		{
			kind: config.VirtualService, name: "reviews",
			create: func(ctx context.Context, h *harness) error {
				return h.createCRD(newVirtualService("reviews", "1", "reviews"))
			},
			update: func(ctx context.Context, h *harness) error {
				return h.updateCRD(newVirtualService("reviews", "2", "reviews", "reviews.example.com"))
			},
			updated: func(c *config.Config) bool { return len(c.Spec.(*networking.VirtualService).Hosts) == 2 },
			deleteFn: func(ctx context.Context, h *harness) error {
				return h.deleteCRD(config.VirtualService, "reviews")
			},
		},
		{
			kind: config.AuthorizationPolicy, name: "allow",
			create: func(ctx context.Context, h *harness) error {
				return h.createCRD(newAuthorizationPolicy("allow", "1", security.AuthorizationPolicy_ALLOW))
			},
			update: func(ctx context.Context, h *harness) error {
				return h.updateCRD(newAuthorizationPolicy("allow", "2", security.AuthorizationPolicy_DENY))
			},
			updated: func(c *config.Config) bool {
				return c.Spec.(*security.AuthorizationPolicy).Action == security.AuthorizationPolicy_DENY
			},
			deleteFn: func(ctx context.Context, h *harness) error {
				return h.deleteCRD(config.AuthorizationPolicy, "allow")
			},
		},
	}
	for _, tc := range cases {
		t.Run(string(tc.kind), func(t *testing.T) {
			h := newHarness(t, harnessOpts{})
			ctx := h.ctx
			if h.get(tc.kind, ns, tc.name) != nil {
				t.Fatal("object in store before it was created")
			}
			if err := tc.create(ctx, h); err != nil {
				t.Fatal(err)
			}
			h.eventually("add", func() bool { return h.get(tc.kind, ns, tc.name) != nil })
			if c := h.get(tc.kind, ns, tc.name); c.Source != "kube" || c.ResourceVersion != "1" {
				t.Errorf("added config: source %q rv %q", c.Source, c.ResourceVersion)
			}
			if err := tc.update(ctx, h); err != nil {
				t.Fatal(err)
			}
			h.eventually("update", func() bool {
				c := h.get(tc.kind, ns, tc.name)
				return c != nil && c.ResourceVersion == "2" && tc.updated(c)
			})
			if err := tc.deleteFn(ctx, h); err != nil {
				t.Fatal(err)
			}
			h.eventually("delete", func() bool { return h.get(tc.kind, ns, tc.name) == nil })
		})
	}
}

func TestTransformDropsUnreadFields(t *testing.T) {
	managed := []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}
	ann := map[string]string{lastApplied: `{"big":"json"}`, "keep": "me"}

	svc := newService("reviews", "1")
	svc.ManagedFields, svc.Annotations = managed, ann
	pod := newPod("reviews-1", "1")
	pod.ManagedFields, pod.Annotations = managed, ann
	node := newNode("node-1")
	node.ManagedFields = managed
	vs := newVirtualService("reviews", "1", "reviews")
	vs.ManagedFields, vs.Annotations = managed, ann

	h := newHarness(t, harnessOpts{kube: []runtime.Object{svc, pod, node}, istio: []runtime.Object{vs}})

	for _, k := range []config.Key{
		{Kind: config.Service, Namespace: ns, Name: "reviews"},
		{Kind: config.Pod, Namespace: ns, Name: "reviews-1"},
		{Kind: config.VirtualService, Namespace: ns, Name: "reviews"},
	} {
		c := h.store.Get(k)
		if c == nil {
			t.Fatalf("%s missing", k)
		}
		if _, ok := c.Annotations[lastApplied]; ok {
			t.Errorf("%s: last-applied annotation kept", k)
		}
		if c.Annotations["keep"] != "me" {
			t.Errorf("%s: other annotations lost: %v", k, c.Annotations)
		}
	}
	if got := h.get(config.Service, ns, "reviews").Spec.(*corev1.Service); got.ManagedFields != nil || got.Spec.Ports[0].Port != 9080 {
		t.Errorf("Service after transform: managedFields %v, ports %v", got.ManagedFields, got.Spec.Ports)
	}
	if got, err := h.crd(config.VirtualService).Get(h.ctx, "reviews", metav1.GetOptions{}); err != nil || got.GetManagedFields() == nil {
		t.Fatalf("fake lost managedFields before the informer saw them (%v), so this test proves nothing", err)
	}
	vsInformer := h.src.informer(config.VirtualService)
	for _, obj := range vsInformer.GetStore().List() {
		if mf := obj.(*networkingv1.VirtualService).ManagedFields; mf != nil {
			t.Errorf("VirtualService in cache keeps managedFields %v", mf)
		}
	}

	p := h.get(config.Pod, ns, "reviews-1").Spec.(*corev1.Pod)
	c := p.Spec.Containers[0]
	if p.ManagedFields != nil || c.Env != nil || c.VolumeMounts != nil || c.Image != "" || p.Spec.Volumes != nil ||
		p.Status.ContainerStatuses != nil {
		t.Errorf("pod keeps unread fields: %+v", p)
	}
	if p.Spec.NodeName != "node-1" || p.Spec.ServiceAccountName != "reviews" || p.Status.PodIP != "10.1.0.5" ||
		len(p.Status.PodIPs) != 1 || p.Status.HostIP != "192.0.2.1" || p.Status.Phase != corev1.PodRunning ||
		len(p.Status.Conditions) != 1 || p.Labels["app"] != "reviews-1" {
		t.Errorf("pod lost fields it needs: %+v", p)
	}
	if want := (corev1.ContainerPort{Name: "http", ContainerPort: 9080, Protocol: corev1.ProtocolTCP}); len(c.Ports) != 1 ||
		c.Ports[0] != want {
		t.Errorf("container ports = %+v, want [%+v]", c.Ports, want)
	}

	n := h.get(config.Node, "", "node-1").Spec.(*corev1.Node)
	if n.ManagedFields != nil || n.Status.Images != nil || n.Status.Conditions != nil || n.Labels["topology.kubernetes.io/zone"] != "z1" {
		t.Errorf("node after transform: %+v", n)
	}
}

func TestTransformIsIdempotentAndLeavesOthersAlone(t *testing.T) {
	pod := newPod("p", "1")
	pod.Annotations = map[string]string{lastApplied: "{}"}
	once, _ := transform(pod)
	twice, _ := transform(once)
	if p := twice.(*corev1.Pod); len(p.Spec.Containers[0].Ports) != 1 || p.Status.PodIP != "10.1.0.5" || p.Annotations != nil {
		t.Errorf("second transform changed the pod: %+v", p)
	}
	if pod.Annotations[lastApplied] != "{}" {
		t.Error("transform edited the caller's annotation map")
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "default/p", Obj: pod}
	if got, err := transform(tomb); err != nil || got != any(tomb) {
		t.Errorf("tombstone transformed to %v, %v", got, err)
	}
}

func TestMissingCRDIsSkippedThenPickedUp(t *testing.T) {
	_, istio := everyKind()
	// virtualservices is absent from networking.istio.io/v1 and security.istio.io/v1 is not served at all.
	var res []*metav1.APIResourceList
	for _, l := range crdResources(config.VirtualService) {
		if !strings.HasPrefix(l.GroupVersion, "security.") {
			res = append(res, l)
		}
	}
	h := newHarness(t, harnessOpts{istio: istio, resources: res})

	// Missing CRDs must not hold back readiness: newHarness has already waited for sync.
	want := []config.Kind{config.AuthorizationPolicy, config.PeerAuthentication, config.RequestAuthentication, config.VirtualService}
	if got := h.src.MissingCRDs(); !equalKinds(got, want) {
		t.Errorf("MissingCRDs = %v, want %v", got, want)
	}
	if h.get(config.VirtualService, ns, "reviews") != nil {
		t.Error("VirtualService stored although its CRD is missing")
	}
	if h.get(config.DestinationRule, ns, "reviews") == nil {
		t.Error("DestinationRule not stored although its CRD is installed")
	}
	// Let a few polls pass: the warning is logged once per kind, not per poll.
	time.Sleep(100 * time.Millisecond)
	logs := h.logs.String()
	if n := strings.Count(logs, "CRD not installed"); n != 4 {
		t.Errorf("%d CRD warnings, want 4 (one per missing kind):\n%s", n, logs)
	}
	if !strings.Contains(logs, "kind=VirtualService") || !strings.Contains(logs, "resource=virtualservices.networking.istio.io") {
		t.Errorf("warning does not name the missing CRD:\n%s", logs)
	}

	h.disc.set(crdResources(config.AuthorizationPolicy, config.PeerAuthentication, config.RequestAuthentication))
	h.eventually("VirtualService after its CRD appears", func() bool { return h.get(config.VirtualService, ns, "reviews") != nil })
	h.eventually("the pickup to be logged after sync", func() bool {
		return strings.Contains(h.logs.String(), `msg="CRD installed; now watching it" source=kube kind=VirtualService`)
	})
	h.eventually("MissingCRDs to shrink", func() bool {
		return equalKinds(h.src.MissingCRDs(), []config.Kind{config.AuthorizationPolicy, config.PeerAuthentication, config.RequestAuthentication})
	})

	// The newly started informer follows changes like any other.
	if err := h.createCRD(newVirtualService("ratings", "1", "ratings")); err != nil {
		t.Fatal(err)
	}
	h.eventually("VirtualService created after pickup", func() bool { return h.get(config.VirtualService, ns, "ratings") != nil })

	h.disc.set(crdResources())
	h.eventually("security CRDs after they appear", func() bool {
		return h.get(config.AuthorizationPolicy, ns, "allow") != nil && h.get(config.PeerAuthentication, ns, "strict") != nil
	})
	h.eventually("MissingCRDs to empty", func() bool { return len(h.src.MissingCRDs()) == 0 })
}

func equalKinds(a, b []config.Kind) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestInvalidObjectIsRejectedAndLastGoodKept(t *testing.T) {
	h := newHarness(t, harnessOpts{istio: []runtime.Object{newVirtualService("reviews", "1", "reviews")}})
	key := config.Key{Kind: config.VirtualService, Namespace: ns, Name: "reviews"}

	// An update that breaks the object: the store keeps version 1.
	if err := h.updateCRD(invalidVirtualService("reviews", "2")); err != nil {
		t.Fatal(err)
	}
	h.eventually("rejection", func() bool { return len(h.src.Rejected()) == 1 })
	r := h.src.Rejected()[0]
	if r.Key() != key || r.Field != "spec.http[0].route[0].destination.host" || r.ResourceVersion != "2" || r.Message == "" {
		t.Errorf("rejected = %+v", r)
	}
	if c := h.store.Get(key); c == nil || c.ResourceVersion != "1" {
		t.Fatalf("store has %v, want the last good version 1", c)
	}

	// Still broken in a new version: still rejected, logged only once.
	if err := h.updateCRD(invalidVirtualService("reviews", "3")); err != nil {
		t.Fatal(err)
	}
	h.eventually("rejection of version 3", func() bool {
		r := h.src.Rejected()
		return len(r) == 1 && r[0].ResourceVersion == "3"
	})
	logs := h.logs.String()
	if n := strings.Count(logs, "rejected invalid object"); n != 1 {
		t.Errorf("%d rejection warnings, want 1:\n%s", n, logs)
	}
	if !strings.Contains(logs, "name=reviews") || !strings.Contains(logs, "field=spec.http[0].route[0].destination.host") {
		t.Errorf("warning does not name the object and field:\n%s", logs)
	}

	// An object that was never valid is not stored at all.
	if err := h.createCRD(invalidVirtualService("broken", "1")); err != nil {
		t.Fatal(err)
	}
	h.eventually("rejection of a new object", func() bool { return len(h.src.Rejected()) == 2 })
	if h.get(config.VirtualService, ns, "broken") != nil {
		t.Error("invalid object stored")
	}

	// Fixing one and deleting the other clears both from Rejected.
	if err := h.updateCRD(newVirtualService("reviews", "4", "reviews.fixed")); err != nil {
		t.Fatal(err)
	}
	if err := h.deleteCRD(config.VirtualService, "broken"); err != nil {
		t.Fatal(err)
	}
	h.eventually("fix and delete", func() bool {
		c := h.store.Get(key)
		return len(h.src.Rejected()) == 0 && c != nil && c.ResourceVersion == "4"
	})
}

func TestResyncDoesNotRepublish(t *testing.T) {
	kube, istio := everyKind()
	h := newHarness(t, harnessOpts{kube: kube, istio: istio, resync: time.Second}) // client-go's minimum
	var mu sync.Mutex
	var events []store.Event
	h.store.AddHandler(func(e store.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	})
	// A second handler proves a resync did happen.
	var resyncs atomic.Int32
	_, err := h.src.kube.Core().V1().Services().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, _ any) { resyncs.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	h.eventually("a resync", func() bool { return resyncs.Load() > 0 })
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 0 {
		t.Errorf("resync produced %d store events, first %v", len(events), events[0].Key())
	}
}

func TestTombstoneDeletes(t *testing.T) {
	st := store.New()
	src, err := New(Options{KubeClient: kubefake.NewClientset(), Dynamic: newDynamicFake(), Store: st})
	if err != nil {
		t.Fatal(err)
	}
	svc := newService("reviews", "1")
	src.upsert(config.Service, svc)
	key := config.Key{Kind: config.Service, Namespace: ns, Name: "reviews"}
	if st.Get(key) == nil {
		t.Fatal("upsert did not store")
	}
	// The final state may be missing from a tombstone; its key is enough.
	src.remove(config.Service, cache.DeletedFinalStateUnknown{Key: "default/reviews"})
	if st.Get(key) != nil {
		t.Error("tombstone did not delete")
	}
}

func TestNewRequiresClientsAndStore(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Error("New with no clients succeeded")
	}
}

// rawDR is a DestinationRule as the API server may hold it under a permissive or newer CRD schema.
func rawDR(name, rv string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.istio.io/v1", "kind": "DestinationRule",
		"metadata": map[string]any{"namespace": ns, "name": name, "resourceVersion": rv, "uid": "uid-" + name},
		"spec":     spec,
	}}
}

func lbSpec(host, lb string) map[string]any {
	return map[string]any{"host": host, "trafficPolicy": map[string]any{"loadBalancer": map[string]any{"simple": lb}}}
}

func TestUndecodableObjectIsRejectedAlone(t *testing.T) {
	bad := rawDR("bad", "1", map[string]any{"host": int64(42)})
	h := newHarness(t, harnessOpts{istio: []runtime.Object{
		&networkingv1.DestinationRule{ObjectMeta: meta("reviews", "1"), Spec: networking.DestinationRule{Host: "reviews"}},
		&networkingv1.DestinationRule{ObjectMeta: meta("ratings", "1"), Spec: networking.DestinationRule{Host: "ratings"}},
	}})
	key := func(name string) config.Key {
		return config.Key{Kind: config.DestinationRule, Namespace: ns, Name: name}
	}
	rejected := func(name string) *RejectedObject {
		for _, r := range h.src.Rejected() {
			if r.Key() == key(name) {
				return &r
			}
		}
		return nil
	}
	check := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	// A new object of the wrong JSON type: rejected, not stored, named with its field.
	check(h.createRaw(bad))
	h.eventually("rejection of bad", func() bool { return rejected("bad") != nil })
	if r := rejected("bad"); r.Field != "spec.host" || r.ResourceVersion != "1" ||
		r.Message != `cannot decode 42: json: cannot unmarshal number into Go value of type string` {
		t.Errorf("rejected = %+v", *r)
	}
	if h.get(config.DestinationRule, ns, "bad") != nil {
		t.Error("an object never decoded is in the store")
	}

	// A good object turning undecodable (an enum value from newer Istio): its last good version stays.
	check(h.updateRaw(rawDR("reviews", "2", lbSpec("reviews", "FUTURE_LB"))))
	h.eventually("rejection of reviews", func() bool { return rejected("reviews") != nil })
	r := rejected("reviews")
	if r.Field != "spec.trafficPolicy.loadBalancer.simple" || r.ResourceVersion != "2" || !strings.Contains(r.Message, "FUTURE_LB") {
		t.Errorf("rejected = %+v", *r)
	}
	if c := h.get(config.DestinationRule, ns, "reviews"); c == nil || c.ResourceVersion != "1" {
		t.Fatalf("store has %v, want the last good version 1", c)
	}

	// The kind keeps flowing: update, create and delete of other objects.
	check(h.updateRaw(rawDR("ratings", "2", lbSpec("ratings", "LEAST_REQUEST"))))
	check(h.createCRD(&networkingv1.DestinationRule{ObjectMeta: meta("details", "1"), Spec: networking.DestinationRule{Host: "details"}}))
	h.eventually("update and create after the bad objects", func() bool {
		c := h.get(config.DestinationRule, ns, "ratings")
		return c != nil && c.ResourceVersion == "2" && h.get(config.DestinationRule, ns, "details") != nil
	})
	lb := h.get(config.DestinationRule, ns, "ratings").Spec.(*networking.DestinationRule).GetTrafficPolicy().GetLoadBalancer().GetSimple()
	if lb != networking.LoadBalancerSettings_LEAST_REQUEST {
		t.Errorf("ratings load balancer = %v, want LEAST_REQUEST", lb)
	}
	check(h.deleteCRD(config.DestinationRule, "details"))
	h.eventually("delete after the bad objects", func() bool { return h.get(config.DestinationRule, ns, "details") == nil })

	// Still undecodable in a new version: rejected, logged once per object.
	check(h.updateRaw(rawDR("reviews", "3", lbSpec("reviews", "FUTURE_LB"))))
	h.eventually("rejection of version 3", func() bool { return rejected("reviews").ResourceVersion == "3" })
	logs := h.logs.String()
	if n := strings.Count(logs, "rejected object that cannot be decoded"); n != 2 {
		t.Errorf("%d decode warnings, want 2 (bad and reviews):\n%s", n, logs)
	}
	if !strings.Contains(logs, "name=reviews resourceVersion=2 field=spec.trafficPolicy.loadBalancer.simple") {
		t.Errorf("warning does not name the object and field:\n%s", logs)
	}

	// The cache holds a marker, not the unstructured object, and the marker's copy is its own.
	for _, obj := range h.src.informer(config.DestinationRule).GetStore().List() {
		switch o := obj.(type) {
		case *networkingv1.DestinationRule:
		case *undecodable:
			c := o.DeepCopyObject().(*undecodable)
			c.Labels = map[string]string{"x": "y"}
			if o.Labels["x"] == "y" {
				t.Error("DeepCopyObject shares labels")
			}
		default:
			t.Errorf("informer cache holds %T", obj)
		}
	}

	// Deleting undecodable objects deletes them and clears their rejection; fixing one serves it.
	check(h.deleteCRD(config.DestinationRule, "reviews"))
	check(h.updateRaw(rawDR("bad", "2", map[string]any{"host": "bad"})))
	h.eventually("delete of reviews and fix of bad", func() bool {
		c := h.get(config.DestinationRule, ns, "bad")
		return h.get(config.DestinationRule, ns, "reviews") == nil && c != nil && c.ResourceVersion == "2" && len(h.src.Rejected()) == 0
	})
}

func TestUndecodableInInitialList(t *testing.T) {
	bad := rawDR("bad", "1", lbSpec("bad", "FUTURE_LB"))
	h := newHarness(t, harnessOpts{istio: []runtime.Object{
		bad,
		&networkingv1.DestinationRule{ObjectMeta: meta("reviews", "1"), Spec: networking.DestinationRule{Host: "reviews"}},
	}})
	// newHarness waited for sync: the bad object did not hold it back.
	if h.get(config.DestinationRule, ns, "reviews") == nil || h.get(config.DestinationRule, ns, "bad") != nil {
		t.Errorf("store after sync: reviews %v, bad %v", h.get(config.DestinationRule, ns, "reviews"), h.get(config.DestinationRule, ns, "bad"))
	}
	if r := h.src.Rejected(); len(r) != 1 || r[0].Name != "bad" || r[0].Field != "spec.trafficPolicy.loadBalancer.simple" {
		t.Errorf("Rejected = %+v", r)
	}
	if err := h.deleteCRD(config.DestinationRule, "bad"); err != nil {
		t.Fatal(err)
	}
	h.eventually("rejection cleared by the delete", func() bool { return len(h.src.Rejected()) == 0 })
}

func TestDecodeCRDNamesTheField(t *testing.T) {
	obj := func(kind config.Kind, spec any) *unstructured.Unstructured {
		ki, _ := config.Info(kind)
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": ki.APIVersion(), "kind": string(kind),
			"metadata": map[string]any{"name": "x", "namespace": ns, "resourceVersion": "7"}, "spec": spec}}
	}
	route := map[string]any{"route": []any{map[string]any{"destination": map[string]any{"host": "reviews"}}}}
	for _, tc := range []struct {
		name  string
		in    *unstructured.Unstructured
		field string // empty: decodes
	}{
		{"unknown enum", obj(config.DestinationRule, lbSpec("reviews", "FUTURE_LB")), "spec.trafficPolicy.loadBalancer.simple"},
		{"wrong type", obj(config.DestinationRule, map[string]any{"host": true}), "spec.host"},
		{"spec not an object", obj(config.DestinationRule, "reviews"), "spec"},
		{"in a list", obj(config.VirtualService, map[string]any{"hosts": []any{"reviews"},
			"http": []any{route, map[string]any{"timeout": int64(5), "route": route["route"]}}}), "spec.http[1].timeout"},
		{"unknown field is ignored", obj(config.DestinationRule, map[string]any{"host": "reviews", "futureField": map[string]any{"a": int64(1)}}),
			""},
		{"status is not read", func() *unstructured.Unstructured {
			u := obj(config.DestinationRule, map[string]any{"host": "reviews"})
			u.Object["status"] = map[string]any{"conditions": "not a list"}
			return u
		}(), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := decodeCRD(config.Kind(tc.in.GetKind()), tc.in)
			u, isBad := out.(*undecodable)
			switch {
			case tc.field == "" && isBad:
				t.Errorf("rejected: field %q: %s", u.Field, u.Err)
			case tc.field != "" && !isBad:
				t.Errorf("decoded to %T, want a rejection at %s", out, tc.field)
			case isBad && (u.Field != tc.field || u.Err == "" || u.Name != "x" || u.Namespace != ns || u.ResourceVersion != "7"):
				t.Errorf("undecodable = %+v, want field %s", u, tc.field)
			}
		})
	}
}

// A field Sextant accepts but does not implement is recorded per object and logged once per generation:
// a new resourceVersion of the same generation (a label or status change) stays quiet.
func TestWarningsPerGeneration(t *testing.T) {
	vs := func(rv string, gen int64, statPrefix bool) *networkingv1.VirtualService {
		o := newVirtualService("reviews", rv, "reviews")
		o.Generation = gen
		if statPrefix {
			o.Spec.Tcp = []*networking.TCPRoute{{Match: []*networking.L4MatchAttributes{{SourceSubnet: "10.1.0.0/16"}},
				Route: []*networking.RouteDestination{{Destination: &networking.Destination{Host: "reviews"}}}}}
		}
		return o
	}
	h := newHarness(t, harnessOpts{istio: []runtime.Object{vs("1", 1, true)}})
	h.eventually("warning", func() bool { return len(h.src.Warnings()) == 1 })
	w := h.src.Warnings()[0]
	if !w.Warning || w.File != "kube" || w.Kind != "VirtualService" || w.Namespace != ns || w.Name != "reviews" ||
		w.Field != "spec.tcp[0].match[0].sourceSubnet" {
		t.Errorf("warning = %+v", w)
	}
	if h.get(config.VirtualService, ns, "reviews") == nil {
		t.Fatal("object with a warning not served")
	}
	count := func() int { return strings.Count(h.logs.String(), "config field not implemented") }

	if err := h.updateCRD(vs("2", 1, true)); err != nil {
		t.Fatal(err)
	}
	h.eventually("version 2", func() bool {
		c := h.get(config.VirtualService, ns, "reviews")
		return c != nil && c.ResourceVersion == "2"
	})
	if n := count(); n != 1 {
		t.Errorf("logged %d times for one generation, want 1:\n%s", n, h.logs)
	}
	if err := h.updateCRD(vs("3", 2, true)); err != nil {
		t.Fatal(err)
	}
	h.eventually("generation 2 logged", func() bool { return count() == 2 })
	if !strings.Contains(h.logs.String(), "field=spec.tcp[0].match[0].sourceSubnet") {
		t.Errorf("log does not name the field:\n%s", h.logs)
	}

	// The field removed, then the object deleted: nothing is left.
	if err := h.updateCRD(vs("4", 3, false)); err != nil {
		t.Fatal(err)
	}
	h.eventually("warning cleared", func() bool { return len(h.src.Warnings()) == 0 })
	if err := h.updateCRD(vs("5", 4, true)); err != nil {
		t.Fatal(err)
	}
	h.eventually("warning back", func() bool { return len(h.src.Warnings()) == 1 })
	if err := h.deleteCRD(config.VirtualService, "reviews"); err != nil {
		t.Fatal(err)
	}
	h.eventually("deleted", func() bool { return len(h.src.Warnings()) == 0 })
}

// Objects of kinds Sextant does not read (an EnvoyFilter, Gateway API routes) are counted at start and logged
// with their count; kinds the cluster does not serve, or serves without objects, are not reported.
func TestUnreadKindsCounted(t *testing.T) {
	obj := func(apiVersion, kind, name string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{}}}
		u.SetAPIVersion(apiVersion)
		u.SetKind(kind)
		u.SetNamespace(ns)
		u.SetName(name)
		return u
	}
	h := newHarness(t, harnessOpts{unread: []*unstructured.Unstructured{
		obj("networking.istio.io/v1alpha3", "EnvoyFilter", "lua"),
		obj("networking.istio.io/v1alpha3", "EnvoyFilter", "ratelimit"),
		obj("gateway.networking.k8s.io/v1", "HTTPRoute", "web"),
	}})
	h.eventually("unread kinds counted", func() bool { return len(h.src.Unread()) == 2 })
	got := h.src.Unread()
	want := []UnreadCount{{Kind: "EnvoyFilter", APIVersion: "networking.istio.io/v1alpha3", Count: 2},
		{Kind: "HTTPRoute", APIVersion: "gateway.networking.k8s.io/v1", Count: 1}}
	if !slices.Equal(got, want) {
		t.Errorf("Unread() = %+v, want %+v", got, want)
	}
	logs := h.logs.String()
	if !strings.Contains(logs, "kind not read by Sextant found in the cluster") || !strings.Contains(logs, "kind=EnvoyFilter") ||
		!strings.Contains(logs, "count=2") {
		t.Errorf("not logged with kind and count:\n%s", logs)
	}
	if strings.Contains(logs, "kind=Telemetry") {
		t.Errorf("a kind the cluster does not serve was reported:\n%s", logs)
	}
}
