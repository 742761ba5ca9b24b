package buildcache

import (
	"sync"
	"sync/atomic"
)

// Latest keeps, per stable identity, only the value built from the newest inputs (snapshot identities:
// scope, routing config, ...), inputs being compared with ==. An LRU keyed by the inputs held every
// superseded generation until evicted: after twenty service adds at 300 services, 400 MB of old listener
// and virtual host lists. In is the inputs' type: a concrete one is compared without boxing it, which cost
// an allocation per lookup, per proxy.
type Latest[K comparable, In comparable, V any] struct {
	mu      sync.RWMutex
	m       map[K]generation[In, V]
	flights map[K]*flight[In, V]
	// sweepAt is the size at which entries unused since the last sweep are dropped: identities that went
	// away (a deleted service, listener or namespace) do not stay forever.
	sweepAt int
}

type generation[In comparable, V any] struct {
	inputs In
	v      V
	used   *atomic.Bool // read since the last sweep
}

// flight is a build in progress: a push starts many proxies of a namespace at once, and without it each
// would build the same value.
type flight[In comparable, V any] struct {
	inputs In
	done   chan struct{}
	v      V
	err    error
}

const minSweep = 1024

// NewLatest returns an empty cache.
func NewLatest[K comparable, In comparable, V any]() *Latest[K, In, V] {
	return &Latest[K, In, V]{m: map[K]generation[In, V]{}, flights: map[K]*flight[In, V]{}, sweepAt: minSweep}
}

// Get returns the value stored for id if it was built from inputs.
func (c *Latest[K, In, V]) Get(id K, inputs In) (V, bool) {
	c.mu.RLock()
	e, ok := c.m[id]
	c.mu.RUnlock()
	if !ok || e.inputs != inputs {
		var zero V
		return zero, false
	}
	if !e.used.Load() {
		e.used.Store(true)
	}
	return e.v, true
}

// Latest returns the value stored for id, whatever inputs it was built from (the previous generation a
// new one is derived from). It does not count as a use for the sweep.
func (c *Latest[K, In, V]) Latest(id K) (V, bool) {
	c.mu.RLock()
	e, ok := c.m[id]
	c.mu.RUnlock()
	return e.v, ok
}

// store sets id's value; called with mu held.
func (c *Latest[K, In, V]) store(id K, inputs In, v V) {
	used := &atomic.Bool{}
	used.Store(true)
	c.m[id] = generation[In, V]{inputs: inputs, v: v, used: used}
	if len(c.m) < c.sweepAt {
		return
	}
	for k, e := range c.m {
		if !e.used.Load() {
			delete(c.m, k)
		} else {
			e.used.Store(false)
		}
	}
	c.sweepAt = max(minSweep, 2*len(c.m))
}

// Replace stores v, built from inputs, whatever id held.
func (c *Latest[K, In, V]) Replace(id K, inputs In, v V) {
	c.mu.Lock()
	c.store(id, inputs, v)
	c.mu.Unlock()
}

// Put stores v, built from inputs, replacing what id held, and returns the value to use: when another
// goroutine stored a build from the same inputs meanwhile, that one, so every caller shares one value.
func (c *Latest[K, In, V]) Put(id K, inputs In, v V) V {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[id]; ok && e.inputs == inputs {
		return e.v
	}
	c.store(id, inputs, v)
	return v
}

// GetOrBuild returns the value for id built from inputs, building it once however many goroutines ask
// at the same time. A failed build is not stored: its waiters get its error, the next caller builds again.
func (c *Latest[K, In, V]) GetOrBuild(id K, inputs In, build func() (V, error)) (V, error) {
	if v, ok := c.Get(id, inputs); ok {
		return v, nil
	}
	c.mu.Lock()
	if e, ok := c.m[id]; ok && e.inputs == inputs {
		c.mu.Unlock()
		return e.v, nil
	}
	if f, ok := c.flights[id]; ok && f.inputs == inputs {
		c.mu.Unlock()
		<-f.done
		return f.v, f.err
	}
	f := &flight[In, V]{inputs: inputs, done: make(chan struct{})}
	c.flights[id] = f
	c.mu.Unlock()
	defer close(f.done)
	f.v, f.err = build()
	c.mu.Lock()
	if f.err == nil {
		c.store(id, inputs, f.v)
	}
	if c.flights[id] == f {
		delete(c.flights, id)
	}
	c.mu.Unlock()
	return f.v, f.err
}
