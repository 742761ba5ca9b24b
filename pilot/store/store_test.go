package store_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/store"
)

func svc(ns, name, rv string) *config.Config {
	return &config.Config{
		Key:             config.Key{Kind: config.Service, Namespace: ns, Name: name},
		ResourceVersion: rv,
		Spec:            &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
	}
}

func slice(ns, name, service, rv string) *config.Config {
	labels := map[string]string{}
	if service != "" {
		labels[discoveryv1.LabelServiceName] = service
	}
	return &config.Config{
		Key:             config.Key{Kind: config.EndpointSlice, Namespace: ns, Name: name},
		Labels:          labels,
		ResourceVersion: rv,
		Spec: &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
			AddressType: discoveryv1.AddressTypeIPv4,
		},
	}
}

// recorder collects events from a store handler.
type recorder struct {
	mu     sync.Mutex
	events []store.Event
}

func record(s *store.Store) *recorder {
	r := &recorder{}
	s.AddHandler(func(e store.Event) {
		r.mu.Lock()
		r.events = append(r.events, e)
		r.mu.Unlock()
	})
	return r
}

// take returns and forgets the events recorded so far.
func (r *recorder) take() []store.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.events
	r.events = nil
	return out
}

func expectEvents(t *testing.T, r *recorder, want ...store.Event) {
	t.Helper()
	got := r.take()
	if len(got) != len(want) {
		t.Fatalf("got %d events %v, want %d %v", len(got), describe(got), len(want), describe(want))
	}
	for i := range want {
		if got[i].Type != want[i].Type || got[i].Old != want[i].Old || got[i].New != want[i].New {
			t.Errorf("event %d = %v, want %v", i, describe(got[i:i+1]), describe(want[i:i+1]))
		}
	}
}

func describe(evs []store.Event) []string {
	var out []string
	for _, e := range evs {
		rv := func(c *config.Config) string {
			if c == nil {
				return "nil"
			}
			return c.Key.String() + "@" + c.ResourceVersion
		}
		out = append(out, fmt.Sprintf("%s(%s -> %s)", e.Type, rv(e.Old), rv(e.New)))
	}
	return out
}

func names(cs []*config.Config) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, c.NamespacedName())
	}
	return out
}

func equal(a, b []string) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

func TestUpsertDeleteEvents(t *testing.T) {
	s := store.New()
	r := record(s)
	key := config.Key{Kind: config.Service, Namespace: "ns", Name: "a"}

	v1 := svc("ns", "a", "1")
	s.Upsert(store.LayerKube, v1)
	expectEvents(t, r, store.Event{Type: store.EventAdd, New: v1})
	if s.Get(key) != v1 || s.GetLayer(store.LayerKube, key) != v1 || s.GetLayer(store.LayerFile, key) != nil {
		t.Fatal("Get/GetLayer after add")
	}

	v2 := svc("ns", "a", "2")
	s.Upsert(store.LayerKube, v2)
	expectEvents(t, r, store.Event{Type: store.EventUpdate, Old: v1, New: v2})

	// Setting the very object again is not a change.
	s.Upsert(store.LayerKube, v2)
	expectEvents(t, r)

	s.Delete(store.LayerKube, key)
	expectEvents(t, r, store.Event{Type: store.EventDelete, Old: v2})
	if s.Get(key) != nil || s.GetLayer(store.LayerKube, key) != nil || s.Count(config.Service) != 0 {
		t.Fatal("object still there after delete")
	}

	// Deleting what is not there is silent, in either layer.
	s.Delete(store.LayerKube, key)
	s.Delete(store.LayerFile, config.Key{Kind: config.VirtualService, Namespace: "ns", Name: "never"})
	expectEvents(t, r)
	if len(s.List(config.Service)) != 0 {
		t.Fatal("List not empty")
	}
}

func TestEventHelpers(t *testing.T) {
	c := svc("ns", "a", "1")
	if k := (store.Event{Type: store.EventAdd, New: c}).Key(); k != c.Key {
		t.Errorf("add Key() = %v", k)
	}
	if k := (store.Event{Type: store.EventDelete, Old: c}).Key(); k != c.Key {
		t.Errorf("delete Key() = %v", k)
	}
	for typ, want := range map[store.EventType]string{store.EventAdd: "add", store.EventUpdate: "update", store.EventDelete: "delete"} {
		if typ.String() != want {
			t.Errorf("%d.String() = %q", typ, typ.String())
		}
	}
	if store.LayerKube.String() != "kube" || store.LayerFile.String() != "file" {
		t.Errorf("layer names %s %s", store.LayerKube, store.LayerFile)
	}
	if !(store.LayerKube < store.LayerFile) {
		t.Error("the file layer must rank above the kube layer")
	}
}

