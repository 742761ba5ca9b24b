package xds

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sextantmesh/sextant/pilot/authn"
	"github.com/sextantmesh/sextant/pilot/envoy"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/ztunnel"
)

const waitFor = 5 * time.Second // generous: -race on two cores is slow

// The types the tests serve are Envoy's and ztunnel's, with their real policies (realPolicies), so the
// transport's tests keep testing the rules those clients need.
const (
	ClusterType       = envoy.ClusterType
	EndpointType      = envoy.EndpointType
	ListenerType      = envoy.ListenerType
	RouteType         = envoy.RouteType
	VirtualHostType   = envoy.VirtualHostType
	SecretType        = envoy.SecretType
	AddressType       = ztunnel.AddressType
	AuthorizationType = ztunnel.AuthorizationType
)

// realPolicies are Envoy's and ztunnel's policies, as the discovery server registers them.
func realPolicies() map[string]model.TypePolicy {
	p := envoy.Policies()
	maps.Copy(p, ztunnel.Policies())
	return p
}

// fakePipeline implements Pipeline; tests publish snapshots by hand.
type fakePipeline struct {
	cur   atomic.Pointer[model.PushContext]
	mu    sync.Mutex
	subs  []func(*model.PushRequest)
	ready atomic.Bool
}

func (f *fakePipeline) Current() *model.PushContext { return f.cur.Load() }
func (f *fakePipeline) Ready() bool                 { return f.ready.Load() }
func (f *fakePipeline) Subscribe(h func(*model.PushRequest)) {
	f.mu.Lock()
	f.subs = append(f.subs, h)
	f.mu.Unlock()
}

func (f *fakePipeline) publish(req *model.PushRequest) {
	f.cur.Store(req.Push)
	f.ready.Store(true)
	f.mu.Lock()
	subs := f.subs
	f.mu.Unlock()
	for _, h := range subs {
		h(req)
	}
}

// snapshot is the fake mesh: type URL → resource name → payload.
type snapshot map[string]map[string]string

func (s snapshot) clone() snapshot {
	out := snapshot{}
	for t, m := range s {
		out[t] = maps.Clone(m)
	}
	return out
}

// testEnv is a server on a loopback port with a fake pipeline and test generators for CDS, EDS, LDS, RDS and
// the ztunnel Address type.
type testEnv struct {
	t    *testing.T
	pipe *fakePipeline
	srv  *Server
	addr string

	mu      sync.Mutex
	version uint64
	snaps   map[uint64]snapshot
	// pad makes a proxy's CDS resources large (flow-control tests); delay slows its generation.
	pad   func(*model.Proxy) int
	delay func(*model.Proxy) time.Duration
	// rebuild makes generators return a new *Resource every time, even for unchanged content.
	rebuild bool
	// order, when set, reorders a generator's output (sorted by name otherwise) for the given push version.
	order func(version uint64, res model.Resources)
	// auth, when set, authenticates every stream (RegisterAuthenticated).
	auth authn.Authenticator
}

type envOption func(*testEnv, *Options)

func newEnv(t testing.TB, initial snapshot, opts ...envOption) *testEnv {
	tt, _ := t.(*testing.T)
	e := &testEnv{t: tt, pipe: &fakePipeline{}, snaps: map[uint64]snapshot{}}
	o := Options{Pipeline: e.pipe, Logger: slog.New(slog.DiscardHandler), SendTimeout: 2 * time.Second, Policies: realPolicies()}
	o.Generators = map[string]model.Generator{}
	for _, typ := range []string{ClusterType, EndpointType, ListenerType, RouteType, VirtualHostType, AddressType} {
		o.Generators[typ] = &testGen{env: e, typeURL: typ}
	}
	for _, f := range opts {
		f(e, &o)
	}
	e.srv = NewServer(o)
	var gs *grpc.Server
	if e.auth != nil {
		gs = grpc.NewServer(e.srv.AuthenticatedGRPCServerOptions()...)
		e.srv.RegisterAuthenticated(gs, e.auth)
	} else {
		gs = grpc.NewServer(e.srv.GRPCServerOptions()...)
		e.srv.Register(gs)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.addr = lis.Addr().String()
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := e.srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		gs.Stop()
	})
	if initial != nil {
		e.publish(true, nil, func(s snapshot) {
			for k, v := range initial {
				s[k] = v
			}
		})
		// The initial push is for nobody: let the distributor take it before a client connects, or a
		// client that subscribed meanwhile gets the same snapshot a second time.
		eventually(t, "initial snapshot distributed", func() bool {
			e.srv.incomingMu.Lock()
			defer e.srv.incomingMu.Unlock()
			return e.srv.incoming == nil
		})
	}
	return e
}

