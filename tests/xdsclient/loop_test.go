package xdsclient

import (
	"errors"
	"net"
	"testing"
	"time"

	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"
)

// loopServer answers every request with the same one-cluster CDS response, as go-control-plane's reference
// server does after a NACK, at most rounds times.
type loopServer struct {
	discovery.UnimplementedAggregatedDiscoveryServiceServer
	cluster *anypb.Any
	rounds  int
}

func (l *loopServer) StreamAggregatedResources(s grpc.BidiStreamingServer[discovery.DiscoveryRequest, discovery.DiscoveryResponse]) error {
	for i := 0; ; {
		req, err := s.Recv()
		if err != nil {
			return err
		}
		if req.GetTypeUrl() != ClusterType || i >= l.rounds {
			continue
		}
		i++
		if err := s.Send(&discovery.DiscoveryResponse{TypeUrl: ClusterType, VersionInfo: "1", Nonce: string(rune('a' + i)),
			Resources: []*anypb.Any{l.cluster}}); err != nil {
			return err
		}
	}
}

func (l *loopServer) DeltaAggregatedResources(s grpc.BidiStreamingServer[discovery.DeltaDiscoveryRequest,
	discovery.DeltaDiscoveryResponse]) error {
	for i := 0; ; {
		req, err := s.Recv()
		if err != nil {
			return err
		}
		if req.GetTypeUrl() != ClusterType || i >= l.rounds {
			continue
		}
		i++
		if err := s.Send(&discovery.DeltaDiscoveryResponse{TypeUrl: ClusterType, Nonce: string(rune('a' + i)),
			Resources: []*discovery.Resource{{Name: "c", Version: "1", Resource: l.cluster}}}); err != nil {
			return err
		}
	}
}

// The models see a server that answers a NACK by sending the rejected config again.
func TestModelsSeeANACKLoop(t *testing.T) {
	cluster, err := anypb.New(&clusterpb.Cluster{Name: "c", ClusterDiscoveryType: &clusterpb.Cluster_Type{Type: clusterpb.Cluster_STATIC}})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(g, &loopServer{cluster: cluster, rounds: 5})
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	for _, delta := range []bool{false, true} {
		e := NewEnvoy(EnvoyOptions{Addr: lis.Addr().String(), NodeID: "sidecar~10.0.0.1~p.ns~ns.svc.cluster.local", Delta: delta,
			Reject: func(string, string, *anypb.Any) error { return errors.New("no") }})
		if err := e.Connect(); err != nil {
			t.Fatal(err)
		}
		if !waitFor(5*time.Second, func() bool { return e.NACKs() == 5 }) {
			t.Fatalf("delta=%v: %d NACKs, want 5", delta, e.NACKs())
		}
		if got := len(e.ResentAfterNACK()); got != 4 {
			t.Errorf("delta=%v: %d re-sends after a NACK seen, want 4: %v", delta, got, e.ResentAfterNACK())
		}
		if held := e.Held(ClusterType); len(held) != 0 {
			t.Errorf("delta=%v: the rejected cluster is held: %v", delta, keys(held))
		}
		e.Close()
	}
}
