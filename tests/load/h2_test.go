package main

import (
	"bytes"
	"fmt"
	"net"
	"strconv"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
)

// scriptedADS answers a delta stream with a script, checking what the client sends.
type scriptedADS struct {
	discovery.UnimplementedAggregatedDiscoveryServiceServer
	t       *testing.T
	payload []byte
	small   int
}

func (a *scriptedADS) DeltaAggregatedResources(stream discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	if first.GetNode().GetId() != "sidecar~10.0.0.1~p.ns~ns.svc.cluster.local" || len(first.ResourceNamesSubscribe) != 30000 ||
		first.ResourceNamesSubscribe[29999] != "outbound|80||service-29999.ns.svc.cluster.local" {
		a.t.Errorf("first request: node %q, %d names", first.GetNode().GetId(), len(first.ResourceNamesSubscribe))
	}
	big := &discovery.DeltaDiscoveryResponse{TypeUrl: edsType, Nonce: "big"}
	for i := range 3 {
		big.Resources = append(big.Resources, &discovery.Resource{Name: "r" + strconv.Itoa(i),
			Resource: &anypb.Any{TypeUrl: edsType, Value: a.payload}})
	}
	if err := stream.Send(big); err != nil {
		return err
	}
	if ack, err := stream.Recv(); err != nil || ack.ResponseNonce != "big" {
		a.t.Errorf("ACK of the large response: %v, %v", ack, err)
	}
	for i := range a.small { // sent back to back: they arrive several per read
		if err := stream.Send(&discovery.DeltaDiscoveryResponse{TypeUrl: edsType, Nonce: strconv.Itoa(i),
			RemovedResources: []string{"gone-" + strconv.Itoa(i)}}); err != nil {
			return err
		}
	}
	for i := range a.small {
		ack, err := stream.Recv()
		if err != nil || ack.ResponseNonce != strconv.Itoa(i) {
			a.t.Errorf("ACK %d: %v, %v", i, ack, err)
			break
		}
	}
	return status.Error(codes.FailedPrecondition, "script over")
}

// The harness's own HTTP/2 client holds a delta ADS stream with gRPC-Go's server: a request larger than the
// server's windows, a response spread over many frames, responses arriving together, and the trailers.
func TestH2StreamWithGRPCServer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	payload := bytes.Repeat([]byte("endpoint"), 40000) // 320 KB: twenty frames each
	srv := grpc.NewServer()                            // default windows: 64 KB until the server grows them
	discovery.RegisterAggregatedDiscoveryServiceServer(srv, &scriptedADS{t: t, payload: payload, small: 200})
	go srv.Serve(lis)
	defer srv.Stop()

	s, err := dialDelta(lis.Addr().String(), nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer s.conn.Close()
	p := newProxy(&harness{cfg: Config{EnvoyVersion: [2]uint32{1, 38}}}, 0, kindSidecar, "ns", "sa", "p", "10.0.0.1", nil)
	names := make([]string, 30000)
	for i := range names {
		names[i] = fmt.Sprintf("outbound|80||service-%d.ns.svc.cluster.local", i)
	}
	if err := s.Send(&discovery.DeltaDiscoveryRequest{Node: p.node, TypeUrl: edsType, ResourceNamesSubscribe: names}); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if resp.Nonce != "big" || len(resp.Resources) != 3 {
		t.Fatalf("large response: nonce %q, %d resources", resp.Nonce, len(resp.Resources))
	}
	for _, r := range resp.Resources {
		if !bytes.Equal(r.Value, payload) {
			t.Fatalf("resource %s: %d bytes, want the %d sent", r.Name, len(r.Value), len(payload))
		}
	}
	if err := s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: edsType, ResponseNonce: "big"}); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		resp, err := s.Recv()
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		if resp.Nonce != strconv.Itoa(i) || len(resp.RemovedResources) != 1 || resp.RemovedResources[0] != "gone-"+strconv.Itoa(i) {
			t.Fatalf("response %d: %+v", i, resp)
		}
		if err := s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: edsType, ResponseNonce: resp.Nonce}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = s.Recv()
	if st, _ := status.FromError(err); st.Code() != codes.FailedPrecondition || st.Message() != "script over" {
		t.Fatalf("end of stream: %v, want the server's FailedPrecondition", err)
	}
	if _, again := s.Recv(); again != err {
		t.Errorf("after the end: %v, want %v again", again, err)
	}
}
