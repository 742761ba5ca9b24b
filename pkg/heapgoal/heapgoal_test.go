package heapgoal_test

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/sextantmesh/sextant/pkg/heapgoal"
)

func TestPercent(t *testing.T) {
	const mb = 1 << 20
	for _, c := range []struct {
		live, scanned, headroom uint64
		want                    int
	}{
		{live: 64 * mb, headroom: 192 * mb, want: 300},
		{live: 60 * mb, scanned: 4 * mb, headroom: 192 * mb, want: 300},
		{live: 64 * mb, headroom: 100 * mb, want: 157}, // rounded up: the goal leaves at least the headroom
		{live: 300 * mb, headroom: 192 * mb, want: heapgoal.MinPercent},
		{live: 192 * mb, headroom: 192 * mb, want: heapgoal.MinPercent},
		{live: 0, headroom: 192 * mb, want: 1 << 20},
		{live: 64 * mb, headroom: 0, want: heapgoal.MinPercent},
	} {
		if got := heapgoal.Percent(c.live, c.scanned, c.headroom); got != c.want {
			t.Errorf("Percent(live %d MB, scanned %d MB, headroom %d MB) = %d, want %d",
				c.live/mb, c.scanned/mb, c.headroom/mb, got, c.want)
		}
	}
}

func readGoal() (goal, live uint64, percent int) {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}, {Name: "/gc/heap/live:bytes"}, {Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64(), int(s[2].Value.Uint64())
}

var sink [][]byte

// TestKeepFollowsEachCollection: after collections, whatever the live heap, the goal leaves the headroom,
// and stop restores the GOGC from before.
func TestKeepFollowsEachCollection(t *testing.T) {
	const headroom = 256 << 20
	before := debug.SetGCPercent(150)
	defer debug.SetGCPercent(before)
	stop := heapgoal.Keep(context.Background(), headroom)
	for round, liveMB := range []int{8, 64} {
		sink = sink[:0]
		for range liveMB {
			sink = append(sink, make([]byte, 1<<20))
		}
		// The keeper adjusts after it hears of a collection; collect until the goal shows it.
		deadline := time.Now().Add(5 * time.Second)
		var goal, live uint64
		for {
			runtime.GC()
			time.Sleep(10 * time.Millisecond)
			if goal, live, _ = readGoal(); goal >= live+headroom*19/20 || time.Now().After(deadline) {
				break
			}
		}
		if goal < live+headroom*19/20 {
			t.Fatalf("round %d: heap goal %d MB with %d MB live, want at least live + %d MB", round, goal>>20, live>>20, headroom>>20)
		}
		if goal > live+headroom*11/10+live {
			t.Errorf("round %d: heap goal %d MB with %d MB live: more than the headroom asks", round, goal>>20, live>>20)
		}
	}
	stop()
	if got := debug.SetGCPercent(150); got != 150 {
		t.Errorf("GOGC after stop = %d, want 150 (from before Keep)", got)
	}
}

// TestKeepLeavesLargeHeapsAtDefault: a live heap bigger than the headroom keeps Go's default doubling.
func TestKeepLeavesLargeHeapsAtDefault(t *testing.T) {
	const headroom = 16 << 20
	stop := heapgoal.Keep(context.Background(), headroom)
	defer stop()
	sink = sink[:0]
	for range 64 {
		sink = append(sink, make([]byte, 1<<20))
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
		goal, live, p := readGoal()
		if p == heapgoal.MinPercent && goal >= 2*live {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GOGC %d, heap goal %d MB with %d MB live; want %d (the default doubling)", p, goal>>20, live>>20, heapgoal.MinPercent)
		}
	}
	sink = nil
}