// publish makes the next snapshot from the current one and pushes it.
func (e *testEnv) publish(full bool, services []string, edit func(snapshot)) uint64 {
	e.mu.Lock()
	next := snapshot{}
	if prev := e.snaps[e.version]; prev != nil {
		next = prev.clone()
	}
	edit(next)
	e.version++
	v := e.version
	e.snaps[v] = next
	e.mu.Unlock()
	req := &model.PushRequest{Full: full, Reason: map[string]int{"test": 1}, Start: time.Now(),
		Push: &model.PushContext{Version: v, BuiltAt: time.Now()}}
	if len(services) > 0 {
		req.ServicesUpdated = map[string]struct{}{}
		for _, s := range services {
			req.ServicesUpdated[s] = struct{}{}
		}
	}
	e.pipe.publish(req)
	return v
}

func (e *testEnv) set(typeURL, name, payload string) uint64 {
	return e.publish(true, nil, func(s snapshot) {
		if s[typeURL] == nil {
			s[typeURL] = map[string]string{}
		}
		s[typeURL][name] = payload
	})
}

func (e *testEnv) del(typeURL, name string) uint64 {
	return e.publish(true, nil, func(s snapshot) { delete(s[typeURL], name) })
}

func (e *testEnv) snap(v uint64) snapshot {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.snaps[v]
}

// testGen builds real Envoy messages from the fake snapshot. Names under "net/" exist only on demand
// (explicitly subscribed), like ztunnel's address lookups. EDS and Address pushes are filtered: a non-full
// push concerns a proxy when a service in its namespace ("NS/..." in ServicesUpdated) changed.
type testGen struct {
	env     *testEnv
	typeURL string
	calls   atomic.Int64
	built   sync.Map // [name, payload] → *Resource
}

func (g *testGen) Generate(p *model.Proxy, push *model.PushContext, w *model.WatchedResource,
	_ *model.PushRequest) (model.Resources, error) {
	g.calls.Add(1)
	if g.env.delay != nil {
		time.Sleep(g.env.delay(p))
	}
	pad := 0
	if g.env.pad != nil && g.typeURL == ClusterType {
		pad = g.env.pad(p)
	}
	var out model.Resources
	for name, payload := range g.env.snap(push.Version)[g.typeURL] {
		if explicit := w.ResourceNames.Has(name); strings.HasPrefix(name, "net/") && !explicit {
			continue
		}
		if !w.Subscribed(name) {
			continue
		}
		if pad > 0 {
			payload += strings.Repeat("x", pad)
		}
		// Unchanged resources come back as the same *Resource, as the real generators' caches hand them out,
		// so the transport's walk over the last full state is exercised by every delta test.
		key := [2]string{name, payload}
		r, ok := g.built.Load(key)
		if g.env.rebuild {
			r, ok = &model.Resource{Name: name, Any: message(g.typeURL, name, payload)}, true
		}
		if !ok {
			r, _ = g.built.LoadOrStore(key, &model.Resource{Name: name, Any: message(g.typeURL, name, payload)})
		}
		out = append(out, r.(*model.Resource))
	}
	slices.SortFunc(out, func(a, b *model.Resource) int { return strings.Compare(a.Name, b.Name) })
	if g.env.order != nil {
		g.env.order(push.Version, out)
	}
	return out, nil
}

func (g *testGen) NeedsPush(p *model.Proxy, _ *model.WatchedResource, req *model.PushRequest) bool {
	if req.Full {
		return true
	}
	if g.typeURL != EndpointType && g.typeURL != AddressType {
		return false
	}
	for s := range req.ServicesUpdated {
		if strings.HasPrefix(s, p.Namespace+"/") {
			return true
		}
	}
	return false
}

