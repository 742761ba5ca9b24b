package ztunnel_test

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/xds"
	"github.com/sextantmesh/sextant/pilot/ztunnel"
)

// pipeline is a hand-driven xds.Pipeline.
type pipeline struct {
	cur  atomic.Pointer[model.PushContext]
	mu   sync.Mutex
	subs []func(*model.PushRequest)
}

func (p *pipeline) Current() *model.PushContext { return p.cur.Load() }
func (p *pipeline) Ready() bool                 { return p.cur.Load() != nil }
func (p *pipeline) Subscribe(h func(*model.PushRequest)) {
	p.mu.Lock()
	p.subs = append(p.subs, h)
	p.mu.Unlock()
}

func (p *pipeline) publish(req *model.PushRequest) {
	p.cur.Store(req.Push)
	p.mu.Lock()
	subs := slices.Clone(p.subs)
	p.mu.Unlock()
	for _, h := range subs {
		h(req)
	}
}

func startServer(t *testing.T, pipe *pipeline, g *ztunnel.Generators) string {
	srv := xds.NewServer(xds.Options{Pipeline: pipe, Generators: g.ByTypeURL(), Policies: ztunnel.Policies(),
		Logger: slog.New(slog.DiscardHandler), SendTimeout: 5 * time.Second})
	gs := grpc.NewServer(srv.GRPCServerOptions()...)
	srv.Register(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		gs.Stop()
	})
	return lis.Addr().String()
}

// ztunnelClient speaks delta ADS like ztunnel: wildcard subscriptions to both types, an ACK for every
// response, and the resources it holds by type and name.
type ztunnelClient struct {
	t      *testing.T
	stream grpc.BidiStreamingClient[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]
	cancel context.CancelFunc
	resps  chan *discovery.DeltaDiscoveryResponse
	have   map[string]map[string]string // type → name → version
}

func dialZtunnel(t *testing.T, addr string, initial map[string]map[string]string) *ztunnelClient {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := &ztunnelClient{t: t, stream: stream, cancel: cancel, resps: make(chan *discovery.DeltaDiscoveryResponse, 16),
		have: map[string]map[string]string{ztunnel.AddressType: {}, ztunnel.AuthorizationType: {}}}
	t.Cleanup(cancel)
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				close(c.resps)
				return
			}
			c.resps <- r
		}
	}()
	node := &core.Node{Id: "ztunnel~10.0.0.2~ztunnel-x7k2p.istio-system~istio-system.svc.cluster.local",
		Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			"NAME": structpb.NewStringValue("ztunnel-x7k2p"), "NAMESPACE": structpb.NewStringValue("istio-system"),
			"NODE_NAME": structpb.NewStringValue("node-1"), "CLUSTER_ID": structpb.NewStringValue("Kubernetes"),
			"INSTANCE_IPS": structpb.NewStringValue("10.0.0.2")}}}
	for _, typ := range []string{ztunnel.AddressType, ztunnel.AuthorizationType} {
		req := &discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: typ, ResourceNamesSubscribe: []string{"*"},
			InitialResourceVersions: initial[typ]}
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
		node = nil
	}
	return c
}

// recv waits for the next response, applies and ACKs it.
func (c *ztunnelClient) recv() *discovery.DeltaDiscoveryResponse {
	c.t.Helper()
	select {
	case r, ok := <-c.resps:
		if !ok {
			c.t.Fatal("stream closed")
		}
		for _, res := range r.Resources {
			c.have[r.TypeUrl][res.Name] = res.Version
		}
		for _, n := range r.RemovedResources {
			delete(c.have[r.TypeUrl], n)
		}
		if err := c.stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce}); err != nil {
			c.t.Fatal(err)
		}
		return r
	case <-time.After(5 * time.Second):
		c.t.Fatal("no response within 5s")
	}
	return nil
}

// quiet asserts nothing arrives for a while.
func (c *ztunnelClient) quiet(d time.Duration) {
	c.t.Helper()
	select {
	case r := <-c.resps:
		if r != nil {
			c.t.Fatalf("unexpected response: type %s resources %v removed %v", r.TypeUrl, resourceNames(r), r.RemovedResources)
		}
	case <-time.After(d):
	}
}

