package xds

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sextantmesh/sextant/pilot/model"
)

// A bad node is refused with InvalidArgument and the parser's message, on both protocols.
func TestMalformedNodeRefused(t *testing.T) {
	e := newEnv(t, twoClusters())
	for name, n := range map[string]*core.Node{
		"no node":       nil,
		"parts":         node("sidecar~10.0.0.1~pod.ns", nil),
		"metadata type": node("sidecar~10.0.0.1~pod.ns~ns.svc.cluster.local", map[string]any{"NAMESPACE": 3.0}),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := model.ParseProxy(n)
			if err == nil {
				t.Fatal("the node parses")
			}
			s := e.sotw(t)
			s.send(&discovery.DiscoveryRequest{Node: n, TypeUrl: ClusterType})
			checkStatus(t, s.end(), codes.InvalidArgument, err.Error())
			d := e.delta(t)
			d.send(&discovery.DeltaDiscoveryRequest{Node: n, TypeUrl: ClusterType})
			checkStatus(t, d.end(), codes.InvalidArgument, err.Error())
		})
	}
	if n := len(e.srv.Connections()); n != 0 {
		t.Fatalf("%d connections", n)
	}
}

func checkStatus(t testing.TB, err error, code codes.Code, msg string) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != code || !strings.Contains(st.Message(), msg) {
		t.Fatalf("got %v, want %v containing %q", err, code, msg)
	}
}

func TestUnavailableBeforeReady(t *testing.T) {
	e := newEnv(t, nil)
	s := e.sotw(t)
	s.send(&discovery.DiscoveryRequest{Node: sidecar("pod", "ns1"), TypeUrl: ClusterType})
	checkStatus(t, s.end(), codes.Unavailable, "not ready")
	d := e.delta(t)
	d.send(&discovery.DeltaDiscoveryRequest{Node: sidecar("pod", "ns1"), TypeUrl: ClusterType})
	checkStatus(t, d.end(), codes.Unavailable, "not ready")

	e.set(ClusterType, "a", "1")
	s = e.sotw(t)
	ask(s, sidecar("pod", "ns1"), ClusterType, nil, nil)
	s.recv()
}

func TestShutdownClosesStreams(t *testing.T) {
	e := newEnv(t, twoClusters())
	var clients []*sotwClient
	for range 3 {
		c := e.sotw(t)
		ask(c, sidecar("pod", "ns1"), ClusterType, nil, nil)
		c.recv()
		clients = append(clients, c)
	}
	d := e.delta(t)
	deltaAsk(d, sidecar("pod", "ns1"), ClusterType, nil, nil, nil)
	d.recv()
	idle := e.sotw(t) // opened, first request not sent yet
	eventually(t, "streams", func() bool { return e.srv.Counters().Connects == 4 })

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	must(t, e.srv.Shutdown(ctx))
	for _, c := range clients {
		checkStatus(t, c.end(), codes.Unavailable, "shutting down")
	}
	checkStatus(t, d.end(), codes.Unavailable, "shutting down")
	checkStatus(t, idle.end(), codes.Unavailable, "")
	late := e.sotw(t)
	ask(late, sidecar("pod", "ns1"), ClusterType, nil, nil)
	checkStatus(t, late.end(), codes.Unavailable, "shutting down")
	if n := len(e.srv.Connections()); n != 0 {
		t.Fatalf("%d connections after shutdown", n)
	}
}

// New streams are paced: a reconnect storm is spread out.
func TestNewStreamRateLimit(t *testing.T) {
	e := newEnv(t, twoClusters(), func(_ *testEnv, o *Options) { o.NewStreamsPerSecond, o.NewStreamsBurst = 10, 1 })
	start := time.Now()
	for range 4 {
		c := e.sotw(t)
		ask(c, sidecar("pod", "ns1"), ClusterType, nil, nil)
		c.recv()
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Fatalf("4 streams at 10/s with burst 1 took %v, want ≥ 300ms", d)
	}
}

// recordingObserver keeps, per connection, whether it was closed and whether anything came after.
type recordingObserver struct {
	mu     sync.Mutex
	closed map[string]bool
	after  []string
}

func (o *recordingObserver) saw(connID, what string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed[connID] {
		o.after = append(o.after, what)
	}
}

func (o *recordingObserver) Sent(connID string, _ *model.Proxy, _, _ string, _ uint64, _ *model.PushRequest) {
	o.saw(connID, "sent")
}
func (o *recordingObserver) Pushed(connID, _ string, _ uint64, _ *model.PushRequest, _ string, _ time.Duration) {
	o.saw(connID, "pushed")
}
func (o *recordingObserver) Acked(connID, _, _ string, _ bool, _ string) { o.saw(connID, "acked") }
func (o *recordingObserver) Closed(connID string) {
	o.saw(connID, "closed")
	o.mu.Lock()
	o.closed[connID] = true
	o.mu.Unlock()
}

// Pushes keep coming while proxies disconnect: for each connection the Observer hears Closed once, last.
func TestObserverHearsClosedLast(t *testing.T) {
	obs := &recordingObserver{closed: map[string]bool{}}
	e := newEnv(t, twoClusters(), func(_ *testEnv, o *Options) { o.Observer = obs })
	stop := make(chan struct{})
	var pushes sync.WaitGroup
	pushes.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			e.set(ClusterType, "a", "a"+strconv.Itoa(i))
			time.Sleep(time.Millisecond)
		}
	})
	for i := range 20 {
		c := e.delta(t)
		deltaAsk(c, sidecar("p"+strconv.Itoa(i), "ns1"), ClusterType, nil, nil, nil)
		deltaAsk(c, nil, ClusterType, nil, nil, c.recv())
		time.Sleep(5 * time.Millisecond)
		c.cancel() // the proxy goes away mid-churn
	}
	close(stop)
	pushes.Wait()
	eventually(t, "every connection closed", func() bool {
		obs.mu.Lock()
		defer obs.mu.Unlock()
		return len(obs.closed) == 20
	})
	time.Sleep(100 * time.Millisecond)
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.after) > 0 {
		t.Fatalf("after Closed the Observer heard %v", obs.after)
	}
}

// A node whose INTERCEPTION_MODE is read otherwise than sent is still served, and the server says so,
// naming the proxy and the field.
func TestMetadataNotesLogged(t *testing.T) {
	var logs syncBuffer
	e := newEnv(t, twoClusters(), func(_ *testEnv, o *Options) { o.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	c := e.sotw(t)
	ask(c, node("sidecar~10.0.0.1~odd.ns~ns.svc.cluster.local", map[string]any{"INTERCEPTION_MODE": "tproxy"}), ClusterType, nil, nil)
	if r := c.recv(); len(r.Resources) != 2 {
		t.Fatalf("%d clusters", len(r.Resources))
	}
	got := logs.String()
	if !strings.Contains(got, "odd.ns") || !strings.Contains(got, `INTERCEPTION_MODE \"tproxy\"`) {
		t.Fatalf("no warning naming the proxy and INTERCEPTION_MODE in:\n%s", got)
	}
}
