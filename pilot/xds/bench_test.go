package xds

import (
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/sextantmesh/sextant/pilot/model"
)

const benchConns = 1000

// benchGen returns prebuilt, shared resources: what a caching generator hands the transport.
type benchGen struct{ sets [2]model.Resources }

func newBenchGen(n, size int) *benchGen {
	g := &benchGen{}
	for i := range g.sets {
		for j := range n {
			name := "outbound|80||svc" + strconv.Itoa(j) + ".ns.svc.cluster.local"
			payload := "set" + strconv.Itoa(i) + strings.Repeat("x", size)
			g.sets[i] = append(g.sets[i], &model.Resource{Name: name, Version: "v" + strconv.Itoa(i), Any: message(ClusterType, name, payload)})
		}
	}
	return g
}

func (g *benchGen) Generate(_ *model.Proxy, push *model.PushContext, _ *model.WatchedResource,
	_ *model.PushRequest) (model.Resources, error) {
	return g.sets[push.Version%2], nil
}

// benchClient reads responses, ACKs them and reports the snapshot version each carries.
type benchClient struct{ versions chan uint64 }

func openBenchClients(b *testing.B, e *testEnv, n int, delta bool) []*benchClient {
	clients := make([]*benchClient, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 50) // connect in parallel, not all at once
	for i := range clients {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			bc := &benchClient{versions: make(chan uint64, 64)}
			nd := sidecar("p"+strconv.Itoa(i), "ns"+strconv.Itoa(i%20))
			ads := e.dial(b)
			if delta {
				s, err := ads.DeltaAggregatedResources(b.Context())
				must(b, err)
				must(b, s.Send(&discovery.DeltaDiscoveryRequest{Node: nd, TypeUrl: ClusterType}))
				go func() {
					for {
						r, err := s.Recv()
						if err != nil {
							return
						}
						_ = s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType, ResponseNonce: r.Nonce})
						v, _, _ := strings.Cut(r.SystemVersionInfo, ".")
						n, _ := strconv.ParseUint(v, 10, 64)
						bc.versions <- n
					}
				}()
			} else {
				s, err := ads.StreamAggregatedResources(b.Context())
				must(b, err)
				must(b, s.Send(&discovery.DiscoveryRequest{Node: nd, TypeUrl: ClusterType}))
				go func() {
					for {
						r, err := s.Recv()
						if err != nil {
							return
						}
						_ = s.Send(&discovery.DiscoveryRequest{TypeUrl: ClusterType, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce})
						bc.versions <- responseVersion(r)
					}
				}()
			}
			<-bc.versions
			clients[i] = bc
		})
	}
	wg.Wait()
	return clients
}

func benchEnv(b *testing.B, gen model.Generator) *testEnv {
	return newEnv(b, snapshot{}, func(_ *testEnv, o *Options) {
		o.Generators = map[string]model.Generator{ClusterType: gen}
		o.SendTimeout = 30 * time.Second
	})
}

// BenchmarkPush measures the time until 1,000 connected proxies all have a new version of 100 prebuilt
// clusters (~20 KB per response).
func BenchmarkPush(b *testing.B) {
	for _, delta := range []bool{false, true} {
		name := "sotw"
		if delta {
			name = "delta"
		}
		b.Run(name, func(b *testing.B) {
			e := benchEnv(b, newBenchGen(100, 200))
			clients := openBenchClients(b, e, benchConns, delta)
			pushes := 0
			for b.Loop() {
				v := e.publish(true, nil, func(snapshot) {})
				for _, c := range clients {
					for <-c.versions < v {
					}
				}
				pushes++
			}
			b.ReportMetric(float64(benchConns), "conns")
			b.ReportMetric(float64(e.srv.Counters().ByType[ClusterType].BytesSent)/float64(pushes+1)/benchConns, "B/response")
		})
	}
}

// BenchmarkIdleConnectionMemory measures the heap held per connected, idle proxy (subscribed to 100
// clusters, ACKed). Clients run in the same process, so the figure includes their side too.
func BenchmarkIdleConnectionMemory(b *testing.B) {
	for _, delta := range []bool{false, true} {
		name := "sotw"
		if delta {
			name = "delta"
		}
		b.Run(name, func(b *testing.B) {
			e := benchEnv(b, newBenchGen(100, 200))
			var perConn float64
			for b.Loop() {
				before := heapInUse()
				clients := openBenchClients(b, e, benchConns, delta)
				time.Sleep(200 * time.Millisecond) // let ACKs land
				after := heapInUse()
				perConn = float64(after-before) / benchConns
				runtime.KeepAlive(clients)
				b.StopTimer()
				for _, c := range e.srv.connections() {
					c.kill("benchmark round over")
				}
				eventually(b, "disconnect", func() bool { return len(e.srv.Connections()) == 0 })
				b.StartTimer()
			}
			b.ReportMetric(perConn, "heap-B/conn")
		})
	}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}
