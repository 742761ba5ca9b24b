package shrink

import (
	"runtime"
	"testing"
)

func TestMapShrinksOnlyBelowAQuarterOfALargePeak(t *testing.T) {
	m := map[int]int{}
	peak := 0
	for i := range 4096 {
		m[i] = i
		peak = max(peak, len(m))
	}
	for i := range 3072 {
		delete(m, i)
		if n, p := Map(m, peak); p != peak || len(n) != len(m) {
			t.Fatalf("copied at %d of %d entries", len(m), peak)
		}
	}
	delete(m, 3072)
	n, p := Map(m, peak)
	if p != len(m) || len(n) != len(m) {
		t.Fatalf("not copied at %d of %d: peak %d", len(m), peak, p)
	}
	for k, v := range m {
		if n[k] != v {
			t.Fatalf("entry %d lost", k)
		}
	}
	small := map[int]int{1: 1}
	if _, p := Map(small, 100); p != 100 {
		t.Error("a small peak was copied")
	}
}

// The point of the copy: the large map's memory is released.
func TestMapReleasesMemory(t *testing.T) {
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	m := map[int][64]byte{}
	for i := range 100_000 {
		m[i] = [64]byte{}
	}
	peak := len(m)
	for i := range 99_000 {
		delete(m, i)
	}
	held := heap() - before
	m, _ = Map(m, peak)
	after := heap() - before
	if after*4 > held {
		t.Errorf("after the copy %d bytes held, before %d", after, held)
	}
	runtime.KeepAlive(m)
}
