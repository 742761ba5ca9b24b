package nameset

import (
	"hash/maphash"
	"runtime"
	"slices"
	"sync"
	"unique"
	"weak"
)

// Set is an immutable set of names. Sets made by With are canonical: holders of the same names share one,
// so 300 sidecars subscribed to the same 900 clusters hold one set rather than 300 maps (a sixth of the
// xDS server's heap, and a cache miss per lookup under endpoint churn). A nil *Set is empty.
type Set struct {
	index  map[string]int32 // name → its position in sorted
	sorted []string
	sum    uint64 // the sum of the names' hashes: changes with each name added or removed, in any order

	// moves are the latest changes made from this set, so the holders making the same change after the
	// first find the result, and carry what they keep per name over to it (RemapTo), without a lookup per
	// name.
	mu    sync.Mutex
	moves []move
}

// move is a change from one set to another: the names added and removed, both sorted.
type move struct {
	add, remove []string
	to          weak.Pointer[Set]
	// remap is, for each name of the set moved from, its position in to (-1 when removed).
	remap []int32
}

const keptMoves = 8

// New returns a set of names (duplicates are dropped). It is not shared: With makes canonical sets.
func New(names ...string) *Set {
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	var sum uint64
	for _, n := range sorted {
		sum += nameHash(n)
	}
	return newSet(sorted, sum)
}

func newSet(sorted []string, sum uint64) *Set {
	s := &Set{index: make(map[string]int32, len(sorted)), sorted: sorted, sum: sum}
	for i, n := range sorted {
		s.index[n] = int32(i)
	}
	return s
}

// Has reports whether name is in the set.
func (s *Set) Has(name string) bool {
	_, ok := s.Position(name)
	return ok
}

// Lookup returns the set's own copy of a name in a buffer, if the set has it: looked up without making the
// name a string, and a caller keeping it shares the set's string instead of allocating one.
func (s *Set) Lookup(name []byte) (string, bool) {
	if s == nil {
		return "", false
	}
	i, ok := s.index[string(name)]
	if !ok {
		return "", false
	}
	return s.sorted[i], true
}

// Len is the number of names.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.sorted)
}

// Sorted returns the names in order. The slice is shared: do not modify it.
func (s *Set) Sorted() []string {
	if s == nil {
		return nil
	}
	return s.sorted
}

// Position is name's index in Sorted.
func (s *Set) Position(name string) (int, bool) {
	if s == nil {
		return 0, false
	}
	i, ok := s.index[name]
	return int(i), ok
}

var nameSeed = maphash.MakeSeed()

func nameHash(name string) uint64 { return maphash.String(nameSeed, name) }

// sets holds the canonical sets, weakly: a set nobody holds any more is collected and its entry pruned.
var sets = &setTable{bySum: map[uint64][]weak.Pointer[Set]{}}

type setTable struct {
	mu    sync.Mutex
	bySum map[uint64][]weak.Pointer[Set]
}

// With returns the canonical set of s's names plus add minus remove. add holds names not in s, each once;
// remove holds names in s, each once; both sorted. On a nil s it is the canonical set of add. Finding an
// existing set costs lookups, not a copy: after a service is added, every sidecar subscribes to the same
// new clusters, and only the first builds the new set. Names added are interned (unique.Make).
func (s *Set) With(add, remove []string) *Set {
	if s == nil {
		return canonical(s, add, remove)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.moves {
		if slices.Equal(m.add, add) && slices.Equal(m.remove, remove) {
			if to := m.to.Value(); to != nil {
				return to
			}
		}
	}
	to := canonical(s, add, remove)
	remap := make([]int32, len(s.sorted))
	for i, name := range s.sorted {
		remap[i] = -1
		if j, ok := to.index[name]; ok {
			remap[i] = j
		}
	}
	if len(s.moves) == keptMoves {
		s.moves = slices.Delete(s.moves, 0, 1)
	}
	s.moves = append(s.moves, move{add: slices.Clone(add), remove: slices.Clone(remove), to: weak.Make(to), remap: remap})
	return to
}

// RemapTo returns, for each name of s, its position in to (-1 when not there), if s recently moved to it
// (With), else nil. The slice is shared: do not modify it.
func (s *Set) RemapTo(to *Set) []int32 {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.moves {
		if m.to.Value() == to {
			return m.remap
		}
	}
	return nil
}

// canonical finds or makes the set s+add-remove (see With).
func canonical(s *Set, add, remove []string) *Set {
	sum, n := uint64(0), s.Len()+len(add)-len(remove)
	if s != nil {
		sum = s.sum
	}
	for _, a := range add {
		sum += nameHash(a)
	}
	for _, r := range remove {
		sum -= nameHash(r)
	}
	removed := newRemoval(remove)
	t := sets
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, wp := range t.bySum[sum] {
		if c := wp.Value(); c != nil && c.Len() == n && c.holds(s, add, removed) {
			return c
		}
	}
	sorted := make([]string, 0, n)
	for _, name := range s.Sorted() {
		if !removed.has(name) {
			sorted = append(sorted, name)
		}
	}
	for _, a := range add {
		sorted = append(sorted, unique.Make(a).Value())
	}
	slices.Sort(sorted)
	c := newSet(sorted, sum)
	t.bySum[sum] = append(t.bySum[sum], weak.Make(c))
	runtime.AddCleanup(c, t.prune, sum)
	return c
}

// holds reports whether c has every name of base but those in remove, and every name in add; with its
// size checked by the caller, that makes it the set base+add-remove.
func (c *Set) holds(base *Set, add []string, remove removal) bool {
	for _, a := range add {
		if !c.Has(a) {
			return false
		}
	}
	for _, name := range base.Sorted() {
		if !c.Has(name) && !remove.has(name) {
			return false
		}
	}
	return true
}

// removal is a few names looked up in a list, or many in a map.
type removal struct {
	list []string
	set  map[string]struct{}
}

func newRemoval(names []string) removal {
	if len(names) <= 8 {
		return removal{list: names}
	}
	set := make(map[string]struct{}, len(names))
	for _, n := range names {
		set[n] = struct{}{}
	}
	return removal{set: set}
}

func (r removal) has(name string) bool {
	if r.set != nil {
		_, ok := r.set[name]
		return ok
	}
	return slices.Contains(r.list, name)
}

// prune drops the collected sets filed under sum.
func (t *setTable) prune(sum uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	live := slices.DeleteFunc(t.bySum[sum], func(wp weak.Pointer[Set]) bool { return wp.Value() == nil })
	if len(live) == 0 {
		delete(t.bySum, sum)
	} else {
		t.bySum[sum] = live
	}
}
