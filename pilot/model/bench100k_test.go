package model_test

import (
	"fmt"
	"testing"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
)

// servicesMesh is the shape of a file of Services: n selector Services over namespaces, no pods or slices.
func servicesMesh(tb testing.TB, n, namespaces int) *meshFixture {
	m := newMesh(tb)
	for ns := range namespaces {
		m.namespace(fmt.Sprintf("ns-%d", ns), nil)
	}
	for s := range n {
		addService(m, s, namespaces)
	}
	return m
}

func addService(m *meshFixture, s, namespaces int) config.Key {
	ns, name := fmt.Sprintf("ns-%d", s%namespaces), fmt.Sprintf("svc-%d", s)
	m.service(ns, name, fmt.Sprintf("10.%d.%d.%d", 100+s/65536, (s/256)%256, s%256), map[string]string{"app": name}, nil, httpPort(8080))
	return config.Key{Kind: config.Service, Namespace: ns, Name: name}
}

func BenchmarkColdBuild100k(b *testing.B) {
	m := servicesMesh(b, 100_000, 10)
	b.ReportAllocs()
	var ps *model.PushContext
	for b.Loop() {
		ps = model.Build(m.store, mesh.Default())
	}
	if ps.ServiceCount() != 100_000 {
		b.Fatalf("services = %d", ps.ServiceCount())
	}
}

// BenchmarkAddOneAt100k adds one more Service per iteration to a snapshot of 100k.
func BenchmarkAddOneAt100k(b *testing.B) {
	m := servicesMesh(b, 100_000, 10)
	ps := model.Build(m.store, mesh.Default())
	b.ReportAllocs()
	next := 100_000
	for b.Loop() {
		b.StopTimer()
		key := addService(m, next, 10)
		next++
		b.StartTimer()
		ps, _ = model.Update(ps, m.store, []model.Change{{Key: key, New: m.store.Get(key)}})
	}
	if ps.ServiceCount() != next {
		b.Fatalf("services = %d, want %d", ps.ServiceCount(), next)
	}
}

// BenchmarkAdd100kInBatches adds 100k Services to a running snapshot of none, batch per Update (as the
// debouncer delivers a large file); one iteration is the whole 100k. Store writes are not timed.
func BenchmarkAdd100kInBatches(b *testing.B) {
	const total = 100_000
	for _, batch := range []int{1000, 10_000, total} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				m := servicesMesh(b, 0, 10)
				ps := model.Build(m.store, mesh.Default())
				for start := 0; start < total; start += batch {
					changes := make([]model.Change, 0, batch)
					for s := start; s < start+batch; s++ {
						key := addService(m, s, 10)
						changes = append(changes, model.Change{Key: key, New: m.store.Get(key)})
					}
					b.StartTimer()
					ps, _ = model.Update(ps, m.store, changes)
					b.StopTimer()
				}
				if ps.ServiceCount() != total {
					b.Fatalf("services = %d", ps.ServiceCount())
				}
				b.StartTimer()
			}
		})
	}
}

// BenchmarkAllServicesAfterAddOneAt100k times the first AllServices (read by every full push) on the
// snapshot after one Service is added to 100k.
func BenchmarkAllServicesAfterAddOneAt100k(b *testing.B) {
	m := servicesMesh(b, 100_000, 10)
	ps := model.Build(m.store, mesh.Default())
	ps.AllServices()
	b.ReportAllocs()
	next := 100_000
	for b.Loop() {
		b.StopTimer()
		key := addService(m, next, 10)
		next++
		ps, _ = model.Update(ps, m.store, []model.Change{{Key: key, New: m.store.Get(key)}})
		b.StartTimer()
		if len(ps.AllServices()) != next {
			b.Fatalf("services = %d, want %d", len(ps.AllServices()), next)
		}
	}
}
