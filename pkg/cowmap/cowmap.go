// Package cowmap is a persistent (copy-on-write) hash map for immutable snapshots.
// Setting one key copies one shard, not the map, so a new snapshot shares almost everything with the old.
package cowmap

import (
	"cmp"
	"hash/maphash"
	"iter"
	"slices"
)

const (
	// minShards is the shard count of a new or small map.
	minShards = 256
	// maxLoad is the mean shard size above which the shard count doubles: shards stay small as the
	// map grows, so a batch of changes copies about batch·maxLoad entries, not the whole map.
	maxLoad = 16
)

// A shard is a small slice sorted by hash: copying one for an edit is one allocation and a memmove, where
// a Go map's clone allocates its table and groups and leaves more for the collector to scan.
type shard[V any] struct {
	entries []entry[V]
}

type entry[V any] struct {
	hash uint64
	key  string
	val  V
}

// Map is an immutable map from string keys to V. The zero value is not usable; call New.
// A *Map is safe for concurrent reads; updates return a new *Map and leave the receiver unchanged.
type Map[V any] struct {
	seed   maphash.Seed
	shards []*shard[V] // length is a power of two, at least minShards; nil is an empty shard
	size   int
}

// New returns an empty map.
func New[V any]() *Map[V] {
	return &Map[V]{seed: maphash.MakeSeed(), shards: make([]*shard[V], minShards)}
}

// Len returns the number of keys.
func (m *Map[V]) Len() int { return m.size }

// Get returns the value for key.
func (m *Map[V]) Get(key string) (V, bool) {
	h := maphash.String(m.seed, key)
	return m.shards[h&uint64(len(m.shards)-1)].find(h, key)
}

func (s *shard[V]) find(h uint64, key string) (V, bool) {
	if s != nil {
		for i := s.search(h); i < len(s.entries) && s.entries[i].hash == h; i++ {
			if s.entries[i].key == key {
				return s.entries[i].val, true
			}
		}
	}
	var zero V
	return zero, false
}

