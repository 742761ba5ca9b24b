package push

import (
	"context"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/store"
	"github.com/sextantmesh/sextant/pkg/loglimit"
)

// Options configure a Pipeline.
type Options struct {
	Store *store.Store
	Mesh  *mesh.Config
	// DebounceAfter is the quiet period after the last config change before a build (default 100ms).
	DebounceAfter time.Duration
	// DebounceMax bounds how long changes can be held back while changes keep coming (default 10s).
	DebounceMax time.Duration
	// DebounceEndpoints is how long endpoint-only changes are held from the first of a batch (default
	// 1ms, at most DebounceAfter): a window, not a quiet period, long enough to take the objects one file
	// or one event brings together. They are applied incrementally and pushed only to the proxies that
	// watch the changed services, so batching them buys little and delays them much. From a cluster, a
	// Pod, its status and its EndpointSlice are three events milliseconds apart, and a longer window did
	// not hold them together: once the writes slowed under load, the status often came after the window
	// and waited a second one. Nor do they need one to be pushed together: a cluster's endpoint waits for
	// its pod (model). Under load, pushes still merge per connection while one waits in the push queue.
	DebounceEndpoints time.Duration
	// DebounceFirst is the quiet period for a config change that arrives after at least DebounceAfter
	// without config changes (endpoint changes do not count): the first change of a burst (0: DebounceAfter,
	// no shorter period). Changes that follow it within DebounceFirst join its push; a burst with longer
	// gaps gets one push for its start and the usual debounce for the rest. An isolated change, the common
	// case, is pushed without waiting for a burst that is not coming.
	DebounceFirst time.Duration
	Logger        *slog.Logger
	// LogEvery is the least time between two "config change applied" lines (default 1s): the snapshots
	// published meanwhile are summed up in the next.
	LogEvery time.Duration
}

// Stats are counters for operators.
type Stats struct {
	Builds       uint64 // snapshots published, the first included
	FullPushes   uint64
	Incremental  uint64
	MergedEvents uint64 // store events folded into an already pending build
	LastBuild    time.Duration
}

// Pipeline owns the current snapshot. Current() is lock-free.
type Pipeline struct {
	opts    Options
	current atomic.Pointer[model.PushContext]

	mu      sync.Mutex
	pending map[config.Key]*model.Change
	first   time.Time // first pending change
	// configPending is set while a pending change is more than endpoints (a full push).
	configPending bool
	// leading is set while the pending config changes began after a quiet spell (see Options.DebounceFirst).
	leading bool
	// lastConfig is the latest config change, pending or not. Config changes debounce on each other only:
	// under endpoint churn, a quiet period counted from any change never came, and a config change (with
	// the endpoint changes batched with it) waited DebounceMax.
	lastConfig time.Time
	wake       chan struct{}
	handlers   []func(*model.PushRequest)
	watchers   []func(ev store.Event, current uint64)

	builds, full, incremental, merged atomic.Uint64
	lastBuild                         atomic.Int64
	// peakObjects is the most store objects since memory was last released; see releaseAfterDrop.
	peakObjects int
	applied     *loglimit.Fold[applied]
}

// A drop of at least releaseMinDrop objects and a quarter of the peak returns memory to the OS
// releaseDelay after the snapshot without them, once pushes have replaced what proxies were sent.
const (
	releaseMinDrop = 10_000
	releaseDelay   = time.Second
)

// New creates a pipeline and subscribes it to the store. Changes are collected from now on; call
// Initialize once the sources have synced, then Run.
func New(opts Options) *Pipeline {
	if opts.DebounceAfter == 0 {
		opts.DebounceAfter = 100 * time.Millisecond
	}
	if opts.DebounceMax == 0 {
		opts.DebounceMax = 10 * time.Second
	}
	if opts.DebounceEndpoints == 0 {
		opts.DebounceEndpoints = time.Millisecond
	}
	opts.DebounceEndpoints = min(opts.DebounceEndpoints, opts.DebounceAfter)
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Mesh == nil {
		opts.Mesh = mesh.Default()
	}
	if opts.LogEvery == 0 {
		opts.LogEvery = appliedLogEvery
	}
	p := &Pipeline{opts: opts, pending: map[config.Key]*model.Change{}, wake: make(chan struct{}, 1)}
	p.applied = loglimit.NewFold(opts.LogEvery, func(a applied) { logApplied(opts.Logger, a) })
	opts.Store.AddHandler(p.onEvent)
	return p
}

