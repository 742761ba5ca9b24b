package xds

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unique"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sextantmesh/sextant/pilot/authn"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pkg/loglimit"
)

// Connection is one ADS stream. Its state is changed only while holding turn: by the stream's reader
// goroutine (ACKs and NACKs), by the handler's goroutine (requests that need a response) and by the push
// worker that dequeued the connection (pushes). mu guards the state against the readers elsewhere (the push
// distributor and debug views).
//
// Handing every request and push to one goroutine of the connection's own instead cost two more goroutine
// wake-ups per push and per ACK, and a third for a goroutine per send: under steady churn to 300 proxies
// that was 17,000 wake-ups a second, and events from Kubernetes queued behind them.
type Connection struct {
	srv         *Server
	id          string
	num         uint64
	proxy       *model.Proxy
	delta       bool
	peer        string
	connectedAt time.Time
	stream      grpc.ServerStream
	ctx         context.Context // ends with the stream, or when the connection is killed
	cancelCtx   context.CancelFunc
	flight      *flight // responses not yet answered, holding the server's in-flight budget
	pushFn      func(*Connection, *model.PushRequest) error

	turn     sync.Mutex  // held while handling a request or a push
	ended    atomic.Bool // the stream's handler has returned: nothing more is handled or sent
	failed   chan error  // the first error of a push or of a request handled by the reader; it ends the stream
	killed   chan struct{}
	killOnce sync.Once
	killMsg  string

	mu      sync.RWMutex
	watched map[string]*watch

	seq         uint64          // responses sent; under turn
	unknownSeen map[string]bool // types without a generator, logged once; under turn
	genFailed   bool            // the last generation failed; under turn
	// resumed is set once a request carried initial_resource_versions (a reconnect); owed holds, by type
	// URL, the follow-ups due while that type had no subscription yet on such a stream (see followUps).
	// Under turn.
	resumed   bool
	owed      map[string]map[string]struct{}
	pushing   *model.PushRequest // the push being sent, for the Observer; under turn
	sendTimer *time.Timer        // kills the connection when a send outlasts SendTimeout; under turn
	// scratch is a delta response and its versions, reused from send to send (deltaScratch); under turn.
	scratch struct {
		resp     *discovery.DeltaDiscoveryResponse
		versions []string
	}
	// checked is the last request the distributor found this connection concerned by, with the types it
	// concerns (under mu): the push of that very request (not merged with another meanwhile) reuses them
	// instead of asking every generator again. Under endpoint churn that second asking was 7% of the CPU.
	checked struct {
		req   *model.PushRequest
		types []*watch
	}

	dequeued bool // guarded by the push queue's lock
}

func (s *Server) newConnection(ctx context.Context, proxy *model.Proxy, delta bool, stream grpc.ServerStream) *Connection {
	num := s.connSeq.Add(1)
	ctx, cancel := context.WithCancel(ctx)
	c := &Connection{
		srv: s, num: num, id: loglimit.Text(proxy.ID) + "-" + strconv.FormatUint(num, 10), proxy: proxy, delta: delta,
		connectedAt: time.Now(), stream: stream, ctx: ctx, cancelCtx: cancel,
		failed: make(chan error, 1), killed: make(chan struct{}),
		watched: map[string]*watch{},
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		c.peer = p.Addr.String()
	}
	return c
}

// kill closes the connection from outside its goroutine.
func (c *Connection) kill(reason string) {
	c.killOnce.Do(func() {
		c.killMsg = reason
		c.srv.sendTimeouts.Add(1)
		close(c.killed)
		c.cancelCtx()
	})
}

