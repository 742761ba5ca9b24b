package xdsclient

// The ztunnel model follows istio/ztunnel's src/xds/client.rs: one initial delta request per type, Address
// then Authorization, each with the node and initial_resource_versions of everything known (names looked
// up and not yet answered too, with an empty version); in on-demand mode the Address request subscribes
// and unsubscribes "*" at once ("subscribe to nothing"), Authorization stays a legacy wildcard (no names);
// in wildcard mode both name nothing. Every resource sent is applied, whether asked for or not; rejected
// ones are not recorded as known, so a reconnect gets them again; ACKs and NACKs carry only the type and
// nonce. A lookup (src/state.rs fetch_on_demand) subscribes one name, "NETWORK/IP" for an address, and
// waits until the name is sent or removed. On a reconnect lookups are not subscribed again: they are only
// in initial_resource_versions.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// ZtunnelOptions configure a ztunnel model.
type ZtunnelOptions struct {
	Addr string
	// IP, Pod, Namespace and NodeName make the node: ztunnel~IP~POD.NS~NS.svc.cluster.local.
	IP, Pod, Namespace, NodeName string
	// OnDemand subscribes to no address up front and looks addresses up one by one.
	OnDemand bool
	// Reject, when set, is asked about every resource: an error rejects it and NACKs the response.
	Reject func(typeURL, name string, a *anypb.Any) error
}

// Ztunnel is a model of ztunnel's xDS client.
type Ztunnel struct {
	opts ZtunnelOptions
	node *core.Node

	mu     sync.Mutex
	cc     *grpc.ClientConn
	cancel context.CancelFunc
	gen    int
	stream grpc.BidiStreamingClient[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]

	known      map[string]map[string]string   // type → name → version ("" for a lookup not answered)
	held       map[string]map[string]Resource // type → name → resource: the proxy state
	pending    map[string]*lookup
	onStream   map[string]bool // names looked up on the current stream
	everLooked map[string]bool
	firstSent  map[string]time.Time // types whose initial request has no response yet

	nacks     int
	bytes     int64
	responses int
	lastRecv  time.Time
	rejected  rejections
	resent    []Resend
}

type lookup struct {
	since time.Time
	done  chan struct{}
}

// NewZtunnel returns a model; Connect starts it.
func NewZtunnel(opts ZtunnelOptions) *Ztunnel {
	md := &structpb.Struct{Fields: map[string]*structpb.Value{
		"NAME": structpb.NewStringValue(opts.Pod), "NAMESPACE": structpb.NewStringValue(opts.Namespace),
		"INSTANCE_IPS": structpb.NewStringValue(opts.IP), "NODE_NAME": structpb.NewStringValue(opts.NodeName),
	}}
	node := &core.Node{Id: fmt.Sprintf("ztunnel~%s~%s.%s~%s.svc.cluster.local", opts.IP, opts.Pod, opts.Namespace, opts.Namespace),
		Metadata: md}
	return &Ztunnel{opts: opts, node: node, known: map[string]map[string]string{}, rejected: rejections{},
		held: map[string]map[string]Resource{AddressType: {}, AuthorizationType: {}}, pending: map[string]*lookup{},
		onStream: map[string]bool{}, everLooked: map[string]bool{}, firstSent: map[string]time.Time{}}
}

// NodeID returns the node id.
func (z *Ztunnel) NodeID() string { return z.node.GetId() }

// OnDemand reports whether the model looks addresses up on demand.
func (z *Ztunnel) OnDemand() bool { return z.opts.OnDemand }

// Connect opens the stream and sends the initial requests.
func (z *Ztunnel) Connect() error {
	cc, err := grpc.NewClient("passthrough:///"+z.opts.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := discovery.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		cancel()
		_ = cc.Close()
		return err
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.cancel != nil {
		cancel()
		_ = cc.Close()
		return errors.New("already connected")
	}
	z.gen++
	z.cc, z.cancel, z.stream = cc, cancel, s
	z.rejected = rejections{}
	clear(z.onStream)
	for _, t := range []string{AddressType, AuthorizationType} {
		req := &discovery.DeltaDiscoveryRequest{TypeUrl: t, Node: z.node}
		if z.opts.OnDemand && t == AddressType {
			req.ResourceNamesSubscribe, req.ResourceNamesUnsubscribe = []string{wildcard}, []string{wildcard}
		}
		if len(z.known[t]) > 0 {
			req.InitialResourceVersions = maps.Clone(z.known[t])
		}
		z.firstSent[t] = time.Now()
		if err := s.Send(req); err != nil {
			return err
		}
	}
	go z.read(s, z.gen)
	return nil
}

// Disconnect ends the stream; the model keeps what it has.
func (z *Ztunnel) Disconnect() {
	z.mu.Lock()
	cancel, cc := z.cancel, z.cc
	z.cancel, z.cc, z.stream = nil, nil, nil
	z.gen++
	z.mu.Unlock()
	if cancel != nil {
		cancel()
		_ = cc.Close()
	}
}

// Lookup asks for an address on demand ("NETWORK/IP", or a workload uid or "NAMESPACE/HOSTNAME") and
// returns a channel closed once the server sent it or said it does not exist.
func (z *Ztunnel) Lookup(name string) (<-chan struct{}, error) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if !z.opts.OnDemand {
		return nil, errors.New("lookups need on-demand mode")
	}
	if z.stream == nil {
		return nil, errors.New("not connected")
	}
	l := &lookup{since: time.Now(), done: make(chan struct{})}
	if old := z.pending[name]; old != nil {
		close(old.done) // ztunnel keeps one waiter per name: the newer replaces it
	}
	z.pending[name] = l
	if z.known[AddressType] == nil {
		z.known[AddressType] = map[string]string{}
	}
	if _, ok := z.known[AddressType][name]; !ok {
		z.known[AddressType][name] = ""
	}
	z.onStream[name] = true
	z.everLooked[name] = true
	return l.done, z.stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: AddressType, ResourceNamesSubscribe: []string{name}})
}

