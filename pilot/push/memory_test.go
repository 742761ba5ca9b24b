package push_test

import (
	"fmt"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/push"
	"github.com/sextantmesh/sextant/pilot/store"
)

// forcedGCs counts the collections something asked for (runtime.GC, debug.FreeOSMemory), not those the
// pacer started.
func forcedGCs() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/forced:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// After most of the config goes (a large file or namespace deleted), the snapshot without it makes the
// pipeline collect and return its memory to the OS, instead of leaving it to the next GC, which a server at
// rest may not run for minutes.
func TestMemoryIsReturnedWhenMostConfigGoes(t *testing.T) {
	if testing.Short() {
		t.Skip("12,000 services built, dropped and their memory measured after collection: -short")
	}
	const n = 12_000
	var empty runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&empty)
	st := store.New()
	for i := range n {
		st.Upsert(store.LayerFile, service(fmt.Sprintf("svc-%d", i)))
	}
	p := push.New(push.Options{Store: st})
	pushes := make(chan int, 2)
	// Nothing here keeps a snapshot: the one with the services must become garbage. The handler never
	// blocks the pipeline, whose goroutine would otherwise hold the request it is delivering.
	p.Subscribe(func(r *model.PushRequest) { pushes <- r.Push.ServiceCount() })
	p.Initialize()
	if got := <-pushes; got != n {
		t.Fatalf("initial push with %d services, want %d", got, n)
	}
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	asked := forcedGCs()
	for i := range n {
		st.Delete(store.LayerFile, service(fmt.Sprintf("svc-%d", i)).Key)
	}
	// One snapshot for all the deletions, however slowly they came: Run's debounce would cut a slow burst
	// into several, and the release would then depend on how the cuts fell.
	p.Flush()
	if got := <-pushes; got != 0 {
		t.Fatalf("push after the deletions with %d services, want 0", got)
	}
	// The pipeline asks for a collection (nothing else here does after the runtime.GC above) and its memory
	// goes back; the deadline only bounds the wait for that, it is not what is measured.
	inUse := func(m *runtime.MemStats) int64 { return int64(m.HeapInuse) - int64(empty.HeapInuse) }
	deadline := time.Now().Add(30 * time.Second)
	for {
		var now runtime.MemStats
		runtime.ReadMemStats(&now)
		if forcedGCs() > asked && inUse(&now) < inUse(&before)/2 && now.HeapReleased > before.HeapReleased {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf(
				"forced collections since the deletions %d; heap in use %d bytes (%d with the services, %d before them), released %d (%d before)",
				forcedGCs()-asked, now.HeapInuse, before.HeapInuse, empty.HeapInuse, now.HeapReleased, before.HeapReleased)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