func TestFileLayerOverlaysKube(t *testing.T) {
	s := store.New()
	r := record(s)
	key := config.Key{Kind: config.Service, Namespace: "ns", Name: "a"}

	kube1 := svc("ns", "a", "k1")
	s.Upsert(store.LayerKube, kube1)
	expectEvents(t, r, store.Event{Type: store.EventAdd, New: kube1})

	file1 := svc("ns", "a", "f1")
	s.Upsert(store.LayerFile, file1)
	expectEvents(t, r, store.Event{Type: store.EventUpdate, Old: kube1, New: file1})
	if s.Get(key) != file1 {
		t.Fatal("file object does not win")
	}

	// A kube change under a file object is invisible: no event, still the file object, but the layer keeps it.
	kube2 := svc("ns", "a", "k2")
	s.Upsert(store.LayerKube, kube2)
	expectEvents(t, r)
	if s.Get(key) != file1 || s.GetLayer(store.LayerKube, key) != kube2 {
		t.Fatal("kube update under a file object")
	}
	if got := s.List(config.Service); len(got) != 1 || got[0] != file1 {
		t.Fatalf("List = %v", got)
	}

	// Kube deletes it while the file still holds it: still invisible.
	s.Delete(store.LayerKube, key)
	expectEvents(t, r)
	if s.Get(key) != file1 {
		t.Fatal("file object lost when the kube object went")
	}
	s.Upsert(store.LayerKube, kube2)
	expectEvents(t, r)

	file2 := svc("ns", "a", "f2")
	s.Upsert(store.LayerFile, file2)
	expectEvents(t, r, store.Event{Type: store.EventUpdate, Old: file1, New: file2})

	// Deleting the file object reveals the latest kube object, as an update.
	s.Delete(store.LayerFile, key)
	expectEvents(t, r, store.Event{Type: store.EventUpdate, Old: file2, New: kube2})
	if s.Get(key) != kube2 || s.GetLayer(store.LayerFile, key) != nil {
		t.Fatal("kube object not revealed")
	}
	if s.Count(config.Service) != 1 {
		t.Fatalf("Count = %d", s.Count(config.Service))
	}

	s.Delete(store.LayerKube, key)
	expectEvents(t, r, store.Event{Type: store.EventDelete, Old: kube2})

	// A file object first, then kube under it, then the file goes.
	file3 := svc("ns", "a", "f3")
	kube3 := svc("ns", "a", "k3")
	s.Upsert(store.LayerFile, file3)
	s.Upsert(store.LayerKube, kube3)
	s.Delete(store.LayerFile, key)
	s.Delete(store.LayerKube, key)
	expectEvents(t, r,
		store.Event{Type: store.EventAdd, New: file3},
		store.Event{Type: store.EventUpdate, Old: file3, New: kube3},
		store.Event{Type: store.EventDelete, Old: kube3},
	)
	if s.Get(key) != nil || s.Count(config.Service) != 0 || len(s.ListNamespace(config.Service, "ns")) != 0 {
		t.Fatal("leftovers after both layers deleted")
	}
}

