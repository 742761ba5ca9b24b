package buildcache

import "sync"

// Slots keeps one value per name together with the key it was built from. A changed key replaces the
// entry, so a superseded build is dropped at once rather than aging out of an LRU: under endpoint churn
// the cache stays the size of the config instead of filling with old load assignments.
// Keyed by a concrete type: a key boxed in an interface cost an allocation per lookup, per proxy.
type Slots[K comparable, V any] struct {
	mu sync.RWMutex
	m  map[string]slot[K, V]
}

type slot[K comparable, V any] struct {
	key K
	v   V
}

// NewSlots returns an empty cache.
func NewSlots[K comparable, V any]() *Slots[K, V] { return &Slots[K, V]{m: map[string]slot[K, V]{}} }

// Get returns the value for name built from key, building and storing it when the slot holds another key.
// A failed build leaves the slot as it was.
func (s *Slots[K, V]) Get(name string, key K, build func() (V, error)) (V, error) {
	s.mu.RLock()
	sl, ok := s.m[name]
	s.mu.RUnlock()
	if ok && sl.key == key {
		return sl.v, nil
	}
	v, err := build()
	if err != nil {
		var zero V
		return zero, err
	}
	s.mu.Lock()
	s.m[name] = slot[K, V]{key: key, v: v}
	s.mu.Unlock()
	return v, nil
}
