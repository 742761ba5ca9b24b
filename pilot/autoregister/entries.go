package autoregister

import (
	"context"
	"errors"
	"strconv"
	"sync"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/store"
)

// Entries is where registered WorkloadEntries are kept: the cluster (NewKubeEntries), so every replica and
// every tool sees them, or without one the config store itself (NewStoreEntries). Either way the entries
// reach the generators as any WorkloadEntry does.
type Entries interface {
	// Get returns the entry of key as stored now, nil if there is none.
	Get(ctx context.Context, key config.Key) (*config.Config, error)
	// Create stores e; ErrExists if its key is taken. owner is the WorkloadGroup it was made from.
	Create(ctx context.Context, e, owner *config.Config) error
	// Update replaces the entry of e's key if its ResourceVersion is still e's, else ErrConflict.
	Update(ctx context.Context, e *config.Config) error
	// Delete removes the entry of key if its ResourceVersion is still resourceVersion; nil if it is gone.
	Delete(ctx context.Context, key config.Key, resourceVersion string) error
	// SetHealth writes h as the entry's Healthy status condition, keeping its other conditions.
	SetHealth(ctx context.Context, key config.Key, h Health) error
}

// Errors of Entries.
var (
	ErrExists   = errors.New("the WorkloadEntry exists")
	ErrConflict = errors.New("the WorkloadEntry was changed meanwhile")
)

// SourceName is config.Config.Source of the entries held in the store's registered layer.
const SourceName = "autoregister"

// StoreEntries keeps registered entries in the config store's registered layer (store.LayerRegistered), below
// the files and the cluster: for a server without a cluster to write to.
type StoreEntries struct {
	store *store.Store
	mu    sync.Mutex
	seq   uint64 // the last ResourceVersion given
}

// NewStoreEntries returns Entries held in s.
func NewStoreEntries(s *store.Store) *StoreEntries { return &StoreEntries{store: s} }

func (m *StoreEntries) Get(_ context.Context, key config.Key) (*config.Config, error) {
	return m.store.GetLayer(store.LayerRegistered, key), nil
}

func (m *StoreEntries) Create(_ context.Context, e, _ *config.Config) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.store.GetLayer(store.LayerRegistered, e.Key) != nil {
		return ErrExists
	}
	m.put(e)
	return nil
}

func (m *StoreEntries) Update(_ context.Context, e *config.Config) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := m.store.GetLayer(store.LayerRegistered, e.Key)
	if cur == nil || cur.ResourceVersion != e.ResourceVersion {
		return ErrConflict
	}
	m.put(e)
	return nil
}

func (m *StoreEntries) Delete(_ context.Context, key config.Key, resourceVersion string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := m.store.GetLayer(store.LayerRegistered, key)
	if cur == nil {
		return nil
	}
	if cur.ResourceVersion != resourceVersion {
		return ErrConflict
	}
	m.store.Delete(store.LayerRegistered, key)
	return nil
}

func (m *StoreEntries) SetHealth(_ context.Context, key config.Key, h Health) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := m.store.GetLayer(store.LayerRegistered, key)
	if cur == nil {
		return ErrConflict
	}
	e := *cur
	e.Conditions = withHealth(cur.Conditions, h)
	m.put(&e)
	return nil
}

// put stores a copy of e with the next ResourceVersion (the store's objects are immutable). Under mu.
func (m *StoreEntries) put(e *config.Config) {
	m.seq++
	c := *e
	c.ResourceVersion, c.Source = strconv.FormatUint(m.seq, 10), SourceName
	m.store.Upsert(store.LayerRegistered, &c)
}
