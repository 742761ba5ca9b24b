package envoy

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/store"
)

// An endpoint push reaches each proxy with the assignments of the changed service's clusters it watches,
// subsets included as the DestinationRule its namespace applies defines them; the names are shared between
// proxies of one push, so proxies of other namespaces must still get their own.
func TestEndpointPushCarriesTheChangedClustersOfEachProxy(t *testing.T) {
	st, push, g, proxies := derivationFixture(t)
	// Visible in ns-3 only: proxies elsewhere have no "local" subset of svc-3.
	push = applyDocs(t, st, push,
		"apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: svc-3-local, namespace: ns-3}\n"+
			"spec:\n  host: svc-3.ns-3.svc.cluster.local\n  exportTo: [.]\n  subsets: [{name: local, labels: {app: svc-3}}]\n")
	in3, in4 := proxies[0], proxies[1]
	watchOf := func(p *model.Proxy) *model.WatchedResource {
		var names []string
		for name := range generateByName(t, g, ClusterType, p, push) {
			if strings.HasPrefix(name, "outbound|") {
				names = append(names, name)
			}
		}
		return named(EndpointType, names...)
	}
	w3, w4 := watchOf(in3), watchOf(in4)
	other := envoyProxy("ns-5", nil, true, 1, 38)
	wOther := named(EndpointType, OutboundClusterName(80, "", "svc-5.ns-5.svc.cluster.local"))

	// A pod more behind svc-3.
	next, res := addEndpointToSvc3(t, st, push)
	if res.Full {
		t.Fatal("an EndpointSlice change made a full push")
	}
	req := &model.PushRequest{ServicesUpdated: res.ServicesUpdated, Push: next}
	eds := endpointGenerator{g}
	host := "svc-3.ns-3.svc.cluster.local"
	var want3, want4 []string
	for _, port := range []uint32{80, 8080, 9090} {
		want3 = append(want3, OutboundClusterName(port, "", host), OutboundClusterName(port, "local", host))
		want4 = append(want4, OutboundClusterName(port, "", host))
	}
	slices.Sort(want3)
	slices.Sort(want4)
	// Asked in turns, as the proxies of one push are.
	for round, tc := range []struct {
		p    *model.Proxy
		w    *model.WatchedResource
		want []string
	}{{in4, w4, want4}, {in3, w3, want3}, {other, wOther, nil}, {in4, w4, want4}, {in3, w3, want3}} {
		if got := eds.NeedsPush(tc.p, tc.w, req); got != (len(tc.want) > 0) {
			t.Errorf("round %d, %s: NeedsPush %v", round, tc.p.Namespace, got)
		}
		out, removed, incremental, err := eds.GenerateDeltas(tc.p, next, tc.w, req)
		if err != nil || !incremental || len(removed) > 0 {
			t.Fatalf("round %d, %s: err %v, incremental %v, removed %v", round, tc.p.Namespace, err, incremental, removed)
		}
		var got []string
		for _, r := range out {
			got = append(got, r.Name)
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("round %d, %s: pushed %v, want %v", round, tc.p.Namespace, got, tc.want)
		}
	}
	fresh, err := New(Options{}).ByTypeURL()[EndpointType].Generate(in3, next, named(EndpointType, want3...), nil)
	if err != nil {
		t.Fatal(err)
	}
	pushed, _, _, _ := eds.GenerateDeltas(in3, next, w3, req)
	if len(pushed) != len(fresh) {
		t.Fatalf("pushed %d assignments, a fresh build has %d", len(pushed), len(fresh))
	}
	for i := range fresh {
		if pushed[i].Version != fresh[i].Version || !slices.Equal(pushed[i].Any.Value, fresh[i].Any.Value) {
			t.Errorf("%s: pushed assignment differs from a fresh build", fresh[i].Name)
		}
	}

	// The service goes: its watched names, known only from the watch now, are reported removed.
	svcKey := config.Key{Kind: config.Service, Namespace: "ns-3", Name: "svc-3"}
	gone := model.Change{Key: svcKey, Old: st.Get(svcKey)}
	st.Delete(store.LayerFile, svcKey)
	after, res := model.Update(next, st, []model.Change{gone})
	req = &model.PushRequest{ServicesUpdated: res.ServicesUpdated, Push: after}
	if _, ok := req.ServicesUpdated["ns-3/"+host]; !ok {
		t.Fatalf("deleting the Service did not update it: %v", slices.Collect(maps.Keys(req.ServicesUpdated)))
	}
	_, removed, _, err := eds.GenerateDeltas(in3, after, w3, &model.PushRequest{ServicesUpdated: req.ServicesUpdated})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, want3) {
		t.Errorf("removed %v, want %v", removed, want3)
	}
}

// addEndpointToSvc3 rewrites benchMeshYAML's EndpointSlice of svc-3 (ns-3) with an address more and
// returns the updated snapshot and what the update changed.
func addEndpointToSvc3(tb testing.TB, st *store.Store, push *model.PushContext) (*model.PushContext, model.UpdateResult) {
	tb.Helper()
	slice := "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n" +
		"metadata: {name: svc-3-x, namespace: ns-3, labels: {kubernetes.io/service-name: svc-3}}\n" +
		"addressType: IPv4\nports: " + benchThreePorts + "\nendpoints:\n- addresses: [10.0.0.30]\n- addresses: [10.9.9.9]\n"
	c, err := config.Parse([]byte(slice), "slice.yaml", 0, "default")
	if err != nil {
		tb.Fatal(err)
	}
	ch := model.Change{Key: c.Key, Old: st.Get(c.Key), New: c}
	st.Upsert(store.LayerFile, c)
	return model.Update(push, st, []model.Change{ch})
}
