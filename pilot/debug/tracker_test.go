package debug

import (
	"runtime"
	"testing"
	"weak"

	"github.com/sextantmesh/sextant/pilot/model"
)

// The push history (kept to tell which pushes concerned a proxy) does not hold the snapshots themselves:
// under churn, 512 of them were 20 MB of a 90 MB heap.
func TestPushHistoryDoesNotKeepSnapshots(t *testing.T) {
	tr := newTracker(newMetrics())
	var snapshots []weak.Pointer[model.PushContext]
	for v := uint64(1); v <= 3; v++ {
		push := &model.PushContext{Version: v}
		snapshots = append(snapshots, weak.Make(push))
		tr.onPush(&model.PushRequest{Full: true, Push: push})
	}
	runtime.GC()
	for i, w := range snapshots {
		if w.Value() != nil {
			t.Errorf("snapshot %d is still held after its push was recorded", i+1)
		}
	}
	if reqs, complete := tr.requestsBetween(0, 3); !complete || len(reqs) != 3 {
		t.Errorf("history: %d requests, complete %v; want the 3", len(reqs), complete)
	}
}
