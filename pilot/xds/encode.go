package xds

import (
	"math/bits"
	"sync"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Responses are encoded by the connection, not by gRPC's proto codec. Their resources are already
// marshaled (Any values, shared between proxies), so a response is its envelope plus those bytes copied
// after a tag and a length. The proto codec walked every resource by reflection twice, once to size the
// message and once to write it: a quarter of the server's CPU in a cold start of 300 sidecars.

// wireCodec is the ADS server's gRPC codec: an encodedResponse goes out as is; anything else (the
// requests) goes through the proto codec.
type wireCodec struct{ encoding.CodecV2 }

func newWireCodec() wireCodec { return wireCodec{encoding.GetCodecV2(protocodec.Name)} }

func (c wireCodec) Marshal(v any) (mem.BufferSlice, error) {
	if e, ok := v.(*encodedResponse); ok {
		return e.data, nil
	}
	return c.CodecV2.Marshal(v)
}

// encodedResponse is a response in its wire form, in a buffer gRPC returns to the pool once written.
type encodedResponse struct{ data mem.BufferSlice }

// wireResponse is a DiscoveryResponse or DeltaDiscoveryResponse about to be encoded: its size is known
// before the buffer exists, so a connection waiting for in-flight budget holds no copy of the response.
type wireResponse struct {
	envelope []byte // the message without its resources
	delta    []*discovery.Resource
	sotw     []*anypb.Any
	size     int
}

// prepareResponse sizes a DiscoveryResponse or DeltaDiscoveryResponse; ok is false for any other message.
// The envelope (versions, nonce, type, removed names) goes through proto.Marshal, without the resources;
// the resources follow it as field 2, each encoded by hand. Field order does not matter on the wire.
func prepareResponse(msg proto.Message) (*wireResponse, bool, error) {
	w := &wireResponse{}
	var err error
	switch m := msg.(type) {
	case *discovery.DeltaDiscoveryResponse:
		if w.envelope, w.delta, err = withoutResources(m, &m.Resources); err != nil {
			return nil, true, err
		}
		for _, r := range w.delta {
			w.size += sizeField(deltaResourceSize(r))
		}
	case *discovery.DiscoveryResponse:
		if w.envelope, w.sotw, err = withoutResources(m, &m.Resources); err != nil {
			return nil, true, err
		}
		for _, a := range w.sotw {
			w.size += sizeField(anySize(a))
		}
	default:
		return nil, false, nil
	}
	w.size += len(w.envelope)
	return w, true, nil
}

// withoutResources marshals m with its resources left out for the time, and returns them.
func withoutResources[R any](m proto.Message, resources *[]R) ([]byte, []R, error) {
	res := *resources
	*resources = nil
	b, err := proto.Marshal(m)
	*resources = res
	return b, res, err
}

// responseBuffers holds the buffers responses are encoded into; gRPC puts each back once it is written.
var responseBuffers = &bufferPool{}

// bufferPool is a mem.BufferPool whose buffers are not cleared. gRPC's own pools clear a buffer to its
// capacity before handing it out (16 KB for a 5 KB EDS update, 1 MB for a cold start's CDS), but encode
// writes every byte it sends: the clearing was 3 % of the server's CPU under endpoint churn. Capacities are
// powers of two, so a buffer is less than twice its response.
type bufferPool struct{ classes [maxPooledShift + 1]sync.Pool }

var _ mem.BufferPool = (*bufferPool)(nil)

const (
	minPooledShift = 8  // 256 B
	maxPooledShift = 24 // 16 MiB; a larger response gets a buffer of its own, left to the collector
)

// Get returns a buffer of length size; its contents are whatever it last held.
func (p *bufferPool) Get(size int) *[]byte {
	shift := max(minPooledShift, bits.Len(uint(max(size, 1)-1)))
	if shift > maxPooledShift {
		b := make([]byte, size)
		return &b
	}
	if buf, ok := p.classes[shift].Get().(*[]byte); ok {
		*buf = (*buf)[:size]
		return buf
	}
	b := make([]byte, size, 1<<shift)
	return &b
}

// Put keeps buf for a later Get, if it came from one.
func (p *bufferPool) Put(buf *[]byte) {
	c := cap(*buf)
	shift := bits.Len(uint(c)) - 1
	if c == 0 || c != 1<<shift || shift < minPooledShift || shift > maxPooledShift {
		return
	}
	p.classes[shift].Put(buf)
}

// encode writes the response into a buffer from responseBuffers.
func (w *wireResponse) encode() (*encodedResponse, error) {
	pool := responseBuffers
	buf := pool.Get(w.size)
	b := append((*buf)[:0], w.envelope...)
	var err error
	for _, r := range w.delta {
		if b, err = appendDeltaResource(b, r); err != nil {
			pool.Put(buf)
			return nil, err
		}
	}
	for _, a := range w.sotw {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(anySize(a)))
		b = appendAny(b, a)
	}
	*buf = b
	return &encodedResponse{data: mem.BufferSlice{mem.NewBuffer(buf, pool)}}, nil
}

// sizeField is the size of field 2 (resources) holding n bytes.
func sizeField(n int) int { return protowire.SizeTag(2) + protowire.SizeBytes(n) }

// plainResource reports whether r has only the fields the transport sets (name, version, resource).
func plainResource(r *discovery.Resource) bool {
	return r.ResourceName == nil && len(r.Aliases) == 0 && r.Ttl == nil && r.CacheControl == nil && r.Metadata == nil &&
		len(r.ProtoReflect().GetUnknown()) == 0
}

func deltaResourceSize(r *discovery.Resource) int {
	if !plainResource(r) {
		return proto.Size(r)
	}
	n := 0
	if r.Version != "" {
		n += protowire.SizeTag(1) + protowire.SizeBytes(len(r.Version))
	}
	if r.Resource != nil {
		n += protowire.SizeTag(2) + protowire.SizeBytes(anySize(r.Resource))
	}
	if r.Name != "" {
		n += protowire.SizeTag(3) + protowire.SizeBytes(len(r.Name))
	}
	return n
}

func appendDeltaResource(b []byte, r *discovery.Resource) ([]byte, error) {
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(deltaResourceSize(r)))
	if !plainResource(r) {
		return proto.MarshalOptions{}.MarshalAppend(b, r)
	}
	if r.Version != "" {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, r.Version)
	}
	if r.Resource != nil {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(anySize(r.Resource)))
		b = appendAny(b, r.Resource)
	}
	if r.Name != "" {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendString(b, r.Name)
	}
	return b, nil
}

// anySize is the encoded size of an Any (type_url = 1, value = 2; it has no other fields).
func anySize(a *anypb.Any) int {
	n := 0
	if a.TypeUrl != "" {
		n += protowire.SizeTag(1) + protowire.SizeBytes(len(a.TypeUrl))
	}
	if len(a.Value) > 0 {
		n += protowire.SizeTag(2) + protowire.SizeBytes(len(a.Value))
	}
	return n
}

func appendAny(b []byte, a *anypb.Any) []byte {
	if a.TypeUrl != "" {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, a.TypeUrl)
	}
	if len(a.Value) > 0 {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, a.Value)
	}
	return b
}
