package xds

import (
	"bytes"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sextantmesh/sextant/pilot/model"
)

// stuckClient subscribes to CDS and EDS with a small fixed window and never reads: gRPC takes the first
// response whole, and the next blocks in flow control.
func stuckClient(t *testing.T, e *testEnv, name string) *sotwClient {
	c := newClient(t, e.dial(t, grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10)).StreamAggregatedResources, false)
	ask(c, sidecar(name, "ns1"), ClusterType, nil, nil)
	ask(c, nil, EndpointType, []string{"a", "b"}, nil)
	return c
}

// A proxy that never reads is closed after the send timeout and leaves the connection table then, even when
// the send that blocks answers one of its own requests.
func TestStuckProxyLeavesAtTheSendTimeout(t *testing.T) {
	const sendTimeout = 300 * time.Millisecond
	e := newEnv(t, twoClusters(), func(e *testEnv, o *Options) {
		o.SendTimeout = sendTimeout
		e.pad = func(*model.Proxy) int { return 1 << 20 }
	})
	start := time.Now()
	stuckClient(t, e, "stuck")
	eventually(t, "connected", func() bool { return len(e.srv.Connections()) == 1 })
	eventually(t, "stuck proxy gone", func() bool { return len(e.srv.Connections()) == 0 })
	// Closed by the send timeout, not before it: how soon after it is the machine's load, not the server.
	if d := time.Since(start); d < sendTimeout {
		t.Fatalf("stuck proxy left %v after connecting, before the %v send timeout", d, sendTimeout)
	}
	if n := e.srv.Counters().SendTimeouts; n != 1 {
		t.Fatalf("send timeouts %d, want 1", n)
	}
}

// Proxies that stop reading hold only a share of the in-flight budget each: a healthy proxy's fetch does
// not wait for them to time out.
func TestStuckProxiesHoldOnlyTheirShare(t *testing.T) {
	e := newEnv(t, twoClusters(), func(e *testEnv, o *Options) {
		o.SendTimeout = 30 * time.Second // the stuck ones stay for the whole test
		o.MaxBytesInFlight, o.MaxBytesInFlightPerProxy = 4<<20, 512<<10
		e.pad = func(*model.Proxy) int { return 1 << 20 } // every CDS response is 2 MB
	})
	for i := range 4 {
		stuckClient(t, e, "stuck"+strconv.Itoa(i))
	}
	eventually(t, "the stuck proxies connected", func() bool {
		return len(e.srv.Connections()) == 4 && e.srv.inflight.used.Load() >= 4*512<<10
	})
	start := time.Now()
	c := e.sotw(t)
	ask(c, sidecar("healthy", "ns1"), ClusterType, nil, nil)
	if got := payloads(t, ClusterType, c.recv().Resources); len(got) != 2 {
		t.Fatalf("healthy proxy got %d clusters", len(got))
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("healthy fetch took %v next to four stuck proxies", d)
	}
	if n := len(e.srv.Connections()); n != 5 {
		t.Fatalf("%d connections, want the 4 stuck ones still there and the healthy one", n)
	}
}

// A subscription to 100,000 names (6 MB, past gRPC's default 4 MiB) is accepted on an authenticated stream;
// one past the configured limit ends the stream with an error that names the limit.
func TestRequestSizeLimit(t *testing.T) {
	names := manyNames(100_000)
	e := newEnv(t, twoClusters(), withAuth(""))
	c := e.sotwAs(t, "cart")
	ask(c, sidecar("pod", "shop"), EndpointType, names, nil)
	// 100k names take seconds to send and answer under -race on a busy machine.
	if r := c.recvWithin(30 * time.Second); r.TypeUrl != EndpointType {
		t.Fatalf("response %v", r)
	}

	var logs syncBuffer
	small := newEnv(t, twoClusters(), withAuth(""), func(_ *testEnv, o *Options) {
		o.MaxRequestBytes, o.Logger = 1<<20, slog.New(slog.NewTextHandler(&logs, nil))
	})
	c = small.sotwAs(t, "cart")
	ask(c, sidecar("pod", "shop"), EndpointType, names, nil)
	// gRPC itself answers with the sizes; the server's log names the flag.
	if err := c.end(); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "larger than max") {
		t.Fatalf("oversized request ended the stream with %v, want ResourceExhausted", err)
	}
	eventually(t, "the refusal logged", func() bool { return strings.Contains(logs.String(), "--max-request-bytes") })
}

// Where clients are not authenticated, a request is read only up to istiod's 4 MiB: the same subscription
// is refused, with the limit in the log, and gRPC refuses it from its length before reading it.
func TestUnauthenticatedRequestSizeLimit(t *testing.T) {
	var logs syncBuffer
	e := newEnv(t, twoClusters(), func(_ *testEnv, o *Options) { o.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	c := e.sotw(t)
	ask(c, sidecar("pod", "ns1"), EndpointType, manyNames(100_000), nil)
	if err := c.end(); status.Code(err) != codes.ResourceExhausted ||
		!strings.Contains(err.Error(), strconv.Itoa(DefaultMaxUnauthenticatedRequestBytes)) {
		t.Fatalf("oversized request ended the stream with %v, want ResourceExhausted naming %d", err, DefaultMaxUnauthenticatedRequestBytes)
	}
	eventually(t, "the refusal logged", func() bool {
		return strings.Contains(logs.String(), "4194304 bytes where clients are not authenticated")
	})
	// Just under the limit is served.
	c = e.sotw(t)
	ask(c, sidecar("pod", "ns1"), EndpointType, manyNames(50_000), nil)
	if r := c.recvWithin(30 * time.Second); r.TypeUrl != EndpointType {
		t.Fatalf("response %v", r)
	}
}

func manyNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = "outbound|8080||service-" + strconv.Itoa(i) + ".namespace.svc.cluster.local"
	}
	return names
}

