package nameset

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"
)

// With behaves as a map of names, and a set reached by different paths is the same set.
func TestSetFollowsAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 100 {
		model := map[string]bool{}
		var s *Set
		for range 50 {
			var add, remove []string
			for range rng.IntN(5) {
				n := fmt.Sprintf("n%02d", rng.IntN(40))
				if !model[n] && !slices.Contains(add, n) {
					add = append(add, n)
				}
			}
			for n := range model {
				if rng.IntN(8) == 0 {
					remove = append(remove, n)
				}
			}
			slices.Sort(add)
			slices.Sort(remove)
			s = s.With(add, remove)
			for _, n := range add {
				model[n] = true
			}
			for _, n := range remove {
				delete(model, n)
			}
			want := slices.Sorted(maps.Keys(model))
			if !slices.Equal(s.Sorted(), want) || s.Len() != len(want) {
				t.Fatalf("set %v, want %v", s.Sorted(), want)
			}
			for i := range 40 {
				n := fmt.Sprintf("n%02d", i)
				if s.Has(n) != model[n] || func() bool { got, ok := s.Lookup([]byte(n)); return ok && got == n }() != model[n] {
					t.Fatalf("Has(%s) = %v, want %v", n, s.Has(n), model[n])
				}
			}
			if fresh := (*Set)(nil).With(want, nil); fresh != s {
				t.Fatalf("the set of %v built afresh is another set", want)
			}
		}
	}
}

// RemapTo carries positions from a set to the one a change made from it.
func TestRemapTo(t *testing.T) {
	from := (*Set)(nil).With([]string{"a", "b", "c"}, nil)
	to := from.With([]string{"d"}, []string{"b"})
	remap := from.RemapTo(to)
	for i, n := range from.Sorted() {
		j, ok := to.Position(n)
		if !ok {
			j = -1
		}
		if int(remap[i]) != j {
			t.Fatalf("remap of %s: %d, want %d", n, remap[i], j)
		}
	}
	if New("x").RemapTo(to) != nil {
		t.Fatal("a set never moved from has a remap")
	}
}

// A set nobody holds any more leaves the table.
func TestUnusedSetsAreForgotten(t *testing.T) {
	s := (*Set)(nil).With([]string{"only-here-1", "only-here-2"}, nil)
	sum := s.sum
	s = nil
	deadline := time.Now().Add(5 * time.Second)
	for {
		runtime.GC()
		sets.mu.Lock()
		_, ok := sets.bySum[sum]
		sets.mu.Unlock()
		if !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the set's entry is not pruned")
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = s
}
