package debug

import (
	"fmt"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/sextantmesh/sextant/pilot/envoy"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/xds"
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

// What the tracker does for each response of an endpoint push to 300 sidecars: the push, the response
// and its ACK.
func BenchmarkTrackerResponse(b *testing.B) {
	tr := newTracker(newMetrics())
	const conns = 300
	ids, nonces := make([]string, conns), make([]string, conns)
	for i := range ids {
		ids[i] = fmt.Sprintf("sidecar~10.0.%d.%d~app-%d.ns~ns.svc.cluster.local-%d", i/250, i%250, i, i)
		nonces[i] = fmt.Sprintf("%d-1", i)
	}
	push := func(v uint64) *model.PushRequest {
		req := &model.PushRequest{Push: &model.PushContext{Version: v}, Start: time.Now()}
		tr.onPush(req)
		return req
	}
	version := uint64(1)
	req := push(version)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i == conns {
			i = 0
			version++
			req = push(version)
		}
		tr.Sent(ids[i], nil, envoy.EndpointType, nonces[i], version, req)
		tr.Pushed(ids[i], envoy.EndpointType, version, req, xds.PushSent, time.Millisecond)
		tr.Acked(ids[i], envoy.EndpointType, nonces[i], false, "")
		i++
	}
}

// A response sent while the pipeline's copy of its push is being recorded is still counted for that push:
// the transport may learn of the push first or second, but never between the two halves of recording it.
func TestResponseCountedWhilePushIsRecorded(t *testing.T) {
	tr := newTracker(newMetrics())
	for v := uint64(1); v <= 10000; v++ {
		req := &model.PushRequest{Full: true, Push: &model.PushContext{Version: v}, Start: time.Now()}
		done := make(chan struct{})
		go func() {
			tr.onPush(req)
			close(done)
		}()
		tr.Sent("sidecar~10.0.0.1~a.ns~ns.svc.cluster.local", nil, envoy.ClusterType, fmt.Sprint(v), v, req)
		<-done
		if e := tr.record(v); e == nil || e.responses.Load() != 1 {
			t.Fatalf("push %d: its response was not counted", v)
		}
	}
}
