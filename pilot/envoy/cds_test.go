package envoy

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/store"
	"github.com/sextantmesh/sextant/pkg/nameset"
)

func cdsPush(t testing.TB) *model.PushContext {
	t.Helper()
	data, err := os.ReadFile("testdata/cds/mesh.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return pushFromYAML(t, data)
}

func sidecarIn(ns, ip string, labels map[string]string) *model.Proxy {
	return &model.Proxy{Type: model.Sidecar, NodeID: "sidecar~" + ip + "~pod." + ns + "~" + ns + ".svc.cluster.local",
		Namespace: ns, IPAddresses: []string{ip}, Labels: labels}
}

func wildcard(typeURL string) *model.WatchedResource {
	return &model.WatchedResource{TypeURL: typeURL, Wildcard: true}
}

func named(typeURL string, names ...string) *model.WatchedResource {
	return &model.WatchedResource{TypeURL: typeURL, ResourceNames: nameset.New(names...)}
}

// generate runs one generator and decodes its output into fresh messages like proto, checking that
// every resource passes ValidateAll and is named as its content.
func generate[T interface {
	proto.Message
	ValidateAll() error
	GetName() string
}](t *testing.T, g *Generators, typeURL string, proxy *model.Proxy, push *model.PushContext, w *model.WatchedResource, newT func() T) []T {
	t.Helper()
	res, err := g.ByTypeURL()[typeURL].Generate(proxy, push, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []T
	for _, r := range res {
		m := newT()
		if err := r.Any.UnmarshalTo(m); err != nil {
			t.Fatal(err)
		}
		if err := m.ValidateAll(); err != nil {
			t.Errorf("%s: ValidateAll: %v", r.Name, err)
		}
		if m.GetName() != r.Name {
			t.Errorf("resource %q holds %q", r.Name, m.GetName())
		}
		out = append(out, m)
	}
	return out
}

func newCluster() *cluster.Cluster                     { return &cluster.Cluster{} }
func newCLA() *endpoint.ClusterLoadAssignment          { return &endpoint.ClusterLoadAssignment{} }
func claName(c *endpoint.ClusterLoadAssignment) string { return c.ClusterName }

func clusterByName(t *testing.T, cs []*cluster.Cluster, name string) *cluster.Cluster {
	t.Helper()
	for _, c := range cs {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no cluster %q", name)
	return nil
}

func TestCDSGolden(t *testing.T) {
	push := cdsPush(t)
	g := New(Options{})
	sidecar := generate(t, g, ClusterType, sidecarIn("shop", "10.1.0.1", map[string]string{"app": "reviews", "version": "v1"}), push,
		wildcard(ClusterType), newCluster)
	golden(t, "cds", "sidecar-shop", sidecar)
	grpc := generate(t, g, ClusterType, &model.Proxy{Type: model.GRPC, NodeID: "grpc-client", Namespace: "shop"}, push,
		wildcard(ClusterType), newCluster)
	golden(t, "cds", "grpc-shop", grpc)
}

// A sidecar's inbound clusters forward to the connection's original destination, the workload's pod IP
// and port (istiod's default inbound traffic policy), from 127.0.0.6 so that iptables lets the
// connection through; they carry no endpoint list of their own.
func TestCDSInboundOriginalDestination(t *testing.T) {
	push := cdsPush(t)
	cs := generate(t, New(Options{}), ClusterType, sidecarIn("shop", "10.1.0.1", map[string]string{"app": "reviews", "version": "v1"}), push,
		wildcard(ClusterType), newCluster)
	for _, name := range []string{"inbound|7070||", "inbound|8080||"} {
		c := clusterByName(t, cs, name)
		if c.GetType() != cluster.Cluster_ORIGINAL_DST || c.LbPolicy != cluster.Cluster_CLUSTER_PROVIDED {
			t.Errorf("%s: type %v lb %v, want ORIGINAL_DST and CLUSTER_PROVIDED", name, c.GetType(), c.LbPolicy)
		}
		if c.LoadAssignment != nil {
			t.Errorf("%s: endpoints %v, want none (the original destination)", name, c.LoadAssignment)
		}
		if got := c.GetUpstreamBindConfig().GetSourceAddress(); got.GetAddress() != "127.0.0.6" || got.GetPortValue() != 0 {
			t.Errorf("%s: bound to %v, want 127.0.0.6", name, got)
		}
		if got := c.GetCleanupInterval().GetSeconds(); got < 9223372035 {
			t.Errorf("%s: hosts cleaned up after %ds", name, got)
		}
	}
}

// Under the mesh's inbound traffic policy LOCALHOST the inbound clusters are STATIC to 127.0.0.1:PORT, as
// istiod's, for applications that listen on localhost only.
func TestCDSInboundLocalhost(t *testing.T) {
	m := mesh.Default()
	m.InboundTrafficPolicy.Mode = mesh.InboundLocalhost
	data, err := os.ReadFile("testdata/cds/mesh.yaml")
	if err != nil {
		t.Fatal(err)
	}
	push := model.Build(storeFromYAML(t, data), m)
	cs := generate(t, New(Options{}), ClusterType, sidecarIn("shop", "10.1.0.1", map[string]string{"app": "reviews", "version": "v1"}), push,
		wildcard(ClusterType), newCluster)
	for _, port := range []uint32{7070, 8080} {
		c := clusterByName(t, cs, InboundClusterName(port))
		if c.GetType() != cluster.Cluster_STATIC || c.UpstreamBindConfig != nil {
			t.Errorf("%s: type %v bind %v, want STATIC unbound", c.Name, c.GetType(), c.UpstreamBindConfig)
		}
		eps := c.GetLoadAssignment().GetEndpoints()
		if len(eps) != 1 || len(eps[0].LbEndpoints) != 1 {
			t.Fatalf("%s: endpoints %v", c.Name, eps)
		}
		if a := eps[0].LbEndpoints[0].GetEndpoint().GetAddress().GetSocketAddress(); a.GetAddress() != "127.0.0.1" || a.GetPortValue() != port {
			t.Errorf("%s: endpoint %v, want 127.0.0.1:%d", c.Name, a, port)
		}
	}
}

func TestCDSClusters(t *testing.T) {
	push := cdsPush(t)
	g := New(Options{})
	cs := generate(t, g, ClusterType, sidecarIn("shop", "10.1.0.1", map[string]string{"app": "reviews", "version": "v1"}), push,
		wildcard(ClusterType), newCluster)
	var names []string
	for _, c := range cs {
		names = append(names, c.Name)
	}
	want := []string{
		"outbound|443||api.payments.example",
		"outbound|3306||db.shop.svc.cluster.local",
		"outbound|8000||legacy.shop.internal",
		"outbound|7070||reviews.shop.svc.cluster.local",
		"outbound|7070|v1|reviews.shop.svc.cluster.local",
		"outbound|7070|v2|reviews.shop.svc.cluster.local",
		"outbound|9080||reviews.shop.svc.cluster.local",
		"outbound|9080|v1|reviews.shop.svc.cluster.local",
		"outbound|9080|v2|reviews.shop.svc.cluster.local",
		"inbound|7070||", "inbound|8080||",
		BlackHoleCluster, PassthroughCluster, InboundPassthroughCluster,
	}
	slices.Sort(want) // by name, as every full state is
	if !slices.Equal(names, want) {
		t.Errorf("clusters:\n got %q\nwant %q", names, want)
	}
	// exportTo "." keeps hidden.other out of shop's view.
	if slices.ContainsFunc(names, func(n string) bool { return n == "outbound|80||hidden.other.svc.cluster.local" }) {
		t.Error("a service exported only to its namespace is visible elsewhere")
	}

	top := clusterByName(t, cs, "outbound|9080||reviews.shop.svc.cluster.local")
	if top.GetType() != cluster.Cluster_EDS || top.EdsClusterConfig.GetEdsConfig().GetAds() == nil {
		t.Errorf("reviews is not an ADS EDS cluster: %v", top.ClusterDiscoveryType)
	}
	if top.LbPolicy != cluster.Cluster_RING_HASH || top.GetRingHashLbConfig().GetMinimumRingSize().GetValue() != 1024 {
		t.Errorf("consistent hash not applied: %v %v", top.LbPolicy, top.GetRingHashLbConfig())
	}
	th := top.CircuitBreakers.GetThresholds()[0]
	if th.MaxConnections.GetValue() != 100 || th.MaxPendingRequests.GetValue() != 10 || th.MaxRequests.GetValue() != 200 ||
		th.MaxRetries.GetValue() != 3 {
		t.Errorf("circuit breakers = %v", th)
	}
	if top.ConnectTimeout.AsDuration().Seconds() != 3 {
		t.Errorf("connect timeout = %v", top.ConnectTimeout)
	}
	if od := top.OutlierDetection; od.Consecutive_5Xx.GetValue() != 5 || od.MaxEjectionPercent.GetValue() != 50 ||
		top.CommonLbConfig.GetHealthyPanicThreshold().GetValue() != 20 {
		t.Errorf("outlier detection = %v", od)
	}
	if len(top.TransportSocketMatches) != 2 {
		t.Errorf("auto mTLS missing: %v", top.TransportSocketMatches)
	}
	// Subset policy overrides the top level; port-level overrides both.
	if v1 := clusterByName(t, cs, "outbound|9080|v1|reviews.shop.svc.cluster.local"); v1.LbPolicy != cluster.Cluster_LEAST_REQUEST ||
		v1.TransportSocket == nil {
		t.Errorf("subset v1: lb %v, tls %v", v1.LbPolicy, v1.TransportSocket)
	}
	if p := clusterByName(t, cs, "outbound|7070||reviews.shop.svc.cluster.local"); p.LbPolicy != cluster.Cluster_RANDOM {
		t.Errorf("port-level lb = %v", p.LbPolicy)
	}
	if ext := clusterByName(t, cs, "outbound|443||api.payments.example"); ext.GetType() != cluster.Cluster_STRICT_DNS ||
		ext.TransportSocket == nil || len(ext.LoadAssignment.GetEndpoints()) != 1 {
		t.Errorf("DNS service entry cluster = %v", ext)
	}
	if st := clusterByName(t, cs, "outbound|8000||legacy.shop.internal"); st.GetType() != cluster.Cluster_STATIC ||
		len(st.LoadAssignment.GetEndpoints()) != 2 {
		t.Errorf("static service entry cluster = %v", st)
	}
	if hl := clusterByName(t, cs, "outbound|3306||db.shop.svc.cluster.local"); hl.GetType() != cluster.Cluster_ORIGINAL_DST {
		t.Errorf("headless service = %v", hl.ClusterDiscoveryType)
	}
}

func TestCDSNamedAndShared(t *testing.T) {
	push := cdsPush(t)
	g := New(Options{})
	a := sidecarIn("shop", "10.1.0.1", nil)
	b := sidecarIn("shop", "10.1.0.7", nil)
	w := named(ClusterType, "outbound|9080||reviews.shop.svc.cluster.local", "outbound|1||nothing")
	ra, _ := g.ByTypeURL()[ClusterType].Generate(a, push, w, nil)
	rb, _ := g.ByTypeURL()[ClusterType].Generate(b, push, w, nil)
	if len(ra) != 1 || ra[0].Name != "outbound|9080||reviews.shop.svc.cluster.local" {
		t.Fatalf("named request = %v", ra)
	}
	if ra[0] != rb[0] {
		t.Error("two proxies in one namespace did not share the marshaled cluster")
	}
}

func TestEDSLocalitiesAndSubsets(t *testing.T) {
	push := cdsPush(t)
	g := New(Options{})
	proxy := sidecarIn("shop", "10.1.0.9", nil)
	w := named(EndpointType, "outbound|9080||reviews.shop.svc.cluster.local", "outbound|9080|v1|reviews.shop.svc.cluster.local",
		"outbound|9080|v9|reviews.shop.svc.cluster.local", "outbound|80||hidden.other.svc.cluster.local")
	res, err := g.ByTypeURL()[EndpointType].Generate(proxy, push, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	var clas []*endpoint.ClusterLoadAssignment
	for _, r := range res {
		cla := newCLA()
		if err := r.Any.UnmarshalTo(cla); err != nil {
			t.Fatal(err)
		}
		if err := cla.ValidateAll(); err != nil {
			t.Errorf("%s: %v", claName(cla), err)
		}
		for _, loc := range cla.Endpoints {
			if loc.Locality == nil || loc.LoadBalancingWeight.GetValue() == 0 {
				t.Errorf("%s: locality group without locality or weight (gRPC clients reject it)", cla.ClusterName)
			}
		}
		clas = append(clas, cla)
	}
	golden(t, "cds", "eds-shop", clas)
	if len(clas) != 2 {
		t.Fatalf("got %d assignments, want 2 (unknown subset and invisible service left out)", len(clas))
	}
	byName := map[string]*endpoint.ClusterLoadAssignment{}
	for _, c := range clas {
		byName[c.ClusterName] = c
	}
	all := byName["outbound|9080||reviews.shop.svc.cluster.local"]
	if len(all.Endpoints) != 2 || all.Endpoints[1].Locality.Zone != "eu-a" ||
		all.Endpoints[1].LbEndpoints[0].HealthStatus.String() != "HEALTHY" {
		t.Errorf("all endpoints = %v", all.Endpoints)
	}
	if all.Endpoints[0].LbEndpoints[0].HealthStatus.String() != "UNHEALTHY" {
		t.Errorf("unready endpoint not UNHEALTHY: %v", all.Endpoints[0])
	}
	v1 := byName["outbound|9080|v1|reviews.shop.svc.cluster.local"]
	if len(v1.Endpoints) != 1 || len(v1.Endpoints[0].LbEndpoints) != 1 ||
		v1.Endpoints[0].LbEndpoints[0].GetEndpoint().Address.GetSocketAddress().Address != "10.1.0.1" {
		t.Errorf("subset v1 = %v", v1.Endpoints)
	}
}

func TestEDSNeedsPushOnlyForWatchedServices(t *testing.T) {
	gen := endpointGenerator{New(Options{})}
	w := named(EndpointType, "outbound|9080||reviews.shop.svc.cluster.local")
	hit := &model.PushRequest{ServicesUpdated: map[string]struct{}{"shop/reviews.shop.svc.cluster.local": {}}}
	miss := &model.PushRequest{ServicesUpdated: map[string]struct{}{"shop/ratings.shop.svc.cluster.local": {}}}
	if !gen.NeedsPush(nil, w, hit) || gen.NeedsPush(nil, w, miss) || !gen.NeedsPush(nil, w, &model.PushRequest{Full: true}) {
		t.Error("EDS push filter wrong")
	}
}

func TestEDSDeltaSendsOnlyChangedServices(t *testing.T) {
	push := cdsPush(t)
	gen := endpointGenerator{New(Options{})}
	w := named(EndpointType, "outbound|9080||reviews.shop.svc.cluster.local", "outbound|9080|v1|reviews.shop.svc.cluster.local",
		"outbound|80||gone.shop.svc.cluster.local")
	req := &model.PushRequest{ServicesUpdated: map[string]struct{}{"shop/reviews.shop.svc.cluster.local": {}}}
	res, removed, incremental, err := gen.GenerateDeltas(sidecarIn("shop", "10.1.0.9", nil), push, w, req)
	if err != nil || !incremental || len(removed) != 0 {
		t.Fatalf("incremental=%v removed=%v err=%v", incremental, removed, err)
	}
	var names []string
	for _, r := range res {
		names = append(names, r.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"outbound|9080|v1|reviews.shop.svc.cluster.local", "outbound|9080||reviews.shop.svc.cluster.local"}) {
		t.Errorf("delta = %v", names)
	}
	gone := &model.PushRequest{ServicesUpdated: map[string]struct{}{"shop/gone.shop.svc.cluster.local": {}}}
	if _, removed, _, _ := gen.GenerateDeltas(sidecarIn("shop", "10.1.0.9", nil), push, w, gone); !slices.Equal(removed,
		[]string{"outbound|80||gone.shop.svc.cluster.local"}) {
		t.Errorf("the cluster of a deleted service should be reported removed, got %v", removed)
	}
}

// A full push for a Service (and its endpoints) rebuilds the assignments of that service only; a full push
// for a DestinationRule, or one naming no config, rebuilds them all.
func TestEDSFullPushForAServiceSendsOnlyIt(t *testing.T) {
	push := cdsPush(t)
	gen := endpointGenerator{New(Options{})}
	w := named(EndpointType, "outbound|9080||reviews.shop.svc.cluster.local", "outbound|9080|v1|reviews.shop.svc.cluster.local",
		"outbound|3306||db.shop.svc.cluster.local")
	proxy := sidecarIn("shop", "10.1.0.9", nil)
	names := func(req *model.PushRequest) ([]string, bool) {
		t.Helper()
		res, _, incremental, err := gen.GenerateDeltas(proxy, push, w, req)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range res {
			out = append(out, r.Name)
		}
		slices.Sort(out)
		return out, incremental
	}
	service := &model.PushRequest{Full: true, ConfigsUpdated: map[config.Key]struct{}{
		{Kind: config.Service, Namespace: "shop", Name: "reviews"}:         {},
		{Kind: config.EndpointSlice, Namespace: "shop", Name: "reviews-1"}: {},
		{Kind: config.VirtualService, Namespace: "shop", Name: "any"}:      {},
	}}
	got, incremental := names(service)
	if !incremental || !slices.Equal(got, []string{"outbound|9080|v1|reviews.shop.svc.cluster.local",
		"outbound|9080||reviews.shop.svc.cluster.local"}) {
		t.Errorf("service change: incremental=%v %v", incremental, got)
	}
	for _, req := range []*model.PushRequest{
		{Full: true, ConfigsUpdated: map[config.Key]struct{}{{Kind: config.DestinationRule, Namespace: "shop", Name: "reviews"}: {}}},
		{Full: true, ConfigsUpdated: map[config.Key]struct{}{{Kind: config.ServiceEntry, Namespace: "shop", Name: "ext"}: {}}},
		{Full: true},
		nil,
	} {
		if got, incremental := names(req); incremental || len(got) != 3 {
			t.Errorf("%v: want every watched assignment, got incremental=%v %v", req, incremental, got)
		}
	}
}

// A sidecar's inbound clusters and virtualInbound follow the services of its namespace from one snapshot to
// the next on the same Generators (they are kept per proxy while those services stand).
func TestSidecarInboundFollowsNamespaceServices(t *testing.T) {
	data, err := os.ReadFile("testdata/rds/mesh.yaml")
	if err != nil {
		t.Fatal(err)
	}
	st := storeFromYAML(t, data)
	push := model.Build(st, mesh.Default())
	g := New(Options{})
	proxy := sidecarIn("bookinfo", "10.1.0.7", map[string]string{"app": "ratings"})
	inbound := func(push *model.PushContext) []string {
		t.Helper()
		var names []string
		for _, c := range generate(t, g, ClusterType, proxy, push, wildcard(ClusterType), newCluster) {
			if strings.HasPrefix(c.Name, "inbound|") {
				names = append(names, c.Name)
			}
		}
		return names
	}
	inboundPorts := func(push *model.PushContext) []uint32 {
		t.Helper()
		var ports []uint32
		for _, l := range ldsGenerate(t, g, proxy, push, wildcard(ListenerType)) {
			if l.Name != VirtualInboundListener {
				continue
			}
			for _, fc := range l.FilterChains {
				if fc.Name == VirtualInboundListener+"-blackhole" { // the capture port's own, not a workload port
					continue
				}
				if p := fc.GetFilterChainMatch().GetDestinationPort().GetValue(); p != 0 && !slices.Contains(ports, p) {
					ports = append(ports, p)
				}
			}
		}
		slices.Sort(ports)
		return ports
	}
	if got := inbound(push); !slices.Equal(got, []string{"inbound|9080||"}) {
		t.Fatalf("before: %v", got)
	}
	if got := inboundPorts(push); !slices.Equal(got, []uint32{9080}) {
		t.Fatalf("before: virtualInbound ports %v", got)
	}
	apply := func(doc string) {
		t.Helper()
		c, err := config.Parse([]byte(doc), "added.yaml", 0, "default")
		if err != nil {
			t.Fatal(err)
		}
		st.Upsert(store.LayerFile, c)
		push, _ = model.Update(push, st, []model.Change{{Key: c.Key, New: c}})
	}
	// Another namespace's service selecting the same labels is not the sidecar's.
	apply("apiVersion: v1\nkind: Service\nmetadata: {name: stats, namespace: other}\n" +
		"spec: {clusterIP: 10.0.9.8, selector: {app: ratings}, ports: [{name: http, port: 7070}]}\n")
	if got := inbound(push); !slices.Equal(got, []string{"inbound|9080||"}) {
		t.Fatalf("after a service in another namespace: %v", got)
	}
	apply("apiVersion: v1\nkind: Service\nmetadata: {name: stats, namespace: bookinfo}\n" +
		"spec: {clusterIP: 10.0.9.9, selector: {app: ratings}, ports: [{name: http, port: 7070}]}\n")
	if got := inbound(push); !slices.Equal(got, []string{"inbound|7070||", "inbound|9080||"}) {
		t.Fatalf("after a service selecting it: %v", got)
	}
	if got := inboundPorts(push); !slices.Equal(got, []uint32{7070, 9080}) {
		t.Fatalf("after a service selecting it: virtualInbound ports %v", got)
	}
}

// Sidecars of a namespace whose own clusters and listeners are the same share one merged list (the transport
// keeps it as what each was sent), and sidecars with the same labels one VHDS list; one with other inbound
// ports gets its own, with its own resources.
func TestSidecarsShareMergedLists(t *testing.T) {
	data, err := os.ReadFile("testdata/rds/mesh.yaml")
	if err != nil {
		t.Fatal(err)
	}
	push := pushFromYAML(t, data)
	g := New(Options{})
	ratings := envoyProxy("bookinfo", map[string]string{"app": "ratings"}, true, 1, 38)
	ratings2 := envoyProxy("bookinfo", map[string]string{"app": "ratings"}, true, 1, 38)
	details := envoyProxy("bookinfo", map[string]string{"app": "details"}, true, 1, 38)
	web := envoyProxy("bookinfo", map[string]string{"app": "web"}, true, 1, 38)
	for _, typ := range []string{ClusterType, ListenerType, VirtualHostType} {
		gen := g.ByTypeURL()[typ]
		lists := map[string]model.Resources{}
		for name, p := range map[string]*model.Proxy{"ratings": ratings, "ratings2": ratings2, "details": details, "web": web} {
			res, err := gen.Generate(p, push, wildcard(typ), nil)
			if err != nil {
				t.Fatal(err)
			}
			want, err := New(Options{}).ByTypeURL()[typ].Generate(p, push, wildcard(typ), nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(res) != len(want) {
				t.Fatalf("%s %s: %d resources, a fresh build %d", typ, name, len(res), len(want))
			}
			for i := range want {
				if res[i].Name != want[i].Name || !proto.Equal(res[i].Any, want[i].Any) {
					t.Fatalf("%s %s: resource %d is %s, a fresh build's %s", typ, name, i, res[i].Name, want[i].Name)
				}
			}
			lists[name] = res
		}
		if &lists["ratings"][0] != &lists["ratings2"][0] {
			t.Errorf("%s: two ratings sidecars do not share their list", typ)
		}
		// details routes by sourceLabels, so its virtual hosts are its own.
		if typ != VirtualHostType && &lists["ratings"][0] != &lists["details"][0] {
			t.Errorf("%s: ratings and details (same inbound port) do not share their list", typ)
		}
		if typ != VirtualHostType && &lists["ratings"][0] == &lists["web"][0] {
			t.Errorf("%s: web (other inbound ports) shares ratings' list", typ)
		}
	}
}

// applyDocs upserts YAML documents into st and returns the snapshot updated for them.
func applyDocs(t *testing.T, st *store.Store, push *model.PushContext, docs ...string) *model.PushContext {
	t.Helper()
	var changes []model.Change
	for i, doc := range docs {
		c, err := config.Parse([]byte(doc), "extra.yaml", i, "default")
		if err != nil {
			t.Fatal(err)
		}
		changes = append(changes, model.Change{Key: c.Key, Old: st.Get(c.Key), New: c})
		st.Upsert(store.LayerFile, c)
	}
	push, _ = model.Update(push, st, changes)
	return push
}

// deleteConfig deletes key from st and returns the snapshot updated for it.
func deleteConfig(st *store.Store, push *model.PushContext, key config.Key) *model.PushContext {
	ch := model.Change{Key: key, Old: st.Get(key)}
	st.Delete(store.LayerFile, key)
	push, _ = model.Update(push, st, []model.Change{ch})
	return push
}

// Outbound cluster lists derived from the previous snapshot's (outboundClusterPlan) equal what a fresh build
// gives, through random service adds, changes and deletes, DNS ServiceEntries whose clusters carry their
// endpoints, and DestinationRules with subsets coming and going.
func TestDerivedClusterListsEqualFullBuilds(t *testing.T) {
	st, push, g, proxies := derivationFixture(t)
	proxies = append(proxies, &model.Proxy{Type: model.GRPC, Namespace: "ns-3", Node: &core.Node{}})
	// Its endpoints are WorkloadEntries: they change while the ServiceEntry stays.
	push = applyDocs(t, st, push, "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: selected, namespace: ns-3}\n"+
		"spec:\n  hosts: [selected.example.com]\n  resolution: DNS\n  ports: [{name: tcp, number: 3306, protocol: TCP}]\n"+
		"  workloadSelector: {labels: {app: db}}\n")
	rng := rand.New(rand.NewPCG(7, 8))
	live := map[config.Key]bool{}
	derived := 0
	for step := range 200 {
		name := fmt.Sprintf("extra-%d", rng.IntN(12))
		ns := fmt.Sprintf("ns-%d", 3+rng.IntN(2))
		switch r := rng.IntN(11); {
		case r < 2: // delete a Service or ServiceEntry added before
			for _, kind := range []config.Kind{config.Service, config.ServiceEntry} {
				if key := (config.Key{Kind: kind, Namespace: ns, Name: name}); live[key] {
					push = deleteConfig(st, push, key)
					delete(live, key)
				}
			}
		case r < 3: // a DNS ServiceEntry: its clusters carry its endpoints
			push = applyDocs(t, st, push, fmt.Sprintf(
				"apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: %s, namespace: %s}\n"+
					"spec:\n  hosts: [%s.example.com]\n  resolution: DNS\n  ports: [{name: http, number: 80, protocol: HTTP}]\n"+
					"  endpoints: [{address: 10.9.0.%d}]\n",
				name, ns, name, rng.IntN(4)))
			live[config.Key{Kind: config.ServiceEntry, Namespace: ns, Name: name}] = true
		case r < 4: // a WorkloadEntry of the DNS ServiceEntry selecting workloads comes or goes
			key := config.Key{Kind: config.WorkloadEntry, Namespace: "ns-3", Name: name}
			if live[key] {
				push = deleteConfig(st, push, key)
				delete(live, key)
				break
			}
			push = applyDocs(t, st, push, fmt.Sprintf(
				"apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: %s, namespace: ns-3}\n"+
					"spec:\n  address: 10.8.0.%d\n  labels: {app: db}\n", name, rng.IntN(200)))
			live[key] = true
		case r < 5: // a DestinationRule with subsets, or without
			subsets := []string{"[]", "[{name: v1, labels: {version: v1}}]"}[rng.IntN(2)]
			push = applyDocs(t, st, push, fmt.Sprintf(
				"apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: dr-%d, namespace: ns-7}\n"+
					"spec:\n  host: svc-%d.ns-%d.svc.cluster.local\n  subsets: %s\n", rng.IntN(3), 7+10*rng.IntN(3), 7, subsets))
		default:
			ports := []string{benchThreePorts, "[{name: http, port: 80}]", "[{name: udp, port: 53, protocol: UDP}]",
				"[{name: http, port: 9080}]"}[rng.IntN(4)]
			push = applyDocs(t, st, push, fmt.Sprintf(
				"apiVersion: v1\nkind: Service\nmetadata: {name: %s, namespace: %s}\nspec:\n  clusterIP: 10.250.0.%d\n  ports: %s\n",
				name, ns, rng.IntN(8), ports))
			live[config.Key{Kind: config.Service, Namespace: ns, Name: name}] = true
		}
		for _, p := range proxies {
			checkSameAsFreshBuild(t, g, ClusterType, p, push, step)
		}
		if l, ok := g.clusterLists.Latest(listID{kind: "cds", namespace: "ns-3", variant: "0"}); ok && l.Full == "" {
			derived++
		}
	}
	if derived < 100 {
		t.Errorf("%d of 200 lists were derived from the previous one; want most", derived)
	}
}

// derivationFixture is the mesh the derived-list tests change at random (40 services × 3 ports over ten
// namespaces), fresh generators, and two sidecars in the namespaces that change.
func derivationFixture(t *testing.T) (*store.Store, *model.PushContext, *Generators, []*model.Proxy) {
	st := storeFromYAML(t, []byte(benchMeshYAML(40, benchThreePorts)))
	return st, model.Build(st, mesh.Default()), New(Options{}), []*model.Proxy{
		envoyProxy("ns-3", map[string]string{"app": "client"}, true, 1, 38),
		envoyProxy("ns-4", nil, true, 1, 38),
	}
}

// checkSameAsFreshBuild checks that g, which has served earlier snapshots, generates for p what generators
// that never saw one do.
func checkSameAsFreshBuild(t *testing.T, g *Generators, typeURL string, p *model.Proxy, push *model.PushContext, step int) {
	t.Helper()
	checkSameAsBuildOf(t, New(Options{}), g, typeURL, p, push, step)
}

// checkSameAsBuildOf fails unless g generates for p in push what fresh does.
func checkSameAsBuildOf(t *testing.T, fresh, g *Generators, typeURL string, p *model.Proxy, push *model.PushContext, step int) {
	t.Helper()
	want, err := fresh.ByTypeURL()[typeURL].Generate(p, push, wildcard(typeURL), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := g.ByTypeURL()[typeURL].Generate(p, push, wildcard(typeURL), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("step %d, %s %s: %d resources, a fresh build %d", step, p.Type, p.Namespace, len(got), len(want))
	}
	for i := range want {
		if got[i].Name != want[i].Name || !proto.Equal(got[i].Any, want[i].Any) {
			t.Fatalf("step %d, %s %s: resource %d is %s, a fresh build's %s (same name: %v)", step, p.Type, p.Namespace, i, got[i].Name,
				want[i].Name, got[i].Name == want[i].Name)
		}
	}
}

// generateByName generates typeURL's full state for proxy and indexes it by resource name.
func generateByName(t *testing.T, g *Generators, typeURL string, proxy *model.Proxy, push *model.PushContext) map[string]*model.Resource {
	t.Helper()
	res, err := g.ByTypeURL()[typeURL].Generate(proxy, push, wildcard(typeURL), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*model.Resource{}
	for _, r := range res {
		out[r.Name] = r
	}
	return out
}
