package xds

import (
	"errors"
	"strings"
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

// reportingHook is a recordingHook that also hears one report type.
type reportingHook struct {
	recordingHook
	reports []string // "ID ok" or "ID failed: MESSAGE"
}

const healthType = "type.googleapis.com/istio.v1.HealthInformation"

func (h *reportingHook) ReportTypes() []string { return []string{healthType} }

func (h *reportingHook) Report(ev ConnectionEvent, typeURL string, failed bool, failure string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := ev.ID + " ok"
	if failed {
		r = ev.ID + " failed: " + failure
	}
	h.reports = append(h.reports, r)
}

func (h *reportingHook) heard() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.reports...)
}

// Requests of a reported type reach the hook, on either protocol, with their error_detail, and are neither
// answered nor tracked as subscriptions; the stream goes on being served.
func TestReportHookHearsReports(t *testing.T) {
	h := &reportingHook{}
	e := newEnv(t, authSnapshot, func(_ *testEnv, o *Options) { o.ConnectionHook = h })
	c := e.sotw(t)
	ask(c, sidecar("vm-1", "shop"), healthType, nil, nil)
	c.send(&discovery.DiscoveryRequest{TypeUrl: healthType, ErrorDetail: statusProto("probe failed")})
	ask(c, nil, ClusterType, nil, nil)
	if r := c.recv(); r.TypeUrl != ClusterType {
		t.Fatalf("answered %s, want only the clusters", r.TypeUrl)
	}
	id := e.srv.connections()[0].id
	if got := h.heard(); len(got) != 2 || got[0] != id+" ok" || got[1] != id+" failed: probe failed" {
		t.Errorf("reports %q", got)
	}
	for _, w := range e.srv.Connections()[0].Watched {
		if w.TypeURL == healthType {
			t.Error("the report type is tracked as a subscription")
		}
	}

	d := e.delta(t)
	d.send(&discovery.DeltaDiscoveryRequest{Node: sidecar("vm-2", "shop"), TypeUrl: healthType})
	d.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType})
	if r := d.recv(); r.TypeUrl != ClusterType {
		t.Fatalf("delta answered %s, want only the clusters", r.TypeUrl)
	}
	if got := h.heard(); len(got) != 3 || !strings.HasSuffix(got[2], " ok") {
		t.Errorf("reports after the delta stream %q", got)
	}
}
