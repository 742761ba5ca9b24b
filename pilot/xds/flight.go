package xds

import (
	"context"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// DefaultMaxBytesInFlight bounds the response bytes sent but not yet acknowledged, over all connections.
const DefaultMaxBytesInFlight = 32 << 20

// budget is the server's in-flight byte budget, shared by all streams.
//
// A burst that fills it (a cold start, a reconnect storm) leaves the heap sized for the burst: the
// collector's goal is twice what was live at its last cycle, taken while hundreds of responses were held, so
// for minutes afterwards the heap grows to that goal before collecting, and the process keeps hundreds of
// MB it no longer needs. When the budget empties after being more than half used, the memory is collected
// and returned to the OS at once (releaseAfterBurst), resetting the goal to what is really live.
type budget struct {
	sem  *semaphore.Weighted
	max  int64
	used atomic.Int64
	// burst is set once more than half the budget is in use, until the budget is next empty.
	burst atomic.Bool
	// releaseAfterBurst runs (on its own goroutine) when the budget empties after a burst, at most once
	// per burstReleaseGap.
	releaseAfterBurst func()
	lastRelease       atomic.Int64 // unix nanoseconds
}

// burstReleaseGap is the least time between two releases after a burst: each is a full collection.
const burstReleaseGap = 10 * time.Second

func newBudget(max int64) *budget {
	return &budget{sem: semaphore.NewWeighted(max), max: max, releaseAfterBurst: debug.FreeOSMemory}
}

func (b *budget) acquire(ctx context.Context, w int64) error {
	if err := b.sem.Acquire(ctx, w); err != nil {
		return err
	}
	if b.used.Add(w) > b.max/2 {
		b.burst.Store(true)
	}
	return nil
}

func (b *budget) release(w int64) {
	b.sem.Release(w)
	if b.used.Add(-w) != 0 || !b.burst.CompareAndSwap(true, false) {
		return
	}
	now := time.Now().UnixNano()
	if last := b.lastRelease.Load(); now-last < int64(burstReleaseGap) || !b.lastRelease.CompareAndSwap(last, now) {
		return
	}
	go b.releaseAfterBurst()
}

// flight tracks one stream's responses that are sent but not yet ACKed or NACKed, each holding its size of
// the server's in-flight budget. A marshaled response stays in memory until the proxy has read it, so when
// hundreds of proxies connect at once, unbounded sending holds all their configuration at once (a 300-proxy
// cold start held ~750 MB). The budget makes the rest wait their turn instead.
//
// The ACK releases the budget on the stream's reader goroutine, not the goroutine that sends, so a stream
// waiting for budget never waits for itself.
type flight struct {
	budget  *budget
	timeout time.Duration

	mu      sync.Mutex
	pending map[string][]*flightEntry // type URL → in send order
	done    bool
}

type flightEntry struct {
	nonce    string
	weight   int64
	released bool
	timer    *time.Timer
}

func newFlight(b *budget, timeout time.Duration) *flight {
	return &flight{budget: b, timeout: timeout, pending: map[string][]*flightEntry{}}
}

// acquire waits for size bytes of budget (capped at the whole budget) and records them against nonce.
func (f *flight) acquire(ctx context.Context, typeURL, nonce string, size int) error {
	if f == nil || f.budget == nil {
		return nil
	}
	w := min(int64(size), f.budget.max)
	if err := f.budget.acquire(ctx, w); err != nil {
		return err
	}
	e := &flightEntry{nonce: nonce, weight: w}
	f.mu.Lock()
	if f.done {
		f.mu.Unlock()
		f.budget.release(w)
		return nil
	}
	f.pending[typeURL] = append(f.pending[typeURL], e)
	// A proxy that never answers must not hold the budget for ever.
	e.timer = time.AfterFunc(f.timeout, func() { f.releaseEntry(e) })
	f.mu.Unlock()
	return nil
}

func (f *flight) releaseEntry(e *flightEntry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !e.released {
		e.released = true
		f.budget.release(e.weight)
	}
}

// answered releases the response with this nonce and every earlier one of the type: the stream is ordered,
// so the proxy has read them all.
func (f *flight) answered(typeURL, nonce string) {
	if f == nil || f.budget == nil || nonce == "" {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	list := f.pending[typeURL]
	for i, e := range list {
		if e.nonce != nonce {
			continue
		}
		for _, old := range list[:i+1] {
			if !old.released {
				old.released = true
				old.timer.Stop()
				f.budget.release(old.weight)
			}
		}
		f.pending[typeURL] = append(list[:0:0], list[i+1:]...)
		return
	}
}

// close releases everything the stream holds.
func (f *flight) close() {
	if f == nil || f.budget == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.done = true
	for _, list := range f.pending {
		for _, e := range list {
			if !e.released {
				e.released = true
				e.timer.Stop()
				f.budget.release(e.weight)
			}
		}
	}
	clear(f.pending)
}
