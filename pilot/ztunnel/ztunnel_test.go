package ztunnel_test

import (
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	networking "istio.io/api/networking/v1alpha3"
	istiosec "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"

	authz "github.com/sextantmesh/sextant/api/security"
	"github.com/sextantmesh/sextant/api/workload"
	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/ztunnel"
	"github.com/sextantmesh/sextant/pkg/nameset"
)

const (
	ratingsA = "Kubernetes//Pod/amb/ratings-v1-6b7c9d8f5d-x2x4k"
	ratingsB = "Kubernetes//Pod/amb/ratings-v1-6b7c9d8f5d-bcdfg"
	legacy   = "Kubernetes//Pod/amb/legacy"
	client   = "Kubernetes//Pod/amb/client"
	web0     = "Kubernetes//Pod/plain/web-0"
	web1     = "Kubernetes//Pod/plain/web-1"
	vm1      = "Kubernetes/networking.istio.io/WorkloadEntry/amb/vm1"

	ratingsSvc = "amb/ratings.amb.svc.cluster.local"
	vmSvc      = "amb/vm.example.com"
	webSvc     = "plain/web.plain.svc.cluster.local"
)

// scenario: an ambient namespace "amb" and a plain one; pods ready, unready and opted out; a Service with a
// waypoint and a named target port; a ServiceEntry selecting a WorkloadEntry; policies of every shape.
func scenario(t testing.TB) *fixture {
	f := newFixture(t)
	f.namespace("istio-system", nil)
	f.namespace("amb", map[string]string{"istio.io/dataplane-mode": "ambient"})
	f.namespace("plain", nil)
	f.node("node-1", "r1", "z1")
	ratings := map[string]string{"app": "ratings", "version": "v1"}
	f.pod(podSpec{ns: "amb", name: "ratings-v1-6b7c9d8f5d-x2x4k", ip: "10.1.0.5", node: "node-1", sa: "ratings", ready: true,
		labels: ratings, ports: map[string]int32{"http": 9080}})
	f.pod(podSpec{ns: "amb", name: "ratings-v1-6b7c9d8f5d-bcdfg", ip: "10.1.0.6", node: "node-1", sa: "ratings", ready: false,
		labels: ratings, ports: map[string]int32{"http": 9080}})
	f.pod(podSpec{ns: "amb", name: "legacy", ip: "10.1.0.7", sa: "legacy", ready: true,
		labels: map[string]string{"app": "ratings", "version": "v2", "istio.io/dataplane-mode": "none"}, ports: map[string]int32{"http": 9081}})
	f.pod(podSpec{ns: "amb", name: "client", ip: "10.1.0.8", ready: true,
		labels: map[string]string{"app": "client", "istio.io/use-waypoint": "client-wp"}})
	f.pod(podSpec{ns: "plain", name: "web-0", ip: "10.3.0.1", sa: "web", ready: true, labels: map[string]string{"app": "web"}})
	f.pod(podSpec{ns: "plain", name: "web-1", ip: "fd00::1", sa: "web", ready: true,
		labels: map[string]string{"app": "web2", "istio.io/dataplane-mode": "ambient", "service.istio.io/canonical-name": "web-canary",
			"app.kubernetes.io/version": "2.0"}})
	f.service("amb", "ratings", "10.96.0.10", map[string]string{"istio.io/use-waypoint": "waypoint"}, map[string]string{"app": "ratings"},
		map[string]string{"networking.istio.io/traffic-distribution": "PreferClose"}, namedTarget("http", 9080, "http"))
	f.service("plain", "web", "10.96.0.20", nil, map[string]string{"app": "web"}, nil, numTarget("http", 80, 8080))
	f.serviceEntry("amb", "vm-svc", &networking.ServiceEntry{Hosts: []string{"vm.example.com"}, Addresses: []string{"240.240.0.1"},
		Ports: []*networking.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP", TargetPort: 8080},
			{Number: 9000, Name: "tcp", Protocol: "TCP"}},
		Location: networking.ServiceEntry_MESH_INTERNAL, Resolution: networking.ServiceEntry_STATIC,
		WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "vm"}}})
	f.workloadEntry("amb", "vm1", &networking.WorkloadEntry{Address: "10.2.0.1", Labels: map[string]string{"app": "vm"},
		ServiceAccount: "vm-sa", Ports: map[string]uint32{"http": 9090}, Locality: "r2/z2/s2"})

	selector := func(l map[string]string) *typev1beta1.WorkloadSelector {
		return &typev1beta1.WorkloadSelector{MatchLabels: l}
	}
	f.put(config.AuthorizationPolicy, "istio-system", "global-deny", nil, nil, &istiosec.AuthorizationPolicy{
		Action: istiosec.AuthorizationPolicy_DENY,
		Rules: []*istiosec.Rule{{
			From: []*istiosec.Rule_From{{Source: &istiosec.Source{Principals: []string{"cluster.local/ns/plain/sa/*"}}}},
			To:   []*istiosec.Rule_To{{Operation: &istiosec.Operation{Methods: []string{"DELETE"}, Ports: []string{"8080"}}}},
		}}})
	dryRun := map[string]string{"istio.io/dry-run": "true"}
	f.put(config.AuthorizationPolicy, "amb", "allow-ratings", nil, dryRun, &istiosec.AuthorizationPolicy{
		Selector: selector(map[string]string{"app": "ratings"}),
		Rules: []*istiosec.Rule{{
			From: []*istiosec.Rule_From{
				{Source: &istiosec.Source{Principals: []string{"cluster.local/ns/amb/sa/client"}, Namespaces: []string{"amb", "*-prod"}}},
				{Source: &istiosec.Source{IpBlocks: []string{"10.0.0.0/8", "192.168.1.1"}, NotIpBlocks: []string{"10.9.0.0/16"}}},
				{Source: &istiosec.Source{ServiceAccounts: []string{"client", "plain/web"}}},
			},
			To: []*istiosec.Rule_To{{Operation: &istiosec.Operation{Ports: []string{"9080"}, NotPorts: []string{"15000"}}}},
			When: []*istiosec.Condition{
				{Key: "source.ip", Values: []string{"10.1.0.0/16"}},
				{Key: "destination.port", NotValues: []string{"9999"}},
			},
		}}})
	f.put(config.AuthorizationPolicy, "amb", "allow-l7", nil, nil, &istiosec.AuthorizationPolicy{
		Selector: selector(map[string]string{"app": "ratings"}),
		Rules: []*istiosec.Rule{{To: []*istiosec.Rule_To{
			{Operation: &istiosec.Operation{Methods: []string{"GET"}, Paths: []string{"/health"}}}}}}})
	f.put(config.AuthorizationPolicy, "amb", "ns-deny", nil, nil, &istiosec.AuthorizationPolicy{
		Action: istiosec.AuthorizationPolicy_DENY,
		Rules: []*istiosec.Rule{{
			From: []*istiosec.Rule_From{{Source: &istiosec.Source{NotNamespaces: []string{"amb"}}}},
			When: []*istiosec.Condition{{Key: "request.headers[x-user]", Values: []string{"bob"}}},
		}}})
	f.put(config.AuthorizationPolicy, "amb", "audit", nil, nil, &istiosec.AuthorizationPolicy{
		Action: istiosec.AuthorizationPolicy_AUDIT, Selector: selector(map[string]string{"app": "ratings"})})
	f.put(config.AuthorizationPolicy, "amb", "waypoint-bound", nil, nil, &istiosec.AuthorizationPolicy{
		TargetRefs: []*typev1beta1.PolicyTargetReference{{Kind: "Service", Name: "ratings"}}})
	return f
}