func TestListSorted(t *testing.T) {
	s := store.New()
	keys := []struct{ ns, name string }{
		{"b", "z"}, {"a", "y"}, {"b", "a"}, {"a", "b"}, {"c", "m"}, {"a", "a"}, {"b", "m"},
	}
	rand.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	for i, k := range keys {
		layer := store.LayerKube
		if i%2 == 1 {
			layer = store.LayerFile
		}
		s.Upsert(layer, svc(k.ns, k.name, "1"))
	}
	// Another kind in the same namespaces must not leak in.
	s.Upsert(store.LayerKube, slice("a", "a-1", "a", "1"))
	s.Upsert(store.LayerKube, &config.Config{Key: config.Key{Kind: config.Node, Name: "node-b"}, Spec: &corev1.Node{}})
	s.Upsert(store.LayerKube, &config.Config{Key: config.Key{Kind: config.Node, Name: "node-a"}, Spec: &corev1.Node{}})

	if got, want := names(s.List(config.Service)), []string{"a/a", "a/b", "a/y", "b/a", "b/m", "b/z", "c/m"}; !equal(got, want) {
		t.Errorf("List = %v, want %v", got, want)
	}
	if got, want := names(s.ListNamespace(config.Service, "b")), []string{"b/a", "b/m", "b/z"}; !equal(got, want) {
		t.Errorf("ListNamespace(b) = %v, want %v", got, want)
	}
	if got := s.ListNamespace(config.Service, "nope"); len(got) != 0 {
		t.Errorf("ListNamespace(nope) = %v", names(got))
	}
	if got, want := names(s.List(config.Node)), []string{"node-a", "node-b"}; !equal(got, want) {
		t.Errorf("List(Node) = %v, want %v", got, want)
	}
	if got, want := names(s.ListNamespace(config.Node, "")), []string{"node-a", "node-b"}; !equal(got, want) {
		t.Errorf("ListNamespace(Node, \"\") = %v, want %v", got, want)
	}
	if got := s.List(config.VirtualService); len(got) != 0 {
		t.Errorf("List(VirtualService) = %v", names(got))
	}
	if s.Count(config.Service) != 7 || s.Count(config.EndpointSlice) != 1 || s.Count(config.Gateway) != 0 {
		t.Errorf("Counts %d %d %d", s.Count(config.Service), s.Count(config.EndpointSlice), s.Count(config.Gateway))
	}

	// Deleting the last object of a namespace empties it.
	s.Delete(store.LayerKube, config.Key{Kind: config.Service, Namespace: "c", Name: "m"})
	s.Delete(store.LayerFile, config.Key{Kind: config.Service, Namespace: "c", Name: "m"})
	if got := s.ListNamespace(config.Service, "c"); len(got) != 0 {
		t.Errorf("ListNamespace(c) after delete = %v", names(got))
	}
	if got, want := names(s.List(config.Service)), []string{"a/a", "a/b", "a/y", "b/a", "b/m", "b/z"}; !equal(got, want) {
		t.Errorf("List after delete = %v, want %v", got, want)
	}
}

func TestListUnsorted(t *testing.T) {
	s := store.New()
	for _, n := range []string{"c", "a", "b"} {
		s.Upsert(store.LayerKube, svc("ns", n, "k"))
	}
	file := svc("ns", "b", "f")
	s.Upsert(store.LayerFile, file)
	s.Upsert(store.LayerKube, slice("ns", "s", "a", "1"))
	got := s.ListUnsorted(config.Service)
	if len(got) != 3 {
		t.Fatalf("ListUnsorted = %v", names(got))
	}
	want := map[*config.Config]bool{}
	for _, c := range s.List(config.Service) {
		want[c] = true
	}
	for _, c := range got {
		if !want[c] {
			t.Errorf("ListUnsorted has %v@%s, which List does not", c.Key, c.ResourceVersion)
		}
	}
	if len(s.ListUnsorted(config.Gateway)) != 0 {
		t.Error("ListUnsorted of an absent kind is not empty")
	}
}

func TestEndpointSlicesFor(t *testing.T) {
	s := store.New()
	s.Upsert(store.LayerKube, slice("ns", "reviews-2", "reviews", "1"))
	s.Upsert(store.LayerKube, slice("ns", "reviews-1", "reviews", "1"))
	s.Upsert(store.LayerKube, slice("ns", "ratings-1", "ratings", "1"))
	s.Upsert(store.LayerKube, slice("other", "reviews-1", "reviews", "1")) // same service name, other namespace
	s.Upsert(store.LayerKube, slice("ns", "orphan", "", "1"))

	check := func(ns, service string, want ...string) {
		t.Helper()
		if want == nil {
			want = []string{}
		}
		if got := names(s.EndpointSlicesFor(ns, service)); !equal(got, want) {
			t.Errorf("EndpointSlicesFor(%s, %s) = %v, want %v", ns, service, got, want)
		}
	}
	check("ns", "reviews", "ns/reviews-1", "ns/reviews-2")
	check("ns", "ratings", "ns/ratings-1")
	check("other", "reviews", "other/reviews-1")
	check("ns", "details")
	check("nope", "reviews")

	// Relabel: the slice moves from reviews to ratings.
	s.Upsert(store.LayerKube, slice("ns", "reviews-2", "ratings", "2"))
	check("ns", "reviews", "ns/reviews-1")
	check("ns", "ratings", "ns/ratings-1", "ns/reviews-2")

	// A file object overlays with its own label; the index follows the effective object.
	s.Upsert(store.LayerFile, slice("ns", "reviews-1", "details", "f1"))
	check("ns", "reviews")
	check("ns", "details", "ns/reviews-1")
	s.Delete(store.LayerFile, config.Key{Kind: config.EndpointSlice, Namespace: "ns", Name: "reviews-1"})
	check("ns", "reviews", "ns/reviews-1")
	check("ns", "details")
	if got := s.EndpointSlicesFor("ns", "reviews"); got[0].ResourceVersion != "1" {
		t.Errorf("revealed slice has rv %s", got[0].ResourceVersion)
	}

	// Losing the label drops it from its service; deleting drops it altogether.
	s.Upsert(store.LayerKube, slice("ns", "ratings-1", "", "3"))
	check("ns", "ratings", "ns/reviews-2")
	s.Delete(store.LayerKube, config.Key{Kind: config.EndpointSlice, Namespace: "ns", Name: "reviews-2"})
	check("ns", "ratings")
	s.Delete(store.LayerKube, config.Key{Kind: config.EndpointSlice, Namespace: "ns", Name: "reviews-1"})
	check("ns", "reviews")
	check("other", "reviews", "other/reviews-1")
}

