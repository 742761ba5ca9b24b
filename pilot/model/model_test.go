package model_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/source/file"
	"github.com/sextantmesh/sextant/pilot/store"
)

func loadBookinfo(t *testing.T) *model.PushContext {
	t.Helper()
	st := store.New()
	src := file.New(file.Options{Dir: "../../examples/bookinfo", Store: st})
	if err := src.Load(); err != nil {
		t.Fatal(err)
	}
	if errs := src.Errors(); len(errs) > 0 {
		t.Fatalf("example has errors: %v", errs)
	}
	return model.Build(st, mesh.Default())
}

func TestBookinfoServicesAndEndpoints(t *testing.T) {
	ps := loadBookinfo(t)
	reviews := ps.ServiceForHostname("bookinfo", "reviews.bookinfo.svc.cluster.local")
	if reviews == nil {
		t.Fatal("reviews not found")
	}
	if got := reviews.Addresses; !slices.Equal(got, []string{"10.96.0.30"}) {
		t.Errorf("addresses = %v", got)
	}
	if len(reviews.Ports) != 1 || reviews.Ports[0].Port != 9080 || reviews.Ports[0].Protocol != model.ProtocolHTTP {
		t.Errorf("ports = %+v", reviews.Ports[0])
	}
	eps := ps.EndpointsForPort(reviews, 9080, nil)
	var got []string
	for _, ep := range eps {
		got = append(got, fmt.Sprintf("%s:%d %s %s %s %s", ep.Address, ep.Port, ep.Labels["version"], ep.Locality, ep.Health, ep.ServiceAccount))
	}
	want := []string{
		"10.1.0.30:9080 v1 eu-west1/eu-west1-a/ HEALTHY bookinfo-reviews",
		"10.1.0.31:9080 v2 eu-west1/eu-west1-b/ HEALTHY bookinfo-reviews",
		"10.1.0.32:9080 v3 eu-west1/eu-west1-a/ HEALTHY bookinfo-reviews",
	}
	if !slices.Equal(got, want) {
		t.Errorf("endpoints:\n got %q\nwant %q", got, want)
	}
	if v2 := ps.EndpointsForPort(reviews, 9080, map[string]string{"version": "v2"}); len(v2) != 1 || v2[0].Address != "10.1.0.31" {
		t.Errorf("subset v2 = %v", v2)
	}

	ext := ps.ServiceForHostname("bookinfo", "httpbin.org")
	if ext == nil || !ext.MeshExternal || ext.Resolution != model.DNSLB || ext.Ports[0].Protocol != model.ProtocolTLS {
		t.Fatalf("httpbin.org = %+v", ext)
	}
	if eps := ps.EndpointsForPort(ext, 443, nil); len(eps) != 1 || eps[0].Address != "httpbin.org" {
		t.Errorf("DNS endpoint = %v", eps)
	}

	// A Kubernetes Service selecting a WorkloadEntry gets it as an endpoint, with the WorkloadEntry's locality.
	cart := ps.ServiceForHostname("shop", "cart.shop.svc.cluster.local")
	var cartEps []string
	for _, ep := range ps.EndpointsForPort(cart, 8080, nil) {
		cartEps = append(cartEps, ep.Address+" "+ep.Locality)
	}
	if !slices.Equal(cartEps, []string{"10.1.1.10 eu-west1/eu-west1-a/", "10.2.0.5 eu-west1/eu-west1-c/"}) {
		t.Errorf("cart endpoints = %q", cartEps)
	}
	// A ServiceEntry with a workloadSelector picks WorkloadEntries.
	payments := ps.ServiceForHostname("shop", "payments.shop.internal")
	if eps := ps.EndpointsForPort(payments, 8443, nil); len(eps) != 1 || eps[0].Address != "10.2.0.9" {
		t.Errorf("payments endpoints = %v", eps)
	}
	if ps.ServiceCount() != 7 || ps.EndpointCount() != 10 || ps.WorkloadCount() != 9 {
		t.Errorf("counts: services %d endpoints %d workloads %d", ps.ServiceCount(), ps.EndpointCount(), ps.WorkloadCount())
	}
}

func TestBookinfoWorkloads(t *testing.T) {
	ps := loadBookinfo(t)
	w := ps.WorkloadByAddress("", "10.1.0.31")
	if w == nil || w.UID != "Kubernetes//Pod/bookinfo/reviews-v2-0003" || w.ServiceAccount != "bookinfo-reviews" || !w.Ready {
		t.Fatalf("workload by address = %+v", w)
	}
	if ps.Workload(w.UID) != w {
		t.Error("by uid differs from by address")
	}
	var uids []string
	for _, w := range ps.WorkloadsForService("shop/cart.shop.svc.cluster.local") {
		uids = append(uids, w.UID)
	}
	want := []string{"Kubernetes//Pod/shop/cart-5d9c7", "Kubernetes/networking.istio.io/WorkloadEntry/shop/cart-vm-1"}
	if !slices.Equal(uids, want) {
		t.Errorf("workloads for cart = %q", uids)
	}
}

