package envoy

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sextantmesh/sextant/pilot/model"
)

// Many proxies of a namespace asking at once build a list once; a newer generation replaces the older.
func TestGenerationsBuildOnce(t *testing.T) {
	c := newGenerations[string, int]()
	var builds atomic.Int32
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := c.getOrBuild("ns", 1, func() (int, error) {
				builds.Add(1)
				<-release
				return 10, nil
			})
			if err != nil || v != 10 {
				t.Errorf("got %d, %v", v, err)
			}
		}()
	}
	for builds.Load() == 0 { // one build in flight, the others waiting or about to
		runtime.Gosched()
	}
	close(release)
	wg.Wait()
	if n := builds.Load(); n != 1 {
		t.Errorf("%d builds for one generation, want 1", n)
	}
	v, _ := c.getOrBuild("ns", 2, func() (int, error) { return 20, nil })
	if _, ok := c.get("ns", 1); ok || v != 20 {
		t.Errorf("generation 2 = %d; generation 1 still held: %v", v, ok)
	}
}

// Identities nobody asked for since the last sweep are dropped once the cache doubles.
func TestGenerationsSweep(t *testing.T) {
	c := newGenerations[int, int]()
	for i := range minSweep {
		c.put(i, 1, i)
	}
	for i := range 10 {
		if _, ok := c.get(i, 1); !ok {
			t.Fatalf("%d lost before any sweep could drop it", i)
		}
	}
	for i := minSweep; i < 2*minSweep; i++ {
		c.put(i, 1, i)
	}
	if _, ok := c.get(5, 1); !ok {
		t.Error("an entry in use was dropped")
	}
	if _, ok := c.get(500, 1); ok {
		t.Error("an entry unused since the last sweep was kept")
	}
	if _, ok := c.get(2*minSweep-1, 1); !ok {
		t.Error("a new entry was dropped")
	}
}

// mergeByName equals sorting the two lists together, a's resource first on equal names.
func TestMergeByName(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	list := func(n int, tag string) model.Resources {
		var out model.Resources
		for range n {
			out = append(out, &model.Resource{Name: fmt.Sprintf("r%02d", rng.IntN(40)), Version: tag})
		}
		slices.SortStableFunc(out, func(a, b *model.Resource) int { return strings.Compare(a.Name, b.Name) })
		return out
	}
	for range 500 {
		a, b := list(rng.IntN(30), "a"), list(rng.IntN(5), "b")
		want := slices.Concat(a, b)
		slices.SortStableFunc(want, func(x, y *model.Resource) int { return strings.Compare(x.Name, y.Name) })
		got := mergeByName(a, b)
		if !slices.Equal(got, want) {
			t.Fatalf("merge of %d and %d resources differs", len(a), len(b))
		}
	}
}