// serve runs a stream. The first request (it carries the node) is read before the connection exists.
// Later ones are read by a reader goroutine, which handles an ACK or NACK itself and hands a request that
// needs a response to a goroutine of the connection's: the reader must keep reading while that response
// waits for the in-flight budget, because the ACKs behind it are what free the budget. Pushes are handled
// by the push workers. One at a time: whoever handles holds the connection's turn. The handler's own
// goroutine only waits for the stream to end.
func serve[Req request](s *Server, ss grpc.ServerStream, delta bool,
	recv func() (Req, error), handle func(c *Connection, req Req, noSend bool) (needsSend bool, err error),
	push func(*Connection, *model.PushRequest) error,
) (err error) {
	if !s.startStream() {
		return status.Error(codes.Unavailable, "server is shutting down")
	}
	defer s.streams.Done()
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	stop := context.AfterFunc(s.base, cancel)
	defer stop()
	if err := s.admit(ctx); err != nil {
		return err
	}
	fl := newFlight(s.inflight, 2*s.opts.SendTimeout, s.opts.MaxBytesInFlightPerProxy)
	defer fl.close()
	// Requests are read on their own goroutine: a stream.Recv cannot be interrupted, and shutdown must not
	// wait for a client that never sends.
	run := &streamRun[Req]{s: s, ctx: ctx, recv: recv, handle: handle, fl: fl, firstReq: make(chan Req, 1),
		queue: newRequestQueue[Req](s.maxQueuedRequestBytes()), recvErr: make(chan error, 1),
		connected: make(chan struct{})}
	go run.read()
	first, err := run.first()
	if err != nil || run.ended {
		return err
	}
	proxy, err := run.proxy(first, delta)
	if err != nil {
		return err
	}
	c := s.newConnection(ctx, proxy, delta, ss)
	disconnected, err := s.connectHook(c, func() error { _, err := run.recv(); return err })
	if err != nil {
		return err
	}
	defer disconnected() // after remove: the hook hears of the end once the stream is out of the table
	c.flight, c.pushFn = fl, push
	c.turn.Lock() // pushes wait until the first request is handled
	s.add(c)
	defer func() { s.remove(c, err) }()
	defer c.end()
	run.c = c
	close(run.connected)
	go run.handleRequests(first)
	return run.wait()
}

// request is what serve reads of a request of either protocol.
type request interface {
	GetNode() *core.Node
	GetTypeUrl() string
	GetResponseNonce() string
}

// streamRun is one stream's state shared by the goroutines serve starts.
type streamRun[Req request] struct {
	s      *Server
	ctx    context.Context
	recv   func() (Req, error)
	handle func(c *Connection, req Req, noSend bool) (needsSend bool, err error)
	fl     *flight
	// firstReq carries the stream's first request; queue the later ones that the reader does not handle
	// itself, to the goroutine that handles them. handing counts those not yet handled.
	firstReq chan Req
	queue    *requestQueue[Req]
	handing  atomic.Int32
	recvErr  chan error
	// c is set, and connected closed, once the first request made the connection.
	c         *Connection
	connected chan struct{}
	// ended: the stream ended cleanly before its first request.
	ended bool
}

// read reads the stream's requests until it ends.
func (r *streamRun[Req]) read() {
	first, err := r.recv()
	if err != nil {
		r.recvErr <- r.s.recvError(r.ctx, nil, err)
		return
	}
	r.firstReq <- first
	select {
	case <-r.connected:
	case <-r.ctx.Done():
		return
	}
	c := r.c
	for {
		req, err := r.recv()
		if err != nil {
			r.recvErr <- r.s.recvError(r.ctx, c, err)
			return
		}
		// An ACK or NACK frees its response's budget at once, even while a push holds the turn.
		r.fl.answered(req.GetTypeUrl(), req.GetResponseNonce())
		// Handled here unless a request before it is still with the handler's goroutine (order
		// matters), a push holds the turn, or it needs a response. Saves two goroutine wake-ups per ACK.
		// The reader never waits for the turn or the handler: either may wait for budget that only an ACK
		// it has still to read frees.
		needsSend := true
		if r.handing.Load() == 0 && c.turn.TryLock() {
			if !c.ended.Load() {
				needsSend, err = r.handle(c, req, true)
			}
			c.turn.Unlock()
			if err != nil {
				c.fail(err)
				return
			}
		}
		if !needsSend {
			continue
		}
		r.handing.Add(1)
		if err := r.queue.push(req); err != nil {
			r.s.refused.Add(1)
			r.s.connLog.Warn("stream ended", "conn", c.id, "proxy", loglimit.Text(c.proxy.NodeID), "error", err)
			c.fail(status.Error(codes.ResourceExhausted, err.Error()))
			return
		}
	}
}

// first waits for the stream's first request; ended is set when the stream closed cleanly before it.
func (r *streamRun[Req]) first() (Req, error) {
	var first Req
	select {
	case first = <-r.firstReq:
		return first, nil
	case err := <-r.recvErr:
		if errors.Is(err, io.EOF) {
			r.ended = true
			return first, nil // closed before asking for anything: a clean end, not an Unknown "EOF"
		}
		return first, err
	case <-r.ctx.Done():
		return first, r.s.doneErr(r.ctx)
	}
}

