package xds

import (
	"fmt"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// A response encoded by the connection decodes to the very message the proto codec would have sent.
func TestEncodedResponsesDecodeToTheMessage(t *testing.T) {
	any1 := &anypb.Any{TypeUrl: EndpointType, Value: []byte("\x0a\x03abc")}
	big := &anypb.Any{TypeUrl: ClusterType, Value: make([]byte, 70000)} // a length that needs three varint bytes
	for i := range big.Value {
		big.Value[i] = byte(i)
	}
	cases := []proto.Message{
		&discovery.DeltaDiscoveryResponse{SystemVersionInfo: "7.3", TypeUrl: EndpointType, Nonce: "n-1-3",
			RemovedResources: []string{"gone-1", "gone-2"},
			Resources: []*discovery.Resource{
				{Name: "a", Version: "v1", Resource: any1},
				{Name: "big", Version: "v2", Resource: big},
				{Name: "no-version", Resource: any1},
				{Name: "extras", Version: "v3", Resource: any1, Aliases: []string{"alias"}, Ttl: durationpb.New(time.Second)},
			}},
		&discovery.DeltaDiscoveryResponse{TypeUrl: ClusterType, Nonce: "only-removals", RemovedResources: []string{"x"}},
		&discovery.DiscoveryResponse{VersionInfo: "4.1", TypeUrl: ClusterType, Nonce: "n-2-1",
			Resources: []*anypb.Any{any1, big, {}}, ControlPlane: &core.ControlPlane{Identifier: "sextant"}},
		&discovery.DiscoveryResponse{TypeUrl: ListenerType, Nonce: "empty"},
	}
	// The pool's buffers are not cleared: leave garbage in them, so a byte encode fails to write shows.
	for shift := minPooledShift; shift <= 17; shift++ {
		buf := responseBuffers.Get(1 << shift)
		for i := range *buf {
			(*buf)[i] = 0xff
		}
		responseBuffers.Put(buf)
	}
	for _, msg := range cases {
		wire, ok, err := prepareResponse(msg)
		if err != nil || !ok {
			t.Fatalf("%T: prepared %v, %v", msg, ok, err)
		}
		enc, err := wire.encode()
		if err != nil {
			t.Fatal(err)
		}
		b := enc.data.Materialize()
		enc.data.Free()
		if len(b) != wire.size || len(b) != proto.Size(msg) {
			t.Errorf("%T: %d bytes, sized %d, proto.Size %d", msg, len(b), wire.size, proto.Size(msg))
		}
		got := msg.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(b, got); err != nil {
			t.Fatalf("%T: %v", msg, err)
		}
		if !proto.Equal(got, msg) {
			t.Errorf("%T decodes to\n%v\nwant\n%v", msg, got, msg)
		}
	}
	if _, ok, _ := prepareResponse(&discovery.DiscoveryRequest{}); ok {
		t.Error("a request was taken for a response")
	}
}

func TestBufferPoolSizes(t *testing.T) {
	for _, c := range []struct{ size, cap int }{{0, 256}, {1, 256}, {256, 256}, {257, 512}, {5000, 8192},
		{1 << 20, 1 << 20}, {1<<24 + 1, 1<<24 + 1}} {
		buf := responseBuffers.Get(c.size)
		if len(*buf) != c.size || cap(*buf) != c.cap {
			t.Errorf("Get(%d): length %d, capacity %d; want capacity %d", c.size, len(*buf), cap(*buf), c.cap)
		}
		responseBuffers.Put(buf)
	}
	// A buffer of another capacity is not kept: a later Get would hand out less than its class promises.
	odd := make([]byte, 300)
	responseBuffers.Put(&odd)
	for range 100 {
		if buf := responseBuffers.Get(400); cap(*buf) != 512 {
			t.Fatalf("Get(400) returned capacity %d", cap(*buf))
		}
	}
}

// A sidecar's initial EDS response: 900 assignments of about 1.4 KB, as gRPC's proto codec sends it (sized
// for the in-flight budget, then marshaled) and as the connection does.
func BenchmarkEncodeResponse(b *testing.B) {
	resp := &discovery.DeltaDiscoveryResponse{SystemVersionInfo: "12.1", TypeUrl: EndpointType, Nonce: "abc-1-1"}
	for i := range 900 {
		value := make([]byte, 1400)
		value[0] = byte(i)
		name := fmt.Sprintf("outbound|80||svc-%d.ns-%d.svc.cluster.local", i, i%10)
		resp.Resources = append(resp.Resources, &discovery.Resource{Name: name, Version: "0123456789abcdef01234567",
			Resource: &anypb.Any{TypeUrl: EndpointType, Value: value}})
	}
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = proto.Size(resp)
			if _, err := proto.Marshal(resp); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("connection", func(b *testing.B) {
		benchmarkEncode(b, resp)
	})
}

// benchmarkEncode encodes resp as the connection does, and gives the buffer back as gRPC does once written.
func benchmarkEncode(b *testing.B, resp proto.Message) {
	b.ReportAllocs()
	for b.Loop() {
		w, _, err := prepareResponse(resp)
		if err != nil {
			b.Fatal(err)
		}
		enc, err := w.encode()
		if err != nil {
			b.Fatal(err)
		}
		enc.data.Free()
	}
}

// One EDS assignment of a 10-endpoint service, about 5 KB: what each of 300 sidecars is sent when one
// endpoint changes.
func BenchmarkEncodeEndpointUpdate(b *testing.B) {
	value := make([]byte, 5000)
	resp := &discovery.DeltaDiscoveryResponse{SystemVersionInfo: "12.1", TypeUrl: EndpointType, Nonce: "abc-1-1",
		Resources: []*discovery.Resource{{Name: "outbound|80||svc-7.ns-7.svc.cluster.local",
			Version: "0123456789abcdef01234567", Resource: &anypb.Any{TypeUrl: EndpointType, Value: value}}}}
	benchmarkEncode(b, resp)
}