func (z *Ztunnel) read(s grpc.BidiStreamingClient[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse], gen int) {
	for {
		resp, err := s.Recv()
		if err != nil {
			return
		}
		z.mu.Lock()
		if z.gen == gen {
			z.handle(resp)
		}
		z.mu.Unlock()
	}
}

func (z *Ztunnel) handle(resp *discovery.DeltaDiscoveryResponse) {
	z.bytes += int64(proto.Size(resp))
	z.responses++
	z.lastRecv = time.Now()
	t := resp.GetTypeUrl()
	delete(z.firstSent, t)
	held := z.held[t]
	if held == nil {
		// An unknown type: ztunnel logs it and still ACKs.
		_ = z.stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: t, ResponseNonce: resp.GetNonce()})
		return
	}
	var problems []string
	bad := map[string]bool{}
	for _, r := range resp.GetResources() {
		if at, ok := z.rejected.seen(t, r.GetName(), r.GetResource()); ok {
			z.resent = append(z.resent, Resend{TypeURL: t, Name: r.GetName(), Rejected: at, Resent: time.Now()})
		}
		err := func() error {
			if r.GetResource().GetTypeUrl() != t {
				return fmt.Errorf("type %s, want %s", r.GetResource().GetTypeUrl(), t)
			}
			if _, err := r.GetResource().UnmarshalNew(); err != nil {
				return err
			}
			if z.opts.Reject != nil {
				return z.opts.Reject(t, r.GetName(), r.GetResource())
			}
			return nil
		}()
		if err != nil {
			problems = append(problems, r.GetName()+": "+err.Error())
			bad[r.GetName()] = true
			z.rejected.add(t, r.GetName(), r.GetResource())
			continue
		}
		held[r.GetName()] = Resource{Name: r.GetName(), Version: r.GetVersion(), Any: r.GetResource()}
	}
	for _, n := range resp.GetRemovedResources() {
		delete(held, n)
	}
	// Then the xDS cache, which notifies the lookups.
	for _, n := range resp.GetRemovedResources() {
		delete(z.known[t], n)
		z.notify(t, n)
	}
	for _, r := range resp.GetResources() {
		z.notify(t, r.GetName())
		if !bad[r.GetName()] {
			if z.known[t] == nil {
				z.known[t] = map[string]string{}
			}
			z.known[t][r.GetName()] = r.GetVersion()
		}
	}
	req := &discovery.DeltaDiscoveryRequest{TypeUrl: t, ResponseNonce: resp.GetNonce()}
	if len(problems) > 0 {
		z.nacks++
		req.ErrorDetail = &rpcstatus.Status{Message: strings.Join(problems, "; ")}
	}
	_ = z.stream.Send(req)
}

func (z *Ztunnel) notify(t, name string) {
	if t != AddressType {
		return
	}
	if l := z.pending[name]; l != nil {
		close(l.done)
		delete(z.pending, name)
	}
}

// Held returns the resources of a type the ztunnel holds.
func (z *Ztunnel) Held(typeURL string) map[string]Resource {
	z.mu.Lock()
	defer z.mu.Unlock()
	return cloneHeld(z.held[typeURL])
}

// LookedUp returns the names looked up on the current stream (the subscription the server should have).
func (z *Ztunnel) LookedUp() []string {
	z.mu.Lock()
	defer z.mu.Unlock()
	return slices.Sorted(maps.Keys(z.onStream))
}

// Unanswered lists lookups and initial requests older than older that the server has not answered.
func (z *Ztunnel) Unanswered(older time.Duration) []string {
	z.mu.Lock()
	defer z.mu.Unlock()
	now := time.Now()
	var out []string
	for _, t := range slices.Sorted(maps.Keys(z.firstSent)) {
		if now.Sub(z.firstSent[t]) > older {
			out = append(out, t+": initial request not answered")
		}
	}
	for _, n := range slices.Sorted(maps.Keys(z.pending)) {
		if now.Sub(z.pending[n].since) > older {
			out = append(out, "lookup of "+n+" neither sent nor removed")
		}
	}
	return out
}

// NACKs is the number of responses rejected.
func (z *Ztunnel) NACKs() int {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.nacks
}

// Rejected returns what was rejected on this stream and not replaced by the server since.
func (z *Ztunnel) Rejected() []Rejection {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.rejected.list()
}

// ResentAfterNACK lists resources sent again unchanged right after they were rejected.
func (z *Ztunnel) ResentAfterNACK() []Resend {
	z.mu.Lock()
	defer z.mu.Unlock()
	return slices.Clone(z.resent)
}

// Stats returns the responses and bytes received, and when the last response arrived.
func (z *Ztunnel) Stats() (responses int, bytes int64, last time.Time) {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.responses, z.bytes, z.lastRecv
}

// lookedUpBefore reports whether name was looked up on an earlier stream.
func (z *Ztunnel) lookedUpBefore(name string) bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.everLooked[name] && !z.onStream[name]
}
