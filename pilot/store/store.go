package store

import (
	"slices"
	"sync"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pkg/shrink"
)

// Layer is a source of config. When two layers hold the same key, the higher layer wins:
// files overlay the cluster, and both overlay what Sextant registered itself.
type Layer int

const (
	// LayerRegistered holds the WorkloadEntries of connected VMs when there is no cluster to write them to
	// (pilot/autoregister): an object a user wrote under the same name wins.
	LayerRegistered Layer = iota
	LayerKube
	LayerFile
	layerCount
)

func (l Layer) String() string {
	switch l {
	case LayerFile:
		return "file"
	case LayerRegistered:
		return "registered"
	}
	return "kube"
}

// EventType says what happened to an object.
type EventType int

const (
	EventAdd EventType = iota
	EventUpdate
	EventDelete
)

func (t EventType) String() string {
	return [...]string{"add", "update", "delete"}[t]
}

// Event is one change of the effective (winning) object for a key.
type Event struct {
	Type EventType
	Old  *config.Config // nil on add
	New  *config.Config // nil on delete
}

// Key returns the key the event is about.
func (e Event) Key() config.Key {
	if e.New != nil {
		return e.New.Key
	}
	return e.Old.Key
}

// Handler receives events synchronously, in order, after the store has applied them.
type Handler func(Event)

type entry struct {
	layers [layerCount]*config.Config
}

func (e *entry) effective() *config.Config {
	for l := layerCount - 1; l >= 0; l-- {
		if e.layers[l] != nil {
			return e.layers[l]
		}
	}
	return nil
}

// Store is safe for concurrent use. Readers get *config.Config values that must not be modified.
type Store struct {
	mu      sync.RWMutex
	entries map[config.Key]*entry
	// entriesPeak is the most entries held since entries was last rebuilt. Go maps never shrink, so after
	// a mass deletion (a large file or namespace gone) the rest is copied into a map of the size needed.
	entriesPeak int
	byKind      map[config.Kind]map[string]map[string]*config.Config // kind → namespace → name → effective
	slices      map[string]map[string]*config.Config                 // "ns/service" → slice name → slice
	handlers    []Handler
	// handlerMu serialises handler calls so events are seen in the order they were applied.
	handlerMu sync.Mutex
}

// New returns an empty store.
func New() *Store {
	return &Store{
		entries: map[config.Key]*entry{},
		byKind:  map[config.Kind]map[string]map[string]*config.Config{},
		slices:  map[string]map[string]*config.Config{},
	}
}

// AddHandler registers h for every later change.
func (s *Store) AddHandler(h Handler) {
	s.mu.Lock()
	s.handlers = append(s.handlers, h)
	s.mu.Unlock()
}

// Upsert sets the object for its key in layer. It returns the event for the effective object, if it changed.
func (s *Store) Upsert(layer Layer, c *config.Config) {
	s.apply(layer, c.Key, c)
}

// Delete removes key from layer.
func (s *Store) Delete(layer Layer, key config.Key) {
	s.apply(layer, key, nil)
}

func (s *Store) apply(layer Layer, key config.Key, c *config.Config) {
	s.handlerMu.Lock()
	defer s.handlerMu.Unlock()
	s.mu.Lock()
	e := s.entries[key]
	if e == nil {
		if c == nil {
			s.mu.Unlock()
			return
		}
		e = &entry{}
		s.entries[key] = e
		s.entriesPeak = max(s.entriesPeak, len(s.entries))
	}
	before := e.effective()
	e.layers[layer] = c
	after := e.effective()
	if after == nil {
		delete(s.entries, key)
		s.entries, s.entriesPeak = shrink.Map(s.entries, s.entriesPeak)
	}
	if before == after {
		s.mu.Unlock()
		return
	}
	s.index(key, before, after)
	handlers := s.handlers
	s.mu.Unlock()

	ev := Event{Old: before, New: after}
	switch {
	case before == nil:
		ev.Type = EventAdd
	case after == nil:
		ev.Type = EventDelete
	default:
		ev.Type = EventUpdate
	}
	for _, h := range handlers {
		h(ev)
	}
}