var wildcard = &model.WatchedResource{TypeURL: ztunnel.AddressType, Wildcard: true}

func ztunnelProxy() *model.Proxy {
	return &model.Proxy{Type: model.Ztunnel, Namespace: "istio-system", ID: "ztunnel-1.istio-system"}
}

func ip(s string) []byte { return netip.MustParseAddr(s).AsSlice() }

func names(res model.Resources) []string {
	var out []string
	for _, r := range res {
		out = append(out, r.Name)
	}
	slices.Sort(out)
	return out
}

func decodeAddresses(t *testing.T, res model.Resources) map[string]*workload.Address {
	t.Helper()
	out := map[string]*workload.Address{}
	for _, r := range res {
		if r.Any.TypeUrl != ztunnel.AddressType {
			t.Fatalf("%s: type %s", r.Name, r.Any.TypeUrl)
		}
		var a workload.Address
		if err := proto.Unmarshal(r.Any.Value, &a); err != nil {
			t.Fatalf("%s: %v", r.Name, err)
		}
		if r.Version == "" {
			t.Errorf("%s: no version", r.Name)
		}
		out[r.Name] = &a
	}
	return out
}

func wl(w *workload.Workload) *workload.Address {
	return &workload.Address{Type: &workload.Address_Workload{Workload: w}}
}

