package xds

import (
	"fmt"
	"sync"

	"google.golang.org/protobuf/proto"
)

// maxQueuedRequests is the most requests a stream may have waiting for its handler. Envoy has a request
// or two per type in flight; a client past this is flooding, and its stream ends.
const maxQueuedRequests = 256

// requestQueue carries a stream's requests from its reader to its handler without ever blocking the
// reader: a reader that waited for a handler waiting for in-flight budget stopped reading the ACKs that free
// that budget, and every stream that waited for budget then waited for the flight timeout.
type requestQueue[Req request] struct {
	mu       sync.Mutex
	items    []queued[Req]
	bytes    int
	maxBytes int // the most the queued requests may hold together
	// wake is signalled when a request is queued; the handler then pops until the queue is empty.
	wake chan struct{}
}

// queued is a request and its encoded size.
type queued[Req request] struct {
	req  Req
	size int
}

func newRequestQueue[Req request](maxBytes int) *requestQueue[Req] {
	return &requestQueue[Req]{maxBytes: maxBytes, wake: make(chan struct{}, 1)}
}

// push queues req, or says why the stream must end: too many requests, or too many bytes, waiting.
func (q *requestQueue[Req]) push(req Req) error {
	size := 0
	if m, ok := any(req).(proto.Message); ok {
		size = proto.Size(m)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) >= maxQueuedRequests {
		return fmt.Errorf("%d requests waiting to be handled: the client sends faster than it is answered", len(q.items))
	}
	if len(q.items) > 0 && q.bytes+size > q.maxBytes {
		return fmt.Errorf("%d bytes of requests waiting to be handled, past the %d a stream may queue", q.bytes+size, q.maxBytes)
	}
	q.items = append(q.items, queued[Req]{req, size})
	q.bytes += size
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return nil
}

// pop returns the oldest queued request; ok is false when there is none. The handler pops one at a time, so
// what waits behind the request it handles counts against the queue's bounds.
func (q *requestQueue[Req]) pop() (req Req, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return req, false
	}
	req = q.items[0].req
	q.bytes -= q.items[0].size
	q.items[0] = queued[Req]{}
	q.items = q.items[1:]
	if len(q.items) == 0 {
		q.items, q.bytes = nil, 0
	}
	return req, true
}

// maxQueuedRequestBytes is how much a stream's queued requests may hold: one request of the largest size
// accepted.
func (s *Server) maxQueuedRequestBytes() int {
	if s.opts.MaxRequestBytes > 0 {
		return s.opts.MaxRequestBytes
	}
	return DefaultMaxRequestBytes
}