func TestBookinfoPolicies(t *testing.T) {
	ps := loadBookinfo(t)
	reviews := ps.ServiceForHostname("bookinfo", "reviews.bookinfo.svc.cluster.local")
	dr := ps.DestinationRule("bookinfo", reviews)
	if dr == nil || len(dr.Spec.Subsets) != 3 || dr.Host != "reviews.bookinfo.svc.cluster.local" {
		t.Fatalf("DestinationRule = %+v", dr)
	}
	vs := ps.VirtualServiceForHost("bookinfo", model.MeshGateway, "reviews.bookinfo.svc.cluster.local")
	if vs == nil || vs.Name != "reviews" || len(vs.Spec.Http) != 2 {
		t.Fatalf("VirtualService = %+v", vs)
	}
	if sc := ps.Sidecar("bookinfo", map[string]string{"app": "reviews"}); sc == nil || sc.Name != "default" {
		t.Errorf("Sidecar = %v", sc)
	}
	ap := ps.AuthorizationPolicies("bookinfo", map[string]string{"app": "reviews"})
	if len(ap.Allow) != 1 || len(ap.Deny) != 1 {
		t.Errorf("reviews policies = %+v", ap)
	}
	ap = ps.AuthorizationPolicies("bookinfo", map[string]string{"app": "ratings"})
	if len(ap.Allow) != 0 || len(ap.Deny) != 1 {
		t.Errorf("ratings policies = %+v", ap)
	}
	if mtls := ps.PeerAuthentication("bookinfo", nil); mtls.Mode != model.MTLSStrict {
		t.Errorf("mesh-wide STRICT not applied: %+v", mtls)
	}
}

func TestServiceVisibility(t *testing.T) {
	m := newMesh(t)
	m.service("a", "private", "10.0.0.1", nil, map[string]string{model.ExportToAnnotation: "."}, httpPort(80))
	m.service("a", "shared", "10.0.0.2", nil, map[string]string{model.ExportToAnnotation: "a,c"}, httpPort(80))
	// The same ServiceEntry host in two namespaces: each namespace sees its own.
	for _, ns := range []string{"a", "b"} {
		m.put(config.ServiceEntry, ns, "ext", nil,
			&networking.ServiceEntry{Hosts: []string{"api.example.com"}, Resolution: networking.ServiceEntry_DNS,
				Ports: []*networking.ServicePort{{Number: 443, Name: "tls", Protocol: "TLS"}}})
	}
	ps := model.Build(m.store, mesh.Default())
	cases := []struct {
		ns, host string
		wantNS   string
	}{
		{"a", "private.a.svc.cluster.local", "a"},
		{"b", "private.a.svc.cluster.local", ""},
		{"c", "shared.a.svc.cluster.local", "c"[:0] + "a"},
		{"b", "shared.a.svc.cluster.local", ""},
		{"a", "api.example.com", "a"},
		{"b", "api.example.com", "b"},
		{"z", "api.example.com", "a"}, // oldest wins elsewhere
	}
	for _, c := range cases {
		s := ps.ServiceForHostname(c.ns, c.host)
		got := ""
		if s != nil {
			got = s.Namespace
		}
		if got != c.wantNS {
			t.Errorf("proxy in %s, host %s: got service in %q, want %q", c.ns, c.host, got, c.wantNS)
		}
	}
}

