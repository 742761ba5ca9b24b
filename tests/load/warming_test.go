package main

import (
	"testing"
	"time"
)

// Envoy's rule: a new or changed EDS cluster warms until a load assignment for its service name arrives,
// the same content does not warm again, and initial_fetch_timeout gives up on it.
func TestWarming(t *testing.T) {
	w := newWarmState(15 * time.Second)
	t0 := time.Unix(1000, 0)
	a := &info{eds: true, edsName: "a", content: 1}
	w.cluster("a", nil, a, t0)
	if w.isWarm("a") {
		t.Fatal("a new EDS cluster is warm before its load assignment")
	}
	w.assignment("a", t0.Add(40*time.Millisecond))
	if !w.isWarm("a") {
		t.Fatal("still warming after its load assignment")
	}
	w.cluster("a", a, &info{eds: true, edsName: "a", content: 1}, t0.Add(time.Second))
	if !w.isWarm("a") {
		t.Fatal("the same cluster again warms")
	}
	changed := &info{eds: true, edsName: "a", content: 2}
	w.cluster("a", a, changed, t0.Add(2*time.Second))
	if w.isWarm("a") {
		t.Fatal("a changed cluster does not warm")
	}
	w.sweep(t0.Add(17 * time.Second))
	if w.isWarm("a") {
		t.Fatal("a warming that timed out counts as warm")
	}
	// A cluster whose load assignment comes under another name; and a non-EDS cluster, which never waits.
	w.cluster("b", nil, &info{eds: true, edsName: "svc-b", content: 3}, t0.Add(20*time.Second))
	w.cluster("s", nil, &info{content: 4}, t0.Add(20*time.Second))
	w.assignment("b", t0.Add(21*time.Second))
	if w.isWarm("b") || !w.isWarm("s") {
		t.Fatalf("b warm %v (its assignment is svc-b), s warm %v (static)", w.isWarm("b"), w.isWarm("s"))
	}
	w.assignment("svc-b", t0.Add(22*time.Second))
	// The timed-out cluster updated again starts over; removed, it is forgotten.
	w.cluster("a", changed, &info{eds: true, edsName: "a", content: 5}, t0.Add(23*time.Second))
	w.clusterGone("a")
	done, timeouts, pending := w.take(t0.Add(24 * time.Second))
	if len(done) != 2 || done[0] != 40*time.Millisecond || done[1] != 2*time.Second || timeouts != 1 || pending != 0 {
		t.Fatalf("done %v, %d timeouts, %d pending; want [40ms 2s], 1, 0", done, timeouts, pending)
	}
	if done, timeouts, _ := w.take(t0.Add(25 * time.Second)); len(done) != 0 || timeouts != 0 {
		t.Fatalf("taken twice: %v, %d", done, timeouts)
	}
}