func message(typeURL, name, payload string) *anypb.Any {
	var m proto.Message
	switch typeURL {
	case ClusterType:
		m = &cluster.Cluster{Name: name, AltStatName: payload, ConnectTimeout: durationpb.New(time.Second),
			ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_EDS}}
	case EndpointType:
		m = &endpoint.ClusterLoadAssignment{ClusterName: name,
			Endpoints: []*endpoint.LocalityLbEndpoints{{Locality: &core.Locality{Region: payload}}}}
	case ListenerType:
		m = &listener.Listener{Name: name, StatPrefix: payload}
	case RouteType:
		m = &route.RouteConfiguration{Name: name, VirtualHosts: []*route.VirtualHost{{Name: payload, Domains: []string{"*"}}}}
	case VirtualHostType:
		m = &route.VirtualHost{Name: name, Domains: []string{payload}}
	default: // a stand-in for istio.workload.Address
		m = &core.Locality{Region: name, Zone: payload}
	}
	a, err := anypb.New(m)
	if err != nil {
		panic(err)
	}
	a.TypeUrl = typeURL
	return a
}

// payloads decodes resources back to name → payload.
func payloads(t testing.TB, typeURL string, anys []*anypb.Any) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, a := range anys {
		if a.TypeUrl != typeURL {
			t.Fatalf("resource type %s in a %s response", a.TypeUrl, typeURL)
		}
		switch typeURL {
		case ClusterType:
			var c cluster.Cluster
			must(t, proto.Unmarshal(a.Value, &c))
			must(t, c.ValidateAll())
			out[c.Name] = c.AltStatName
		case EndpointType:
			var c endpoint.ClusterLoadAssignment
			must(t, proto.Unmarshal(a.Value, &c))
			out[c.ClusterName] = c.Endpoints[0].Locality.Region
		case ListenerType:
			var l listener.Listener
			must(t, proto.Unmarshal(a.Value, &l))
			out[l.Name] = l.StatPrefix
		case RouteType:
			var r route.RouteConfiguration
			must(t, proto.Unmarshal(a.Value, &r))
			out[r.Name] = r.VirtualHosts[0].Name
		case VirtualHostType:
			var v route.VirtualHost
			must(t, proto.Unmarshal(a.Value, &v))
			must(t, v.ValidateAll())
			out[v.Name] = v.Domains[0]
		default:
			var l core.Locality
			must(t, proto.Unmarshal(a.Value, &l))
			out[l.Region] = l.Zone
		}
	}
	return out
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func node(id string, md map[string]any) *core.Node {
	n := &core.Node{Id: id}
	if md != nil {
		s, err := structpb.NewStruct(md)
		if err != nil {
			panic(err)
		}
		n.Metadata = s
	}
	return n
}

func sidecar(name, ns string) *core.Node {
	return node("sidecar~10.0.0.1~"+name+"."+ns+"~"+ns+".svc.cluster.local", nil)
}

