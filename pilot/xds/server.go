package xds

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/sextantmesh/sextant/pilot/authn"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pkg/loglimit"
)

// Pipeline is what the server needs from push.Pipeline. No stream is admitted while Ready is false; a
// Pipeline with a NotReadyReason() string method says why to the refused client.
type Pipeline interface {
	Current() *model.PushContext
	Ready() bool
	Subscribe(func(*model.PushRequest))
}

// Options configure a Server.
type Options struct {
	Pipeline Pipeline
	// Generators by type URL. A request for another type is answered with nothing.
	Generators map[string]model.Generator
	// Policies by type URL: how the clients of a type want its resources ordered and linked. A type
	// without one has the zero policy.
	Policies map[string]model.TypePolicy
	Logger   *slog.Logger
	// PushConcurrency bounds how many connections are pushed to at once (default 100).
	PushConcurrency int
	// SendTimeout is how long a push may take before the connection is closed as not reading (default 5s).
	SendTimeout time.Duration
	// MaxConnectionAge makes clients reconnect now and then, which spreads them over replicas after a
	// scale-up (zero: never). At that age (±10%) a connection is told to go away (HTTP/2 GOAWAY), so the
	// client opens its next stream on a new connection, and MaxConnectionAgeGrace later (default
	// DefaultMaxConnectionAgeGrace) it is closed: an ADS stream never ends by itself, and with no grace it
	// stayed on the old connection for good.
	MaxConnectionAge      time.Duration
	MaxConnectionAgeGrace time.Duration
	// NewStreamsPerSecond limits how fast new streams are accepted, so a reconnect storm (e.g. after a
	// restart) is spread out instead of every proxy asking for full config at once. 0 means no limit.
	NewStreamsPerSecond float64
	// NewStreamsBurst is how many streams may start at once before the limit applies (default: one second's worth).
	NewStreamsBurst int
	// MaxBytesInFlight bounds the response bytes sent to all proxies and not yet ACKed or NACKed; sends
	// beyond it wait. It caps the memory a reconnect storm takes (default DefaultMaxBytesInFlight; <0: no bound).
	MaxBytesInFlight int64
	// MaxBytesInFlightPerProxy is the most one response counts for in MaxBytesInFlight, so a few proxies that
	// stop reading leave most of it to the others until the send timeout closes them (default
	// DefaultMaxBytesInFlightPerProxy, at most MaxBytesInFlight).
	MaxBytesInFlightPerProxy int64
	// MaxRequestBytes is the largest request accepted on a server made with AuthenticatedGRPCServerOptions
	// (default DefaultMaxRequestBytes): enough for a subscription to hundreds of thousands of names.
	MaxRequestBytes int
	// MaxUnauthenticatedRequestBytes is the largest request accepted on a server made with GRPCServerOptions,
	// whose clients are not authenticated (default DefaultMaxUnauthenticatedRequestBytes).
	MaxUnauthenticatedRequestBytes int
	// Observer, if set, is told about pushes, responses and ACKs (metrics, distribution tracking).
	Observer Observer
	// ConnectionHook, if set, hears of each stream's proxy before it is served (and may refuse it), and of
	// its end.
	ConnectionHook ConnectionHook
	// TrustedNodeAccounts are the identities (NAMESPACE/SERVICE_ACCOUNT) a ztunnel must have on an
	// authenticated stream (see RegisterAuthenticated): a ztunnel is served every workload.
	TrustedNodeAccounts authn.Accounts
}

// Server serves ADS. It implements discovery.AggregatedDiscoveryServiceServer.
type Server struct {
	opts Options
	// reports are the ConnectionHook's ReportHook and the types it hears, fixed at construction.
	reports     ReportHook
	reportTypes map[string]bool
	log         *slog.Logger
	connLog     *loglimit.Log // connections accepted, ended and refused
	queue       *pushQueue
	rounds      *rounds
	// distributing is set while distribute hands a request out: the queue may drain meanwhile, and the
	// round is not over.
	distributing atomic.Int32
	limiter      *rate.Limiter
	instance     string // random per process, so nonces from a previous run never look current
	inflight     *budget

	base   context.Context // cancelled by Shutdown
	cancel context.CancelFunc

	mu      sync.RWMutex
	conns   map[*Connection]struct{}
	connSeq atomic.Uint64

	incomingMu sync.Mutex
	incoming   *model.PushRequest
	wake       chan struct{}

	streams sync.WaitGroup
	workers sync.WaitGroup

	byType                                           map[string]*typeCounters
	policies                                         map[string]*model.TypePolicy
	children                                         map[string][]string // by parent type, the types with that Parent
	connects, disconnects, refused, sendTimeouts     atomic.Uint64
	pushRequests, pushesQueued, genErrors, unknownTy atomic.Uint64
}

