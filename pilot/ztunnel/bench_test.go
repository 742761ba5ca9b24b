package ztunnel_test

import (
	"fmt"
	"testing"

	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/ztunnel"
)

const (
	benchServices    = 1000
	benchPerService  = 10 // 10,000 workloads
	benchNamespaces  = 20
	benchConnections = 200
	benchNodes       = 50
)

// bigAmbientMesh: 1,000 services × 10 pods over 20 ambient namespaces, no policies.
func bigAmbientMesh(tb testing.TB) *fixture {
	f := newFixture(tb)
	for n := range benchNamespaces {
		f.namespace(fmt.Sprintf("ns-%d", n), map[string]string{"istio.io/dataplane-mode": "ambient"})
	}
	for i := range benchNodes {
		f.node(fmt.Sprintf("node-%d", i), "region", fmt.Sprintf("zone-%d", i%3))
	}
	for s := range benchServices {
		ns := fmt.Sprintf("ns-%d", s%benchNamespaces)
		name := fmt.Sprintf("svc-%d", s)
		f.service(ns, name, fmt.Sprintf("10.%d.%d.%d", 100+s/65536, (s/256)%256, s%256), nil, map[string]string{"app": name}, nil,
			numTarget("http", 8080, 8080))
		for e := range benchPerService {
			i := s*benchPerService + e
			f.pod(podSpec{ns: ns, name: fmt.Sprintf("%s-6b7c9d8f5d-%05d", name, e), ip: fmt.Sprintf("10.%d.%d.%d", i/65536, i/256%256, i%256),
				node: fmt.Sprintf("node-%d", i%benchNodes), sa: name, ready: true,
				labels: map[string]string{"app": name, "version": fmt.Sprintf("v%d", e%2)}})
		}
	}
	return f
}

// BenchmarkPodChangeDelta measures one pod change as 200 ztunnels see it: the delta each connection gets,
// in bytes, and the time to compute all 200 deltas (the model update is not timed).
func BenchmarkPodChangeDelta(b *testing.B) {
	f := bigAmbientMesh(b)
	ps := f.build()
	g := ztunnel.New()
	conns := make([]*model.WatchedResource, benchConnections)
	proxies := make([]*model.Proxy, benchConnections)
	for i := range conns {
		conns[i] = &model.WatchedResource{TypeURL: ztunnel.AddressType, Wildcard: true}
		proxies[i] = &model.Proxy{Type: model.Ztunnel, ID: fmt.Sprintf("ztunnel-%d.istio-system", i), Namespace: "istio-system"}
	}
	full, _ := g.Address().Generate(proxies[0], ps, conns[0], nil)
	fullBytes := 0
	for _, r := range full {
		fullBytes += len(r.Any.Value)
	}

	bytesPerConn, resPerConn := 0, 0
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		ready := i%2 == 1
		f.pod(podSpec{ns: "ns-0", name: "svc-0-6b7c9d8f5d-00000", ip: "10.0.0.0", node: "node-0", sa: "svc-0", ready: ready,
			labels: map[string]string{"app": "svc-0", "version": "v0"}})
		next, req := f.update(ps)
		ps = next
		b.StartTimer()
		for c := range conns {
			res, removed, incremental, err := g.Address().GenerateDeltas(proxies[c], next, conns[c], req)
			if err != nil || !incremental || len(removed) != 0 {
				b.Fatalf("incremental=%v removed=%v err=%v", incremental, removed, err)
			}
			bytesPerConn, resPerConn = 0, len(res)
			for _, r := range res {
				bytesPerConn += len(r.Any.Value)
			}
		}
	}
	b.ReportMetric(float64(len(full)), "resources/full")
	b.ReportMetric(float64(fullBytes), "bytes/full-state")
	b.ReportMetric(float64(bytesPerConn), "bytes/conn")
	b.ReportMetric(float64(resPerConn), "resources/conn")
}

// BenchmarkFullPush200 is a full push (e.g. a Service changed) to 200 ztunnels: the full state is built
// once per snapshot, from cached bytes for everything that did not change.
func BenchmarkFullPush200(b *testing.B) {
	f := bigAmbientMesh(b)
	ps := f.build()
	g := ztunnel.New()
	w := &model.WatchedResource{TypeURL: ztunnel.AddressType, Wildcard: true}
	p := &model.Proxy{Type: model.Ztunnel}
	_, _ = g.Address().Generate(p, ps, w, nil)
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		f.service("ns-0", "svc-0", "10.100.0.0", nil, map[string]string{"app": "svc-0"}, nil, numTarget("http", 8080, 8080+int32(i%2)))
		next, req := f.update(ps)
		ps = next
		b.StartTimer()
		for range benchConnections {
			if _, _, _, err := g.Address().GenerateDeltas(p, next, w, req); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkColdFullState is the first full state of a snapshot with an empty cache: every workload and
// service marshaled once.
func BenchmarkColdFullState(b *testing.B) {
	f := bigAmbientMesh(b)
	ps := f.build()
	w := &model.WatchedResource{TypeURL: ztunnel.AddressType, Wildcard: true}
	b.ResetTimer()
	for range b.N {
		g := ztunnel.New()
		res, _ := g.Address().Generate(&model.Proxy{}, ps, w, nil)
		if len(res) != benchServices*(benchPerService+1) {
			b.Fatalf("%d resources", len(res))
		}
	}
}
