package model_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/store"
)

// vsStore is a store of VirtualServices written as YAML, each a second younger than the last, that records
// the changes a snapshot update is given.
type vsStore struct {
	t       *testing.T
	st      *store.Store
	n       int
	changes []model.Change
}

func newVSStore(t *testing.T) *vsStore {
	s := &vsStore{t: t, st: store.New()}
	s.st.AddHandler(func(ev store.Event) {
		s.changes = append(s.changes, model.Change{Key: ev.Key(), Old: ev.Old, New: ev.New})
	})
	return s
}

func (s *vsStore) put(doc string) {
	s.t.Helper()
	c, err := config.Parse([]byte("apiVersion: networking.istio.io/v1\nkind: VirtualService\n"+doc), "test.yaml", 0, "default")
	if err != nil {
		s.t.Fatal(err)
	}
	s.n++
	c.CreationTimestamp = time.Unix(int64(s.n), 0)
	s.st.Upsert(store.LayerFile, c)
}

func (s *vsStore) del(ns, name string) {
	s.st.Delete(store.LayerFile, config.Key{Kind: config.VirtualService, Namespace: ns, Name: name})
}

// update applies the changes recorded since the last call.
func (s *vsStore) update(ps *model.PushContext) *model.PushContext {
	next, _ := model.Update(ps, s.st, s.changes)
	s.changes = nil
	return next
}

// describeRoutes renders a VirtualService's http routes: each match (uri, headers, port) and where it goes.
func describeRoutes(vs *model.VirtualService) string {
	if vs == nil {
		return "<none>"
	}
	var b strings.Builder
	for _, r := range vs.Spec.Http {
		var ms []string
		for _, m := range r.Match {
			s := fmt.Sprint(m.GetUri().GetMatchType())
			for k, v := range m.Headers {
				s += fmt.Sprintf(" %s=%v", k, v.GetMatchType())
			}
			if m.Port != 0 {
				s += fmt.Sprintf(" port=%d", m.Port)
			}
			ms = append(ms, s)
		}
		var dests []string
		for _, d := range r.Route {
			dests = append(dests, d.GetDestination().GetHost())
		}
		fmt.Fprintf(&b, "[%s] -> %v timeout=%v delegate=%v\n", strings.Join(ms, " | "), dests, r.GetTimeout().AsDuration(), r.Delegate != nil)
	}
	return b.String()
}

const reviewsHost = "reviews.default.svc.cluster.local"

// A root's delegating route is replaced in place by the delegate's routes, each match narrowed by the root's
// (istiod's mergeHTTPMatchRequests); a delegate route whose match escapes the root's is dropped; what a
// delegate route leaves unset comes from the root route; short hosts resolve in the delegate's namespace.
func TestDelegateRoutesMergedIntoRoot(t *testing.T) {
	s := newVSStore(t)
	s.put(`metadata: {name: root, namespace: default}
spec:
  hosts: [reviews]
  http:
  - match: [{uri: {prefix: /ratings}, headers: {x-team: {exact: a}}}]
    timeout: 3s
    delegate: {name: ratings, namespace: shop}
  - route: [{destination: {host: reviews}}]
`)
	s.put(`metadata: {name: ratings, namespace: shop}
spec:
  http:
  - match: [{uri: {prefix: /ratings/v2}}]
    timeout: 2s
    route: [{destination: {host: ratings}}]
  - match: [{uri: {prefix: /other}}]
    route: [{destination: {host: other}}]
  - route: [{destination: {host: ratings.shop.svc.cluster.local}}]
`)
	ps := model.Build(s.st, mesh.Default())
	got := describeRoutes(ps.VirtualServiceForHost("default", model.MeshGateway, reviewsHost))
	want := `[&{/ratings/v2} x-team=&{a}] -> [ratings.shop.svc.cluster.local] timeout=2s delegate=false
[&{/ratings} x-team=&{a}] -> [ratings.shop.svc.cluster.local] timeout=3s delegate=false
[] -> [reviews] timeout=0s delegate=false
`
	if got != want {
		t.Errorf("merged routes:\n%s\nwant:\n%s", got, want)
	}
	// The delegate is routed only through its root.
	for _, vs := range ps.VirtualServices("shop", model.MeshGateway) {
		if vs.Name == "ratings" {
			t.Error("the delegate VirtualService is bound to the mesh by itself")
		}
	}
	if probs := ps.VirtualServiceProblems(); len(probs) > 0 {
		t.Errorf("problems: %v", probs)
	}
}