var _ discovery.AggregatedDiscoveryServiceServer = (*Server)(nil)

// NewServer creates a server, subscribes it to the pipeline and starts its push workers. Shutdown stops them.
func NewServer(opts Options) *Server {
	if opts.Pipeline == nil {
		panic("xds.NewServer: Options.Pipeline is nil")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.PushConcurrency <= 0 {
		opts.PushConcurrency = 100
	}
	if opts.SendTimeout <= 0 {
		opts.SendTimeout = 5 * time.Second
	}
	var id [4]byte
	_, _ = rand.Read(id[:])
	s := &Server{
		opts:     opts,
		log:      opts.Logger,
		connLog:  loglimit.New(opts.Logger, connLogRate, connLogBurst),
		queue:    newPushQueue(),
		rounds:   newRounds(opts.Logger),
		instance: hex.EncodeToString(id[:]),
		conns:    map[*Connection]struct{}{},
		wake:     make(chan struct{}, 1),
		byType:   map[string]*typeCounters{},
	}
	if rh, ok := opts.ConnectionHook.(ReportHook); ok {
		s.reports, s.reportTypes = rh, map[string]bool{}
		for _, t := range rh.ReportTypes() {
			s.reportTypes[t] = true
		}
	}
	for t := range opts.Generators {
		s.byType[t] = &typeCounters{}
	}
	s.policies, s.children = typePolicies(opts)
	if opts.MaxBytesInFlight == 0 {
		opts.MaxBytesInFlight = DefaultMaxBytesInFlight
	}
	if opts.MaxBytesInFlight > 0 {
		s.opts.MaxBytesInFlight = opts.MaxBytesInFlight
		s.inflight = newBudget(opts.MaxBytesInFlight)
	}
	if s.opts.MaxBytesInFlightPerProxy <= 0 {
		s.opts.MaxBytesInFlightPerProxy = DefaultMaxBytesInFlightPerProxy
	}
	if s.opts.MaxBytesInFlight > 0 {
		s.opts.MaxBytesInFlightPerProxy = min(s.opts.MaxBytesInFlightPerProxy, s.opts.MaxBytesInFlight)
	}
	if s.opts.MaxRequestBytes <= 0 {
		s.opts.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if s.opts.MaxUnauthenticatedRequestBytes <= 0 {
		s.opts.MaxUnauthenticatedRequestBytes = DefaultMaxUnauthenticatedRequestBytes
	}
	if s.opts.MaxConnectionAge > 0 && s.opts.MaxConnectionAgeGrace <= 0 {
		s.opts.MaxConnectionAgeGrace = DefaultMaxConnectionAgeGrace
	}
	if opts.NewStreamsPerSecond > 0 {
		burst := opts.NewStreamsBurst
		if burst <= 0 {
			burst = max(1, int(math.Ceil(opts.NewStreamsPerSecond)))
		}
		s.limiter = rate.NewLimiter(rate.Limit(opts.NewStreamsPerSecond), burst)
	}
	s.base, s.cancel = context.WithCancel(context.Background())
	opts.Pipeline.Subscribe(s.onPushRequest)
	s.workers.Add(1 + opts.PushConcurrency)
	go s.distribute()
	for range opts.PushConcurrency {
		go s.worker()
	}
	return s
}

// typePolicies returns the policy of every type that has a generator or a policy, and the child types of
// each parent type, sorted.
func typePolicies(opts Options) (map[string]*model.TypePolicy, map[string][]string) {
	policies := map[string]*model.TypePolicy{}
	children := map[string][]string{}
	for t := range opts.Generators {
		policies[t] = &model.TypePolicy{}
	}
	for t, p := range opts.Policies {
		if p.Parent != "" && p.ParentOf == nil || p.FollowUp != "" && p.FollowUpOf == nil {
			panic("xds.NewServer: the policy of " + t + " names a Parent or FollowUp type without its function")
		}
		policies[t] = &p
		if p.Parent != "" {
			children[p.Parent] = append(children[p.Parent], t)
		}
	}
	for _, c := range children {
		slices.Sort(c)
	}
	return policies, children
}

// policyOf returns typeURL's policy.
func (s *Server) policyOf(typeURL string) *model.TypePolicy {
	if p := s.policies[typeURL]; p != nil {
		return p
	}
	return &model.TypePolicy{}
}

// Register adds the ADS service to g, which must have been created with GRPCServerOptions.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	discovery.RegisterAggregatedDiscoveryServiceServer(g, s)
}

// requestWindow is the HTTP/2 flow-control window the server grants each proxy's stream and connection.
// Requests are small (ACKs and subscriptions); a fixed window also turns off gRPC's bandwidth estimation,
// which answers every burst of incoming data with a window update and a PING: with 300 proxies ACKing a
// push, that was a second round trip per ACK, as many writes and reads again as the push itself.
const requestWindow = 1 << 20

// GRPCServerOptions returns the options a grpc.Server serving ADS to clients that are not authenticated
// (Register) must be created with. gRPC reads a whole message before any handler sees it, so its size
// limit is what one unauthenticated request can make the server hold: MaxUnauthenticatedRequestBytes.
func (s *Server) GRPCServerOptions() []grpc.ServerOption {
	return s.grpcServerOptions(s.opts.MaxUnauthenticatedRequestBytes)
}

// AuthenticatedGRPCServerOptions returns the options of a grpc.Server whose every service authenticates
// its callers before reading their requests (RegisterAuthenticated, the CA's certificate service): requests
// up to MaxRequestBytes. A refused caller's request is never read, so it holds at most the stream's
// flow-control window (requestWindow) until its status is sent.
func (s *Server) AuthenticatedGRPCServerOptions() []grpc.ServerOption {
	return s.grpcServerOptions(s.opts.MaxRequestBytes)
}

// grpcServerOptions are keepalive (so dead proxies are noticed), connection age, a fixed flow-control
// window, a shared write buffer (idle connections hold no buffer), the codec that sends responses as the
// connection encoded them, and the largest request read.
func (s *Server) grpcServerOptions(maxRequestBytes int) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:                  30 * time.Second,
			Timeout:               10 * time.Second,
			MaxConnectionAge:      s.opts.MaxConnectionAge,
			MaxConnectionAgeGrace: s.opts.MaxConnectionAgeGrace,
		}),
		// Envoy pings every 30s or so by default; allow it without streams in flight.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 15 * time.Second, PermitWithoutStream: true}),
		grpc.SharedWriteBuffer(true),
		grpc.InitialWindowSize(requestWindow),
		grpc.InitialConnWindowSize(requestWindow),
		// Responses are encoded by the connection (see encodeResponse).
		grpc.ForceServerCodecV2(newWireCodec()),
		grpc.MaxRecvMsgSize(maxRequestBytes),
	}
}