// proxy reads the proxy from the first request and checks it against the stream's verified identity;
// a refusal ends the stream.
func (r *streamRun[Req]) proxy(first Req, delta bool) (*model.Proxy, error) {
	s, ctx := r.s, r.ctx
	drain := func() error { _, err := r.recv(); return err }
	proxy, err := model.ParseProxy(first.GetNode())
	if err != nil {
		s.refused.Add(1)
		s.connLog.Warn("rejected stream: bad node", "error", err)
		return nil, s.refuse(ctx, true, drain, status.Error(codes.InvalidArgument, err.Error()))
	}
	if caller := authn.FromContext(ctx); caller != nil {
		id, err := s.checkIdentity(caller, proxy)
		if err != nil {
			s.refused.Add(1)
			s.connLog.Warn("rejected stream: identity check", "error", err)
			return nil, s.refuse(ctx, true, drain, status.Error(codes.PermissionDenied, err.Error()))
		}
		proxy.Identity = &id
	}
	proxy.Delta = delta
	for _, note := range proxy.MetadataNotes {
		s.log.Warn("node metadata not honoured as sent", "proxy", loglimit.Text(proxy.NodeID), "note", note)
	}
	return proxy, nil
}

// handleRequests handles the first request, then those the reader hands over, each under the turn (taken
// for the first by serve). Requests are handled, and their responses sent, on a goroutine of their own: a
// send to a proxy that stops reading blocks until the stream ends, and the stream ends only when serve
// returns, which it does at once when the connection is killed. Blocked there, the connection stayed in
// the table until the transport gave up on the proxy.
func (r *streamRun[Req]) handleRequests(first Req) {
	c := r.c
	_, err := r.handle(c, first, false)
	c.turn.Unlock()
	for err == nil {
		select {
		case <-r.queue.wake:
			for req, ok := r.queue.pop(); ok && err == nil; req, ok = r.queue.pop() {
				err = r.handleQueued(req)
				r.handing.Add(-1)
			}
		case <-r.ctx.Done():
			return
		}
	}
	c.fail(err)
}

// handleQueued handles one request the reader queued, under the turn.
func (r *streamRun[Req]) handleQueued(req Req) (err error) {
	c := r.c
	c.turn.Lock()
	defer c.turn.Unlock()
	if !c.ended.Load() {
		_, err = r.handle(c, req, false)
	}
	return err
}

// wait returns how the stream ends: the client's, the connection's failure or kill, or the server's.
func (r *streamRun[Req]) wait() error {
	c := r.c
	select {
	case err := <-r.recvErr:
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	case err := <-c.failed:
		return err
	case <-c.killed:
		return status.Error(codes.DeadlineExceeded, c.killMsg)
	case <-r.ctx.Done():
		return r.s.doneErr(r.ctx)
	}
}

// recvError is the status a stream ends with when reading a request failed (c is nil before the first
// request). A request over the limit is logged naming it (--max-request-bytes where the stream is
// authenticated); gRPC itself tells the client the sizes.
func (s *Server) recvError(ctx context.Context, c *Connection, err error) error {
	if status.Code(err) != codes.ResourceExhausted {
		return err
	}
	limit := fmt.Sprintf("%d bytes, --max-request-bytes", s.opts.MaxRequestBytes)
	if authn.FromContext(ctx) == nil {
		limit = fmt.Sprintf("%d bytes where clients are not authenticated", s.opts.MaxUnauthenticatedRequestBytes)
	}
	msg := fmt.Sprintf("request larger than the server accepts (%s): %s", limit, status.Convert(err).Message())
	attrs := []any{"error", msg}
	if c != nil {
		attrs = append(attrs, "conn", c.id, "proxy", loglimit.Text(c.proxy.NodeID))
	}
	s.refused.Add(1)
	s.connLog.Warn("request refused", attrs...)
	return status.Error(codes.ResourceExhausted, msg)
}

// fail ends the stream with err, unless it is ending already.
func (c *Connection) fail(err error) {
	select {
	case c.failed <- err:
	default:
	}
}

// end marks the stream over: a request or push that takes the turn afterwards does nothing.
func (c *Connection) end() { c.ended.Store(true) }

// deliverPush generates and sends req's push on the calling goroutine (a push worker). A send that outlasts
// SendTimeout kills the connection, which ends the stream and with it the blocked send.
func (c *Connection) deliverPush(req *model.PushRequest) {
	c.turn.Lock()
	defer c.turn.Unlock()
	if c.ended.Load() {
		return
	}
	if err := c.pushFn(c, req); err != nil {
		c.fail(err)
	}
}