func TestDestinationRulePrecedence(t *testing.T) {
	m := newMesh(t)
	m.service("svc-ns", "api", "10.0.0.1", nil, nil, httpPort(80))
	m.destinationRule("istio-system", "root", "*.svc.cluster.local", nil, "root")
	m.destinationRule("svc-ns", "owner", "api", nil, "owner")
	m.destinationRule("client", "local", "api.svc-ns.svc.cluster.local", nil, "local")
	m.destinationRule("svc-ns", "private", "api.svc-ns.svc.cluster.local", []string{"."}, "private")
	ps := model.Build(m.store, mesh.Default())
	svc := ps.ServiceForHostname("client", "api.svc-ns.svc.cluster.local")
	cases := map[string]string{
		"client": "local",   // the proxy's own namespace first
		"other":  "owner",   // then the service's namespace (exported)
		"svc-ns": "private", // in the service's namespace, the older of two rules for the host wins... merged
	}
	for proxyNS, want := range cases {
		dr := ps.DestinationRule(proxyNS, svc)
		if dr == nil {
			t.Fatalf("%s: no rule", proxyNS)
		}
		names := []string{}
		for _, s := range dr.Spec.Subsets {
			names = append(names, s.Name)
		}
		if proxyNS == "svc-ns" {
			// owner and private target the same host in the same namespace: merged, oldest first.
			if !slices.Equal(names, []string{"owner", "private"}) {
				t.Errorf("merged subsets = %v", names)
			}
			continue
		}
		if names[0] != want {
			t.Errorf("proxy in %s: got rule with subsets %v, want %s", proxyNS, names, want)
		}
	}
	// Another service with no namespace rule falls back to the root namespace wildcard.
	m.service("x", "web", "10.0.0.2", nil, nil, httpPort(80))
	ps = model.Build(m.store, mesh.Default())
	web := ps.ServiceForHostname("x", "web.x.svc.cluster.local")
	if dr := ps.DestinationRule("x", web); dr == nil || dr.Spec.Subsets[0].Name != "root" {
		t.Errorf("root fallback = %+v", dr)
	}
}

func TestPeerAuthenticationInheritance(t *testing.T) {
	m := newMesh(t)
	put := func(ns, name string, sel map[string]string, mode security.PeerAuthentication_MutualTLS_Mode,
		ports map[uint32]security.PeerAuthentication_MutualTLS_Mode) {
		pa := &security.PeerAuthentication{Mtls: &security.PeerAuthentication_MutualTLS{Mode: mode}}
		if sel != nil {
			pa.Selector = &typev1beta1.WorkloadSelector{MatchLabels: sel}
		}
		for p, pm := range ports {
			if pa.PortLevelMtls == nil {
				pa.PortLevelMtls = map[uint32]*security.PeerAuthentication_MutualTLS{}
			}
			pa.PortLevelMtls[p] = &security.PeerAuthentication_MutualTLS{Mode: pm}
		}
		m.put(config.PeerAuthentication, ns, name, nil, pa)
	}
	put("istio-system", "mesh", nil, security.PeerAuthentication_MutualTLS_STRICT, nil)
	put("legacy", "ns", nil, security.PeerAuthentication_MutualTLS_PERMISSIVE, nil)
	put("legacy", "db", map[string]string{"app": "db"}, security.PeerAuthentication_MutualTLS_UNSET,
		map[uint32]security.PeerAuthentication_MutualTLS_Mode{5432: security.PeerAuthentication_MutualTLS_DISABLE})
	ps := model.Build(m.store, mesh.Default())
	if got := ps.PeerAuthentication("prod", nil).Mode; got != model.MTLSStrict {
		t.Errorf("prod = %s", got)
	}
	if got := ps.PeerAuthentication("legacy", map[string]string{"app": "web"}).Mode; got != model.MTLSPermissive {
		t.Errorf("legacy web = %s", got)
	}
	db := ps.PeerAuthentication("legacy", map[string]string{"app": "db"})
	if db.Mode != model.MTLSPermissive || db.ModeForPort(5432) != model.MTLSDisable || db.ModeForPort(80) != model.MTLSPermissive {
		t.Errorf("legacy db = %+v", db)
	}
}

