// Package cowmap is a persistent (copy-on-write) hash map for immutable snapshots.
// Setting one key copies one shard, not the map, so a new snapshot shares almost everything with the old.
package cowmap

import (
	"hash/maphash"
	"iter"
)

const shardCount = 256

// Map is an immutable map from string keys to V. The zero value is not usable; call New.
// A *Map is safe for concurrent reads; updates return a new *Map and leave the receiver unchanged.
type Map[V any] struct {
	seed   maphash.Seed
	shards *[shardCount]map[string]V
	size   int
}

// New returns an empty map.
func New[V any]() *Map[V] {
	return &Map[V]{seed: maphash.MakeSeed(), shards: new([shardCount]map[string]V)}
}

func (m *Map[V]) shardOf(key string) int {
	return int(maphash.String(m.seed, key) % shardCount)
}

// Len returns the number of keys.
func (m *Map[V]) Len() int { return m.size }

// Get returns the value for key.
func (m *Map[V]) Get(key string) (V, bool) {
	v, ok := m.shards[m.shardOf(key)][key]
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
	shards [shardCount]map[string]V
	copied [shardCount]bool
	size   int
}

// Edit starts a batch of changes on top of m.
func (m *Map[V]) Edit() *Builder[V] {
	b := &Builder[V]{base: m, size: m.size}
	b.shards = *m.shards
	return b
}

func (b *Builder[V]) own(i int) map[string]V {
	if !b.copied[i] {
		old := b.shards[i]
		fresh := make(map[string]V, len(old)+1)
		for k, v := range old {
			fresh[k] = v
		}
		b.shards[i] = fresh
		b.copied[i] = true
	}
	return b.shards[i]
}

// Get reads through the pending changes.
func (b *Builder[V]) Get(key string) (V, bool) {
	v, ok := b.shards[b.base.shardOf(key)][key]
	return v, ok
}

// Set stores value under key.
func (b *Builder[V]) Set(key string, value V) {
	s := b.own(b.base.shardOf(key))
	if _, exists := s[key]; !exists {
		b.size++
	}
	s[key] = value
}

// Delete removes key.
func (b *Builder[V]) Delete(key string) {
	i := b.base.shardOf(key)
	if _, exists := b.shards[i][key]; !exists {
		return
	}
	delete(b.own(i), key)
	b.size--
}

// Map returns the result. When nothing changed it returns the original map itself.
func (b *Builder[V]) Map() *Map[V] {
	changed := false
	for _, c := range b.copied {
		if c {
			changed = true
			break
		}
	}
	if !changed {
		return b.base
	}
	shards := b.shards
	// Further edits through b must not leak into the published map.
	b.copied = [shardCount]bool{}
	return &Map[V]{seed: b.base.seed, shards: &shards, size: b.size}
}
