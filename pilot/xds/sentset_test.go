package xds

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pkg/nameset"
)

// sentSet behaves as the map it stands for, through whole lists, changes on top, subscriptions' names
// and the switch to a map.
func TestSentSetMatchesAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	name := func() string { return fmt.Sprintf("r%03d", rng.IntN(300)) }
	for round := range 200 {
		var s sentSet
		has := map[string]string{}
		for step := range 400 {
			switch op := rng.IntN(10); {
			case op == 0: // a new whole state, sorted by name (sendDelta keeps only those whole)
				n := rng.IntN(200)
				seen := map[string]bool{}
				var res model.Resources
				for range n {
					nm := name()
					if !seen[nm] {
						seen[nm] = true
						res = append(res, &model.Resource{Name: nm, Version: fmt.Sprint(rng.IntN(5))})
					}
				}
				slices.SortFunc(res, func(a, b *model.Resource) int { return compareName(a, b.Name) })
				s.whole(res)
				has = map[string]string{}
				for _, r := range res {
					has[r.Name] = r.Version
				}
			case op == 1: // a subscription's names: start following them, or move to new ones
				var keys []string
				for range rng.IntN(250) {
					keys = append(keys, name())
				}
				switch {
				case rng.IntN(3) == 0:
					s = byPosition(nameset.New(keys...))
					has = map[string]string{}
				case s.keys != nil && rng.IntN(2) == 0: // a change from the current names (recorded as a move)
					var add, remove []string
					for _, k := range keys {
						if !s.keys.Has(k) {
							add = append(add, k)
						}
					}
					for _, k := range s.keys.Sorted() {
						if rng.IntN(10) == 0 {
							remove = append(remove, k)
						}
					}
					slices.Sort(add)
					s.follow(s.keys.With(slices.Compact(add), remove))
				default:
					s.follow(nameset.New(keys...))
				}
			case op < 6:
				nm, v := name(), fmt.Sprint(rng.IntN(5))
				s.set(nm, v)
				has[nm] = v
			default:
				nm := name()
				s.del(nm)
				delete(has, nm)
			}
			if s.len() != len(has) {
				t.Fatalf("round %d step %d: len %d, want %d", round, step, s.len(), len(has))
			}
			got := map[string]string{}
			s.names(func(n string) {
				if _, dup := got[n]; dup {
					t.Fatalf("round %d step %d: %s named twice", round, step, n)
				}
				got[n], _ = s.get(n)
			})
			if !maps.Equal(got, has) {
				t.Fatalf("round %d step %d: have %v, want %v", round, step, got, has)
			}
			if _, ok := s.get("absent"); ok {
				t.Fatal("absent name found")
			}
			if l := s.wholeList(); l != nil {
				for _, r := range l {
					if v := has[r.Name]; v != r.Version {
						t.Fatalf("round %d step %d: whole list holds %s@%s, client has %q", round, step, r.Name, r.Version, v)
					}
				}
				if len(l) != len(has) {
					t.Fatalf("whole list of %d, client has %d", len(l), len(has))
				}
			}
		}
	}
}