func (s *Store) index(key config.Key, before, after *config.Config) {
	ns := s.byKind[key.Kind]
	if ns == nil {
		ns = map[string]map[string]*config.Config{}
		s.byKind[key.Kind] = ns
	}
	names := ns[key.Namespace]
	if after == nil {
		delete(names, key.Name)
		if len(names) == 0 {
			delete(ns, key.Namespace)
		}
	} else {
		if names == nil {
			names = map[string]*config.Config{}
			ns[key.Namespace] = names
		}
		names[key.Name] = after
	}
	if key.Kind == config.EndpointSlice {
		if before != nil {
			svc := sliceService(before)
			delete(s.slices[svc], key.Name)
			if len(s.slices[svc]) == 0 {
				delete(s.slices, svc)
			}
		}
		if after != nil {
			svc := sliceService(after)
			if s.slices[svc] == nil {
				s.slices[svc] = map[string]*config.Config{}
			}
			s.slices[svc][key.Name] = after
		}
	}
}

func sliceService(c *config.Config) string {
	name := c.Spec.(*discoveryv1.EndpointSlice).Labels[discoveryv1.LabelServiceName]
	return c.Namespace + "/" + name
}

// Get returns the effective object for key, or nil.
func (s *Store) Get(key config.Key) *config.Config {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.byKind[key.Kind][key.Namespace][key.Name]
}

// GetLayer returns the object layer holds for key, whether or not it wins.
func (s *Store) GetLayer(layer Layer, key config.Key) *config.Config {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if e := s.entries[key]; e != nil {
		return e.layers[layer]
	}
	return nil
}

// List returns every object of kind, sorted by namespace and name.
func (s *Store) List(kind config.Kind) []*config.Config {
	s.mu.RLock()
	var out []*config.Config
	for _, names := range s.byKind[kind] {
		for _, c := range names {
			out = append(out, c)
		}
	}
	s.mu.RUnlock()
	sortConfigs(out)
	return out
}

// ListUnsorted returns every object of kind in no particular order; cheaper than List for bulk reads.
func (s *Store) ListUnsorted(kind config.Kind) []*config.Config {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := 0
	for _, names := range s.byKind[kind] {
		n += len(names)
	}
	out := make([]*config.Config, 0, n)
	for _, names := range s.byKind[kind] {
		for _, c := range names {
			out = append(out, c)
		}
	}
	return out
}

// ListNamespace returns the objects of kind in namespace, sorted by name.
func (s *Store) ListNamespace(kind config.Kind, namespace string) []*config.Config {
	s.mu.RLock()
	names := s.byKind[kind][namespace]
	out := make([]*config.Config, 0, len(names))
	for _, c := range names {
		out = append(out, c)
	}
	s.mu.RUnlock()
	sortConfigs(out)
	return out
}

// EndpointSlicesFor returns the EndpointSlices labelled for the Service namespace/name, sorted by name.
func (s *Store) EndpointSlicesFor(namespace, service string) []*config.Config {
	s.mu.RLock()
	m := s.slices[namespace+"/"+service]
	out := make([]*config.Config, 0, len(m))
	for _, c := range m {
		out = append(out, c)
	}
	s.mu.RUnlock()
	sortConfigs(out)
	return out
}

// Len returns how many keys have an object in some layer.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.entries)
}

// Count returns how many effective objects of kind there are.
func (s *Store) Count(kind config.Kind) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := 0
	for _, names := range s.byKind[kind] {
		n += len(names)
	}
	return n
}

func sortConfigs(cs []*config.Config) {
	slices.SortFunc(cs, func(a, b *config.Config) int { return config.CompareKeys(a.Key, b.Key) })
}
