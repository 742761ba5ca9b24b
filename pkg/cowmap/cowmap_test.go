package cowmap

import (
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
	if shared < shardCount-3 {
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
