package xds

import (
	"context"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// DefaultMaxBytesInFlight bounds the response bytes sent but not yet acknowledged, over all connections.
const DefaultMaxBytesInFlight = 32 << 20

// DefaultMaxBytesInFlightPerProxy is the most one response counts for: a sixteenth of the default budget.
// A proxy that stops reading holds about two responses until the send timeout closes it, so four of them
// hold at most half the budget.
const DefaultMaxBytesInFlightPerProxy = 2 << 20

// DefaultMaxRequestBytes is the largest request accepted on an authenticated stream: gRPC's own default
// (4 MiB) refused a subscription to about 50,000 names.
const DefaultMaxRequestBytes = 64 << 20

// DefaultMaxUnauthenticatedRequestBytes is the largest request accepted where clients are not authenticated
// (the plaintext port), istiod's limit: sixteen callers sending 64 MiB each took the server to 2 GB.
const DefaultMaxUnauthenticatedRequestBytes = 4 << 20

// DefaultMaxConnectionAgeGrace is how long a connection past its age may keep its streams (istiod's too).
const DefaultMaxConnectionAgeGrace = 10 * time.Second

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
	// share is the most one response counts for. A proxy that stops reading is closed at its first send
	// that blocks for the send timeout, and gRPC takes one response whole before flow control blocks the
	// next, so it holds about two shares meanwhile: a few such proxies cannot take the budget from the rest.
	// A share per stream that later responses wait on would wait on Envoy, which holds its CDS ACK until
	// the load assignments the next response carries arrive.
	share int64

	mu sync.Mutex
	// pending holds the responses of every type in send order, so oldest first, and by deadline. A
	// connection has a few at most; a map by type URL cost a hash of the URL per response and per ACK.
	pending []flightEntry
	done    bool
	// expiry releases what a proxy never answers. One timer per stream, armed while anything is pending: a
	// timer per response was an allocation and a timer-heap insertion and removal per push.
	expiry *time.Timer
	armed  bool
}

type flightEntry struct {
	typeURL  string
	nonce    string
	weight   int64
	deadline time.Time
}

// newFlight tracks a stream's responses against b, each counting for at most share of it (0: all of it).
func newFlight(b *budget, timeout time.Duration, share int64) *flight {
	f := &flight{budget: b, timeout: timeout}
	if b != nil {
		if share <= 0 || share > b.max {
			share = b.max
		}
		f.share = share
	}
	return f
}

// acquire waits for size bytes of the budget (a response larger than the share counts as the share) and
// records them against nonce.
func (f *flight) acquire(ctx context.Context, typeURL, nonce string, size int) error {
	if f == nil || f.budget == nil {
		return nil
	}
	w := min(int64(size), f.share)
	if err := f.budget.acquire(ctx, w); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		f.budget.release(w)
		return nil
	}
	// A proxy that never answers must not hold the budget for ever.
	f.pending = append(f.pending, flightEntry{typeURL: typeURL, nonce: nonce, weight: w, deadline: time.Now().Add(f.timeout)})
	if !f.armed {
		f.armed = true
		if f.expiry == nil {
			f.expiry = time.AfterFunc(f.timeout, f.expire)
		} else {
			f.expiry.Reset(f.timeout)
		}
	}
	return nil
}

// expire releases the responses past their deadline and arms the timer for the next one.
func (f *flight) expire() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		return
	}
	now := time.Now()
	i := 0
	for ; i < len(f.pending) && !f.pending[i].deadline.After(now); i++ {
		f.budget.release(f.pending[i].weight)
	}
	f.pending = slices.Delete(f.pending, 0, i)
	if len(f.pending) == 0 {
		f.armed = false
		return
	}
	f.expiry.Reset(f.pending[0].deadline.Sub(now))
}

// answered releases the response with this nonce and every earlier one of the type: the stream is ordered,
// so the proxy has read them all.
func (f *flight) answered(typeURL, nonce string) {
	if f == nil || f.budget == nil || nonce == "" {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	i := 0
	for ; i < len(f.pending); i++ {
		if e := &f.pending[i]; e.nonce == nonce && e.typeURL == typeURL {
			break
		}
	}
	if i == len(f.pending) {
		return
	}
	kept := f.pending[:0]
	for j, e := range f.pending {
		if j <= i && e.typeURL == typeURL {
			f.budget.release(e.weight)
			continue
		}
		kept = append(kept, e)
	}
	clear(f.pending[len(kept):]) // the array serves the next responses; drop its strings
	f.pending = kept
}

// close releases everything the stream holds.
func (f *flight) close() {
	if f == nil || f.budget == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.done = true
	if f.expiry != nil {
		f.expiry.Stop()
	}
	for _, e := range f.pending {
		f.budget.release(e.weight)
	}
	f.pending = nil
}