func (e *testEnv) dial(t testing.TB, opts ...grpc.DialOption) discovery.AggregatedDiscoveryServiceClient {
	cc, err := grpc.NewClient("passthrough:///"+e.addr,
		append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	must(t, err)
	t.Cleanup(func() { _ = cc.Close() })
	return discovery.NewAggregatedDiscoveryServiceClient(cc)
}

// client wraps a stream: responses are read by a goroutine so tests can wait with a timeout.
type client[Req, Resp any] struct {
	t      testing.TB
	stream grpc.BidiStreamingClient[Req, Resp]
	resps  chan *Resp
	errc   chan error
	cancel context.CancelFunc
}

func newClient[Req, Resp any](t testing.TB, open func(context.Context, ...grpc.CallOption) (grpc.BidiStreamingClient[Req, Resp], error),
	read bool) *client[Req, Resp] {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := open(ctx)
	must(t, err)
	c := &client[Req, Resp]{t: t, stream: s, resps: make(chan *Resp, 1000), errc: make(chan error, 1), cancel: cancel}
	if read {
		go func() {
			for {
				r, err := s.Recv()
				if err != nil {
					c.errc <- err
					return
				}
				c.resps <- r
			}
		}()
	}
	return c
}

func (c *client[Req, Resp]) send(req *Req) {
	c.t.Helper()
	// io.EOF means the server ended the stream; Recv reports why.
	if err := c.stream.Send(req); err != nil && !errors.Is(err, io.EOF) {
		c.t.Fatal(err)
	}
}

func (c *client[Req, Resp]) recv() *Resp {
	c.t.Helper()
	return c.recvWithin(waitFor)
}

// recvWithin is recv for a response that takes long to build or decode (e.g. a request for 100k names).
func (c *client[Req, Resp]) recvWithin(d time.Duration) *Resp {
	c.t.Helper()
	select {
	case r := <-c.resps:
		return r
	case err := <-c.errc:
		c.t.Fatalf("stream ended: %v", err)
	case <-time.After(d):
		c.t.Fatal("no response")
	}
	return nil
}

// none fails if a response arrives within d.
func (c *client[Req, Resp]) none(d time.Duration) {
	c.t.Helper()
	select {
	case r := <-c.resps:
		c.t.Fatalf("unexpected response: %v", r)
	case err := <-c.errc:
		c.t.Fatalf("stream ended: %v", err)
	case <-time.After(d):
	}
}

// end waits for the stream to end and returns its error.
func (c *client[Req, Resp]) end() error {
	c.t.Helper()
	select {
	case err := <-c.errc:
		return err
	case <-time.After(waitFor):
		c.t.Fatal("stream did not end")
	}
	return nil
}

type sotwClient = client[discovery.DiscoveryRequest, discovery.DiscoveryResponse]
type deltaClient = client[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]

func (e *testEnv) sotw(t testing.TB, opts ...grpc.DialOption) *sotwClient {
	return newClient(t, e.dial(t, opts...).StreamAggregatedResources, true)
}

func (e *testEnv) delta(t testing.TB) *deltaClient {
	return newClient(t, e.dial(t).DeltaAggregatedResources, true)
}

// ask sends a state-of-the-world request; after is the response being ACKed (nil for the first request).
func ask(c *sotwClient, n *core.Node, typeURL string, names []string, after *discovery.DiscoveryResponse) {
	req := &discovery.DiscoveryRequest{Node: n, TypeUrl: typeURL, ResourceNames: names}
	if after != nil {
		req.VersionInfo, req.ResponseNonce = after.VersionInfo, after.Nonce
	}
	c.send(req)
}

func nack(c *sotwClient, typeURL string, names []string, lastGood, rejected *discovery.DiscoveryResponse, msg string) {
	req := &discovery.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: names, ResponseNonce: rejected.Nonce,
		ErrorDetail: statusProto(msg)}
	if lastGood != nil {
		req.VersionInfo = lastGood.VersionInfo
	}
	c.send(req)
}

// deltaResources decodes a delta response to name → payload, checking per-resource versions are set.
func deltaResources(t testing.TB, r *discovery.DeltaDiscoveryResponse) map[string]string {
	t.Helper()
	anys := make([]*anypb.Any, 0, len(r.Resources))
	for _, res := range r.Resources {
		if res.Version == "" {
			t.Fatalf("resource %s has no version", res.Name)
		}
		anys = append(anys, res.Resource)
	}
	return payloads(t, r.TypeUrl, anys)
}

func versions(r *discovery.DeltaDiscoveryResponse) map[string]string {
	out := map[string]string{}
	for _, res := range r.Resources {
		out[res.Name] = res.Version
	}
	return out
}

func watched(t testing.TB, srv *Server, typeURL string) model.WatchedResource {
	t.Helper()
	conns := srv.Connections()
	if len(conns) != 1 {
		t.Fatalf("%d connections, want 1", len(conns))
	}
	for _, w := range conns[0].Watched {
		if w.TypeURL == typeURL {
			return w
		}
	}
	t.Fatalf("no watch for %s", typeURL)
	return model.WatchedResource{}
}

// eventually polls cond until it holds or waitFor passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func statusProto(msg string) *rpcstatus.Status { return &rpcstatus.Status{Code: 3, Message: msg} }
