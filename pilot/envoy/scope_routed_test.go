package envoy

import (
	"slices"
	"strings"
	"testing"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/store"
)

const routedDestinationsMesh = `
apiVersion: v1
kind: Service
metadata: {name: reviews, namespace: shop}
spec:
  clusterIP: 10.0.6.10
  ports: [{name: http, port: 9080}]
---
apiVersion: v1
kind: Service
metadata: {name: ratings, namespace: team-b}
spec:
  clusterIP: 10.0.6.20
  ports: [{name: http, port: 9080}, {name: tcp-admin, port: 9901}]
---
apiVersion: v1
kind: Service
metadata: {name: audit, namespace: team-b}
spec:
  clusterIP: 10.0.6.30
  ports: [{name: http, port: 8080}]
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: shop}
spec:
  egress: [{hosts: ["./*"]}]
`

const reviewsToRatings = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: shop}
spec:
  hosts: [reviews]
  http:
  - route: [{destination: {host: ratings.team-b.svc.cluster.local, port: {number: 9080}}}]
    mirror: {host: audit.team-b.svc.cluster.local}
`

// outboundClusterNames are the names of the outbound clusters proxy gets.
func outboundClusterNames(t *testing.T, g *Generators, proxy *model.Proxy, push *model.PushContext) []string {
	t.Helper()
	var out []string
	for _, c := range generate(t, g, ClusterType, proxy, push, wildcard(ClusterType), newCluster) {
		if strings.HasPrefix(c.Name, "outbound|") {
			out = append(out, c.Name)
		}
	}
	return out
}

// A VirtualService the Sidecar imports routes (and mirrors) to services its egress hosts leave out: the
// proxy gets their clusters on the ports routed to, and their endpoints, as istiod adds such destinations
// to its scope. Before, the routes led to clusters the proxy did not have. Adding the VirtualService to a
// running mesh adds them; other namespaces' scopes are not rebuilt for it.
func TestSidecarGetsClustersOfRoutedDestinations(t *testing.T) {
	st := storeFromYAML(t, []byte(routedDestinationsMesh))
	push := model.Build(st, mesh.Default())
	g := New(Options{})
	proxy := sidecarIn("shop", "10.1.0.5", map[string]string{"app": "productpage"})
	other := sidecarIn("elsewhere", "10.1.0.6", map[string]string{"app": "x"})
	if got := outboundClusterNames(t, g, proxy, push); !slices.Equal(got, []string{"outbound|9080||reviews.shop.svc.cluster.local"}) {
		t.Fatalf("before the VirtualService: clusters %v, want reviews' alone", got)
	}
	outboundClusterNames(t, g, other, push)
	otherScope := g.scopeFor(other, push)

	c, err := config.Parse([]byte(reviewsToRatings), "vs.yaml", 0, "shop")
	if err != nil {
		t.Fatal(err)
	}
	st.Upsert(store.LayerFile, c)
	next, _ := model.Update(push, st, []model.Change{{Key: c.Key, New: c}})
	want := []string{
		"outbound|8080||audit.team-b.svc.cluster.local",
		"outbound|9080||ratings.team-b.svc.cluster.local",
		"outbound|9080||reviews.shop.svc.cluster.local",
	}
	if got := outboundClusterNames(t, g, proxy, next); !slices.Equal(got, want) {
		t.Errorf("clusters %v, want %v (ratings on the port routed to only, audit mirrored to)", got, want)
	}
	clas, err := g.ByTypeURL()[EndpointType].Generate(proxy, next, named(EndpointType, want[:2]...), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(clas) != 2 {
		t.Errorf("%d load assignments for the routed destinations, want 2", len(clas))
	}
	if g.scopeFor(other, next) != otherScope {
		t.Error("a scope without a Sidecar was rebuilt for a VirtualService change")
	}

	// A VirtualService change that adds no destination keeps the scope, and what is cached against it.
	scope := g.scopeFor(proxy, next)
	c, err = config.Parse([]byte(strings.Replace(reviewsToRatings, "name: reviews,", "name: reviews-copy,", 1)), "vs2.yaml", 0, "shop")
	if err != nil {
		t.Fatal(err)
	}
	st.Upsert(store.LayerFile, c)
	last, _ := model.Update(next, st, []model.Change{{Key: c.Key, New: c}})
	if g.scopeFor(proxy, last) != scope {
		t.Error("the scope was rebuilt for a VirtualService change that adds no destination")
	}
}

// BenchmarkScopeLookup is the scope lookup every request and push filter of a proxy makes, for a proxy
// under a Sidecar whose VirtualServices add destinations and for one without a Sidecar.
func BenchmarkScopeLookup(b *testing.B) {
	push := pushFromYAML(b, []byte(routedDestinationsMesh+"---\n"+reviewsToRatings))
	g := New(Options{})
	for name, proxy := range map[string]*model.Proxy{
		"sidecar":    sidecarIn("shop", "10.1.0.5", map[string]string{"app": "productpage"}),
		"no-sidecar": sidecarIn("elsewhere", "10.1.0.6", nil),
	} {
		b.Run(name, func(b *testing.B) {
			g.scopeFor(proxy, push)
			b.ReportAllocs()
			for b.Loop() {
				g.scopeFor(proxy, push)
			}
		})
	}
}

// A service added under the same VirtualServices rebuilds the routed scope on the new scope of services:
// the routed destinations stay and the new service joins them.
func TestRoutedScopeFollowsItsBase(t *testing.T) {
	st := storeFromYAML(t, []byte(routedDestinationsMesh+"---\n"+reviewsToRatings))
	push := model.Build(st, mesh.Default())
	g := New(Options{})
	proxy := sidecarIn("shop", "10.1.0.5", map[string]string{"app": "productpage"})
	before := outboundClusterNames(t, g, proxy, push)
	c, err := config.Parse([]byte("apiVersion: v1\nkind: Service\nmetadata: {name: extra, namespace: shop}\nspec:\n  clusterIP: 10.0.6.99\n"+
		"  ports: [{name: http, port: 80}]\n"), "extra.yaml", 0, "shop")
	if err != nil {
		t.Fatal(err)
	}
	st.Upsert(store.LayerFile, c)
	next, _ := model.Update(push, st, []model.Change{{Key: c.Key, New: c}})
	want := append(slices.Clone(before), "outbound|80||extra.shop.svc.cluster.local")
	slices.Sort(want)
	if got := outboundClusterNames(t, g, proxy, next); !slices.Equal(got, want) {
		t.Errorf("clusters %v, want %v", got, want)
	}
	if s := g.scopeFor(proxy, next); s.base == nil || s.base.Service("extra.shop.svc.cluster.local") == nil || g.scopeFor(proxy, next) != s {
		t.Error("the routed scope is not built on, and kept for, the new scope of services")
	}
}
