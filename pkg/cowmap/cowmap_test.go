package cowmap

import (
	"maps"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"
)

func TestEditLeavesOriginalUnchanged(t *testing.T) {
	m := New[int]()
	b := m.Edit()
	for i := range 1000 {
		b.Set(strconv.Itoa(i), i)
	}
	m1 := b.Map()
	if m1.Len() != 1000 || m.Len() != 0 {
		t.Fatalf("len m1=%d m=%d", m1.Len(), m.Len())
	}
	b2 := m1.Edit()
	b2.Set("5", 50)
	b2.Delete("6")
	b2.Delete("missing")
	b2.Set("new", 1)
	m2 := b2.Map()
	if v, _ := m1.Get("5"); v != 5 {
		t.Fatalf("original changed: %d", v)
	}
	if _, ok := m1.Get("6"); !ok {
		t.Fatal("delete leaked into original")
	}
	if v, _ := m2.Get("5"); v != 50 {
		t.Fatalf("m2[5]=%d", v)
	}
	if _, ok := m2.Get("6"); ok {
		t.Fatal("6 not deleted")
	}
	if m2.Len() != 1000 {
		t.Fatalf("m2 len %d", m2.Len())
	}
	count := 0
	for range m2.All() {
		count++
	}
	if count != 1000 {
		t.Fatalf("iterated %d", count)
	}
	// Shards not touched are shared.
	shared := 0
	for i := range m1.shards {
		if reflect.ValueOf(m1.shards[i]).UnsafePointer() == reflect.ValueOf(m2.shards[i]).UnsafePointer() {
			shared++
		}
	}
	if shared < len(m1.shards)-3 {
		t.Fatalf("only %d shards shared", shared)
	}
}

func TestBuilderReuseAfterMapDoesNotMutatePublished(t *testing.T) {
	b := New[string]().Edit()
	b.Set("a", "1")
	first := b.Map()
	b.Set("a", "2")
	second := b.Map()
	if v, _ := first.Get("a"); v != "1" {
		t.Fatalf("published map mutated: %s", v)
	}
	if v, _ := second.Get("a"); v != "2" {
		t.Fatalf("second=%s", v)
	}
}

func TestMapTwiceWithoutChangesReturnsLastPublished(t *testing.T) {
	b := New[int]().Edit()
	b.Set("a", 1)
	first := b.Map()
	if b.Map() != first {
		t.Fatal("second Map without changes did not return the first result")
	}
}

// TestMatchesPlainMapAcrossResizes checks every published map against a plain map while the map grows
// past several shard doublings and shrinks back, and that earlier maps never change.
func TestMatchesPlainMapAcrossResizes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	m := New[int]()
	want := map[string]int{}
	type snap struct {
		m    *Map[int]
		want map[string]int
	}
	var snaps []snap
	check := func(m *Map[int], want map[string]int) {
		t.Helper()
		if m.Len() != len(want) {
			t.Fatalf("len %d, want %d", m.Len(), len(want))
		}
		n := 0
		for k, v := range m.All() {
			n++
			if w, ok := want[k]; !ok || w != v {
				t.Fatalf("key %q = %d, want %d (present %v)", k, v, w, ok)
			}
		}
		if n != len(want) {
			t.Fatalf("iterated %d, want %d", n, len(want))
		}
		for k, w := range want {
			if v, ok := m.Get(k); !ok || v != w {
				t.Fatalf("Get(%q) = %d %v, want %d", k, v, ok, w)
			}
		}
	}
	step := func(batch int, deleteFrac float64, keySpace int) {
		b := m.Edit()
		for range batch {
			k := strconv.Itoa(rng.IntN(keySpace))
			if rng.Float64() < deleteFrac {
				b.Delete(k)
				delete(want, k)
			} else {
				v := rng.Int()
				b.Set(k, v)
				want[k] = v
			}
			w, wok := want[k]
			if v, ok := b.Get(k); v != w || ok != wok {
				t.Fatalf("builder Get(%q) disagrees", k)
			}
		}
		m = b.Map()
		check(m, want)
		snaps = append(snaps, snap{m, maps.Clone(want)})
	}
	for range 20 {
		step(3000, 0.1, 100000)
	}
	if len(m.shards) <= minShards {
		t.Fatalf("map of %d keys still has %d shards", m.Len(), len(m.shards))
	}
	for len(want) > 0 {
		b := m.Edit()
		n := 0
		for k := range want {
			if n++; n > 5000 {
				break
			}
			b.Delete(k)
			delete(want, k)
		}
		m = b.Map()
		check(m, want)
	}
	if len(m.shards) != minShards {
		t.Fatalf("map of %d keys has %d shards", m.Len(), len(m.shards))
	}
	for _, s := range snaps {
		check(s.m, s.want)
	}
}

func TestNoChangeReturnsSameMap(t *testing.T) {
	m := New[int]()
	if m.Edit().Map() != m {
		t.Fatal("unchanged edit allocated a new map")
	}
}

func BenchmarkSetOneIn10k(b *testing.B) {
	e := New[int]().Edit()
	for i := range 10000 {
		e.Set(strconv.Itoa(i), i)
	}
	m := e.Map()
	b.ReportAllocs()
	for b.Loop() {
		e := m.Edit()
		e.Set("42", 1)
		_ = e.Map()
	}
}

func BenchmarkSetBatch1000In100k(b *testing.B) {
	e := New[int]().Edit()
	for i := range 100000 {
		e.Set(strconv.Itoa(i), i)
	}
	m := e.Map()
	b.ReportAllocs()
	for b.Loop() {
		e := m.Edit()
		for i := range 1000 {
			e.Set(strconv.Itoa(i*97), i)
		}
		_ = e.Map()
	}
}

// Keys whose hashes collide in full share a run of the shard; a change to one leaves the others.
func TestMergeShardKeepsCollidingKeys(t *testing.T) {
	old := &shard[int]{entries: []entry[int]{{1, "a", 1}, {5, "b", 2}, {5, "c", 3}, {9, "d", 4}}}
	got := mergeShard(old, []op[int]{
		{entry: entry[int]{5, "c", 30}},
		{entry: entry[int]{5, "e", 50}},
		{entry: entry[int]{9, "d", 0}, deleted: true},
	})
	want := []entry[int]{{1, "a", 1}, {5, "b", 2}, {5, "c", 30}, {5, "e", 50}}
	if !reflect.DeepEqual(got.entries, want) {
		t.Fatalf("merged %v, want %v", got.entries, want)
	}
	if !reflect.DeepEqual(old.entries, []entry[int]{{1, "a", 1}, {5, "b", 2}, {5, "c", 3}, {9, "d", 4}}) {
		t.Fatalf("old shard changed: %v", old.entries)
	}
	if s := mergeShard(&shard[int]{entries: []entry[int]{{3, "x", 1}}}, []op[int]{{entry: entry[int]{3, "x", 0}, deleted: true}}); s != nil {
		t.Fatalf("emptied shard = %v, want nil", s.entries)
	}
	// found by key among colliding entries
	if v, ok := got.find(5, "e"); !ok || v != 50 {
		t.Fatalf("find(5, e) = %d %v", v, ok)
	}
	if _, ok := got.find(5, "d"); ok {
		t.Fatal("find(5, d) found a key that is not there")
	}
}
