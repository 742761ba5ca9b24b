package xds

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"

	"github.com/sextantmesh/sextant/pilot/model"
)

func responseVersion(r *discovery.DiscoveryResponse) uint64 {
	v, _, _ := strings.Cut(r.VersionInfo, ".")
	n, _ := strconv.ParseUint(v, 10, 64)
	return n
}

// stuckPushes records the CDS pushes the Observer hears finish for one proxy.
type stuckPushes struct {
	prefix string // the proxy's connection IDs start with it
	mu     sync.Mutex
	done   []uint64
}

func (o *stuckPushes) Sent(string, *model.Proxy, string, string, uint64, *model.PushRequest) {}
func (o *stuckPushes) Pushed(connID, typeURL string, version uint64, _ *model.PushRequest, _ string, _ time.Duration) {
	if strings.HasPrefix(connID, o.prefix) && typeURL == ClusterType {
		o.mu.Lock()
		o.done = append(o.done, version)
		o.mu.Unlock()
	}
}
func (o *stuckPushes) Acked(string, string, string, bool, string) {}
func (o *stuckPushes) Closed(string)                              {}

func (o *stuckPushes) finished() []uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.done)
}

// One proxy stops reading while 100 others keep up: each of five pushes reaches the 100 while the stuck
// proxy's send of the first is still blocked, so nobody waits for it. (That it is then closed at the send
// timeout is TestStuckProxyLeavesAtTheSendTimeout.)
func TestSlowConsumerDoesNotDelayOthers(t *testing.T) {
	const readers = 100
	obs := &stuckPushes{prefix: "stuck.ns1-"}
	generated := make(chan struct{}, 10) // a CDS response for the stuck proxy was generated
	e := newEnv(t, twoClusters(), func(e *testEnv, o *Options) {
		// Never within the test: the stuck send stays blocked until the server shuts down, so the readers'
		// pushes are known to pass it whatever the machine's load (a short timeout, racing them, was not).
		o.SendTimeout = time.Hour
		o.Observer = obs
		// Large responses for the stuck proxy only, after its first (reading a large one would grant the
		// window for another as large).
		stuckResponses := 0
		e.pad = func(p *model.Proxy) int {
			if p.Name != "stuck" {
				return 0
			}
			stuckResponses++ // one at a time: the stuck proxy's turn is held while generating
			generated <- struct{}{}
			if stuckResponses == 1 {
				return 0
			}
			return 1 << 20
		}
	})

	// A small, fixed window (no BDP growth) and a client that reads its first response, ACKs it and then
	// nothing: gRPC takes one more response into its buffers whatever its size, and the send after that
	// blocks, 1 MB not passing the window.
	small := e.dial(t, grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	stuck := newClient(t, small.StreamAggregatedResources, false)
	ask(stuck, sidecar("stuck", "ns1"), ClusterType, nil, nil)
	first, err := stuck.stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	ask(stuck, nil, ClusterType, nil, first)
	<-generated
	buffered := e.set(ClusterType, "a", "buffered")
	<-generated
	eventually(t, "the stuck proxy's buffered push", func() bool { return slices.Contains(obs.finished(), buffered) })

	clients := make([]*sotwClient, readers)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			c := e.sotw(t)
			ask(c, sidecar("r"+strconv.Itoa(i), "ns1"), ClusterType, nil, nil)
			r := c.recv()
			ask(c, nil, ClusterType, nil, r)
			clients[i] = c
		})
	}
	wg.Wait()
	eventually(t, "all connected", func() bool { return len(e.srv.Connections()) == readers+1 })

	var blocked uint64 // the push whose send to the stuck proxy blocks
	for i := range 5 {
		start := time.Now()
		v := e.set(ClusterType, "a", "push"+strconv.Itoa(i))
		if i == 0 {
			blocked = v
			select {
			case <-generated: // its send begins now, and cannot end
			case <-time.After(waitFor):
				t.Fatal("the push never reached the stuck proxy")
			}
		}
		for j, c := range clients {
			for {
				select {
				case r := <-c.resps:
					if responseVersion(r) < v {
						continue
					}
				case err := <-c.errc:
					t.Fatalf("push %d: reader %d: stream ended: %v", i, j, err)
				case <-time.After(waitFor):
					t.Fatalf("push %d: reader %d had nothing", i, j)
				}
				break
			}
		}
		t.Logf("push %d reached all %d readers in %v", i, readers, time.Since(start).Round(time.Millisecond))
	}

	// All of that happened while the stuck proxy's push was still being sent.
	for _, v := range obs.finished() {
		if v >= blocked {
			t.Fatalf("the stuck proxy's push of version %d finished (pushes finished: %v): the readers' pushes may have waited for it",
				v, obs.finished())
		}
	}
	if n := e.srv.Counters().SendTimeouts; n != 0 {
		t.Fatalf("send timeouts %d, want none yet", n)
	}
	if n := len(e.srv.Connections()); n != readers+1 {
		t.Fatalf("%d connections, want the %d readers and the stuck proxy", n, readers)
	}
}

// One namespace churns without pause; a proxy in another namespace still gets its push promptly, because
// the queue serves namespaces round-robin rather than in arrival order.
func TestNamespaceStormDoesNotStarveOthers(t *testing.T) {
	const (
		storm = 50
		work  = 10 * time.Millisecond // per storm push, with one worker: one round of the storm takes 500ms
		// Storm pushes served while the quiet proxy's push waits: round-robin allows the one in progress and
		// perhaps one more; arrival order puts it behind the whole storm. Counted, not timed, so a slow
		// machine does not change the verdict.
		bound = storm / 5
	)
	e := newEnv(t, twoClusters(), func(e *testEnv, o *Options) {
		o.PushConcurrency = 1
		e.delay = func(p *model.Proxy) time.Duration {
			if p.Namespace == "storm" {
				return work
			}
			return 0
		}
	})
	ads := e.dial(t)
	stormClients := make([]*sotwClient, storm)
	for i := range stormClients {
		c := newClient(t, ads.StreamAggregatedResources, true)
		ask(c, sidecar("s"+strconv.Itoa(i), "storm"), EndpointType, []string{"a"}, nil)
		stormClients[i] = c
	}
	for _, c := range stormClients {
		c.recv()
	}
	quiet := e.sotw(t)
	ask(quiet, sidecar("q", "quiet"), EndpointType, []string{"a"}, nil)
	quiet.recv()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
				e.publish(false, []string{"storm/svc"}, func(snapshot) {})
			}
		}
	})
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(300 * time.Millisecond) // let the backlog build

	pushes := func() uint64 { return e.srv.Counters().ByType[EndpointType].Pushes }
	for i := range 3 {
		start := time.Now()
		before := pushes()
		v := e.publish(false, []string{"quiet/svc"}, func(s snapshot) { s[EndpointType]["a"] = "quiet" + strconv.Itoa(i) })
		for {
			r := quiet.recv()
			if responseVersion(r) >= v {
				break
			}
		}
		stormServed := pushes() - before - 1
		t.Logf("quiet proxy got push %d in %v after %d storm pushes, with %d connections queued", i, time.Since(start).Round(time.Millisecond),
			stormServed, e.srv.Counters().QueueLen)
		if stormServed > bound {
			t.Fatalf("quiet proxy's push waited for %d storm pushes, want at most %d", stormServed, bound)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The storm keeps being served at the rate one worker allows (~45 pushes in this time).
	if n := e.srv.Counters().ByType[EndpointType].Pushes; n < 20 {
		t.Fatalf("storm namespace starved: %d pushes", n)
	}
}