// Subscribe registers f to receive every PushRequest, in order, from the pipeline's goroutine.
// f must not block for long: it should hand the request to a queue.
func (p *Pipeline) Subscribe(f func(*model.PushRequest)) {
	p.mu.Lock()
	p.handlers = append(p.handlers, f)
	p.mu.Unlock()
}

// WatchChanges registers f to see every store event the pipeline takes, with the version of the snapshot
// published at that moment (0 before Initialize): the change is not in it, and is in a later one. Called on
// the store's goroutine before the change can be applied, so a handler that asks Current after the store's
// other handlers cannot be handed a snapshot that already holds it. f must be quick. Register before the
// sources load.
func (p *Pipeline) WatchChanges(f func(ev store.Event, current uint64)) {
	p.mu.Lock()
	p.watchers = append(p.watchers, f)
	p.mu.Unlock()
}

// Current returns the published snapshot, or nil before Initialize.
func (p *Pipeline) Current() *model.PushContext { return p.current.Load() }

// Ready reports whether the first snapshot is published.
func (p *Pipeline) Ready() bool { return p.current.Load() != nil }

// Stats returns the counters.
func (p *Pipeline) Stats() Stats {
	return Stats{Builds: p.builds.Load(), FullPushes: p.full.Load(), Incremental: p.incremental.Load(),
		MergedEvents: p.merged.Load(), LastBuild: time.Duration(p.lastBuild.Load())}
}

func (p *Pipeline) onEvent(ev store.Event) {
	now := time.Now()
	p.mu.Lock()
	if len(p.watchers) > 0 {
		// Before the change is pending: no snapshot published until then holds it.
		var current uint64
		if ps := p.current.Load(); ps != nil {
			current = ps.Version
		}
		for _, f := range p.watchers {
			f(ev, current)
		}
	}
	key := ev.Key()
	if ch, ok := p.pending[key]; ok {
		ch.New = ev.New
		p.merged.Add(1)
	} else {
		p.pending[key] = &model.Change{Key: key, Old: ev.Old, New: ev.New}
	}
	if p.first.IsZero() {
		p.first = now
	}
	if !config.IsEndpointKind(key.Kind) {
		if !p.configPending {
			p.leading = p.opts.DebounceFirst > 0 && now.Sub(p.lastConfig) >= p.opts.DebounceAfter
		}
		p.configPending = true
		p.lastConfig = now
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Initialize builds and publishes the first snapshot from everything in the store.
func (p *Pipeline) Initialize() *model.PushContext {
	p.mu.Lock()
	// Changes seen so far are in the store and so in the full build.
	p.pending = map[config.Key]*model.Change{}
	p.first, p.configPending, p.leading = time.Time{}, false, false
	p.mu.Unlock()
	ps := model.Build(p.opts.Store, p.opts.Mesh)
	p.publish(ps)
	p.peakObjects = p.opts.Store.Len()
	p.opts.Logger.Info("first snapshot published", "services", ps.ServiceCount(), "endpoints", ps.EndpointCount(),
		"workloads", ps.WorkloadCount(), "build", ps.BuildDuration.Round(time.Microsecond))
	p.notify(&model.PushRequest{Full: true, Reason: map[string]int{"initial": 1}, Start: ps.BuiltAt, Push: ps})
	return ps
}

func (p *Pipeline) publish(ps *model.PushContext) {
	p.current.Store(ps)
	p.builds.Add(1)
	p.lastBuild.Store(int64(ps.BuildDuration))
}

// releaseAfterDrop returns memory to the OS after a snapshot that left many objects behind (a large file or
// namespace gone). Otherwise the garbage waits for the next GC, which a server at rest may not run for two
// minutes, and its pages for the scavenger after that. Called from the pipeline's goroutine.
func (p *Pipeline) releaseAfterDrop(objects int) {
	p.peakObjects = max(p.peakObjects, objects)
	if p.peakObjects-objects < releaseMinDrop || objects > p.peakObjects*3/4 {
		return
	}
	p.opts.Logger.Info("config shrank; returning its memory", "objects", objects, "was", p.peakObjects)
	p.peakObjects = objects
	time.AfterFunc(releaseDelay, debug.FreeOSMemory)
}

func (p *Pipeline) notify(req *model.PushRequest) {
	p.mu.Lock()
	handlers := slices.Clone(p.handlers)
	p.mu.Unlock()
	for _, h := range handlers {
		h(req)
	}
}

// Run debounces changes and publishes snapshots until ctx is done. Initialize must have been called.
func (p *Pipeline) Run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-p.wake:
		case <-timer.C:
		}
		p.mu.Lock()
		if len(p.pending) == 0 {
			p.mu.Unlock()
			continue
		}
		now := time.Now()
		quietFor := now.Sub(p.lastConfig)
		heldFor := now.Sub(p.first)
		// Config changes wait for a quiet period between config changes (bounded by DebounceMax): a burst
		// becomes one full push. Endpoint-only changes are held DebounceEndpoints from the first one,
		// however many follow.
		quiet, maxHold := p.opts.DebounceAfter, p.opts.DebounceMax
		switch {
		case !p.configPending:
			quiet, maxHold, quietFor = p.opts.DebounceEndpoints, p.opts.DebounceEndpoints, heldFor
		case p.leading:
			quiet = p.opts.DebounceFirst
		}
		if quietFor < quiet && heldFor < maxHold {
			wait := min(quiet-quietFor, maxHold-heldFor)
			p.mu.Unlock()
			timer.Reset(wait)
			continue
		}
		pending, start := p.pending, p.first
		p.pending = map[config.Key]*model.Change{}
		p.first, p.configPending, p.leading = time.Time{}, false, false
		p.mu.Unlock()
		p.apply(pending, start)
	}
}

