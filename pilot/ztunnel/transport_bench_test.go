package ztunnel_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sextantmesh/sextant/pilot/xds"
	"github.com/sextantmesh/sextant/pilot/ztunnel"
)

// BenchmarkPodChangeTo200Ztunnels measures, over the real transport on loopback, the time from a snapshot
// leaving the pipeline (the debouncer's output) until each of 200 delta ztunnels holding 10k workloads has
// received and ACKed the one changed Address; it reports p50/p99/max across connections and bytes per
// connection. Run: go test -run '^$' -bench PodChangeTo200 ./pilot/ztunnel/
func BenchmarkPodChangeTo200Ztunnels(b *testing.B) {
	f := bigAmbientMesh(b)
	ps := f.build()
	pipe := &pipeline{}
	pipe.cur.Store(ps)
	g := ztunnel.New()
	srv := xds.NewServer(xds.Options{Pipeline: pipe, Generators: g.ByTypeURL(), Policies: ztunnel.Policies(),
		Logger: slog.New(slog.DiscardHandler), SendTimeout: 30 * time.Second})
	gs := grpc.NewServer(srv.GRPCServerOptions()...)
	srv.Register(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Each client ACKs everything and reports (time, bytes) when a response names the watched uid.
	type hit struct {
		at    time.Time
		bytes int
	}
	const uid = "Kubernetes//Pod/ns-0/svc-0-6b7c9d8f5d-00000"
	hits := make([]chan hit, benchConnections)
	synced := make(chan struct{}, benchConnections)
	for i := range benchConnections {
		hits[i] = make(chan hit, 4)
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
		if err != nil {
			b.Fatal(err)
		}
		node := &core.Node{Id: fmt.Sprintf("ztunnel~10.9.%d.%d~ztunnel-%d.istio-system~istio-system.svc.cluster.local", i/250, i%250, i)}
		for _, typ := range []string{ztunnel.AddressType, ztunnel.AuthorizationType} {
			if err := stream.Send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: typ, ResourceNamesSubscribe: []string{"*"}}); err != nil {
				b.Fatal(err)
			}
			node = nil
		}
		go func() {
			first := true
			for {
				r, err := stream.Recv()
				if err != nil {
					return
				}
				_ = stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce})
				if r.TypeUrl != ztunnel.AddressType {
					continue
				}
				if first {
					first = false
					synced <- struct{}{}
					continue
				}
				size := 0
				found := false
				for _, res := range r.Resources {
					size += len(res.Resource.GetValue())
					found = found || res.Name == uid
				}
				if found {
					hits[i] <- hit{time.Now(), size}
				}
			}
		}()
	}
	for range benchConnections {
		<-synced
	}

	var lats []time.Duration
	totalBytes := 0
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		f.pod(podSpec{ns: "ns-0", name: "svc-0-6b7c9d8f5d-00000", ip: "10.0.0.0", node: "node-0", sa: "svc-0", ready: i%2 == 1,
			labels: map[string]string{"app": "svc-0", "version": "v0"}})
		next, req := f.update(ps)
		ps = next
		b.StartTimer()
		start := time.Now()
		pipe.publish(req)
		for c := range benchConnections {
			select {
			case h := <-hits[c]:
				lats = append(lats, h.at.Sub(start))
				totalBytes += h.bytes
			case <-time.After(30 * time.Second):
				b.Fatalf("connection %d did not get the change", c)
			}
		}
	}
	b.StopTimer()
	slices.Sort(lats)
	q := func(p float64) float64 { return float64(lats[int(p*float64(len(lats)-1))].Microseconds()) / 1000 }
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(q(1), "max-ms")
	b.ReportMetric(float64(totalBytes)/float64(b.N*benchConnections), "bytes/conn")
}