// Connection lines (accepted, ended, refused) are written at most connLogBurst at once and connLogRate a
// second after that, per message: anyone who reaches the port can open streams far faster, and each line
// was written. The Counters count every connection; the log keeps a sample and says how much it left out.
const (
	connLogRate  = 20
	connLogBurst = 200
)

// Shutdown refuses new streams, closes every open one with codes.Unavailable (clients reconnect elsewhere)
// and stops the workers. It returns when all are gone or ctx is done.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.cancel() // under mu: no stream is counted in after this (see startStream)
	s.mu.Unlock()
	s.queue.Close()
	done := make(chan struct{})
	go func() {
		s.streams.Wait()
		s.workers.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startStream counts a stream in, unless shutting down.
func (s *Server) startStream() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.base.Err() != nil {
		s.refused.Add(1)
		return false
	}
	s.streams.Add(1)
	return true
}

// Push hands req to the connections it concerns, as a request from the pipeline would be: for changes
// the pipeline does not see (an authorization answer). It never blocks.
func (s *Server) Push(req *model.PushRequest) { s.onPushRequest(req) }

// onPushRequest runs on the pipeline's goroutine: it only merges and signals, never blocks.
func (s *Server) onPushRequest(req *model.PushRequest) {
	s.pushRequests.Add(1)
	s.incomingMu.Lock()
	s.incoming = s.incoming.Merge(req)
	s.incomingMu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// distribute hands each push request to the queue of every connection it concerns.
func (s *Server) distribute() {
	defer s.workers.Done()
	for {
		select {
		case <-s.wake:
		case <-s.base.Done():
			return
		}
		s.distributing.Add(1)
		s.incomingMu.Lock()
		req := s.incoming
		s.incoming = nil
		s.incomingMu.Unlock()
		if req != nil {
			for _, c := range s.connections() {
				if c.needsPush(req) {
					s.pushesQueued.Add(1)
					s.queue.Enqueue(c, req)
				}
			}
		}
		s.distributing.Add(-1)
		s.endRoundIfDrained()
	}
}

// endRoundIfDrained ends the push round once nothing is queued, in flight or being handed out.
func (s *Server) endRoundIfDrained() {
	if s.distributing.Load() == 0 && s.queue.Drained() {
		s.rounds.end()
	}
}

func (s *Server) worker() {
	defer s.workers.Done()
	for {
		c, req := s.queue.Dequeue()
		if c == nil {
			return
		}
		c.deliverPush(req)
		s.queue.Done(c)
		s.endRoundIfDrained()
	}
}

func (s *Server) snapshot(req *model.PushRequest) *model.PushContext {
	cur := s.opts.Pipeline.Current()
	if req != nil && req.Push != nil && (cur == nil || req.Push.Version > cur.Version) {
		return req.Push
	}
	return cur
}

func (s *Server) needsPush(p *model.Proxy, w *watch, req *model.PushRequest) bool {
	gen := w.gen
	if gen == nil {
		return false
	}
	if f, ok := gen.(model.PushFilter); ok {
		return f.NeedsPush(p, &w.WatchedResource, req)
	}
	return req.Full
}

// admit refuses streams while shutting down or before the first snapshot, and paces new streams.
func (s *Server) admit(ctx context.Context) error {
	if s.base.Err() != nil {
		s.refused.Add(1)
		return status.Error(codes.Unavailable, "server is shutting down")
	}
	if !s.opts.Pipeline.Ready() {
		s.refused.Add(1)
		reason := "the first configuration snapshot is not built yet"
		if r, ok := s.opts.Pipeline.(interface{ NotReadyReason() string }); ok {
			if why := r.NotReadyReason(); why != "" {
				reason = why
			}
		}
		return status.Error(codes.Unavailable, "not ready: "+reason)
	}
	if s.limiter != nil {
		if err := s.limiter.Wait(ctx); err != nil {
			s.refused.Add(1)
			return status.Error(codes.Unavailable, "too many new streams: "+err.Error())
		}
	}
	return nil
}

func (s *Server) connections() []*Connection {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*Connection, 0, len(s.conns))
	for c := range s.conns {
		out = append(out, c)
	}
	return out
}

func (s *Server) add(c *Connection) {
	s.mu.Lock()
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	s.connects.Add(1)
	s.connLog.Info("proxy connected", "conn", c.id, "proxy", loglimit.Text(c.proxy.NodeID), "type", c.proxy.Type, "delta", c.delta,
		"peer", c.peer, "agent", loglimit.Text(c.proxy.UserAgent))
}

func (s *Server) remove(c *Connection, err error) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.queue.Remove(c)
	if obs := s.opts.Observer; obs != nil {
		// After the last push or request that holds the turn: a push still sending when the stream ended
		// reports first, so the Observer hears nothing of the connection after Closed. Not waited for here:
		// a send blocked by flow control ends only once this handler has returned.
		go func() {
			c.turn.Lock()
			defer c.turn.Unlock()
			obs.Closed(c.id)
		}()
	}
	s.disconnects.Add(1)
	attrs := []any{"conn", c.id, "proxy", loglimit.Text(c.proxy.NodeID), "connected", time.Since(c.connectedAt).Round(time.Millisecond)}
	if err != nil && !errors.Is(err, context.Canceled) && status.Code(err) != codes.Canceled {
		attrs = append(attrs, "reason", err.Error())
	}
	s.connLog.Info("proxy disconnected", attrs...)
}