// doneErr is the status for a stream whose context ended: shutdown or the client going away.
func (s *Server) doneErr(ctx context.Context) error {
	if s.base.Err() != nil {
		return status.Error(codes.Unavailable, "server is shutting down")
	}
	return status.FromContextError(ctx.Err()).Err()
}

// send writes msg with the send timeout. A gRPC send blocked by flow control cannot be interrupted: the
// timer kills the connection, whose handler then returns, and that ends the send.
func (c *Connection) send(msg proto.Message, typeURL string) error {
	wire, encoded, err := prepareResponse(msg)
	if err != nil {
		return status.Errorf(codes.Internal, "encoding the %s response: %v", typeURL, err)
	}
	var size int
	if encoded {
		size = wire.size
	} else {
		size = proto.Size(msg)
	}
	if n, ok := msg.(interface{ GetNonce() string }); ok && c.flight != nil {
		// Waiting for budget is not the proxy's fault: the send timeout starts after.
		if err := c.flight.acquire(c.ctx, typeURL, n.GetNonce(), size); err != nil {
			return status.FromContextError(err).Err()
		}
	}
	var out any = msg
	if encoded {
		enc, err := wire.encode()
		if err != nil {
			return status.Errorf(codes.Internal, "encoding the %s response: %v", typeURL, err)
		}
		out = enc
	}
	if c.sendTimer == nil {
		c.sendTimer = time.AfterFunc(c.srv.opts.SendTimeout, func() { c.kill(c.sendTimedOut()) })
	} else {
		c.sendTimer.Reset(c.srv.opts.SendTimeout)
	}
	err = c.stream.SendMsg(out)
	if !c.sendTimer.Stop() { // it fired: the connection is being killed
		return status.Error(codes.DeadlineExceeded, c.sendTimedOut())
	}
	if err != nil {
		return err
	}
	if tc := c.srv.byType[typeURL]; tc != nil {
		tc.responses.Add(1)
		tc.bytes.Add(uint64(size))
	}
	if c.pushing != nil && c.pushing.Push != nil {
		c.srv.rounds.sent(c.id, typeURL, c.pushing.Push.Version, size)
	}
	return nil
}

func (c *Connection) sendTimedOut() string {
	return fmt.Sprintf("send timed out after %v: the proxy is not reading", c.srv.opts.SendTimeout)
}

// nextResponse returns a nonce unique to this server process and connection, and a version_info made of
// the snapshot version and the response number (unique per response, so every push is visibly new).
func (c *Connection) nextResponse(push *model.PushContext) (version, nonce string) {
	c.seq++
	seq := strconv.FormatUint(c.seq, 10)
	return strconv.FormatUint(push.Version, 10) + "." + seq, c.srv.instance + "-" + strconv.FormatUint(c.num, 10) + "-" + seq
}

// needsPush reports whether req concerns any type the connection watches, and keeps the types for the
// push. Called by the distributor.
func (c *Connection) needsPush(req *model.PushRequest) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	types := c.typesOf(req)
	c.checked.req, c.checked.types = req, types
	return len(types) > 0
}

// pushTypes returns the watched types req concerns, in push order.
func (c *Connection) pushTypes(req *model.PushRequest) []*watch {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.checked.req == req {
		return c.checked.types
	}
	return c.typesOf(req)
}

// typesOf asks each watched type's generator whether req concerns it. The caller holds mu.
func (c *Connection) typesOf(req *model.PushRequest) []*watch {
	var types []*watch
	for _, w := range c.watched {
		if c.srv.needsPush(c.proxy, w, req) {
			types = append(types, w)
		}
	}
	slices.SortFunc(types, pushOrder)
	return types
}

// maxUnknownTypes is how many types without a generator a connection logs.
const maxUnknownTypes = 16

// requestGenerator returns the generator for a request's type. A request without a type is an error; a
// type no generator serves is ignored (nil, nil), logged once per connection.
func (c *Connection) requestGenerator(typeURL string) (model.Generator, error) {
	if typeURL == "" {
		return nil, status.Error(codes.InvalidArgument, "request has no type_url")
	}
	// A ztunnel's identity was checked against the trusted node accounts at admission: the types only a
	// ztunnel may have are refused to any other proxy on an authenticated stream.
	if c.srv.policyOf(typeURL).ZtunnelOnly && c.proxy.Identity != nil && c.proxy.Type != model.Ztunnel {
		return nil, status.Errorf(codes.PermissionDenied, "node %q is a %s, not a ztunnel: %s is served to ztunnels of a trusted node "+
			"account only", loglimit.Text(c.proxy.NodeID), c.proxy.Type, typeURL)
	}
	gen := c.srv.opts.Generators[typeURL]
	// Logged once per type, for the first few types only: a client choosing a new type URL per request
	// must not grow the map or the log without end.
	if gen == nil && !c.unknownSeen[typeURL] && len(c.unknownSeen) < maxUnknownTypes {
		if c.unknownSeen == nil {
			c.unknownSeen = map[string]bool{}
		}
		c.unknownSeen[typeURL] = true
		c.srv.unknownTy.Add(1)
		c.srv.log.Warn("request for a type no generator serves; ignored", "conn", c.id, "type", loglimit.Text(typeURL))
	}
	return gen, nil
}

