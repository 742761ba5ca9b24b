package xds

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
)

// DefaultMaxBytesInFlight bounds the response bytes sent but not yet acknowledged, over all connections.
const DefaultMaxBytesInFlight = 32 << 20

// flight tracks one stream's responses that are sent but not yet ACKed or NACKed, each holding its size of
// the server's in-flight budget. A marshaled response stays in memory until the proxy has read it, so when
// hundreds of proxies connect at once, unbounded sending holds all their configuration at once (a 300-proxy
// cold start held ~750 MB). The budget makes the rest wait their turn instead.
//
// The ACK releases the budget on the stream's reader goroutine, not the goroutine that sends, so a stream
// waiting for budget never waits for itself.
type flight struct {
	sem     *semaphore.Weighted
	max     int64
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

func newFlight(sem *semaphore.Weighted, max int64, timeout time.Duration) *flight {
	return &flight{sem: sem, max: max, timeout: timeout, pending: map[string][]*flightEntry{}}
}

// acquire waits for size bytes of budget (capped at the whole budget) and records them against nonce.
func (f *flight) acquire(ctx context.Context, typeURL, nonce string, size int) error {
	if f == nil || f.sem == nil {
		return nil
	}
	w := min(int64(size), f.max)
	if err := f.sem.Acquire(ctx, w); err != nil {
		return err
	}
	e := &flightEntry{nonce: nonce, weight: w}
	f.mu.Lock()
	if f.done {
		f.mu.Unlock()
		f.sem.Release(w)
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
		f.sem.Release(e.weight)
	}
}

// answered releases the response with this nonce and every earlier one of the type: the stream is ordered,
// so the proxy has read them all.
func (f *flight) answered(typeURL, nonce string) {
	if f == nil || f.sem == nil || nonce == "" {
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
				f.sem.Release(old.weight)
			}
		}
		f.pending[typeURL] = append(list[:0:0], list[i+1:]...)
		return
	}
}

// close releases everything the stream holds.
func (f *flight) close() {
	if f == nil || f.sem == nil {
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
				f.sem.Release(e.weight)
			}
		}
	}
	clear(f.pending)
}
