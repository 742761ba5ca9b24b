package xds

import (
	"hash/maphash"
	"runtime"
	"slices"
	"sync"
	"weak"
)

// NameSet is an immutable set of resource names. A subscription's set is canonical: connections
// subscribed to the same names share one, so 300 sidecars watching the same 900 clusters hold one set
// rather than 300 maps (a sixth of the heap, and a cache miss per lookup under endpoint churn). A nil
// *NameSet is empty.
type NameSet struct {
	index  map[string]int32 // name → its position in sorted
	sorted []string
	sum    uint64 // the sum of the names' hashes: changes with each name added or removed, in any order

	// moves are the latest changes made from this set, so the sidecars making the same change after the
	// first find the result, and carry what they were sent over to it, without a lookup per name.
	mu    sync.Mutex
	moves []move
}

// move is a change from one set to another: the names added and removed, both sorted.
type move struct {
	add, remove []string
	to          weak.Pointer[NameSet]
	// remap is, for each name of the set moved from, its position in to (-1 when removed).
	remap []int32
}

const keptMoves = 8

// NewNameSet returns a set of names (duplicates are dropped). It is not shared; subscriptions use
// canonical sets.
func NewNameSet(names ...string) *NameSet {
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	var sum uint64
	for _, n := range sorted {
		sum += nameHash(n)
	}
	return newNameSet(sorted, sum)
}

func newNameSet(sorted []string, sum uint64) *NameSet {
	s := &NameSet{index: make(map[string]int32, len(sorted)), sorted: sorted, sum: sum}
	for i, n := range sorted {
		s.index[n] = int32(i)
	}
	return s
}

// Has reports whether name is in the set.
func (s *NameSet) Has(name string) bool {
	_, ok := s.position(name)
	return ok
}

// Lookup returns the set's own copy of a name in a buffer, if the set has it: looked up without making the
// name a string, and a caller keeping it shares the set's string instead of allocating one.
func (s *NameSet) Lookup(name []byte) (string, bool) {
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
func (s *NameSet) Len() int {
	if s == nil {
		return 0
	}
	return len(s.sorted)
}

// Sorted returns the names in order. The slice is shared: do not modify it.
func (s *NameSet) Sorted() []string {
	if s == nil {
		return nil
	}
	return s.sorted
}

// position is name's index in Sorted.
func (s *NameSet) position(name string) (int, bool) {
	if s == nil {
		return 0, false
	}
	i, ok := s.index[name]
	return int(i), ok
}

var nameSeed = maphash.MakeSeed()

func nameHash(name string) uint64 { return maphash.String(nameSeed, name) }

// nameSets holds the canonical sets, weakly: a set no connection uses any more is collected and its entry
// pruned.
var nameSets = &nameSetTable{bySum: map[uint64][]weak.Pointer[NameSet]{}}

type nameSetTable struct {
	mu    sync.Mutex
	bySum map[uint64][]weak.Pointer[NameSet]
}

// canonicalNames returns the canonical set of names ("*" excluded) and whether "*" was among them.
func canonicalNames(names []string) (*NameSet, bool) {
	star := false
	add := make([]string, 0, len(names))
	for _, n := range names {
		if n == "*" {
			star = true
			continue
		}
		add = append(add, n)
	}
	slices.Sort(add)
	return (*NameSet)(nil).with(slices.Compact(add), nil), star
}

// with returns the canonical set of s's names plus add minus remove. add holds names not in s, each once;
// remove holds names in s, each once; both sorted. Finding an existing set costs lookups, not a copy:
// after a service is added, every sidecar subscribes to the same new clusters, and only the first builds
// the new set.
func (s *NameSet) with(add, remove []string) *NameSet {
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

// remapTo returns, for each name of s, its position in to (-1 when not there), if s recently moved to it.
func (s *NameSet) remapTo(to *NameSet) []int32 {
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

// canonical finds or makes the set s+add-remove (see with).
func canonical(s *NameSet, add, remove []string) *NameSet {
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
	t := nameSets
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
		sorted = append(sorted, intern(a))
	}
	slices.Sort(sorted)
	c := newNameSet(sorted, sum)
	t.bySum[sum] = append(t.bySum[sum], weak.Make(c))
	runtime.AddCleanup(c, t.prune, sum)
	return c
}

// holds reports whether c has every name of base but those in remove, and every name in add; with its
// size checked by the caller, that makes it the set base+add-remove.
func (c *NameSet) holds(base *NameSet, add []string, remove removal) bool {
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
func (t *nameSetTable) prune(sum uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	live := slices.DeleteFunc(t.bySum[sum], func(wp weak.Pointer[NameSet]) bool { return wp.Value() == nil })
	if len(live) == 0 {
		delete(t.bySum, sum)
	} else {
		t.bySum[sum] = live
	}
}
