package buildcache

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A build from newer inputs replaces the older one: Get finds only the newest, Latest whatever was stored.
func TestLatestNewestInputsReplace(t *testing.T) {
	c := NewLatest[string, any, int]()
	if _, ok := c.Latest("ns"); ok {
		t.Fatal("Latest found a value in an empty cache")
	}
	if v, err := c.GetOrBuild("ns", 1, func() (int, error) { return 10, nil }); err != nil || v != 10 {
		t.Fatalf("first build = %d, %v", v, err)
	}
	if v, ok := c.Get("ns", 1); !ok || v != 10 {
		t.Fatalf("Get(ns, 1) = %d, %v; want 10", v, ok)
	}
	if _, ok := c.Get("ns", 2); ok {
		t.Fatal("Get found a value for inputs it was not built from")
	}
	v, _ := c.GetOrBuild("ns", 2, func() (int, error) {
		prev, ok := c.Latest("ns") // what a derivation starts from
		if !ok || prev != 10 {
			t.Errorf("Latest during the build of generation 2 = %d, %v; want 10", prev, ok)
		}
		return 20, nil
	})
	if _, ok := c.Get("ns", 1); ok || v != 20 {
		t.Errorf("generation 2 = %d; generation 1 still held: %v", v, ok)
	}
	c.Replace("ns", 3, 30)
	if v, ok := c.Latest("ns"); !ok || v != 30 {
		t.Errorf("Latest after Replace = %d, %v; want 30", v, ok)
	}
	// Replace stores even when the inputs are those already held.
	c.Replace("ns", 3, 31)
	if v, ok := c.Get("ns", 3); !ok || v != 31 {
		t.Errorf("Get after a second Replace with the same inputs = %d, %v; want 31", v, ok)
	}
	if _, ok := c.Latest("other"); ok {
		t.Error("Latest found a value for an identity never stored")
	}
}

// Put returns the value already stored for the same inputs, so every caller shares one; other inputs replace it.
func TestLatestPutSharesStoredValue(t *testing.T) {
	c := NewLatest[string, any, *int]()
	a, b, d := new(int), new(int), new(int)
	if got := c.Put("ns", 1, a); got != a {
		t.Fatal("Put into an empty slot did not return its value")
	}
	if got := c.Put("ns", 1, b); got != a {
		t.Error("Put with the inputs already stored did not return the stored value")
	}
	if got, _ := c.Get("ns", 1); got != a {
		t.Error("Put with the inputs already stored replaced the value")
	}
	if got := c.Put("ns", 2, d); got != d {
		t.Error("Put with newer inputs did not return its own value")
	}
	if _, ok := c.Get("ns", 1); ok {
		t.Error("the older generation is still held after Put")
	}

	// Two goroutines racing to Put builds from the same inputs end up with one value.
	c2 := NewLatest[string, any, *int]()
	var wg sync.WaitGroup
	got := make([]*int, 8)
	for i := range got {
		wg.Go(func() { got[i] = c2.Put("ns", 1, new(int)) })
	}
	wg.Wait()
	for i := range got {
		if got[i] != got[0] {
			t.Fatalf("Put %d returned a value of its own, not the one stored first", i)
		}
	}
}

// sharedBuild has callers ask c at once for ("ns", 1) with a build that waits until they all could have
// joined it and returns v, err; each caller checks what it got. It returns how many builds ran.
func sharedBuild(c *Latest[string, any, int], callers int, v int, err error, check func(int, error)) int32 {
	var builds atomic.Int32
	release := make(chan struct{})
	var started, wg sync.WaitGroup
	started.Add(callers)
	for range callers {
		wg.Go(func() {
			started.Done()
			check(c.GetOrBuild("ns", 1, func() (int, error) {
				builds.Add(1)
				<-release
				return v, err
			}))
		})
	}
	started.Wait()
	for builds.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	// Let the other callers reach the build in flight: without the single flight each would build.
	time.Sleep(20 * time.Millisecond)
	close(release)
	wg.Wait()
	return builds.Load()
}

// Many goroutines asking at once for the same inputs share one build.
func TestLatestGetOrBuildOnce(t *testing.T) {
	const callers = 50
	n := sharedBuild(NewLatest[string, any, int](), callers, 10, nil, func(v int, err error) {
		if err != nil || v != 10 {
			t.Errorf("got %d, %v", v, err)
		}
	})
	if n != 1 {
		t.Errorf("%d builds for %d callers with the same inputs, want 1", n, callers)
	}
}

// A build from other inputs does not wait for the one in flight.
func TestLatestGetOrBuildOtherInputsDoNotWait(t *testing.T) {
	c := NewLatest[string, any, int]()
	release := make(chan struct{})
	inBuild := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = c.GetOrBuild("ns", 1, func() (int, error) {
			close(inBuild)
			<-release
			return 10, nil
		})
	}()
	<-inBuild
	v, err := c.GetOrBuild("ns", 2, func() (int, error) { return 20, nil })
	if err != nil || v != 20 {
		t.Errorf("build from other inputs = %d, %v; want 20", v, err)
	}
	close(release)
	<-done
}

// A failed build is not stored: its waiters get the error and the next caller builds again.
func TestLatestErrorNotStored(t *testing.T) {
	c := NewLatest[string, any, int]()
	boom := errors.New("boom")
	const callers = 10
	n := sharedBuild(c, callers, 0, boom, func(_ int, err error) {
		if !errors.Is(err, boom) {
			t.Errorf("err = %v, want the build's error", err)
		}
	})
	if n != 1 {
		t.Errorf("%d builds for %d callers, want 1", n, callers)
	}
	if _, ok := c.Get("ns", 1); ok {
		t.Error("a failed build was stored")
	}
	if _, ok := c.Latest("ns"); ok {
		t.Error("Latest returns a failed build")
	}
	rebuilt := false
	v, err := c.GetOrBuild("ns", 1, func() (int, error) { rebuilt = true; return 10, nil })
	if err != nil || v != 10 || !rebuilt {
		t.Errorf("after a failure: %d, %v, built again %v; want 10 from a second build", v, err, rebuilt)
	}
}

// Identities nobody asked for since the last sweep are dropped once the cache doubles; used ones stay.
func TestLatestSweep(t *testing.T) {
	c := NewLatest[int, any, int]()
	// Filling the cache to minSweep sweeps once: every entry was just stored, so none goes, and each
	// counts as unused from then on.
	for i := range minSweep {
		c.Put(i, 1, i)
	}
	for i := range 10 {
		if _, ok := c.Get(i, 1); !ok {
			t.Fatalf("%d lost before any sweep could drop it", i)
		}
	}
	c.Replace(20, 2, 20) // a new generation counts as a use
	for i := minSweep; i < 2*minSweep; i++ {
		c.Put(i, 1, i)
	}
	for _, i := range []int{0, 5, 9} {
		if _, ok := c.Get(i, 1); !ok {
			t.Errorf("%d, used since the last sweep, was dropped", i)
		}
	}
	if _, ok := c.Get(20, 2); !ok {
		t.Error("an identity replaced since the last sweep was dropped")
	}
	for _, i := range []int{10, 500, minSweep - 1} {
		if _, ok := c.Latest(i); ok {
			t.Errorf("%d, unused since the last sweep, was kept", i)
		}
	}
	if _, ok := c.Get(2*minSweep-1, 1); !ok {
		t.Error("a new entry was dropped")
	}
}