func TestHandlersInOrder(t *testing.T) {
	s := store.New()
	early := svc("ns", "before-handlers", "1")
	s.Upsert(store.LayerKube, early)

	var mu sync.Mutex
	var calls []string
	for _, name := range []string{"first", "second", "third"} {
		s.AddHandler(func(e store.Event) {
			// The store has applied the event before handlers see it.
			if got := s.Get(e.Key()); got != e.New {
				t.Errorf("%s: Get(%v) in handler = %v, want the event's New %v", name, e.Key(), got, e.New)
			}
			mu.Lock()
			calls = append(calls, name+":"+e.Key().Name+":"+e.Type.String())
			mu.Unlock()
		})
	}
	s.Upsert(store.LayerKube, svc("ns", "x", "1"))
	s.Delete(store.LayerKube, config.Key{Kind: config.Service, Namespace: "ns", Name: "x"})
	want := []string{
		"first:x:add", "second:x:add", "third:x:add",
		"first:x:delete", "second:x:delete", "third:x:delete",
	}
	if !equal(calls, want) {
		t.Errorf("calls = %v, want %v (handlers registered later must not see earlier events)", calls, want)
	}
}

// TestHandlersSeeConsistentHistory changes a few keys from many goroutines: every handler must see, per key,
// a chain where each event's Old is the previous event's New, ending at what the store holds.
func TestHandlersSeeConsistentHistory(t *testing.T) {
	s := store.New()
	const handlers = 3
	logs := make([]map[config.Key][]store.Event, handlers)
	for i := range logs {
		logs[i] = map[config.Key][]store.Event{}
		log := logs[i]
		s.AddHandler(func(e store.Event) {
			// Handlers are serialised: no lock needed, and -race would catch it otherwise.
			log[e.Key()] = append(log[e.Key()], e)
		})
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				name := fmt.Sprintf("svc-%d", i%4)
				layer := []store.Layer{store.LayerRegistered, store.LayerKube, store.LayerFile}[(g+i)%3]
				switch (g * i) % 5 {
				case 0:
					s.Delete(layer, config.Key{Kind: config.Service, Namespace: "ns", Name: name})
				default:
					s.Upsert(layer, svc("ns", name, fmt.Sprintf("%d-%d", g, i)))
				}
				_ = s.List(config.Service)
			}
		})
	}
	wg.Wait()

	for i, log := range logs {
		for key, evs := range log {
			var cur *config.Config
			for j, e := range evs {
				if e.Old != cur {
					t.Fatalf("handler %d key %v event %d: Old does not follow the previous New", i, key, j)
				}
				switch e.Type {
				case store.EventAdd:
					if e.Old != nil || e.New == nil {
						t.Fatalf("bad add %v", describe(evs[j:j+1]))
					}
				case store.EventUpdate:
					if e.Old == nil || e.New == nil || e.Old == e.New {
						t.Fatalf("bad update %v", describe(evs[j:j+1]))
					}
				case store.EventDelete:
					if e.Old == nil || e.New != nil {
						t.Fatalf("bad delete %v", describe(evs[j:j+1]))
					}
				}
				cur = e.New
			}
			if got := s.Get(key); got != cur {
				t.Errorf("handler %d key %v: history ends at %v, store holds %v", i, key, cur, got)
			}
		}
		if i > 0 && fmt.Sprint(describeAll(logs[0])) != fmt.Sprint(describeAll(log)) {
			t.Errorf("handler %d saw a different history than handler 0", i)
		}
	}
	// And the layers agree with the effective object.
	for _, c := range s.List(config.Service) {
		var want *config.Config
		for _, l := range []store.Layer{store.LayerFile, store.LayerKube, store.LayerRegistered} { // top first
			if want = s.GetLayer(l, c.Key); want != nil {
				break
			}
		}
		if c != want {
			t.Errorf("%v: effective object is not the top layer's", c.Key)
		}
	}
}

func describeAll(log map[config.Key][]store.Event) map[string][]string {
	out := map[string][]string{}
	for k, evs := range log {
		out[k.String()] = describe(evs)
	}
	return out
}