func TestUpdateEndpointOnlyIsIncremental(t *testing.T) {
	m := newMesh(t)
	m.node("n1", "r", "z")
	m.service("ns", "api", "10.0.0.1", map[string]string{"app": "api"}, nil, httpPort(80))
	// The pods share a service account, as a deployment's do: a new one would change the service's identities.
	m.podAs("ns", "api-1", "10.1.0.1", "n1", true, map[string]string{"app": "api"}, "api")
	m.slice("ns", "api-x", "api", "http", 80, sliceEndpoint{ip: "10.1.0.1", pod: "api-1", node: "n1", ready: true})
	ps := model.Build(m.store, mesh.Default())

	key := config.Key{Kind: config.EndpointSlice, Namespace: "ns", Name: "api-x"}
	old := m.store.Get(key)
	m.podAs("ns", "api-2", "10.1.0.2", "n1", true, map[string]string{"app": "api"}, "api")
	m.slice("ns", "api-x", "api", "http", 80, sliceEndpoint{ip: "10.1.0.1", pod: "api-1", node: "n1", ready: true},
		sliceEndpoint{ip: "10.1.0.2", pod: "api-2", node: "n1", ready: false})
	next, res := model.Update(ps, m.store, []model.Change{
		{Key: key, Old: old, New: m.store.Get(key)},
		{Key: config.Key{Kind: config.Pod, Namespace: "ns", Name: "api-2"},
			New: m.store.Get(config.Key{Kind: config.Pod, Namespace: "ns", Name: "api-2"})},
	})
	if res.Full {
		t.Error("endpoint-only change asked for a full push")
	}
	if _, ok := res.ServicesUpdated["ns/api.ns.svc.cluster.local"]; !ok || len(res.ServicesUpdated) != 1 {
		t.Errorf("ServicesUpdated = %v", res.ServicesUpdated)
	}
	if len(next.Rebuilt) != 0 {
		t.Errorf("rebuilt %v for an endpoint change", next.Rebuilt)
	}
	eps := next.EndpointsForPort(next.ServiceForHostname("ns", "api.ns.svc.cluster.local"), 80, nil)
	if len(eps) != 2 || eps[1].Health != model.Unhealthy {
		t.Errorf("endpoints = %+v", eps)
	}
	// The old snapshot is untouched.
	if n := len(ps.EndpointsForPort(ps.ServiceForHostname("ns", "api.ns.svc.cluster.local"), 80, nil)); n != 1 {
		t.Errorf("previous snapshot changed: %d endpoints", n)
	}
	if next.Version != ps.Version+1 {
		t.Errorf("version %d after %d", next.Version, ps.Version)
	}
}

// TestIncrementalMatchesFullBuild applies random changes one batch at a time and checks, after each batch, that
// the incrementally updated snapshot equals a snapshot built from scratch.
func TestIncrementalMatchesFullBuild(t *testing.T) {
	// From a cluster, a slice's endpoint waits for its pod; from files it does not. Slices here name pods
	// that come and go.
	for _, source := range []string{"file:mesh.yaml", config.KubeSource} {
		t.Run(source, func(t *testing.T) { testIncrementalMatchesFullBuild(t, source) })
	}
}

