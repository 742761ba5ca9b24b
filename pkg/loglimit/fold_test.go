package loglimit

import (
	"sync"
	"testing"
	"time"
)

// An isolated event is written at once; a storm within the interval is one more line, carrying the count
// of every event folded in, once the interval is over.
func TestFoldWritesAtOnceThenOncePerInterval(t *testing.T) {
	var mu sync.Mutex
	var lines []int
	f := NewFold(100*time.Millisecond, func(n int) {
		mu.Lock()
		lines = append(lines, n)
		mu.Unlock()
	})
	written := func() []int {
		mu.Lock()
		defer mu.Unlock()
		return append([]int(nil), lines...)
	}
	f.Add(func(n *int) { *n++ })
	if got := written(); len(got) != 1 || got[0] != 1 {
		t.Fatalf("the first event: lines %v, want [1] at once", got)
	}
	for range 50 {
		f.Add(func(n *int) { *n++ })
	}
	if got := written(); len(got) != 1 {
		t.Fatalf("a storm within the interval wrote %v", got)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(written()) < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := written(); len(got) != 2 || got[1] != 50 {
		t.Fatalf("after the interval: lines %v, want [1 50]", got)
	}
	time.Sleep(150 * time.Millisecond)
	f.Add(func(n *int) { *n++ })
	if got := written(); len(got) != 3 || got[2] != 1 {
		t.Fatalf("an event after a quiet interval: lines %v, want it at once", got)
	}
}
