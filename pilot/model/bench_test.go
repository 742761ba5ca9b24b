package model_test

import (
	"fmt"
	"runtime"
	"testing"

	security "istio.io/api/security/v1beta1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
)

func BenchmarkBuild(b *testing.B) {
	for _, services := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("services=%d/endpoints=%d", services, services*10), func(b *testing.B) {
			m := bigMesh(b, services, 10, 10)
			b.ReportAllocs()
			var ps *model.PushContext
			for b.Loop() {
				ps = model.Build(m.store, mesh.Default())
			}
			if ps.EndpointCount() != services*10 {
				b.Fatalf("endpoints = %d", ps.EndpointCount())
			}
			// Heap held by one snapshot (the store excluded): what a full build costs in memory.
			var with, without runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&with)
			runtime.KeepAlive(ps)
			ps = nil
			runtime.GC()
			runtime.ReadMemStats(&without)
			b.ReportMetric(float64(int64(with.HeapAlloc)-int64(without.HeapAlloc))/(1<<20), "snapshot-MiB")
		})
	}
}

func BenchmarkUpdateAuthorizationPolicy(b *testing.B) {
	m := bigMesh(b, 10000, 10, 10)
	ps := model.Build(m.store, mesh.Default())
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		m.authz("ns-1", "policy", map[string]string{"app": fmt.Sprintf("svc-%d", i%100)}, security.AuthorizationPolicy_ALLOW)
		key := config.Key{Kind: config.AuthorizationPolicy, Namespace: "ns-1", Name: "policy"}
		ps, _ = model.Update(ps, m.store, []model.Change{{Key: key, New: m.store.Get(key)}})
	}
}

func BenchmarkUpdateEndpointSlice(b *testing.B) {
	m := bigMesh(b, 10000, 10, 10)
	ps := model.Build(m.store, mesh.Default())
	key := config.Key{Kind: config.EndpointSlice, Namespace: "ns-7", Name: "svc-7-abcde"}
	orig := m.store.Get(key)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		b.StopTimer()
		// Flip readiness of one endpoint: a different slice object each time.
		s := orig.Spec.(*discoveryv1.EndpointSlice).DeepCopy()
		ready := i%2 == 1
		s.Endpoints[3].Conditions.Ready = &ready
		i++
		c := *orig
		c.Spec = s
		old := m.store.Get(key)
		m.store.Upsert(0, &c)
		b.StartTimer()
		var res model.UpdateResult
		ps, res = model.Update(ps, m.store, []model.Change{{Key: key, Old: old, New: &c}})
		if res.Full || len(res.ServicesUpdated) != 1 {
			b.Fatalf("unexpected result %+v", res)
		}
	}
}