func svc(s *workload.Service) *workload.Address {
	return &workload.Address{Type: &workload.Address_Service{Service: s}}
}

func ports(pairs ...uint32) []*workload.Port {
	var out []*workload.Port
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, &workload.Port{ServicePort: pairs[i], TargetPort: pairs[i+1]})
	}
	return out
}

func waypointAddr(ns, name string) *workload.GatewayAddress {
	return &workload.GatewayAddress{Destination: &workload.GatewayAddress_Hostname{Hostname: &workload.NamespacedHostname{
		Namespace: ns, Hostname: name + "." + ns + ".svc.cluster.local"}}, HboneMtlsPort: 15008}
}

func expectedAddresses() map[string]*workload.Address {
	base := func(uid, name, ns, sa string) *workload.Workload {
		return &workload.Workload{Uid: uid, Name: name, Namespace: ns, TrustDomain: "cluster.local", ServiceAccount: sa,
			ClusterId: "Kubernetes", CanonicalRevision: "latest", WorkloadType: workload.WorkloadType_POD}
	}
	ratingsPolicies := []string{"amb/allow-l7", "amb/allow-ratings"}

	a := base(ratingsA, "ratings-v1-6b7c9d8f5d-x2x4k", "amb", "ratings")
	a.Addresses, a.TunnelProtocol, a.Node = [][]byte{ip("10.1.0.5")}, workload.TunnelProtocol_HBONE, "node-1"
	a.CanonicalName, a.CanonicalRevision, a.WorkloadName, a.WorkloadType = "ratings", "v1", "ratings-v1", workload.WorkloadType_DEPLOYMENT
	a.Services = map[string]*workload.PortList{ratingsSvc: {Ports: ports(9080, 9080)}}
	a.AuthorizationPolicies, a.Locality = ratingsPolicies, &workload.Locality{Region: "r1", Zone: "z1"}

	b := proto.Clone(a).(*workload.Workload)
	b.Uid, b.Name, b.Addresses, b.Status = ratingsB, "ratings-v1-6b7c9d8f5d-bcdfg", [][]byte{ip("10.1.0.6")}, workload.WorkloadStatus_UNHEALTHY

	l := base(legacy, "legacy", "amb", "legacy")
	l.Addresses, l.TunnelProtocol, l.WorkloadName = [][]byte{ip("10.1.0.7")}, workload.TunnelProtocol_NONE, "legacy"
	l.CanonicalName, l.CanonicalRevision = "ratings", "v2"
	l.Services = map[string]*workload.PortList{ratingsSvc: {Ports: ports(9080, 9081)}}
	l.AuthorizationPolicies = ratingsPolicies

	c := base(client, "client", "amb", "default")
	c.Addresses, c.TunnelProtocol, c.WorkloadName, c.CanonicalName = [][]byte{ip("10.1.0.8")},
		workload.TunnelProtocol_HBONE, "client", "client"
	c.Waypoint = waypointAddr("amb", "client-wp")

	w0 := base(web0, "web-0", "plain", "web")
	w0.Addresses, w0.WorkloadName, w0.CanonicalName = [][]byte{ip("10.3.0.1")}, "web-0", "web"
	w0.Services = map[string]*workload.PortList{webSvc: {Ports: ports(80, 8080)}}

	w1 := base(web1, "web-1", "plain", "web")
	w1.Addresses, w1.TunnelProtocol, w1.WorkloadName = [][]byte{ip("fd00::1")}, workload.TunnelProtocol_HBONE, "web-1"
	w1.CanonicalName, w1.CanonicalRevision = "web-canary", "2.0"

	v := base(vm1, "vm1", "amb", "vm-sa")
	v.Addresses, v.TunnelProtocol, v.WorkloadName, v.CanonicalName = [][]byte{ip("10.2.0.1")}, workload.TunnelProtocol_HBONE, "vm1", "vm"
	v.Services = map[string]*workload.PortList{vmSvc: {Ports: ports(80, 9090, 9000, 9000)}}
	v.Locality = &workload.Locality{Region: "r2", Zone: "z2", Subzone: "s2"}

	return map[string]*workload.Address{
		ratingsA: wl(a), ratingsB: wl(b), legacy: wl(l), client: wl(c), web0: wl(w0), web1: wl(w1), vm1: wl(v),
		ratingsSvc: svc(&workload.Service{Name: "ratings", Namespace: "amb", Hostname: "ratings.amb.svc.cluster.local",
			Addresses: []*workload.NetworkAddress{{Address: ip("10.96.0.10")}}, Ports: ports(9080, 0),
			Waypoint: waypointAddr("amb", "waypoint"), Canonical: true,
			LoadBalancing: &workload.LoadBalancing{Mode: workload.LoadBalancing_FAILOVER, RoutingPreference: []workload.LoadBalancing_Scope{
				workload.LoadBalancing_NETWORK, workload.LoadBalancing_REGION, workload.LoadBalancing_ZONE, workload.LoadBalancing_SUBZONE}}}),
		webSvc: svc(&workload.Service{Name: "web", Namespace: "plain", Hostname: "web.plain.svc.cluster.local",
			Addresses: []*workload.NetworkAddress{{Address: ip("10.96.0.20")}}, Ports: ports(80, 8080), Canonical: true}),
		vmSvc: svc(&workload.Service{Name: "vm-svc", Namespace: "amb", Hostname: "vm.example.com",
			Addresses: []*workload.NetworkAddress{{Address: ip("240.240.0.1")}}, Ports: ports(80, 8080, 9000, 9000)}),
	}
}