func resourceNames(r *discovery.DeltaDiscoveryResponse) []string {
	var out []string
	for _, res := range r.Resources {
		out = append(out, res.Name)
	}
	return out
}

func TestEndToEndDeltaClient(t *testing.T) {
	f := scenario(t)
	ps := f.build()
	pipe := &pipeline{}
	pipe.publish(&model.PushRequest{Full: true, Push: ps})
	g := ztunnel.New()
	addr := startServer(t, pipe, g)

	c := dialZtunnel(t, addr, nil)
	got := map[string]*discovery.DeltaDiscoveryResponse{}
	for range 2 {
		r := c.recv()
		got[r.TypeUrl] = r
	}
	if n := len(got[ztunnel.AddressType].GetResources()); n != len(expectedAddresses()) {
		t.Fatalf("initial Address response has %d resources, want %d", n, len(expectedAddresses()))
	}
	if n := len(got[ztunnel.AuthorizationType].GetResources()); n != 4 {
		t.Fatalf("initial Authorization response has %d resources, want 4", n)
	}

	// One pod changes: one Address resource on the wire, and no Authorization response (unchanged policies).
	f.pod(podSpec{ns: "amb", name: "ratings-v1-6b7c9d8f5d-bcdfg", ip: "10.1.0.6", node: "node-1", sa: "ratings", ready: true,
		labels: map[string]string{"app": "ratings", "version": "v1"}, ports: map[string]int32{"http": 9080}})
	next, req := f.update(ps)
	pipe.publish(req)
	r := c.recv()
	if r.TypeUrl != ztunnel.AddressType || !slices.Equal(resourceNames(r), []string{ratingsB}) || len(r.RemovedResources) != 0 {
		t.Fatalf("pod change: type %s resources %v removed %v", r.TypeUrl, resourceNames(r), r.RemovedResources)
	}
	c.quiet(200 * time.Millisecond)

	// Deletion: one removal.
	f.del("Pod", "amb", "ratings-v1-6b7c9d8f5d-bcdfg")
	next2, req := f.update(next)
	pipe.publish(req)
	r = c.recv()
	if len(r.Resources) != 0 || !slices.Equal(r.RemovedResources, []string{ratingsB}) {
		t.Fatalf("pod deletion: resources %v removed %v", resourceNames(r), r.RemovedResources)
	}

	// On-demand lookup of an address, answered under that name; an unknown one is reported removed.
	if err := c.stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: ztunnel.AddressType,
		ResourceNamesSubscribe: []string{"/10.1.0.5", "/10.200.0.1"}}); err != nil {
		t.Fatal(err)
	}
	r = c.recv()
	if !slices.Equal(resourceNames(r), []string{"/10.1.0.5"}) || !slices.Equal(r.RemovedResources, []string{"/10.200.0.1"}) {
		t.Fatalf("on-demand: resources %v removed %v", resourceNames(r), r.RemovedResources)
	}
	c.quiet(200 * time.Millisecond)
	have := c.have
	c.cancel()

	// Reconnect (as to another replica) with what it has: nothing is sent again, but both types answer.
	g2 := ztunnel.New()
	pipe2 := &pipeline{}
	pipe2.publish(&model.PushRequest{Full: true, Push: next2})
	addr2 := startServer(t, pipe2, g2)
	c2 := dialZtunnel(t, addr2, have)
	for range 2 {
		r := c2.recv()
		if len(r.Resources) != 0 {
			t.Errorf("reconnect: %s resent %v", r.TypeUrl, resourceNames(r))
		}
		// The on-demand name is not subscribed on the new stream, so it is reported removed; nothing else is.
		for _, n := range r.RemovedResources {
			if n != "/10.1.0.5" && n != "/10.200.0.1" {
				t.Errorf("reconnect: %s removed %s", r.TypeUrl, n)
			}
		}
	}
	c2.quiet(200 * time.Millisecond)
}