func testIncrementalMatchesFullBuild(t *testing.T, source string) {
	rng := rand.New(rand.NewPCG(1, 2))
	m := newMesh(t)
	m.source = source
	for i := range 3 {
		m.node(fmt.Sprintf("n%d", i), "r", fmt.Sprintf("z%d", i))
	}
	m.namespace("ns0", nil)
	m.namespace("ns1", nil)
	var changes []model.Change
	m.store.AddHandler(func(ev store.Event) { changes = append(changes, model.Change{Key: ev.Key(), Old: ev.Old, New: ev.New}) })
	ps := model.Build(m.store, mesh.Default())
	apps := []string{"a", "b", "c"}
	for batch := range 300 {
		changes = nil
		for range 1 + rng.IntN(4) {
			ns := fmt.Sprintf("ns%d", rng.IntN(2))
			app := apps[rng.IntN(len(apps))]
			switch op := rng.IntN(10); op {
			case 0, 1:
				m.service(ns, app, fmt.Sprintf("10.0.%d.%d", rng.IntN(2), rng.IntN(200)), map[string]string{"app": app}, nil,
					httpPort(int32(80+rng.IntN(2))))
			case 2:
				m.del(config.Service, ns, app)
			case 3, 4, 5:
				name := fmt.Sprintf("%s-%d", app, rng.IntN(4))
				m.pod(ns, name, fmt.Sprintf("10.1.%d.%d", rng.IntN(2), rng.IntN(250)), fmt.Sprintf("n%d", rng.IntN(3)), rng.IntN(3) > 0,
					map[string]string{"app": apps[rng.IntN(len(apps))], "version": fmt.Sprint(rng.IntN(2))})
			case 6:
				m.del(config.Pod, ns, fmt.Sprintf("%s-%d", app, rng.IntN(4)))
			case 7:
				var eps []sliceEndpoint
				for i := range rng.IntN(3) {
					pod := fmt.Sprintf("%s-%d", app, i)
					ip := fmt.Sprintf("10.1.9.%d", i)
					if pc := m.store.Get(config.Key{Kind: config.Pod, Namespace: ns, Name: pod}); pc != nil {
						ip = pc.Spec.(*corev1.Pod).Status.PodIP
					}
					eps = append(eps, sliceEndpoint{ip: ip, pod: pod, node: fmt.Sprintf("n%d", i%3), ready: rng.IntN(2) == 0})
				}
				m.slice(ns, app+"-slice", app, "http", 80+int32(rng.IntN(2)), eps...)
			case 8:
				m.node(fmt.Sprintf("n%d", rng.IntN(3)), "r", fmt.Sprintf("z%d", rng.IntN(5)))
			case 9:
				m.put(config.WorkloadEntry, ns, "vm-"+app, nil, &networking.WorkloadEntry{Address: fmt.Sprintf("10.2.0.%d", rng.IntN(50)),
					Labels: map[string]string{"app": apps[rng.IntN(len(apps))]}})
				if rng.IntN(2) == 0 {
					m.put(config.ServiceEntry, ns, "se-"+app, nil, &networking.ServiceEntry{Hosts: []string{app + ".example.internal"},
						Ports: []*networking.ServicePort{{Number: 80, Name: "http"}}, Resolution: networking.ServiceEntry_STATIC,
						WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": app}}})
				}
			}
		}
		ps, _ = model.Update(ps, m.store, slices.Clone(changes))
		full := model.Build(m.store, mesh.Default())
		if got, want := dump(ps), dump(full); got != want {
			t.Fatalf("batch %d: incremental snapshot differs from a full build\nincremental:\n%s\nfull:\n%s", batch, got, want)
		}
	}
}

// dump renders what a snapshot says about services, endpoints and workloads, in a stable order.
func dump(ps *model.PushContext) string {
	var b strings.Builder
	for _, s := range ps.AllServices() {
		fmt.Fprintf(&b, "svc %s %v %v\n", s.Key(), s.Addresses, s.Resolution)
		se := ps.Endpoints(s.Key())
		if len(se.WaitingForPods) > 0 {
			fmt.Fprintf(&b, "  waiting for %v\n", se.WaitingForPods)
		}
		for _, p := range s.Ports {
			for _, ep := range se.ByPort[p.Port] {
				fmt.Fprintf(&b, "  ep %d %s:%d %s %s %v %s\n", p.Port, ep.Address, ep.Port, ep.Health, ep.Locality, ep.Labels, ep.ServiceAccount)
			}
		}
		for _, w := range ps.WorkloadsForService(s.Key()) {
			fmt.Fprintf(&b, "  wl %s\n", w.UID)
		}
	}
	// The per-namespace and per-hostname indexes, in their order.
	var namespaces, hosts []string
	for _, s := range ps.AllServices() {
		namespaces = append(namespaces, s.Namespace)
		hosts = append(hosts, s.Hostname)
	}
	slices.Sort(namespaces)
	for _, ns := range slices.Compact(namespaces) {
		fmt.Fprintf(&b, "ns %s:", ns)
		for _, s := range ps.ServicesInNamespace(ns) {
			fmt.Fprintf(&b, " %s(%s)", s.Hostname, s.Source)
		}
		b.WriteString("\n")
	}
	for _, h := range slices.Compact(hosts) {
		fmt.Fprintf(&b, "host %s:", h)
		for _, s := range ps.ServicesForHostname(h) {
			fmt.Fprintf(&b, " %s", s.Source)
		}
		b.WriteString("\n")
	}
	var wls []string
	ps.AllWorkloads(func(w *model.Workload) bool {
		wls = append(wls, fmt.Sprintf("wl %s %v %s %v %v", w.UID, w.Addresses, w.Locality, w.Ready, w.Labels))
		for _, a := range w.Addresses {
			wls = append(wls, fmt.Sprintf("  address %s → %s", a, ps.WorkloadByAddress(w.Network, a).UID))
		}
		return true
	})
	slices.Sort(wls)
	b.WriteString(strings.Join(wls, "\n"))
	return b.String()
}

var _ = metav1.Now

// The VirtualService for a host: an exact host first (the oldest among equals), then the longest matching
// wildcard (the oldest among equals); visibility by exportTo.
func TestVirtualServiceForHostPrecedence(t *testing.T) {
	st := store.New()
	for i, vs := range []struct {
		name     string
		hosts    []string
		exportTo []string
	}{
		{"a", []string{"*.example.com"}, nil},
		{"b", []string{"foo.example.com"}, nil},
		{"c", []string{"*.foo.example.com", "foo.example.com"}, nil},
		{"d", []string{"*"}, nil},
		{"e", []string{"*.bar.example.com"}, nil},
		{"f", []string{"*.bar.example.com"}, nil},
		{"g", []string{"private.example.com"}, []string{"."}},
	} {
		st.Upsert(store.LayerFile, &config.Config{
			Key:               config.Key{Kind: config.VirtualService, Namespace: "ns", Name: vs.name},
			CreationTimestamp: metav1.Unix(int64(i), 0).Time,
			Spec:              &networking.VirtualService{Hosts: vs.hosts, ExportTo: vs.exportTo},
		})
	}
	ps := model.Build(st, mesh.Default())
	for _, tc := range []struct{ ns, host, want string }{
		{"ns", "foo.example.com", "b"},
		{"ns", "x.foo.example.com", "c"},
		{"ns", "baz.example.com", "a"},
		{"ns", "x.bar.example.com", "e"},
		{"ns", "other.org", "d"},
		{"ns", "private.example.com", "g"},
		{"elsewhere", "private.example.com", "a"},
		{"elsewhere", "foo.example.com", "b"},
	} {
		got := ""
		if vs := ps.VirtualServiceForHost(tc.ns, model.MeshGateway, tc.host); vs != nil {
			got = vs.Config.Key.Name
		}
		if got != tc.want {
			t.Errorf("from %s, %s: got %q, want %q", tc.ns, tc.host, got, tc.want)
		}
	}
}

// A sidecar's VirtualServices in istiod's order: those of its namespace exported to it alone, then those
// of other namespaces exported to it by name, then those exported everywhere, each oldest first; the first
// of them for a host is the one for it.
func TestVirtualServicesExportToOrder(t *testing.T) {
	st := store.New()
	for i, vs := range []struct {
		ns, name string
		exportTo []string
	}{
		{"ns", "public", nil},
		{"other", "to-ns", []string{"ns"}},
		{"ns", "private", []string{"."}},
		{"ns", "private-and-public", []string{".", "*"}},
		{"other", "to-ns-and-other", []string{"ns", "."}},
		{"ns", "private-named", []string{"ns"}},
		{"other", "other-only", []string{"."}},
	} {
		st.Upsert(store.LayerFile, &config.Config{
			Key:               config.Key{Kind: config.VirtualService, Namespace: vs.ns, Name: vs.name},
			CreationTimestamp: metav1.Unix(int64(i), 0).Time,
			Spec: &networking.VirtualService{Hosts: []string{"api.example.com"}, ExportTo: vs.exportTo,
				Gateways: []string{"mesh", "gw-ns/gw"}},
		})
	}
	ps := model.Build(st, mesh.Default())
	for _, tc := range []struct{ ns, want string }{
		{"ns", "private,private-named,to-ns,to-ns-and-other,public,private-and-public"},
		{"other", "to-ns-and-other,other-only,public,private-and-public"},
	} {
		var got []string
		for _, vs := range ps.VirtualServices(tc.ns, model.MeshGateway) {
			got = append(got, vs.Config.Key.Name)
		}
		if strings.Join(got, ",") != tc.want {
			t.Errorf("from %s: %v, want %s", tc.ns, got, tc.want)
		}
		// A gateway's pods in the namespace see the same ones, as istiod's VirtualServicesForGateway.
		got = got[:0]
		for _, vs := range ps.VirtualServices(tc.ns, "gw-ns/gw") {
			got = append(got, vs.Config.Key.Name)
		}
		if strings.Join(got, ",") != tc.want {
			t.Errorf("gateway pods in %s: %v, want %s", tc.ns, got, tc.want)
		}
		first := strings.Split(tc.want, ",")[0]
		if vs := ps.VirtualServiceForHost(tc.ns, model.MeshGateway, "api.example.com"); vs == nil || vs.Config.Key.Name != first {
			t.Errorf("from %s: the VirtualService for the host is %v, want %s", tc.ns, vs, first)
		}
	}
}

// Every VirtualService for a host, as istiod's getConfigsForHost: those with a host overlapping it (a
// wildcard on either side), in VirtualServices' order whatever the specificity of the host that matched,
// each once; visibility by exportTo.
func TestVirtualServicesForHost(t *testing.T) {
	st := store.New()
	for i, vs := range []struct {
		name     string
		hosts    []string
		exportTo []string
	}{
		{"a", []string{"*.example.com"}, nil},
		{"b", []string{"foo.example.com"}, nil},
		{"c", []string{"*.foo.example.com", "foo.example.com"}, nil},
		{"d", []string{"*"}, nil},
		{"e", []string{"private.example.com", "*.example.com"}, []string{"."}},
		{"f", []string{"bar.example.com"}, nil},
	} {
		st.Upsert(store.LayerFile, &config.Config{
			Key:               config.Key{Kind: config.VirtualService, Namespace: "ns", Name: vs.name},
			CreationTimestamp: metav1.Unix(int64(i), 0).Time,
			Spec:              &networking.VirtualService{Hosts: vs.hosts, ExportTo: vs.exportTo},
		})
	}
	ps := model.Build(st, mesh.Default())
	for _, tc := range []struct{ ns, host, want string }{
		{"ns", "foo.example.com", "e,a,b,c,d"}, // e, exported to ns alone, first,
		{"ns", "x.foo.example.com", "e,a,c,d"},
		{"ns", "bar.example.com", "e,a,d,f"},
		{"elsewhere", "bar.example.com", "a,d,f"},
		{"elsewhere", "other.org", "d"},
		{"elsewhere", "*.example.com", "a,b,c,d,f"}, // a ServiceEntry's wildcard host overlaps exact ones
		{"elsewhere", "*.foo.example.com", "a,c,d"},
		{"elsewhere", "*.org", "d"},
	} {
		var got []string
		for _, vs := range ps.VirtualServicesForHost(tc.ns, model.MeshGateway, tc.host) {
			got = append(got, vs.Config.Key.Name)
		}
		if strings.Join(got, ",") != tc.want {
			t.Errorf("from %s, %s: got %v, want %s", tc.ns, tc.host, got, tc.want)
		}
	}
}

// TestClusterEndpointWaitsForItsPod: a cluster's EndpointSlice can arrive before the status that gives its
// pod an IP. The endpoint is held back until then, so it never goes out without the pod's tlsMode and
// labels, and the service is not pushed twice. A slice from files is taken as it is.
func TestClusterEndpointWaitsForItsPod(t *testing.T) {
	const host = "api.ns.svc.cluster.local"
	labels := map[string]string{"app": "api", "security.istio.io/tlsMode": "istio"}
	m := newMesh(t)
	m.source = config.KubeSource
	m.node("n1", "r", "z")
	m.service("ns", "api", "10.0.0.1", map[string]string{"app": "api"}, nil, httpPort(80))
	m.pod("ns", "api-1", "10.1.0.1", "n1", true, labels)
	m.slice("ns", "api-x", "api", "http", 80, sliceEndpoint{ip: "10.1.0.1", pod: "api-1", node: "n1", ready: true})
	ps := model.Build(m.store, mesh.Default())
	var changes []model.Change
	m.store.AddHandler(func(ev store.Event) { changes = append(changes, model.Change{Key: ev.Key(), Old: ev.Old, New: ev.New}) })
	apply := func() model.UpdateResult {
		t.Helper()
		next, res := model.Update(ps, m.store, changes)
		ps, changes = next, nil
		return res
	}
	addresses := func() []string {
		var out []string
		for _, ep := range ps.EndpointsForPort(ps.ServiceForHostname("ns", host), 80, nil) {
			out = append(out, ep.Address+"/"+ep.TLSMode)
		}
		return out
	}

	// The pod exists without an IP, and the slice already lists it.
	m.put(config.Pod, "ns", "api-2", labels, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "api-2", Namespace: "ns", Labels: labels}})
	m.slice("ns", "api-x", "api", "http", 80, sliceEndpoint{ip: "10.1.0.1", pod: "api-1", node: "n1", ready: true},
		sliceEndpoint{ip: "10.1.0.2", pod: "api-2", node: "n1", ready: true})
	if req := apply(); len(req.ServicesUpdated) != 0 {
		t.Errorf("slice naming a pod without IP: services updated %v, want none (nothing servable changed)", req.ServicesUpdated)
	}
	if got := addresses(); !slices.Equal(got, []string{"10.1.0.1/istio"}) {
		t.Errorf("before the pod's IP: endpoints %v, want only 10.1.0.1/istio", got)
	}
	if w := ps.Endpoints("ns/" + host).WaitingForPods; !slices.Equal(w, []string{"api-2"}) || ps.EndpointsWaitingForPods() != 1 {
		t.Errorf("before the pod's IP: waiting for %v (%d in all), want [api-2]", w, ps.EndpointsWaitingForPods())
	}

	// The pod's status arrives.
	m.pod("ns", "api-2", "10.1.0.2", "n1", true, labels)
	if req := apply(); len(req.ServicesUpdated) != 1 {
		t.Errorf("pod got its IP: services updated %v, want %s", req.ServicesUpdated, host)
	}
	if got := addresses(); !slices.Equal(got, []string{"10.1.0.1/istio", "10.1.0.2/istio"}) {
		t.Errorf("after the pod's IP: endpoints %v, want both with tlsMode istio", got)
	}
	if n := ps.EndpointsWaitingForPods(); n != 0 {
		t.Errorf("after the pod's IP: %d pods waited for, want 0", n)
	}

	// From files, a slice may name pods that are not in the directory: its endpoints stand as written.
	f := newMesh(t)
	f.source = "file:mesh.yaml"
	f.service("ns", "api", "10.0.0.1", map[string]string{"app": "api"}, nil, httpPort(80))
	f.slice("ns", "api-x", "api", "http", 80, sliceEndpoint{ip: "10.1.0.9", pod: "api-9", node: "n1", ready: true})
	fps := model.Build(f.store, mesh.Default())
	if eps := fps.EndpointsForPort(fps.ServiceForHostname("ns", host), 80, nil); len(eps) != 1 || eps[0].TLSMode != "disabled" {
		t.Errorf("file slice naming an absent pod: endpoints %+v, want 10.1.0.9 with tlsMode disabled", eps)
	}
}

