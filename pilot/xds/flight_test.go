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