// search returns the index of the first entry with hash h or above.
func (s *shard[V]) search(h uint64) int {
	lo, hi := 0, len(s.entries)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if s.entries[mid].hash < h {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// All iterates over every key and value in no particular order.
func (m *Map[V]) All() iter.Seq2[string, V] {
	return func(yield func(string, V) bool) {
		for _, s := range m.shards {
			if s == nil {
				continue
			}
			for _, e := range s.entries {
				if !yield(e.key, e.val) {
					return
				}
			}
		}
	}
}

// Builder accumulates changes to a Map and produces a new Map sharing untouched shards.
// A Builder is not safe for concurrent use.
type Builder[V any] struct {
	base *Map[V]
	// pending holds the changes since Edit or the last Map; they are merged into the shards they touch, each
	// copied once, when Map is called.
	pending map[string]change[V]
	size    int
}

type change[V any] struct {
	hash    uint64
	val     V
	deleted bool
}

// Edit starts a batch of changes on top of m.
func (m *Map[V]) Edit() *Builder[V] {
	return &Builder[V]{base: m, size: m.size}
}

// Get reads through the pending changes.
func (b *Builder[V]) Get(key string) (V, bool) {
	if c, ok := b.pending[key]; ok {
		return c.val, !c.deleted
	}
	return b.base.Get(key)
}

// Set stores value under key.
func (b *Builder[V]) Set(key string, value V) {
	b.put(key, change[V]{val: value})
}

// Delete removes key.
func (b *Builder[V]) Delete(key string) {
	b.put(key, change[V]{deleted: true})
}

func (b *Builder[V]) put(key string, c change[V]) {
	c.hash = maphash.String(b.base.seed, key)
	var existed bool
	if p, ok := b.pending[key]; ok {
		existed = !p.deleted
	} else {
		_, existed = b.base.shards[c.hash&uint64(len(b.base.shards)-1)].find(c.hash, key)
	}
	if c.deleted && !existed {
		return
	}
	switch {
	case c.deleted:
		b.size--
	case !existed:
		b.size++
	}
	if b.pending == nil {
		b.pending = map[string]change[V]{}
	}
	b.pending[key] = c
}

// Map returns the result. When nothing changed since Edit (or the last Map) it returns that map itself.
func (b *Builder[V]) Map() *Map[V] {
	if len(b.pending) == 0 {
		return b.base
	}
	base := b.base
	var shards []*shard[V]
	if n := shardsFor(len(base.shards), b.size); n != len(base.shards) {
		shards = rebuild(base, b.pending, n)
	} else {
		shards = merge(base, b.pending)
	}
	m := &Map[V]{seed: base.seed, shards: shards, size: b.size}
	*b = Builder[V]{base: m, size: b.size}
	return m
}

// op is one pending change, in the order merge applies them.
type op[V any] struct {
	entry[V]
	deleted bool
}

// merge copies the shards that pending touches, with the changes applied, and shares the rest.
func merge[V any](base *Map[V], pending map[string]change[V]) []*shard[V] {
	mask := uint64(len(base.shards) - 1)
	ops := make([]op[V], 0, len(pending))
	for k, c := range pending {
		ops = append(ops, op[V]{entry: entry[V]{hash: c.hash, key: k, val: c.val}, deleted: c.deleted})
	}
	// By shard, then by hash, so that each touched shard is merged in one pass.
	slices.SortFunc(ops, func(a, b op[V]) int {
		if c := cmp.Compare(a.hash&mask, b.hash&mask); c != 0 {
			return c
		}
		return cmp.Compare(a.hash, b.hash)
	})
	shards := slices.Clone(base.shards)
	for start := 0; start < len(ops); {
		i := ops[start].hash & mask
		end := start + 1
		for end < len(ops) && ops[end].hash&mask == i {
			end++
		}
		shards[i] = mergeShard(base.shards[i], ops[start:end])
		start = end
	}
	return shards
}

// mergeShard returns old with ops (sorted by hash) applied: each replaces or adds its key, or removes it.
func mergeShard[V any](old *shard[V], ops []op[V]) *shard[V] {
	var prev []entry[V]
	if old != nil {
		prev = old.entries
	}
	out := make([]entry[V], 0, len(prev)+len(ops))
	j := 0
	for start := 0; start < len(ops); {
		h := ops[start].hash
		end := start + 1
		for end < len(ops) && ops[end].hash == h {
			end++
		}
		for j < len(prev) && prev[j].hash < h {
			out = append(out, prev[j])
			j++
		}
		// Entries sharing the hash (a full collision) stay unless a change names their key.
		for ; j < len(prev) && prev[j].hash == h; j++ {
			if !slices.ContainsFunc(ops[start:end], func(o op[V]) bool { return o.key == prev[j].key }) {
				out = append(out, prev[j])
			}
		}
		for _, o := range ops[start:end] {
			if !o.deleted {
				out = append(out, o.entry)
			}
		}
		start = end
	}
	out = append(out, prev[j:]...)
	if len(out) == 0 {
		return nil
	}
	return &shard[V]{entries: out}
}

// rebuild distributes every entry of base, with pending applied, over n fresh shards.
func rebuild[V any](base *Map[V], pending map[string]change[V], n int) []*shard[V] {
	mask := uint64(n - 1)
	counts := make([]int, n)
	for _, s := range base.shards {
		if s == nil {
			continue
		}
		for _, e := range s.entries {
			if _, changed := pending[e.key]; !changed {
				counts[e.hash&mask]++
			}
		}
	}
	for _, c := range pending {
		if !c.deleted {
			counts[c.hash&mask]++
		}
	}
	shards := make([]*shard[V], n)
	// One backing array for every shard: a fresh map is one allocation, not one per shard. The array lives
	// until the last of its shards is replaced, so a map can hold up to twice its entries' memory.
	total := 0
	for _, c := range counts {
		total += c
	}
	all := make([]entry[V], total)
	for i, c := range counts {
		if c > 0 {
			shards[i] = &shard[V]{entries: all[:0:c]}
			all = all[c:]
		}
	}
	for _, s := range base.shards {
		if s == nil {
			continue
		}
		for _, e := range s.entries {
			if _, changed := pending[e.key]; !changed {
				t := shards[e.hash&mask]
				t.entries = append(t.entries, e)
			}
		}
	}
	for k, c := range pending {
		if !c.deleted {
			t := shards[c.hash&mask]
			t.entries = append(t.entries, entry[V]{hash: c.hash, key: k, val: c.val})
		}
	}
	for _, s := range shards {
		if s != nil {
			slices.SortFunc(s.entries, func(a, b entry[V]) int { return cmp.Compare(a.hash, b.hash) })
		}
	}
	return shards
}

// shardsFor returns the shard count for size keys, given the current count n: doubled while the mean
// load exceeds maxLoad, halved while it is under maxLoad/8, so resizing is rare and amortised.
func shardsFor(n, size int) int {
	for size > n*maxLoad {
		n *= 2
	}
	for n > minShards && size < n*maxLoad/8 {
		n /= 2
	}
	return n
}