// A headless Service's sidecar listeners are its endpoints' addresses (Service.ListensOnEndpoints): an
// endpoint change that changes them is reported in AddressesUpdated and changes EndpointAddressesID; one
// that changes only health, or only a HTTP port's addresses, or a service with a VIP, does not.
func TestUpdateReportsListenerAddresses(t *testing.T) {
	m := newMesh(t)
	m.node("n1", "r", "z")
	tcp := corev1.ServicePort{Name: "tcp-db", Port: 5432}
	m.service("ns", "db", "None", nil, nil, tcp, httpPort(8080))
	m.service("ns", "api", "10.0.0.1", nil, nil, corev1.ServicePort{Name: "tcp-db", Port: 5432})
	m.slice("ns", "db-tcp", "db", "tcp-db", 5432, sliceEndpoint{ip: "10.1.0.1", node: "n1", ready: true})
	m.slice("ns", "db-http", "db", "http", 8080, sliceEndpoint{ip: "10.1.0.1", node: "n1", ready: true})
	m.slice("ns", "api-tcp", "api", "tcp-db", 5432, sliceEndpoint{ip: "10.1.0.5", node: "n1", ready: true})
	ps := model.Build(m.store, mesh.Default())
	db := "ns/db.ns.svc.cluster.local"
	if !ps.ServiceForHostname("ns", "db.ns.svc.cluster.local").ListensOnEndpoints() ||
		ps.ServiceForHostname("ns", "api.ns.svc.cluster.local").ListensOnEndpoints() {
		t.Fatal("ListensOnEndpoints: want the headless service only")
	}
	step := func(what string, put func(), wantAddresses bool) {
		t.Helper()
		var changes []model.Change
		before := map[config.Key]*config.Config{}
		for _, name := range []string{"db-tcp", "db-http", "api-tcp"} {
			k := config.Key{Kind: config.EndpointSlice, Namespace: "ns", Name: name}
			before[k] = m.store.Get(k)
		}
		put()
		for k, old := range before {
			if cur := m.store.Get(k); cur != old {
				changes = append(changes, model.Change{Key: k, Old: old, New: cur})
			}
		}
		next, res := model.Update(ps, m.store, changes)
		if res.Full || len(res.ServicesUpdated) == 0 {
			t.Errorf("%s: full %v, services updated %v: want an endpoint push", what, res.Full, res.ServicesUpdated)
		}
		_, got := res.AddressesUpdated[db]
		if got != wantAddresses || len(res.AddressesUpdated) > 1 {
			t.Errorf("%s: AddressesUpdated %v, want %s: %v", what, res.AddressesUpdated, db, wantAddresses)
		}
		if changed := next.EndpointAddressesID() != ps.EndpointAddressesID(); changed != wantAddresses {
			t.Errorf("%s: EndpointAddressesID changed %v, want %v", what, changed, wantAddresses)
		}
		ps = next
	}
	step("a TCP endpoint added", func() {
		m.slice("ns", "db-tcp", "db", "tcp-db", 5432, sliceEndpoint{ip: "10.1.0.1", node: "n1", ready: true},
			sliceEndpoint{ip: "10.1.0.2", node: "n1", ready: true})
	}, true)
	step("an endpoint not ready", func() {
		m.slice("ns", "db-tcp", "db", "tcp-db", 5432, sliceEndpoint{ip: "10.1.0.1", node: "n1", ready: true},
			sliceEndpoint{ip: "10.1.0.2", node: "n1", ready: false})
	}, false)
	step("an HTTP endpoint added", func() {
		m.slice("ns", "db-http", "db", "http", 8080, sliceEndpoint{ip: "10.1.0.1", node: "n1", ready: true},
			sliceEndpoint{ip: "10.1.0.3", node: "n1", ready: true})
	}, false)
	step("a VIP service's endpoint added", func() {
		m.slice("ns", "api-tcp", "api", "tcp-db", 5432, sliceEndpoint{ip: "10.1.0.5", node: "n1", ready: true},
			sliceEndpoint{ip: "10.1.0.6", node: "n1", ready: true})
	}, false)
	step("a TCP endpoint removed", func() {
		m.slice("ns", "db-tcp", "db", "tcp-db", 5432, sliceEndpoint{ip: "10.1.0.2", node: "n1", ready: false})
	}, true)
}