func checkAddresses(t *testing.T, got map[string]*workload.Address, want map[string]*workload.Address) {
	t.Helper()
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("missing %s", name)
			continue
		}
		if !proto.Equal(g, w) {
			t.Errorf("%s:\n got %v\nwant %v", name, g, w)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("unexpected %s", name)
		}
	}
}

func TestAddressFullState(t *testing.T) {
	f := scenario(t)
	ps := f.build()
	g := ztunnel.New()
	res, err := g.Address().Generate(ztunnelProxy(), ps, wildcard, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.IsSortedFunc(res, func(a, b *model.Resource) int { return strings.Compare(a.Name, b.Name) }) {
		t.Errorf("resources not sorted by name: %v", names(res))
	}
	checkAddresses(t, decodeAddresses(t, res), expectedAddresses())
}

func TestAmbientOnly(t *testing.T) {
	f := scenario(t)
	ps := f.build()
	g := ztunnel.NewWithOptions(ztunnel.Options{AmbientOnly: true})
	res, _ := g.Address().Generate(ztunnelProxy(), ps, wildcard, nil)
	want := expectedAddresses()
	// Opted-out and non-ambient pods are not sent, nor a service whose workloads are all outside the mesh.
	delete(want, legacy)
	delete(want, web0)
	delete(want, webSvc)
	checkAddresses(t, decodeAddresses(t, res), want)

	// web-0 joins the mesh: it is sent, and so is its service, which now selects an ambient workload.
	f.pod(podSpec{ns: "plain", name: "web-0", ip: "10.3.0.1", sa: "web", ready: true,
		labels: map[string]string{"app": "web", "istio.io/dataplane-mode": "ambient"}})
	next, req := f.update(ps)
	if req.Full {
		t.Fatal("a pod change must not be a full push")
	}
	out, removed, incremental, err := g.Address().GenerateDeltas(ztunnelProxy(), next, wildcard, req)
	if err != nil || !incremental {
		t.Fatalf("incremental=%v err=%v", incremental, err)
	}
	if got := names(out); !slices.Equal(got, []string{web0, webSvc}) || len(removed) != 0 {
		t.Fatalf("delta = %v removed %v, want [%s %s]", got, removed, web0, webSvc)
	}

	// and leaves it again: both are removed.
	f.pod(podSpec{ns: "plain", name: "web-0", ip: "10.3.0.1", sa: "web", ready: true,
		labels: map[string]string{"app": "web", "istio.io/dataplane-mode": "none"}})
	next2, req := f.update(next)
	out, removed, _, _ = g.Address().GenerateDeltas(ztunnelProxy(), next2, wildcard, req)
	if len(out) != 0 || !slices.Equal(removed, []string{web0, webSvc}) {
		t.Fatalf("delta = %v removed %v, want removed [%s %s]", names(out), removed, web0, webSvc)
	}
}

func TestDeltaSinglePodChange(t *testing.T) {
	f := scenario(t)
	ps := f.build()
	g := ztunnel.New()
	full, _ := g.Address().Generate(ztunnelProxy(), ps, wildcard, nil)
	before := map[string]string{}
	for _, r := range full {
		before[r.Name] = r.Version
	}

	// ratings-b becomes ready.
	f.pod(podSpec{ns: "amb", name: "ratings-v1-6b7c9d8f5d-bcdfg", ip: "10.1.0.6", node: "node-1", sa: "ratings", ready: true,
		labels: map[string]string{"app": "ratings", "version": "v1"}, ports: map[string]int32{"http": 9080}})
	next, req := f.update(ps)
	if req.Full || len(req.WorkloadsUpdated) != 1 {
		t.Fatalf("request %+v: want one workload, not full", req)
	}
	if !g.Address().NeedsPush(ztunnelProxy(), wildcard, req) {
		t.Fatal("Address must be pushed when a workload changed")
	}
	out, removed, incremental, err := g.Address().GenerateDeltas(ztunnelProxy(), next, wildcard, req)
	if err != nil || !incremental {
		t.Fatalf("incremental=%v err=%v", incremental, err)
	}
	if len(out) != 1 || out[0].Name != ratingsB || len(removed) != 0 {
		t.Fatalf("delta = %v removed %v, want exactly [%s]", names(out), removed, ratingsB)
	}
	a := decodeAddresses(t, out)[ratingsB]
	if a.GetWorkload().GetStatus() != workload.WorkloadStatus_HEALTHY {
		t.Errorf("status = %v, want HEALTHY", a.GetWorkload().GetStatus())
	}
	if out[0].Version == before[ratingsB] {
		t.Error("version did not change with the content")
	}
	// Every other resource of the new snapshot is byte-identical (same version) to what was sent before.
	full2, _ := g.Address().Generate(ztunnelProxy(), next, wildcard, nil)
	for _, r := range full2 {
		if r.Name != ratingsB && before[r.Name] != r.Version {
			t.Errorf("%s changed version without changing", r.Name)
		}
	}
	// Policies in the namespace are offered again with the same versions: the transport sends nothing.
	pol, _, inc, _ := g.Authorization().GenerateDeltas(ztunnelProxy(), next, &model.WatchedResource{Wildcard: true}, req)
	allPol, _ := g.Authorization().Generate(ztunnelProxy(), ps, &model.WatchedResource{Wildcard: true}, nil)
	if !inc || len(pol) == 0 {
		t.Fatalf("authorization delta: incremental=%v n=%d", inc, len(pol))
	}
	for _, p := range pol {
		if i := slices.IndexFunc(allPol, func(r *model.Resource) bool { return r.Name == p.Name }); i < 0 || allPol[i].Version != p.Version {
			t.Errorf("policy %s changed", p.Name)
		}
	}

	// The pod is deleted: one removal, nothing else.
	f.del(config.Pod, "amb", "ratings-v1-6b7c9d8f5d-bcdfg")
	next2, req := f.update(next)
	out, removed, incremental, _ = g.Address().GenerateDeltas(ztunnelProxy(), next2, wildcard, req)
	if !incremental || len(out) != 0 || !slices.Equal(removed, []string{ratingsB}) {
		t.Fatalf("delete: delta %v removed %v incremental %v, want removed [%s]", names(out), removed, incremental, ratingsB)
	}
}

func TestFullPushReturnsFullState(t *testing.T) {
	f := scenario(t)
	ps := f.build()
	g := ztunnel.New()
	f.service("plain", "web", "10.96.0.20", nil, map[string]string{"app": "web"}, nil, numTarget("http", 80, 8081))
	next, req := f.update(ps)
	if !req.Full {
		t.Fatal("a service change is a full push")
	}
	out, removed, incremental, _ := g.Address().GenerateDeltas(ztunnelProxy(), next, wildcard, req)
	if incremental || removed != nil || len(out) != len(expectedAddresses()) {
		t.Fatalf("full push: incremental=%v removed=%v n=%d", incremental, removed, len(out))
	}
	got := decodeAddresses(t, out)
	if p := got[web0].GetWorkload().GetServices()[webSvc].GetPorts(); len(p) != 1 || p[0].TargetPort != 8081 {
		t.Errorf("web-0 ports = %v, want target 8081", p)
	}
}

func TestOnDemand(t *testing.T) {
	f := scenario(t)
	ps := f.build()
	g := ztunnel.New()
	w := &model.WatchedResource{TypeURL: ztunnel.AddressType, ResourceNames: nameset.New(
		"/10.1.0.5", "/10.96.0.10", "/10.9.9.9", "other/10.1.0.5", vm1, webSvc)}
	res, err := g.Address().Generate(ztunnelProxy(), ps, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := expectedAddresses()
	checkAddresses(t, decodeAddresses(t, res), map[string]*workload.Address{
		"/10.1.0.5": want[ratingsA], "/10.96.0.10": want[ratingsSvc], vm1: want[vm1], webSvc: want[webSvc]})

	// The workload behind "/10.1.0.5" changes: the lookup is answered again; an unknown one stays removed.
	f.pod(podSpec{ns: "amb", name: "ratings-v1-6b7c9d8f5d-x2x4k", ip: "10.1.0.5", node: "node-1", sa: "ratings", ready: false,
		labels: map[string]string{"app": "ratings", "version": "v1"}, ports: map[string]int32{"http": 9080}})
	next, req := f.update(ps)
	out, removed, _, _ := g.Address().GenerateDeltas(ztunnelProxy(), next, w, req)
	if !slices.Contains(names(out), "/10.1.0.5") || !slices.Contains(removed, "/10.9.9.9") {
		t.Fatalf("delta %v removed %v: want /10.1.0.5 resent and /10.9.9.9 removed", names(out), removed)
	}
}

func TestVersionsStable(t *testing.T) {
	f := scenario(t)
	versions := func(g *ztunnel.Generators, ps *model.PushContext) map[string]string {
		out := map[string]string{}
		res, _ := g.Address().Generate(ztunnelProxy(), ps, wildcard, nil)
		pol, _ := g.Authorization().Generate(ztunnelProxy(), ps, wildcard, nil)
		for _, r := range append(res, pol...) {
			out[r.Name] = r.Version
		}
		return out
	}
	// Two processes (fresh generators, fresh snapshots from the same config) agree on every version, so a
	// ztunnel reconnecting to another replica with initial_resource_versions receives nothing.
	v1 := versions(ztunnel.New(), f.build())
	for range 3 {
		v2 := versions(ztunnel.New(), f.build())
		if len(v1) != len(v2) {
			t.Fatalf("%d vs %d resources", len(v1), len(v2))
		}
		for n, v := range v1 {
			if v2[n] != v {
				t.Errorf("%s: version %s then %s", n, v, v2[n])
			}
		}
	}
}

func TestPushFilter(t *testing.T) {
	g := ztunnel.New()
	p := ztunnelProxy()
	addr, az := g.Address(), g.Authorization()
	key := func(k config.Kind) map[config.Key]struct{} {
		return map[config.Key]struct{}{{Kind: k, Namespace: "amb", Name: "x"}: {}}
	}
	for _, tc := range []struct {
		name       string
		req        *model.PushRequest
		addr, auth bool
	}{
		{"initial", &model.PushRequest{Full: true}, true, true},
		{"destination rule", &model.PushRequest{Full: true, ConfigsUpdated: key(config.DestinationRule)}, false, false},
		{"authorization policy", &model.PushRequest{Full: true, ConfigsUpdated: key(config.AuthorizationPolicy)}, true, true},
		{"namespace", &model.PushRequest{Full: true, ConfigsUpdated: key(config.Namespace)}, true, true},
		{"peer authentication", &model.PushRequest{Full: true, ConfigsUpdated: key(config.PeerAuthentication)}, true, true},
		{"service", &model.PushRequest{Full: true, ConfigsUpdated: key(config.Service)}, true, false},
		{"endpoints only", &model.PushRequest{ServicesUpdated: map[string]struct{}{ratingsSvc: {}}}, true, false},
		{"workload", &model.PushRequest{WorkloadsUpdated: map[string]struct{}{ratingsA: {}}}, true, true},
		{"nothing", &model.PushRequest{}, false, false},
	} {
		if got := addr.NeedsPush(p, wildcard, tc.req); got != tc.addr {
			t.Errorf("%s: Address NeedsPush = %v, want %v", tc.name, got, tc.addr)
		}
		if got := az.NeedsPush(p, wildcard, tc.req); got != tc.auth {
			t.Errorf("%s: Authorization NeedsPush = %v, want %v", tc.name, got, tc.auth)
		}
	}
}

func TestAuthorization(t *testing.T) {
	f := scenario(t)
	ps := f.build()
	g := ztunnel.New()
	res, err := g.Authorization().Generate(ztunnelProxy(), ps, &model.WatchedResource{Wildcard: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*authz.Authorization{}
	for _, r := range res {
		var a authz.Authorization
		if err := proto.Unmarshal(r.Any.Value, &a); err != nil || r.Any.TypeUrl != ztunnel.AuthorizationType {
			t.Fatalf("%s: %v %s", r.Name, err, r.Any.TypeUrl)
		}
		got[r.Name] = &a
	}
	exact := func(s string) *authz.StringMatch {
		return &authz.StringMatch{MatchType: &authz.StringMatch_Exact{Exact: s}}
	}
	cidr := func(s string) *authz.Address {
		p := netip.MustParsePrefix(s)
		return &authz.Address{Address: p.Addr().AsSlice(), Length: uint32(p.Bits())}
	}
	clause := func(m ...*authz.Match) *authz.Clause { return &authz.Clause{Matches: m} }
	want := map[string]*authz.Authorization{
		// DENY with an HTTP method: enforced on the port and principals alone (denies more).
		"istio-system/global-deny": {Name: "global-deny", Namespace: "istio-system", Scope: authz.Scope_GLOBAL, Action: authz.Action_DENY,
			Rules: []*authz.Rule{{Clauses: []*authz.Clause{
				clause(&authz.Match{DestinationPorts: []uint32{8080}}),
				clause(&authz.Match{Principals: []*authz.StringMatch{{MatchType: &authz.StringMatch_Prefix{Prefix: "cluster.local/ns/plain/sa/"}}}}),
			}}}},
		"amb/allow-ratings": {Name: "allow-ratings", Namespace: "amb", Scope: authz.Scope_WORKLOAD_SELECTOR,
			Action: authz.Action_ALLOW, DryRun: true,
			Rules: []*authz.Rule{{Clauses: []*authz.Clause{
				clause(&authz.Match{DestinationPorts: []uint32{9080}, NotDestinationPorts: []uint32{15000}}),
				clause(
					&authz.Match{Principals: []*authz.StringMatch{exact("cluster.local/ns/amb/sa/client")},
						Namespaces: []*authz.StringMatch{exact("amb"), {MatchType: &authz.StringMatch_Suffix{Suffix: "-prod"}}}},
					&authz.Match{SourceIps: []*authz.Address{cidr("10.0.0.0/8"), cidr("192.168.1.1/32")},
						NotSourceIps: []*authz.Address{cidr("10.9.0.0/16")}},
					&authz.Match{ServiceAccounts: []*authz.ServiceAccountMatch{{Namespace: "amb", ServiceAccount: "client"},
						{Namespace: "plain", ServiceAccount: "web"}}},
				),
				clause(&authz.Match{SourceIps: []*authz.Address{cidr("10.1.0.0/16")}}),
				clause(&authz.Match{NotDestinationPorts: []uint32{9999}}),
			}}}},
		// ALLOW whose only rule needs HTTP: the rule is left out, the policy allows nothing.
		"amb/allow-l7": {Name: "allow-l7", Namespace: "amb", Scope: authz.Scope_WORKLOAD_SELECTOR, Action: authz.Action_ALLOW},
		// DENY with a header condition: the condition matches everything.
		"amb/ns-deny": {Name: "ns-deny", Namespace: "amb", Scope: authz.Scope_NAMESPACE, Action: authz.Action_DENY,
			Rules: []*authz.Rule{{Clauses: []*authz.Clause{
				clause(&authz.Match{NotNamespaces: []*authz.StringMatch{exact("amb")}}),
				clause(&authz.Match{}),
			}}}},
	}
	for name, w := range want {
		if !proto.Equal(got[name], w) {
			t.Errorf("%s:\n got %v\nwant %v", name, got[name], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("policies %v, want %d (audit and waypoint-bound ones are not for ztunnel)", names(res), len(want))
	}
	notes := g.Notes(ps)
	for name, sub := range map[string]string{
		"istio-system/global-deny": "denies more", "amb/allow-l7": "allows nothing", "amb/ns-deny": "request.headers[x-user]",
		"amb/audit": "AUDIT is not supported", "amb/waypoint-bound": "targetRef",
	} {
		if !strings.Contains(strings.Join(notes[name], "\n"), sub) {
			t.Errorf("notes[%s] = %q, want it to mention %q", name, notes[name], sub)
		}
	}
	if _, ok := notes["amb/allow-ratings"]; ok {
		t.Errorf("allow-ratings is fully L4 but has notes %q", notes["amb/allow-ratings"])
	}
}

func TestStringMatchConventions(t *testing.T) {
	c := &config.Config{Key: config.Key{Kind: config.AuthorizationPolicy, Namespace: "ns", Name: "p"},
		Spec: &istiosec.AuthorizationPolicy{Rules: []*istiosec.Rule{{From: []*istiosec.Rule_From{{Source: &istiosec.Source{
			Principals:    []string{"*", "spiffe://td/ns/a/sa/b", "*/sa/x", "td/ns/y/*"},
			NotPrincipals: []string{"bad"},
		}}}}}}}
	got, notes := ztunnel.ConvertPolicy(c, "istio-system")
	m := got.GetRules()[0].GetClauses()[0].GetMatches()[0]
	want := &authz.Match{
		Principals: []*authz.StringMatch{
			{MatchType: &authz.StringMatch_Presence{Presence: &emptypb.Empty{}}},
			{MatchType: &authz.StringMatch_Exact{Exact: "td/ns/a/sa/b"}},
			{MatchType: &authz.StringMatch_Suffix{Suffix: "/sa/x"}},
			{MatchType: &authz.StringMatch_Prefix{Prefix: "td/ns/y/"}},
		},
		NotPrincipals: []*authz.StringMatch{{MatchType: &authz.StringMatch_Exact{Exact: "bad"}}},
	}
	if !proto.Equal(m, want) || len(notes) != 0 {
		t.Errorf("got %v notes %q\nwant %v", m, notes, want)
	}
}

// Many connections at once share one computation and one marshaled resource.
func TestConcurrentConnectionsShare(t *testing.T) {
	f := scenario(t)
	ps := f.build()
	g := ztunnel.New()
	f.pod(podSpec{ns: "amb", name: "client", ip: "10.1.0.8", ready: false,
		labels: map[string]string{"app": "client", "istio.io/use-waypoint": "client-wp"}})
	next, req := f.update(ps)
	const n = 50
	outs := make([]model.Resources, n)
	fulls := make([]model.Resources, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			w := &model.WatchedResource{TypeURL: ztunnel.AddressType, Wildcard: true}
			outs[i], _, _, _ = g.Address().GenerateDeltas(ztunnelProxy(), next, w, req)
			fulls[i], _ = g.Address().Generate(ztunnelProxy(), next, w, nil)
			_, _ = g.Authorization().Generate(ztunnelProxy(), next, w, nil)
		})
	}
	wg.Wait()
	for i := range n {
		if len(outs[i]) != 1 || outs[i][0] != outs[0][0] {
			t.Fatalf("connection %d: delta %v not the shared resource", i, names(outs[i]))
		}
		if len(fulls[i]) != len(fulls[0]) || fulls[i][0] != fulls[0][0] {
			t.Fatalf("connection %d: full state not shared", i)
		}
	}
}
