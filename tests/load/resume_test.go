package main

import (
	"context"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// agingADS serves one EDS cluster over delta and records the requests of each stream.
type agingADS struct {
	discovery.UnimplementedAggregatedDiscoveryServiceServer
	t       *testing.T
	streams atomic.Int32
	mu      sync.Mutex
	reqs    [][]*discovery.DeltaDiscoveryRequest
}

func (a *agingADS) DeltaAggregatedResources(stream discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	n := int(a.streams.Add(1)) - 1
	a.mu.Lock()
	a.reqs = append(a.reqs, nil)
	a.mu.Unlock()
	c, _ := proto.Marshal(&cluster.Cluster{Name: "c1", ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_EDS}})
	e, _ := proto.Marshal(&endpoint.ClusterLoadAssignment{ClusterName: "c1"})
	answered := map[string]bool{}
	for {
		req, err := stream.Recv()
		if err != nil {
			return err
		}
		a.mu.Lock()
		a.reqs[n] = append(a.reqs[n], req)
		a.mu.Unlock()
		if req.ResponseNonce != "" || answered[req.TypeUrl] {
			continue
		}
		answered[req.TypeUrl] = true
		resp := &discovery.DeltaDiscoveryResponse{TypeUrl: req.TypeUrl, Nonce: req.TypeUrl}
		// Resumed: what the client holds in the version it holds is not sent again.
		switch {
		case req.TypeUrl == cdsType && req.InitialResourceVersions["c1"] != "v1":
			resp.Resources = []*discovery.Resource{{Name: "c1", Version: "v1", Resource: &anypb.Any{TypeUrl: cdsType, Value: c}}}
		case req.TypeUrl == edsType && req.InitialResourceVersions["c1"] != "e1":
			resp.Resources = []*discovery.Resource{{Name: "c1", Version: "e1", Resource: &anypb.Any{TypeUrl: edsType, Value: e}}}
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// A delta sidecar whose connection the server ages out (GOAWAY, then the close at the end of the grace)
// resumes on a new connection with what it holds as initial_resource_versions and its EDS subscription.
func TestResumeAfterGoAway(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: 400 * time.Millisecond,
		MaxConnectionAgeGrace: 200 * time.Millisecond}))
	ads := &agingADS{t: t}
	discovery.RegisterAggregatedDiscoveryServiceServer(srv, ads)
	go srv.Serve(lis)
	defer srv.Stop()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := &harness{cfg: Config{Delta: true, EnvoyVersion: [2]uint32{1, 36}}, ctx: ctx, dec: newDecoder(),
		byType: map[string]*atomic.Int64{}, srv: &serverProc{grpcAddr: lis.Addr().String()}}
	p := newProxy(h, 0, kindSidecar, "ns", "sa", "p", "10.0.0.1", nil)
	defer p.stop()
	if err := p.start(h.srv.grpcAddr); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for ads.streams.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // the new stream's first requests
	p.mu.Lock()
	perr, moves := p.err, slices.Clone(p.resumed.moves)
	p.mu.Unlock()
	if perr != nil || len(moves) == 0 {
		t.Fatalf("no move (error %v)", perr)
	}
	if m := moves[0]; m.goaway <= 0 || m.age < m.goaway || m.age > 5*time.Second {
		t.Errorf("move: GOAWAY at age %v, ended at %v", m.goaway, m.age)
	}
	ads.mu.Lock()
	defer ads.mu.Unlock()
	first := map[string]*discovery.DeltaDiscoveryRequest{}
	for _, r := range ads.reqs[1] {
		if r.ResponseNonce == "" && first[r.TypeUrl] == nil {
			first[r.TypeUrl] = r
		}
	}
	cds, eds, lds := first[cdsType], first[edsType], first[ldsType]
	if cds == nil || cds.Node.GetId() != p.node.Id || cds.InitialResourceVersions["c1"] != "v1" || len(cds.ResourceNamesSubscribe) != 0 {
		t.Errorf("resumed CDS request: %v", cds)
	}
	if eds == nil || eds.InitialResourceVersions["c1"] != "e1" || !slices.Equal(eds.ResourceNamesSubscribe, []string{"c1"}) {
		t.Errorf("resumed EDS request: %v", eds)
	}
	if lds == nil || len(lds.ResourceNamesSubscribe) != 0 {
		t.Errorf("resumed LDS request: %v", lds)
	}
	// Nothing changed: the cluster is not sent again, so it does not warm again.
	p.mu.Lock()
	done, timeouts, pending := p.warm.take(time.Now())
	p.mu.Unlock()
	if len(done) != 1 || timeouts != 0 || pending != 0 {
		t.Errorf("warming: %d done, %d timeouts, %d pending; want the first stream's one", len(done), timeouts, pending)
	}
}