// A delegate that does not exist, has hosts (then it is no delegate) or is not exported to the root's
// namespace leaves its root route out, and only that route; each is reported as a warning naming the field.
func TestDelegateMissingOrHiddenDropsTheRoute(t *testing.T) {
	s := newVSStore(t)
	s.put(`metadata: {name: root, namespace: default}
spec:
  hosts: [reviews]
  http:
  - match: [{uri: {prefix: /missing}}]
    delegate: {name: nowhere}
  - match: [{uri: {prefix: /hidden}}]
    delegate: {name: hidden, namespace: shop}
  - match: [{uri: {prefix: /hosted}}]
    delegate: {name: hosted}
  - route: [{destination: {host: reviews}}]
`)
	s.put(`metadata: {name: hidden, namespace: shop}
spec:
  exportTo: [.]
  http:
  - route: [{destination: {host: ratings}}]
`)
	s.put(`metadata: {name: hosted, namespace: default}
spec:
  hosts: [hosted.example.com]
  http:
  - route: [{destination: {host: ratings}}]
`)
	ps := model.Build(s.st, mesh.Default())
	vs := ps.VirtualServiceForHost("default", model.MeshGateway, reviewsHost)
	if got, want := describeRoutes(vs), "[] -> [reviews] timeout=0s delegate=false\n"; got != want {
		t.Errorf("routes:\n%s\nwant:\n%s", got, want)
	}
	var fields []string
	for _, p := range ps.VirtualServiceProblems() {
		if p.Namespace != "default" || p.Name != "root" || !p.Warning {
			t.Errorf("problem not a warning on default/root: %+v", p)
		}
		fields = append(fields, p.Field+": "+p.Message)
	}
	want := []string{
		"spec.http[0].delegate: VirtualService default/nowhere is not a delegate VirtualService (it must exist and have no hosts): this route " +
			"is left out",
		"spec.http[1].delegate: VirtualService shop/hidden is not exported to namespace default: this route is left out",
		"spec.http[2].delegate: VirtualService default/hosted is not a delegate VirtualService (it must exist and have no hosts): this route " +
			"is left out",
	}
	if strings.Join(fields, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(fields, "\n"), strings.Join(want, "\n"))
	}
}

// A change to a delegate resolves the roots that name it again, and nothing else: other VirtualServices
// keep their very objects (what generators built from them stays cached). A delegate created after its root,
// changed, and deleted, each time the snapshot says what a full build says.
func TestDelegateChangeReresolvesItsRoots(t *testing.T) {
	s := newVSStore(t)
	s.put(`metadata: {name: root, namespace: default}
spec:
  hosts: [reviews]
  http:
  - match: [{uri: {prefix: /ratings}}]
    delegate: {name: ratings}
  - route: [{destination: {host: reviews}}]
`)
	s.put(`metadata: {name: other, namespace: default}
spec:
  hosts: [details]
  http:
  - route: [{destination: {host: details}}]
`)
	ps := model.Build(s.st, mesh.Default())
	s.changes = nil
	other := ps.VirtualServiceForHost("default", model.MeshGateway, "details.default.svc.cluster.local")
	check := func(step, want string) {
		t.Helper()
		ps = s.update(ps)
		got := describeRoutes(ps.VirtualServiceForHost("default", model.MeshGateway, reviewsHost))
		full := describeRoutes(model.Build(s.st, mesh.Default()).VirtualServiceForHost("default", model.MeshGateway, reviewsHost))
		if got != want || got != full {
			t.Errorf("%s: routes\n%s\nwant\n%s\nfull build\n%s", step, got, want, full)
		}
		if ps.VirtualServiceForHost("default", model.MeshGateway, "details.default.svc.cluster.local") != other {
			t.Errorf("%s: an unrelated VirtualService was resolved again", step)
		}
	}
	s.put(`metadata: {name: ratings, namespace: default}
spec:
  http:
  - route: [{destination: {host: ratings}}]
`)
	check("delegate created",
		"[&{/ratings}] -> [ratings.default.svc.cluster.local] timeout=0s delegate=false\n[] -> [reviews] timeout=0s delegate=false\n")
	s.put(`metadata: {name: ratings, namespace: default}
spec:
  http:
  - match: [{uri: {exact: /ratings/v2}}]
    timeout: 2s
    route: [{destination: {host: ratings}}]
`)
	check("delegate changed",
		"[&{/ratings/v2}] -> [ratings.default.svc.cluster.local] timeout=2s delegate=false\n[] -> [reviews] timeout=0s delegate=false\n")
	s.del("default", "ratings")
	check("delegate deleted", "[] -> [reviews] timeout=0s delegate=false\n")
	s.put(`metadata: {name: root, namespace: default}
spec:
  hosts: [reviews]
  http:
  - route: [{destination: {host: reviews-v2}}]
`)
	s.put(`metadata: {name: ratings, namespace: default}
spec:
  http:
  - route: [{destination: {host: ratings}}]
`)
	check("root no longer delegates", "[] -> [reviews-v2] timeout=0s delegate=false\n")
}

