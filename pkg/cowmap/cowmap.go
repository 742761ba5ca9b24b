// Package cowmap is a persistent (copy-on-write) hash map for immutable snapshots.
// Setting one key copies one shard, not the map, so a new snapshot shares almost everything with the old.
package cowmap

import (
	"hash/maphash"
	"iter"
	"maps"
)

const (
	// minShards is the shard count of a new or small map.
	minShards = 256
	// maxLoad is the mean shard size above which the shard count doubles: shards stay small as the
	// map grows, so a batch of changes copies about batch·maxLoad entries, not the whole map.
	maxLoad = 16
)

// Map is an immutable map from string keys to V. The zero value is not usable; call New.
// A *Map is safe for concurrent reads; updates return a new *Map and leave the receiver unchanged.
type Map[V any] struct {
	seed   maphash.Seed
	shards []map[string]V // length is a power of two, at least minShards
	size   int
}

// New returns an empty map.
func New[V any]() *Map[V] {
	return &Map[V]{seed: maphash.MakeSeed(), shards: make([]map[string]V, minShards)}
}

func shardOf(seed maphash.Seed, n int, key string) int {
	return int(maphash.String(seed, key) & uint64(n-1))
}

// Len returns the number of keys.
func (m *Map[V]) Len() int { return m.size }

// Get returns the value for key.
func (m *Map[V]) Get(key string) (V, bool) {
	v, ok := m.shards[shardOf(m.seed, len(m.shards), key)][key]
	return v, ok
}

// All iterates over every key and value in no particular order.
func (m *Map[V]) All() iter.Seq2[string, V] {
	return func(yield func(string, V) bool) {
		for _, shard := range m.shards {
			for k, v := range shard {
				if !yield(k, v) {
					return
				}
			}
		}
	}
}

// Builder accumulates changes to a Map and produces a new Map sharing untouched shards.
// A Builder is not safe for concurrent use.
type Builder[V any] struct {
	base   *Map[V]
	shards []map[string]V
	// shared: shards is still the slice of a published map and must be copied before a write.
	shared bool
	copied []bool // shard i is owned by this builder; meaningful only when !shared
	dirty  bool
	size   int
}

// Edit starts a batch of changes on top of m.
func (m *Map[V]) Edit() *Builder[V] {
	return &Builder[V]{base: m, shards: m.shards, shared: true, size: m.size}
}

func (b *Builder[V]) own(i int) map[string]V {
	if b.shared {
		b.shards = append([]map[string]V(nil), b.shards...)
		b.copied = make([]bool, len(b.shards))
		b.shared = false
	}
	if !b.copied[i] {
		// maps.Clone copies the table wholesale, several times faster than re-inserting each key.
		if old := b.shards[i]; old != nil {
			b.shards[i] = maps.Clone(old)
		} else {
			b.shards[i] = make(map[string]V)
		}
		b.copied[i] = true
	}
	b.dirty = true
	return b.shards[i]
}

func (b *Builder[V]) shardOf(key string) int {
	return shardOf(b.base.seed, len(b.shards), key)
}

// Get reads through the pending changes.
func (b *Builder[V]) Get(key string) (V, bool) {
	v, ok := b.shards[b.shardOf(key)][key]
	return v, ok
}

// Set stores value under key.
func (b *Builder[V]) Set(key string, value V) {
	s := b.own(b.shardOf(key))
	if _, exists := s[key]; !exists {
		b.size++
	}
	s[key] = value
}

// Delete removes key.
func (b *Builder[V]) Delete(key string) {
	i := b.shardOf(key)
	if _, exists := b.shards[i][key]; !exists {
		return
	}
	delete(b.own(i), key)
	b.size--
}

// Map returns the result. When nothing changed since Edit (or the last Map) it returns that map itself.
func (b *Builder[V]) Map() *Map[V] {
	if !b.dirty {
		return b.base
	}
	shards := b.shards
	if n := shardsFor(len(shards), b.size); n != len(shards) {
		shards = rehash(b.base.seed, shards, n)
	}
	m := &Map[V]{seed: b.base.seed, shards: shards, size: b.size}
	// Further edits through b must copy again rather than leak into the published map.
	*b = Builder[V]{base: m, shards: shards, shared: true, size: b.size}
	return m
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

// rehash distributes every entry of shards over n fresh shards.
func rehash[V any](seed maphash.Seed, shards []map[string]V, n int) []map[string]V {
	total := 0
	for _, s := range shards {
		total += len(s)
	}
	out := make([]map[string]V, n)
	per := total/n + 1
	for _, s := range shards {
		for k, v := range s {
			i := shardOf(seed, n, k)
			if out[i] == nil {
				out[i] = make(map[string]V, per)
			}
			out[i][k] = v
		}
	}
	return out
}