// Past its age a connection is told to go away and, after the grace, closed: the stream ends, so the proxy
// reconnects (on a new connection, to any replica).
func TestConnectionAgeEndsStreams(t *testing.T) {
	const age, grace = 300 * time.Millisecond, 200 * time.Millisecond
	e := newEnv(t, twoClusters(), func(_ *testEnv, o *Options) { o.MaxConnectionAge, o.MaxConnectionAgeGrace = age, grace })
	start := time.Now()
	c := e.delta(t)
	deltaAsk(c, sidecar("pod", "ns1"), ClusterType, nil, nil, nil)
	deltaAsk(c, nil, ClusterType, nil, nil, c.recv())
	err := c.end()
	t.Logf("stream ended %v after it started: %v", time.Since(start), err)
	if d := time.Since(start); d > age*11/10+grace+2*time.Second {
		t.Fatalf("stream ended %v after it started (%v), want within age %v ±10%% + grace %v", d, err, age, grace)
	}
}

// The default grace is finite: without one gRPC waits for streams for ever, and ADS streams never end.
func TestConnectionAgeHasAGraceByDefault(t *testing.T) {
	e := newEnv(t, nil, func(_ *testEnv, o *Options) { o.MaxConnectionAge = time.Minute })
	if e.srv.opts.MaxConnectionAgeGrace != DefaultMaxConnectionAgeGrace {
		t.Fatalf("grace %v, want %v", e.srv.opts.MaxConnectionAgeGrace, DefaultMaxConnectionAgeGrace)
	}
}

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A client picks its node id: one of a megabyte is cut in the log, not written on every connect.
func TestLongNodeIDIsCutInLogs(t *testing.T) {
	var logs syncBuffer
	e := newEnv(t, twoClusters(), func(_ *testEnv, o *Options) { o.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	long := strings.Repeat("p", 1<<20)
	c := e.sotw(t)
	ask(c, node("sidecar~10.0.0.1~"+long+".ns1~ns1.svc.cluster.local", nil), ClusterType, nil, nil)
	c.recv()
	c.cancel()
	c = e.sotw(t) // refused: the error names the id, cut too
	ask(c, node("sidecar~"+long, nil), ClusterType, nil, nil)
	if err := c.end(); status.Code(err) != codes.InvalidArgument || len(err.Error()) > 1024 {
		t.Fatalf("bad node id: %d bytes of error, code %v", len(err.Error()), status.Code(err))
	}
	eventually(t, "disconnect logged", func() bool { return strings.Count(logs.String(), "proxy disconnected") == 1 })
	if n := len(logs.String()); n > 16<<10 {
		t.Fatalf("%d bytes of log for two connections with a 1 MB node id", n)
	}
	if !strings.Contains(logs.String(), "bytes)") {
		t.Fatalf("the cut id does not say how long it was:\n%s", logs.String())
	}
}

// Envoy holds its CDS ACK until the clusters it warms have their load assignments: a response larger than
// the share must not make the next one, of another type, wait for that ACK.
func TestNextResponseDoesNotWaitForAHeldAck(t *testing.T) {
	e := newEnv(t, twoClusters(), func(e *testEnv, o *Options) {
		o.MaxBytesInFlight, o.MaxBytesInFlightPerProxy = 1<<20, 1<<10
		e.pad = func(*model.Proxy) int { return 8 << 10 }
	})
	c := e.delta(t)
	deltaAsk(c, sidecar("pod", "ns1"), ClusterType, nil, nil, nil)
	c.recv() // not ACKed
	start := time.Now()
	deltaAsk(c, nil, EndpointType, []string{"a", "b"}, nil, nil)
	if r := c.recv(); r.TypeUrl != EndpointType || time.Since(start) > time.Second {
		t.Fatalf("load assignments %v after %v", r.TypeUrl, time.Since(start))
	}
}

// A NACK's message is the client's too: kept and logged cut to 4 KiB.
func TestLongNACKMessageIsCut(t *testing.T) {
	e := newEnv(t, twoClusters())
	c := e.sotw(t)
	ask(c, sidecar("pod", "ns1"), ClusterType, nil, nil)
	r := c.recv()
	nack(c, ClusterType, nil, nil, r, strings.Repeat("e", 1<<20))
	eventually(t, "NACK recorded", func() bool { return watched(t, e.srv, ClusterType).NACKs == 1 })
	if n := len(watched(t, e.srv, ClusterType).LastError); n > maxNACKText+32 {
		t.Fatalf("kept %d bytes of the NACK's message", n)
	}
}
