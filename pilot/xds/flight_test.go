package xds

import (
	"context"
	"testing"
	"time"
)

// The memory of a burst is given back once the budget empties after being more than half used; small
// pushes and the rest of the gap after a release leave the collector alone.
func TestBudgetReleasesMemoryAfterABurst(t *testing.T) {
	b := newBudget(100)
	released := make(chan struct{}, 10)
	b.releaseAfterBurst = func() { released <- struct{}{} }
	ctx := context.Background()
	expect := func(want bool, what string) {
		t.Helper()
		select {
		case <-released:
			if !want {
				t.Errorf("%s: memory released", what)
			}
		case <-time.After(100 * time.Millisecond):
			if want {
				t.Errorf("%s: memory not released", what)
			}
		}
	}

	must(t, b.acquire(ctx, 30))
	b.release(30)
	expect(false, "a third of the budget used and returned")

	must(t, b.acquire(ctx, 40))
	must(t, b.acquire(ctx, 20)) // 60 of 100: a burst
	b.release(40)
	expect(false, "a burst still in flight")
	b.release(20)
	expect(true, "the budget empty after a burst")

	must(t, b.acquire(ctx, 80))
	b.release(80)
	expect(false, "a second burst within the gap")
	if b.used.Load() != 0 {
		t.Errorf("%d bytes counted in flight after every release", b.used.Load())
	}
}

// A response the proxy never answers gives its budget back after the flight timeout; an answer gives it
// back at once, with every earlier response of the type.
func TestFlightReleasesUnansweredResponsesAfterTimeout(t *testing.T) {
	b := newBudget(100)
	b.releaseAfterBurst = func() {}
	f := newFlight(b, 100*time.Millisecond, 0)
	ctx := context.Background()
	must(t, f.acquire(ctx, ClusterType, "c1", 30))
	must(t, f.acquire(ctx, ClusterType, "c2", 30))
	must(t, f.acquire(ctx, EndpointType, "e1", 40)) // never answered
	f.answered(ClusterType, "c2")
	if used := b.used.Load(); used != 40 {
		t.Fatalf("%d bytes in flight after c2's answer, want 40 (e1 only)", used)
	}
	start := time.Now()
	waited, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	must(t, f.acquire(waited, ClusterType, "c3", 100)) // waits for e1 to expire
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("the whole budget was granted after %v, before e1 expired", d)
	}
	eventually(t, "c3 expired too", func() bool { return b.used.Load() == 0 })
	must(t, f.acquire(ctx, ListenerType, "l1", 10))
	f.close()
	if used := b.used.Load(); used != 0 {
		t.Fatalf("%d bytes in flight after close", used)
	}
}

// An answer releases the earlier responses of its own type only, wherever the other types' responses sit
// between them; a nonce under another type releases nothing.
func TestFlightAnswerReleasesItsTypeOnly(t *testing.T) {
	b := newBudget(1000)
	b.releaseAfterBurst = func() {}
	f := newFlight(b, time.Minute, 0)
	defer f.close()
	ctx := context.Background()
	must(t, f.acquire(ctx, ClusterType, "1", 1))
	must(t, f.acquire(ctx, EndpointType, "2", 10))
	must(t, f.acquire(ctx, ClusterType, "3", 100))
	must(t, f.acquire(ctx, ClusterType, "4", 200))
	f.answered(EndpointType, "3")
	if used := b.used.Load(); used != 311 {
		t.Fatalf("%d bytes in flight after an answer naming another type's nonce, want 311", used)
	}
	f.answered(ClusterType, "3")
	if used := b.used.Load(); used != 210 {
		t.Fatalf("%d bytes in flight after the answer to CDS nonce 3, want 210 (EDS 2 and CDS 4)", used)
	}
	f.answered(EndpointType, "2")
	f.answered(ClusterType, "4")
	if used := b.used.Load(); used != 0 {
		t.Fatalf("%d bytes in flight after every answer", used)
	}
}
