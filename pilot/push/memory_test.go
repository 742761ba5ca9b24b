package push_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/push"
	"github.com/sextantmesh/sextant/pilot/store"
)

// After most of the config goes (a large file or namespace deleted), its memory goes back to the OS within
// seconds, not at the next GC, which a server at rest may not run for minutes.
func TestMemoryIsReturnedWhenMostConfigGoes(t *testing.T) {
	const n = 12_000
	var empty runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&empty)
	st := store.New()
	for i := range n {
		st.Upsert(store.LayerFile, service(fmt.Sprintf("svc-%d", i)))
	}
	p := push.New(push.Options{Store: st, DebounceAfter: 10 * time.Millisecond})
	pushed := make(chan struct{}, 1)
	// Nothing here keeps a snapshot: the one with the services must become garbage.
	p.Subscribe(func(*model.PushRequest) { pushed <- struct{}{} })
	p.Initialize()
	<-pushed
	go p.Run(t.Context())
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range n {
		st.Delete(store.LayerFile, service(fmt.Sprintf("svc-%d", i)).Key)
	}
	select {
	case <-pushed:
	case <-time.After(10 * time.Second):
		t.Fatal("no push after the deletions")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var now runtime.MemStats
		runtime.ReadMemStats(&now)
		// HeapInuse falls only when a GC has run and swept the services; nothing else here makes one run.
		if now.HeapInuse-empty.HeapInuse < (before.HeapInuse-empty.HeapInuse)/2 && now.HeapReleased > before.HeapReleased {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("heap in use %d bytes (%d with the services, %d before them), released %d (%d before)", now.HeapInuse,
				before.HeapInuse, empty.HeapInuse, now.HeapReleased, before.HeapReleased)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
