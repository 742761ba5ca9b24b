package xds

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/sextantmesh/sextant/pkg/nameset"
)

// Two sidecars subscribing to the same endpoints, in different orders and steps, share one set.
func TestSameSubscriptionsShareOneNameSet(t *testing.T) {
	e := newEnv(t, snapshot{EndpointType: {"a": "1", "b": "1", "c": "1", "d": "1"}})
	c1, c2 := e.delta(t), e.delta(t)
	deltaAsk(c1, sidecar("one", "ns1"), EndpointType, []string{"a", "b", "c"}, nil, nil)
	r1 := c1.recv()
	deltaAsk(c2, sidecar("two", "ns1"), EndpointType, []string{"c", "a", "b", "a"}, nil, nil)
	r2 := c2.recv()
	sets := func() []*nameset.Set {
		var out []*nameset.Set
		for _, c := range e.srv.Connections() {
			for _, w := range c.Watched {
				out = append(out, w.ResourceNames)
			}
		}
		return out
	}
	if s := sets(); len(s) != 2 || s[0] != s[1] || !slices.Equal(s[0].Sorted(), []string{"a", "b", "c"}) {
		t.Fatalf("initial subscriptions: %v", s)
	}

	// The same change, in one request and in two.
	deltaAsk(c1, nil, EndpointType, []string{"d"}, []string{"a"}, r1)
	if got := deltaResources(t, c1.recv()); !maps.Equal(got, map[string]string{"d": "1"}) {
		t.Fatalf("subscribed to d: %v", got)
	}
	deltaAsk(c2, nil, EndpointType, nil, []string{"a"}, r2)
	deltaAsk(c2, nil, EndpointType, []string{"d"}, nil, nil)
	if got := deltaResources(t, c2.recv()); !maps.Equal(got, map[string]string{"d": "1"}) {
		t.Fatalf("subscribed to d: %v", got)
	}
	if s := sets(); len(s) != 2 || s[0] != s[1] || !slices.Equal(s[0].Sorted(), []string{"b", "c", "d"}) {
		t.Fatalf("after the change: %v", s)
	}

	// Only the subscriber hears of a change to a name.
	e.set(EndpointType, "a", "2")
	c1.none(200 * time.Millisecond)
	e.set(EndpointType, "b", "2")
	if got := deltaResources(t, c1.recv()); !maps.Equal(got, map[string]string{"b": "2"}) {
		t.Fatalf("update: %v", got)
	}
}

// A request's names make the canonical set: "*" apart, duplicates and order ignored.
func TestCanonicalNames(t *testing.T) {
	s, star := canonicalNames([]string{"b", "*", "a", "b"})
	if !star || s != (*nameset.Set)(nil).With([]string{"a", "b"}, nil) {
		t.Fatalf("canonicalNames: %v, star %v", s.Sorted(), star)
	}
	if s, star := canonicalNames(nil); star || s.Len() != 0 {
		t.Fatalf("no names: %v, star %v", s.Sorted(), star)
	}
}

// A service added: each of 300 sidecars watching 900 clusters subscribes to 3 more, and what it was sent
// moves to the new set.
func BenchmarkSubscribeMore(b *testing.B) {
	names := make([]string, 900)
	for i := range names {
		names[i] = fmt.Sprintf("outbound|80||svc-%d.ns-%d.svc.cluster.local", i, i%10)
	}
	base, _ := canonicalNames(names)
	add := []string{"outbound|80||new.ns-0.svc.cluster.local", "outbound|8080||new.ns-0.svc.cluster.local",
		"outbound|9090||new.ns-0.svc.cluster.local"}
	sent := make([]sentSet, 300)
	for i := range sent {
		sent[i] = byPosition(base)
		for _, n := range names {
			sent[i].set(n, "v1")
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		for i := range sent {
			s := sent[i]
			next := base.With(add, nil)
			s.follow(next)
		}
	}
}