// The delegate's spec is never modified by merging, even when two roots merge it.
func TestDelegateSharedByTwoRootsIsNotModified(t *testing.T) {
	s := newVSStore(t)
	for _, name := range []string{"a", "b"} {
		s.put(fmt.Sprintf(`metadata: {name: %s, namespace: default}
spec:
  hosts: [%s.example.com]
  http:
  - match: [{uri: {prefix: /%s}}]
    delegate: {name: shared}
`, name, name, name))
	}
	s.put(`metadata: {name: shared, namespace: default}
spec:
  http:
  - route: [{destination: {host: ratings}}]
`)
	ps := model.Build(s.st, mesh.Default())
	for _, name := range []string{"a", "b"} {
		want := fmt.Sprintf("[&{/%s}] -> [ratings.default.svc.cluster.local] timeout=0s delegate=false\n", name)
		if got := describeRoutes(ps.VirtualServiceForHost("default", model.MeshGateway, name+".example.com")); got != want {
			t.Errorf("root %s:\n%s\nwant\n%s", name, got, want)
		}
	}
	shared := s.st.Get(config.Key{Kind: config.VirtualService, Namespace: "default", Name: "shared"}).Spec.(*networking.VirtualService)
	if len(shared.Http[0].Match) != 0 || shared.Http[0].Route[0].Destination.Host != "ratings" {
		t.Errorf("the stored delegate was modified: %v", shared)
	}
}

// Random VirtualService changes (roots, delegates, roots turning into delegates and back, gateways, deletes):
// every incremental snapshot says what a full build of the same store says.
func TestVirtualServiceUpdatesMatchFullBuild(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	s := newVSStore(t)
	ps := model.Build(s.st, mesh.Default())
	names := []string{"a", "b", "c", "d", "e"}
	dumpVS := func(ps *model.PushContext) string {
		var b strings.Builder
		for _, gw := range []string{model.MeshGateway, "default/gw"} {
			for _, ns := range []string{"default", "shop"} {
				for _, vs := range ps.VirtualServices(ns, gw) {
					fmt.Fprintf(&b, "%s %s %s/%s %v\n%s", gw, ns, vs.Namespace, vs.Name, vs.Hosts, describeRoutes(vs))
				}
			}
		}
		for _, p := range ps.VirtualServiceProblems() {
			fmt.Fprintf(&b, "problem %s/%s %s: %s\n", p.Namespace, p.Name, p.Field, p.Message)
		}
		return b.String()
	}
	for step := range 300 {
		for range 1 + rng.IntN(3) {
			ns := []string{"default", "shop"}[rng.IntN(2)]
			name := names[rng.IntN(len(names))]
			if rng.IntN(5) == 0 {
				s.del(ns, name)
				continue
			}
			var doc strings.Builder
			fmt.Fprintf(&doc, "metadata: {name: %s, namespace: %s}\nspec:\n", name, ns)
			root := rng.IntN(2) == 0
			if root {
				fmt.Fprintf(&doc, "  hosts: [%s.example.com]\n", name)
				if rng.IntN(3) == 0 {
					doc.WriteString("  gateways: [gw, mesh]\n")
				}
			}
			if rng.IntN(3) == 0 {
				doc.WriteString("  exportTo: [.]\n")
			}
			doc.WriteString("  http:\n")
			if root {
				fmt.Fprintf(&doc, "  - match: [{uri: {prefix: /%d}}]\n    delegate: {name: %s, namespace: %s}\n",
					rng.IntN(3), names[rng.IntN(len(names))], []string{"default", "shop"}[rng.IntN(2)])
			}
			fmt.Fprintf(&doc, "  - match: [{uri: {prefix: /%d/x}}]\n    route: [{destination: {host: r%d}}]\n", rng.IntN(3), rng.IntN(3))
			s.put(doc.String())
		}
		ps = s.update(ps)
		if got, want := dumpVS(ps), dumpVS(model.Build(s.st, mesh.Default())); got != want {
			t.Fatalf("step %d: incremental\n%s\nfull build\n%s", step, got, want)
		}
	}
}
