package xds

import (
	"context"
	"log/slog"
	"maps"
	"slices"
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

func TestParseProxy(t *testing.T) {
	p, err := ParseProxy(node("sidecar~10.0.0.1~reviews-v1-abc.bookinfo~bookinfo.svc.cluster.local", map[string]any{
		"LABELS": map[string]any{"app": "reviews", "version": "v1"}, "CLUSTER_ID": "Kubernetes", "ISTIO_VERSION": "1.28.0",
		"SERVICE_ACCOUNT": "bookinfo-reviews", "INSTANCE_IPS": "10.0.0.1,fd00::1", "NODE_NAME": "node-1",
		"NAME": "reviews-v1-abc",
	}))
	must(t, err)
	if p.Type != Sidecar || p.ID != "reviews-v1-abc.bookinfo" || p.Namespace != "bookinfo" || p.Name != "reviews-v1-abc" ||
		p.DNSDomain != "bookinfo.svc.cluster.local" || !slices.Equal(p.IPAddresses, []string{"10.0.0.1", "fd00::1"}) ||
		!maps.Equal(p.Labels, map[string]string{"app": "reviews", "version": "v1"}) || p.ClusterID != "Kubernetes" ||
		p.IstioVersion != "1.28.0" || p.ServiceAccount != "bookinfo-reviews" || p.NodeName != "node-1" {
		t.Fatalf("sidecar: %+v", p)
	}

	// Namespace and pod name from the id alone; pod names may contain dots.
	p, err = ParseProxy(node("router~10.0.0.7~gw.v2.istio-system~istio-system.svc.cluster.local", nil))
	must(t, err)
	if p.Type != Router || p.Namespace != "istio-system" || p.Name != "gw.v2" {
		t.Fatalf("router: %+v", p)
	}
	p, err = ParseProxy(node("ztunnel~10.0.0.2~ztunnel-x.kube-system~", nil))
	must(t, err)
	if p.Type != Ztunnel || p.Namespace != "kube-system" {
		t.Fatalf("ztunnel: %+v", p)
	}

	// Proxyless gRPC: any id, namespace from metadata.
	p, err = ParseProxy(&core.Node{Id: "my-client", UserAgentName: "gRPC Go", UserAgentVersionType: &core.Node_UserAgentVersion{UserAgentVersion: "1.85.0"},
		Metadata: node("", map[string]any{"NAMESPACE": "app"}).Metadata})
	must(t, err)
	if p.Type != GRPC || p.ID != "my-client" || p.Namespace != "app" || p.UserAgent != "gRPC Go 1.85.0" {
		t.Fatalf("grpc: %+v", p)
	}
	p, err = ParseProxy(node("sidecar~10.0.0.3~c.app~app.svc.cluster.local", map[string]any{"GENERATOR": "grpc"}))
	must(t, err)
	if p.Type != GRPC || p.Namespace != "app" || p.Generator != "grpc" {
		t.Fatalf("grpc with Istio id: %+v", p)
	}
}

// INTERCEPTION_MODE and UNPRIVILEGED_POD are read as istiod reads them: a mode it does not know is
// REDIRECT (with a note the transport logs), UNPRIVILEGED_POD is strconv.ParseBool.
func TestParseProxyInterception(t *testing.T) {
	for _, tc := range []struct {
		md           map[string]any
		mode         InterceptionMode
		unprivileged bool
		noted        bool
	}{
		{nil, InterceptRedirect, false, false},
		{map[string]any{"INTERCEPTION_MODE": "NONE", "UNPRIVILEGED_POD": "true"}, InterceptNone, true, false},
		{map[string]any{"INTERCEPTION_MODE": "TPROXY", "UNPRIVILEGED_POD": "1"}, InterceptTPROXY, true, false},
		{map[string]any{"INTERCEPTION_MODE": "REDIRECT", "UNPRIVILEGED_POD": "yes"}, InterceptRedirect, false, false},
		{map[string]any{"INTERCEPTION_MODE": "tproxy"}, InterceptRedirect, false, true},
	} {
		p, err := ParseProxy(node("sidecar~10.0.0.1~pod.ns~ns.svc.cluster.local", tc.md))
		must(t, err)
		if p.InterceptionMode != tc.mode || p.Unprivileged != tc.unprivileged || (len(p.MetadataNotes) > 0) != tc.noted ||
			p.CaptureNone() != (tc.mode == InterceptNone) {
			t.Errorf("%v: mode %q unprivileged %t notes %q", tc.md, p.InterceptionMode, p.Unprivileged, p.MetadataNotes)
		}
	}
	_, err := ParseProxy(node("sidecar~10.0.0.1~pod.ns~ns.svc.cluster.local", map[string]any{"INTERCEPTION_MODE": true}))
	if err == nil || !strings.Contains(err.Error(), "metadata INTERCEPTION_MODE: want a string") {
		t.Fatalf("a non-string mode: %v", err)
	}
}

var badNodes = []struct {
	name string
	node *core.Node
	want string
}{
	{"no node", nil, "carries no node"},
	{"empty id", node("", nil), "node id is empty"},
	{"parts", node("sidecar~10.0.0.1~pod.ns", nil), `has 3 parts separated by "~", want 4`},
	{"type", node("waypoint~10.0.0.1~pod.ns~ns.svc.cluster.local", nil), `unknown proxy type "waypoint"`},
	{"ip", node("sidecar~10.0.0.300~pod.ns~ns.svc.cluster.local", nil), `second part "10.0.0.300" is not an IP address`},
	{"namespace", node("sidecar~10.0.0.1~pod~", nil), "namespace missing"},
	{"grpc namespace", &core.Node{Id: "client", UserAgentName: "grpc-java-netty"}, "namespace missing: set node metadata NAMESPACE"},
	{"instance ips", node("sidecar~10.0.0.1~pod.ns~ns.svc.cluster.local", map[string]any{"INSTANCE_IPS": "10.0.0.1,nope"}),
		`metadata INSTANCE_IPS: "nope" is not an IP address`},
	{"labels", node("sidecar~10.0.0.1~pod.ns~ns.svc.cluster.local", map[string]any{"LABELS": "app=x"}), "metadata LABELS: want a map"},
	{"metadata type", node("sidecar~10.0.0.1~pod.ns~ns.svc.cluster.local", map[string]any{"NAMESPACE": 3.0}), "metadata NAMESPACE: want a string"},
}

func TestParseProxyErrors(t *testing.T) {
	for _, tc := range badNodes {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseProxy(tc.node)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// A bad node is refused with InvalidArgument and the parser's message, on both protocols.
func TestMalformedNodeRefused(t *testing.T) {
	e := newEnv(t, twoClusters())
	for _, tc := range badNodes {
		t.Run(tc.name, func(t *testing.T) {
			s := e.sotw(t)
			s.send(&discovery.DiscoveryRequest{Node: tc.node, TypeUrl: ClusterType})
			checkStatus(t, s.end(), codes.InvalidArgument, tc.want)
			d := e.delta(t)
			d.send(&discovery.DeltaDiscoveryRequest{Node: tc.node, TypeUrl: ClusterType})
			checkStatus(t, d.end(), codes.InvalidArgument, tc.want)
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

func (o *recordingObserver) Sent(connID string, _ *Proxy, _, _ string, _ uint64, _ *model.PushRequest) {
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
