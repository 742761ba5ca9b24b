package xds

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
)

func responseVersion(r *discovery.DiscoveryResponse) uint64 {
	v, _, _ := strings.Cut(r.VersionInfo, ".")
	n, _ := strconv.ParseUint(v, 10, 64)
	return n
}

// One proxy stops reading while 100 others keep up: the 100 get every push within one push interval, and
// the stuck one is disconnected after the send timeout without delaying anyone.
func TestSlowConsumerDoesNotDelayOthers(t *testing.T) {
	const (
		readers = 100
		// One push interval. Generous so -race and a busy CI machine do not turn scheduling delays into
		// failures; the point is that the stuck proxy (dropped only after sendTimeout) delays nobody.
		interval    = time.Second
		sendTimeout = 500 * time.Millisecond
	)
	e := newEnv(t, twoClusters(), func(e *testEnv, o *Options) {
		o.SendTimeout = sendTimeout
		// Large responses for the stuck proxy only, so flow control blocks it quickly and the test stays fast.
		e.pad = func(p *Proxy) int {
			if p.Name == "stuck" {
				return 1 << 20
			}
			return 0
		}
	})

	// A small, fixed window (no BDP growth): 2 MB cannot pass while the client does not read.
	stuck := newClient(t, e.dial(t, grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10)).StreamAggregatedResources, false)
	ask(stuck, sidecar("stuck", "ns1"), ClusterType, nil, nil)
	if _, err := stuck.stream.Recv(); err != nil { // the first response is read; nothing after it
		t.Fatal(err)
	}

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

	firstPush := time.Now()
	stuckGone := make(chan time.Duration, 1)
	go func() {
		for time.Since(firstPush) < 10*time.Second {
			if len(e.srv.Connections()) == readers {
				stuckGone <- time.Since(firstPush)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	for i := range 5 {
		start := time.Now()
		v := e.set(ClusterType, "a", "push"+strconv.Itoa(i))
		deadline := start.Add(interval)
		for j, c := range clients {
			for {
				select {
				case r := <-c.resps:
					if responseVersion(r) < v {
						continue
					}
				case <-time.After(time.Until(deadline)):
					t.Fatalf("push %d: reader %d had nothing after %v", i, j, interval)
				}
				break
			}
		}
		t.Logf("push %d reached all %d readers in %v", i, readers, time.Since(start).Round(time.Millisecond))
		time.Sleep(time.Until(deadline))
	}

	select {
	case gone := <-stuckGone:
		t.Logf("stuck proxy disconnected %v after the first push", gone.Round(time.Millisecond))
		if gone < sendTimeout || gone > sendTimeout+2*time.Second {
			t.Fatalf("stuck proxy dropped after %v, want just after the %v send timeout", gone, sendTimeout)
		}
	case <-time.After(waitFor):
		t.Fatal("stuck proxy not disconnected")
	}
	if n := e.srv.Counters().SendTimeouts; n != 1 {
		t.Fatalf("send timeouts %d, want 1", n)
	}
	for _, c := range e.srv.Connections() {
		if c.ProxyID == "stuck.ns1" {
			t.Fatal("stuck proxy still connected")
		}
	}
}

// One namespace churns without pause; a proxy in another namespace still gets its push promptly, because
// the queue serves namespaces round-robin rather than in arrival order.
func TestNamespaceStormDoesNotStarveOthers(t *testing.T) {
	const (
		storm = 50
		work  = 10 * time.Millisecond // per storm push, with one worker: one round of the storm takes 500ms
		bound = 200 * time.Millisecond
	)
	e := newEnv(t, twoClusters(), func(e *testEnv, o *Options) {
		o.PushConcurrency = 1
		e.delay = func(p *Proxy) time.Duration {
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

	for i := range 3 {
		start := time.Now()
		v := e.publish(false, []string{"quiet/svc"}, func(s snapshot) { s[EndpointType]["a"] = "quiet" + strconv.Itoa(i) })
		for {
			r := quiet.recv()
			if responseVersion(r) >= v {
				break
			}
		}
		took := time.Since(start)
		t.Logf("quiet proxy got push %d in %v with %d connections queued", i, took.Round(time.Millisecond), e.srv.Counters().QueueLen)
		if took > bound {
			t.Fatalf("quiet proxy waited %v for its push during the storm, want < %v", took, bound)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The storm keeps being served at the rate one worker allows (~45 pushes in this time).
	if n := e.srv.Counters().ByType[EndpointType].Pushes; n < 20 {
		t.Fatalf("storm namespace starved: %d pushes", n)
	}
}
