package xds

import (
	"errors"
	"sync"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// recordingHook records what the server tells it, and refuses while refuse is set.
type recordingHook struct {
	mu                      sync.Mutex
	refuse                  error
	connected, disconnected []ConnectionEvent
}

func (h *recordingHook) Connected(ev ConnectionEvent) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.refuse != nil {
		return h.refuse
	}
	h.connected = append(h.connected, ev)
	return nil
}

func (h *recordingHook) Disconnected(ev ConnectionEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.disconnected = append(h.disconnected, ev)
}

func (h *recordingHook) events() (connected, disconnected []ConnectionEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]ConnectionEvent(nil), h.connected...), append([]ConnectionEvent(nil), h.disconnected...)
}

// The hook hears of a stream's proxy before it is served, with the connection's id, and of its end once the
// connection is out of the table.
func TestConnectionHookHearsConnectAndDisconnect(t *testing.T) {
	h := &recordingHook{}
	e := newEnv(t, authSnapshot, func(_ *testEnv, o *Options) { o.ConnectionHook = h })
	c := e.sotw(t)
	ask(c, sidecar("cart-1", "shop"), ClusterType, nil, nil)
	c.recv()
	connected, disconnected := h.events()
	conns := e.srv.connections()
	if len(connected) != 1 || len(disconnected) != 0 || len(conns) != 1 || connected[0].ID != conns[0].id ||
		connected[0].Proxy.Namespace != "shop" || connected[0].ConnectedAt.IsZero() {
		t.Fatalf("connected %v, disconnected %v, connections %d", connected, disconnected, len(conns))
	}
	c.cancel()
	eventually(t, "disconnection heard", func() bool { _, d := h.events(); return len(d) == 1 })
	if _, d := h.events(); d[0].ID != connected[0].ID || len(e.srv.connections()) != 0 {
		t.Errorf("disconnected %v with %d connections left", d, len(e.srv.connections()))
	}
}

// A refusal ends the stream with the hook's status (PermissionDenied for a plain error), before anything
// is served, and no disconnection follows.
func TestConnectionHookRefuses(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code codes.Code
	}{
		{status.Error(codes.FailedPrecondition, "cannot find WorkloadGroup shop/vms"), codes.FailedPrecondition},
		{errors.New("cannot find WorkloadGroup shop/vms"), codes.PermissionDenied},
	} {
		h := &recordingHook{refuse: tc.err}
		e := newEnv(t, authSnapshot, func(_ *testEnv, o *Options) { o.ConnectionHook = h })
		c := e.sotw(t)
		c.send(&discovery.DiscoveryRequest{Node: sidecar("cart-1", "shop"), TypeUrl: ClusterType})
		wantRefused(t, c.end(), tc.code, "cannot find WorkloadGroup shop/vms")
		if _, d := h.events(); len(d) != 0 || len(e.srv.connections()) != 0 {
			t.Errorf("refused stream: %d disconnections, %d connections", len(d), len(e.srv.connections()))
		}
	}
}
