// Package heapgoal gives Go's collector a floor of headroom: after each collection the heap may grow by at
// least a fixed number of bytes before the next one starts, and by GOGC=100's doubling when that is more.
//
// GOGC alone ties the interval between collections to the live heap. A control plane keeps a modest heap
// live (tens of MB for a mesh of hundreds of services) and allocates at a steady rate while it pushes, so at
// GOGC=100 it collects every few seconds, and each mark phase takes a share of the CPU the pushes run on and
// makes the allocating push workers assist. A fixed GOGC above 100 spaces the collections out, but also
// multiplies the peak after a full push, when the live heap is largest. A headroom floor spaces them out
// while the live heap is small and leaves the large-heap case as at GOGC=100: the heap goal is
// live + max(headroom, live + roots), so the extra memory is bounded by the headroom.
package heapgoal

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
)

// MinPercent is the lowest GOGC Keep sets: Go's default.
const MinPercent = 100

// Percent returns the GOGC value whose heap goal leaves at least headroom bytes over live (the heap marked
// live by the last collection; scanned the collection's roots, stacks and globals, which GOGC also counts),
// and never less than MinPercent.
func Percent(live, scanned, headroom uint64) int {
	base := live + scanned
	if base == 0 {
		base = 1
	}
	p := (headroom*100 + base - 1) / base
	if p < MinPercent {
		return MinPercent
	}
	const most = 1 << 20 // far beyond any useful goal; keeps the int conversion safe
	if p > most {
		return most
	}
	return int(p)
}

// Keep sets GOGC after every collection so the next goal leaves headroom bytes, until ctx is done or the
// returned stop is called; then it restores the GOGC in effect before. It overrides a GOGC the environment
// sets: the caller decides whether an operator's explicit setting wins.
func Keep(ctx context.Context, headroom uint64) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	k := &keeper{headroom: headroom, collected: make(chan struct{}, 1), done: make(chan struct{})}
	before := debug.SetGCPercent(MinPercent)
	k.percent = MinPercent
	k.adjust()
	k.arm()
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-ctx.Done():
				close(k.done)
				debug.SetGCPercent(before)
				return
			case <-k.collected:
				k.adjust()
			}
		}
	}()
	return func() {
		cancel()
		<-finished
	}
}

type keeper struct {
	headroom  uint64
	percent   int
	collected chan struct{}
	done      chan struct{}
	samples   [3]metrics.Sample
}

// sentinel is an object only the collector's cleanup refers to: it becomes unreachable at once, so its
// cleanup runs after each collection. Large enough to be its own allocation, not part of a tiny block
// whose other objects could keep it alive.
type sentinel struct{ _ [32]byte }

// arm asks to hear of the next collection; each notice arms the following one, until done.
func (k *keeper) arm() {
	runtime.AddCleanup(new(sentinel), func(k *keeper) {
		select {
		case <-k.done:
			return
		default:
		}
		select {
		case k.collected <- struct{}{}:
		default:
		}
		k.arm()
	}, k)
}

// adjust sets GOGC from what the last collection left live. A change below a twentieth is skipped:
// setting GOGC briefly stops the world.
func (k *keeper) adjust() {
	k.samples[0].Name = "/gc/heap/live:bytes"
	k.samples[1].Name = "/gc/scan/stack:bytes"
	k.samples[2].Name = "/gc/scan/globals:bytes"
	metrics.Read(k.samples[:])
	var v [3]uint64
	for i, s := range k.samples {
		if s.Value.Kind() == metrics.KindUint64 {
			v[i] = s.Value.Uint64()
		}
	}
	p := Percent(v[0], v[1]+v[2], k.headroom)
	if diff := p - k.percent; diff*20 > k.percent || -diff*20 > k.percent || (p == MinPercent && k.percent != MinPercent) {
		debug.SetGCPercent(p)
		k.percent = p
	}
}