// Flush applies pending changes at once, without waiting for the debounce period. For tools and tests.
func (p *Pipeline) Flush() {
	p.mu.Lock()
	pending, start := p.pending, p.first
	p.pending = map[config.Key]*model.Change{}
	p.first, p.configPending, p.leading = time.Time{}, false, false
	p.mu.Unlock()
	if len(pending) > 0 {
		p.apply(pending, start)
	}
}

func (p *Pipeline) apply(pending map[config.Key]*model.Change, start time.Time) {
	prev := p.current.Load()
	if prev == nil {
		return
	}
	changes := make([]model.Change, 0, len(pending))
	updated := make(map[config.Key]struct{}, len(pending))
	reasons := map[string]int{}
	for k, ch := range pending {
		changes = append(changes, *ch)
		updated[k] = struct{}{}
		if config.IsEndpointKind(k.Kind) {
			reasons["endpoint"]++
		} else {
			reasons["config"]++
		}
	}
	slices.SortFunc(changes, func(a, b model.Change) int { return config.CompareKeys(a.Key, b.Key) })
	next, res := model.Update(prev, p.opts.Store, changes)
	p.publish(next)
	p.releaseAfterDrop(p.opts.Store.Len())
	if res.Full {
		p.full.Add(1)
	} else {
		p.incremental.Add(1)
	}
	p.opts.Logger.Debug("snapshot published", "version", next.Version, "full", res.Full, "changes", len(changes),
		"rebuilt", next.Rebuilt, "servicesUpdated", len(res.ServicesUpdated), "build", next.BuildDuration)
	p.applied.Add(func(a *applied) { a.add(next.Version, res.Full, changes) })
	if !res.Full && len(res.ServicesUpdated) == 0 && len(res.WorkloadsUpdated) == 0 && len(res.SecretsUpdated) == 0 {
		return // nothing a proxy sees changed (e.g. a pod annotation)
	}
	p.notify(&model.PushRequest{
		Full:             res.Full,
		ConfigsUpdated:   updated,
		ServicesUpdated:  res.ServicesUpdated,
		WorkloadsUpdated: res.WorkloadsUpdated,
		AddressesUpdated: res.AddressesUpdated,
		Reason:           reasons,
		Start:            start,
		Push:             next,
	})
}
