package envoy

import (
	"testing"
	"time"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/store"
)

// A root VirtualService's delegated routes reach the proxy in the root's place, and a change to the
// delegate rebuilds the root's virtual host only: another service's routed virtual host is the very
// resource built before.
func TestDelegateChangeRebuildsOnlyItsRootsVirtualHost(t *testing.T) {
	st := store.New()
	add := func(y string) model.Change {
		t.Helper()
		c, err := config.Parse([]byte(y), "mesh.yaml", 0, "default")
		if err != nil {
			t.Fatal(err)
		}
		old := st.Get(c.Key)
		st.Upsert(store.LayerFile, c)
		return model.Change{Key: c.Key, Old: old, New: c}
	}
	add("apiVersion: v1\nkind: Service\nmetadata: {name: front, namespace: ns}\nspec:\n  clusterIP: 10.1.0.1\n" +
		"  ports: [{name: http, port: 80}]\n")
	add("apiVersion: v1\nkind: Service\nmetadata: {name: other, namespace: ns}\nspec:\n  clusterIP: 10.1.0.2\n" +
		"  ports: [{name: http, port: 80}]\n")
	add("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: front, namespace: ns}\nspec:\n" +
		"  hosts: [front]\n  http:\n  - match: [{uri: {prefix: /api}}]\n    delegate: {name: api}\n  - route: [{destination: {host: front}}]\n")
	add("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: other, namespace: ns}\nspec:\n  hosts: [other]\n" +
		"  http:\n  - route: [{destination: {host: other}}]\n")
	add("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: api, namespace: ns}\nspec:\n  http:\n" +
		"  - match: [{uri: {prefix: /api/v2}}]\n    timeout: 2s\n    route: [{destination: {host: other}}]\n")
	before := model.Build(st, mesh.Default())
	after, _ := model.Update(before, st, []model.Change{
		add("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: api, namespace: ns}\nspec:\n  http:\n" +
			"  - match: [{uri: {prefix: /api/v2}}]\n    timeout: 5s\n    route: [{destination: {host: other}}]\n")})

	g := newByPort()
	proxy := envoyProxy("ns", nil, true, 1, 38)
	const frontVH, otherVH = "80/front.ns.svc.cluster.local:80", "80/other.ns.svc.cluster.local:80"
	check := func(push *model.PushContext, timeout time.Duration) map[string]*model.Resource {
		t.Helper()
		for _, vh := range generateVirtualHosts(t, g, proxy, push) {
			if vh.Name != frontVH {
				continue
			}
			if len(vh.Routes) != 2 {
				t.Fatalf("front: %d routes, want the delegated one and the default", len(vh.Routes))
			}
			r := vh.Routes[0]
			if r.GetMatch().GetPrefix() != "/api/v2" || r.GetRoute().GetCluster() != "outbound|80||other.ns.svc.cluster.local" ||
				r.GetRoute().GetTimeout().AsDuration() != timeout {
				t.Errorf("front's first route: %v, want /api/v2 to other with timeout %v", r, timeout)
			}
		}
		res, err := g.ByTypeURL()[VirtualHostType].Generate(proxy, push, wildcard(VirtualHostType), nil)
		if err != nil {
			t.Fatal(err)
		}
		byName := map[string]*model.Resource{}
		for _, r := range res {
			byName[r.Name] = r
		}
		return byName
	}
	first := check(before, 2*time.Second)
	second := check(after, 5*time.Second)
	if first[frontVH] == second[frontVH] {
		t.Error("the root's virtual host was not rebuilt after its delegate changed")
	}
	if first[otherVH] == nil || first[otherVH] != second[otherVH] {
		t.Error("another service's routed virtual host was rebuilt for a delegate it does not use")
	}
}