// generate runs gen for w, which is a watch's subscription or a view of part of it.
func (c *Connection) generate(gen model.Generator, w *model.WatchedResource, push *model.PushContext,
	req *model.PushRequest) (model.Resources, bool) {
	res, err := gen.Generate(c.proxy, push, w, req)
	if err != nil {
		c.generateFailed(w.TypeURL, err)
		return nil, false
	}
	return res, true
}

// generateFailed keeps the proxy on what it has: a failed generation sends nothing.
func (c *Connection) generateFailed(typeURL string, err error) {
	c.srv.genErrors.Add(1)
	c.genFailed = true
	c.srv.log.Error("generating resources failed; proxy keeps its config", "conn", c.id, "type", typeURL, "error", err)
}

func (c *Connection) watch(w *watch) {
	w.gen, w.counters, w.policy = c.srv.opts.Generators[w.TypeURL], c.srv.byType[w.TypeURL], c.srv.policies[w.TypeURL]
	c.mu.Lock()
	c.watched[w.TypeURL] = w
	c.mu.Unlock()
}

func (c *Connection) sent(w *watch, version, nonce string) {
	c.mu.Lock()
	w.VersionSent, w.NonceSent, w.LastSent = version, nonce, time.Now()
	c.mu.Unlock()
}

func (c *Connection) ack(w *watch, version, nonce string) {
	c.mu.Lock()
	w.VersionAcked, w.NonceAcked, w.LastAcked = version, nonce, time.Now()
	w.LastError = ""
	c.mu.Unlock()
	c.observeAck(w, nonce, false, "")
}

// nack records a rejection. Nothing is re-sent: the proxy keeps its last good config until the next push
// (which may carry a fix), so a proxy that rejects something cannot make the server loop.
func (c *Connection) nack(w *watch, nonce, msg string) {
	if w.nacked == nonce {
		return // the same rejection repeated: logged and counted already
	}
	msg = loglimit.Cut(msg, maxNACKText)
	c.mu.Lock()
	w.nacked, w.LastError = nonce, msg
	w.NACKs++
	c.mu.Unlock()
	if tc := c.srv.byType[w.TypeURL]; tc != nil {
		tc.nacks.Add(1)
	}
	c.observeAck(w, nonce, true, msg)
	c.srv.log.Warn("proxy rejected config", "conn", c.id, "proxy", loglimit.Text(c.proxy.NodeID), "type", w.TypeURL,
		"version", w.VersionSent, "nonce", nonce, "error", msg)
	if p := c.srv.policyOf(w.TypeURL); p != nil && p.Rejected != nil && p.Rejected(c.proxy, msg) {
		// Its generator serves it another shape now: a push of everything sends it.
		c.srv.pushesQueued.Add(1)
		c.srv.queue.Enqueue(c, &model.PushRequest{Full: true, Reason: map[string]int{"nack-fallback": 1}, Start: time.Now()})
	}
}

// maxNACKText is how much of a NACK's error message is kept and logged: Envoy cuts its own at 4 KiB too.
const maxNACKText = 4096

// intern returns the canonical copy of a subscribed name: hundreds of proxies subscribe to the same 900
// cluster names, each request decoding its own copies.
func intern(name string) string { return unique.Make(name).Value() }

func (c *Connection) status() ConnectionStatus {
	st := ConnectionStatus{
		ID: c.id, ProxyID: c.proxy.ID, NodeID: c.proxy.NodeID, Type: c.proxy.Type, Namespace: c.proxy.Namespace,
		Delta: c.delta, Peer: c.peer, ConnectedAt: c.connectedAt, Notes: c.proxy.ShapeNotes(),
	}
	c.mu.RLock()
	for _, t := range slices.Sorted(maps.Keys(c.watched)) {
		st.Watched = append(st.Watched, c.watched[t].WatchedResource)
	}
	c.mu.RUnlock()
	return st
}
