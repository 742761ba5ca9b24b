package xdsclient

// The Envoy model follows Envoy's own client code (github.com/envoyproxy/envoy):
//   - delta ADS: source/extensions/config_subscription/grpc/delta_subscription_state.cc (requested, wildcard
//     and ambiguous names; legacy wildcard; initial_resource_versions on a new stream; the node on every
//     request), new_grpc_mux_impl.cc (ACKs before subscription changes, in subscription order; a paused
//     type's ACKs wait), watch_map.cc (a name is subscribed only when no other watch has it, unsubscribed
//     when none is left; resources go to the watches interested in them, VHDS by the text before the last
//     "/");
//   - state-of-the-world ADS: grpc_mux_impl.cc (every added watch sends a request with all the type's
//     names, even unchanged; version_info is the last accepted, a NACK keeps it; the node only in the
//     stream's first request with set_node_on_first_message_only, as Istio's bootstrap sets it; EDS and RDS
//     responses reach only the watches whose names they carry, CDS and LDS replace everything);
//   - source/common/upstream/cds_api_helper.cc (EDS paused during a CDS update; bad clusters are reported
//     while the good ones apply), cluster_manager_impl.cc (an added or changed cluster warms; an unchanged
//     one is skipped; CDS stays paused, its ACK held, while any cluster warms after initialization; LDS
//     starts once the first clusters are warm), source/extensions/clusters/eds/eds.cc (an EDS cluster
//     subscribes eds_cluster_config.service_name, else its name, and is warm at the first load assignment
//     or removal for it, or at initial_fetch_timeout);
//   - source/common/listener_manager/ and source/common/rds/route_config_provider_manager.cc,
//     rds_route_config_subscription.cc (a listener warms until every route configuration its
//     HttpConnectionManagers name through rds has arrived once; a route configuration already received is
//     shared at once; delta removals of route configurations are ignored), source/common/router/vhds.cc
//     (VHDS is delta only, subscribed with no names, and a route configuration with vhds waits for its first
//     virtual host update).
// Timings (initial_fetch_timeout) are configurable; everything else is as Envoy does it.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerpb "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// EnvoyOptions configure an Envoy model.
type EnvoyOptions struct {
	// Addr is the xDS server's gRPC address.
	Addr string
	// NodeID is the node id, e.g. sidecar~10.0.0.1~pod.ns~ns.svc.cluster.local.
	NodeID   string
	Metadata map[string]string
	// Delta selects delta ADS, else state-of-the-world.
	Delta bool
	// BuildVersion is node.user_agent_build_version (major, minor, patch); zero sends none.
	BuildVersion [3]uint32
	// InitialFetchTimeout ends a wait for a resource (DefaultInitialFetchTimeout when zero).
	InitialFetchTimeout time.Duration
	// Reject, when set, is asked about every resource before it is applied: an error NACKs the response.
	Reject func(typeURL, name string, a *anypb.Any) error
}

// Envoy is a model of an Envoy proxy's xDS client: ADS subscriptions, cluster and listener warming, ACKs
// and NACKs. It keeps its config across reconnects, as Envoy does.
type Envoy struct {
	opts EnvoyOptions
	node *core.Node

	mu     sync.Mutex
	cc     *grpc.ClientConn
	cancel context.CancelFunc
	gen    int // the stream's number: a reader of an older stream does nothing
	dstr   grpc.BidiStreamingClient[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]
	sstr   grpc.BidiStreamingClient[discovery.DiscoveryRequest, discovery.DiscoveryResponse]
	// firstOnStream is true until the stream's first request is sent (state-of-the-world node).
	firstOnStream bool

	order  []string // types in the order subscribed (new_grpc_mux_impl's subscription_ordering_)
	dstate map[string]*deltaState
	sstate map[string]*sotwState
	acks   []ack // delta: the pausable ACK queue

	// explicit holds names asked for on top of a wildcard type (on-demand style), by type.
	explicit map[string]map[string]bool
	// interest is the names the watches hold for EDS and RDS, and the route configurations VHDS files
	// virtual hosts under.
	interest map[string]map[string]bool

	clusters, warmingClusters   map[string]*cluster
	cdsStarted, initialized     bool
	endpoints                   map[string]Resource
	listeners, warmingListeners map[string]*listener
	ldsStarted                  bool
	routes                      map[string]*routeProvider
	vhosts                      map[string]map[string]Resource // route configuration → virtual host name → resource

	timeouts  []Timeout
	nacks     int
	bytes     int64
	responses int
	lastRecv  time.Time
	rejected  rejections
	lastNACK  map[string]nackedResponse // state-of-the-world: the last NACKed response per type
	resent    []Resend
	errs      []string
}

type nackedResponse struct {
	resp *discovery.DiscoveryResponse
	at   time.Time
}

type ack struct {
	typeURL, nonce string
	nack           *rpcstatus.Status
}

// sotwState is a state-of-the-world type's request as grpc_mux_impl.cc keeps it.
type sotwState struct {
	names     []string // sorted; empty for a wildcard type
	version   string
	nonce     string
	nack      *rpcstatus.Status
	want      bool      // a request is queued
	lastNames []string  // the names of the last request sent on this stream (nil: none sent)
	awaiting  time.Time // a request that changed the names is not answered yet
}

type cluster struct {
	name  string
	res   Resource
	eds   string // the EDS service name; "" for a cluster that needs no EDS
	since time.Time
	timer *time.Timer
}

type listener struct {
	name   string
	res    Resource
	routes []string
	since  time.Time
}

type routeProvider struct {
	name  string
	refs  int
	res   *Resource
	ready bool
	since time.Time
	timer *time.Timer
	// vhds is true once the route configuration named VHDS: its virtual hosts come from the VHDS watch.
	vhds        bool
	vhdsWaiting bool
	vhdsTimer   *time.Timer
}

// NewEnvoy returns a model; Connect starts it.
func NewEnvoy(opts EnvoyOptions) *Envoy {
	if opts.InitialFetchTimeout == 0 {
		opts.InitialFetchTimeout = DefaultInitialFetchTimeout
	}
	node := &core.Node{Id: opts.NodeID, UserAgentName: "envoy"}
	if len(opts.Metadata) > 0 {
		fields := map[string]*structpb.Value{}
		for k, v := range opts.Metadata {
			fields[k] = structpb.NewStringValue(v)
		}
		node.Metadata = &structpb.Struct{Fields: fields}
	}
	if v := opts.BuildVersion; v != [3]uint32{} {
		node.UserAgentVersionType = &core.Node_UserAgentBuildVersion{UserAgentBuildVersion: &core.BuildVersion{
			Version: &typev3.SemanticVersion{MajorNumber: v[0], MinorNumber: v[1], Patch: v[2]}}}
	}
	return &Envoy{opts: opts, node: node, dstate: map[string]*deltaState{}, sstate: map[string]*sotwState{},
		explicit: map[string]map[string]bool{},
		interest: map[string]map[string]bool{ClusterType: {}, EndpointType: {}, RouteType: {}, VirtualHostType: {}},
		clusters: map[string]*cluster{}, warmingClusters: map[string]*cluster{}, endpoints: map[string]Resource{},
		listeners: map[string]*listener{}, warmingListeners: map[string]*listener{}, routes: map[string]*routeProvider{},
		vhosts: map[string]map[string]Resource{}, rejected: rejections{}, lastNACK: map[string]nackedResponse{}}
}

// Connect opens an ADS stream. The first time it starts with CDS; after Disconnect it restates every
// subscription, with initial_resource_versions on delta.
func (e *Envoy) Connect() error {
	cc, err := grpc.NewClient("passthrough:///"+e.opts.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	client := discovery.NewAggregatedDiscoveryServiceClient(cc)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cancel != nil {
		cancel()
		_ = cc.Close()
		return errors.New("already connected")
	}
	e.gen++
	gen := e.gen
	if e.opts.Delta {
		s, err := client.DeltaAggregatedResources(ctx)
		if err != nil {
			cancel()
			_ = cc.Close()
			return err
		}
		e.dstr = s
		go e.readDelta(s, gen)
	} else {
		s, err := client.StreamAggregatedResources(ctx)
		if err != nil {
			cancel()
			_ = cc.Close()
			return err
		}
		e.sstr = s
		go e.readSotW(s, gen)
	}
	e.cc, e.cancel, e.firstOnStream = cc, cancel, true
	e.rejected = rejections{} // a new stream may rightly send again what was rejected
	clear(e.lastNACK)
	e.acks = nil
	for _, t := range e.order {
		if st := e.dstate[t]; st != nil {
			st.streamFresh(true)
		}
		if st := e.sstate[t]; st != nil {
			st.nonce, st.nack, st.lastNames, st.awaiting, st.want = "", nil, nil, time.Time{}, true
		}
	}
	if !e.cdsStarted {
		e.cdsStarted = true
		e.subscribeType(ClusterType)
	}
	e.trySend()
	return nil
}

// Disconnect ends the stream; the model keeps what it has.
func (e *Envoy) Disconnect() {
	e.mu.Lock()
	cancel, cc := e.cancel, e.cc
	e.cancel, e.cc, e.dstr, e.sstr = nil, nil, nil, nil
	e.gen++
	e.mu.Unlock()
	if cancel != nil {
		cancel()
		_ = cc.Close()
	}
}

// Close ends the stream and stops the timers.
func (e *Envoy) Close() {
	e.Disconnect()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, c := range e.warmingClusters {
		c.timer.Stop()
	}
	for _, p := range e.routes {
		stop(p.timer)
		stop(p.vhdsTimer)
	}
}

func stop(t *time.Timer) {
	if t != nil {
		t.Stop()
	}
}

// Watch asks for name of a wildcard type (CDS or LDS) explicitly, on top of the wildcard, as on-demand
// discovery does.
func (e *Envoy) Watch(typeURL, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.explicit[typeURL] == nil {
		e.explicit[typeURL] = map[string]bool{}
	}
	if e.explicit[typeURL][name] {
		return
	}
	e.explicit[typeURL][name] = true
	e.changeInterest(typeURL, []string{name}, nil)
	e.trySend()
}

// Unwatch drops an explicit name asked for with Watch.
func (e *Envoy) Unwatch(typeURL, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.explicit[typeURL][name] {
		return
	}
	delete(e.explicit[typeURL], name)
	e.changeInterest(typeURL, nil, []string{name})
	e.trySend()
}

// subscribeType adds the first watch of a type: CDS and LDS are wildcard, the others start empty.
func (e *Envoy) subscribeType(typeURL string) {
	if slices.Contains(e.order, typeURL) {
		return
	}
	e.order = append(e.order, typeURL)
	if e.opts.Delta {
		e.dstate[typeURL] = newDeltaState(typeURL)
		return
	}
	e.sstate[typeURL] = &sotwState{want: true}
}

// changeInterest tells the type's subscription about names added to or removed from its watches.
func (e *Envoy) changeInterest(typeURL string, add, remove []string) {
	if len(add) == 0 && len(remove) == 0 {
		return
	}
	if !slices.Contains(e.order, typeURL) {
		e.subscribeType(typeURL)
	}
	if st := e.dstate[typeURL]; st != nil {
		st.updateInterest(add, remove)
		return
	}
	st := e.sstate[typeURL]
	names := map[string]bool{}
	for _, n := range st.names {
		names[n] = true
	}
	for _, n := range add {
		names[n] = true
	}
	for _, n := range remove {
		delete(names, n)
	}
	st.names = slices.Sorted(maps.Keys(names))
	st.want = true
}

// setInterest makes the watches of EDS or RDS hold exactly names, subscribing what is new and
// unsubscribing what none holds any more.
func (e *Envoy) setInterest(typeURL string, names map[string]bool) {
	cur := e.interest[typeURL]
	var add, remove []string
	for n := range names {
		if !cur[n] {
			add = append(add, n)
		}
	}
	for n := range cur {
		if !names[n] {
			remove = append(remove, n)
		}
	}
	slices.Sort(add)
	slices.Sort(remove)
	e.interest[typeURL] = names
	if typeURL == VirtualHostType {
		// VHDS watches match by namespace: the subscription itself names nothing (vhds.cc).
		if len(names) > 0 && !slices.Contains(e.order, VirtualHostType) {
			e.subscribeType(VirtualHostType)
		}
		return
	}
	e.changeInterest(typeURL, add, remove)
}

// paused reports whether the type's requests wait: CDS while a cluster warms after initialization.
func (e *Envoy) paused(typeURL string) bool {
	return typeURL == ClusterType && e.initialized && len(e.warmingClusters) > 0
}

// trySend sends what is due: ACKs first, then subscription changes in subscription order.
func (e *Envoy) trySend() {
	if e.cancel == nil {
		return
	}
	if e.opts.Delta {
		for {
			var req *discovery.DeltaDiscoveryRequest
			for i, a := range e.acks {
				if !e.paused(a.typeURL) {
					req = e.dstate[a.typeURL].next(a.nonce, a.nack)
					e.acks = slices.Delete(e.acks, i, i+1)
					break
				}
			}
			if req == nil {
				for _, t := range e.order {
					if st := e.dstate[t]; st.pending() && !e.paused(t) {
						req = st.next("", nil)
						break
					}
				}
			}
			if req == nil {
				return
			}
			req.Node = e.node // delta_subscription_state.cc merges the node into every request
			if err := e.dstr.Send(req); err != nil {
				return // the reader sees the stream end
			}
		}
	}
	for _, t := range e.order {
		st := e.sstate[t]
		if !st.want || e.paused(t) {
			continue
		}
		st.want = false
		req := &discovery.DiscoveryRequest{TypeUrl: t, ResourceNames: st.names, VersionInfo: st.version,
			ResponseNonce: st.nonce, ErrorDetail: st.nack}
		if e.firstOnStream {
			req.Node, e.firstOnStream = e.node, false
		}
		st.nack = nil
		if st.lastNames == nil || !slices.Equal(st.lastNames, st.names) {
			st.awaiting = time.Now()
		}
		st.lastNames = append([]string{}, st.names...)
		if err := e.sstr.Send(req); err != nil {
			return
		}
	}
}

func (e *Envoy) readDelta(s grpc.BidiStreamingClient[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse], gen int) {
	for {
		resp, err := s.Recv()
		if err != nil {
			return
		}
		e.mu.Lock()
		if e.gen == gen {
			e.handleDelta(resp)
		}
		e.mu.Unlock()
	}
}

func (e *Envoy) readSotW(s grpc.BidiStreamingClient[discovery.DiscoveryRequest, discovery.DiscoveryResponse], gen int) {
	for {
		resp, err := s.Recv()
		if err != nil {
			return
		}
		e.mu.Lock()
		if e.gen == gen {
			e.handleSotW(resp)
		}
		e.mu.Unlock()
	}
}

// update is one resource of a response, decoded.
type update struct {
	name string
	res  Resource
	msg  proto.Message
}

func (e *Envoy) handleDelta(resp *discovery.DeltaDiscoveryResponse) {
	e.bytes += int64(proto.Size(resp))
	e.responses++
	e.lastRecv = time.Now()
	t := resp.GetTypeUrl()
	st := e.dstate[t]
	if st == nil {
		e.errs = append(e.errs, "delta response for "+t+", which is not subscribed")
		return
	}
	st.answered(resp)
	var problems []string
	seen := map[string]bool{}
	var ups []update
	for _, r := range resp.GetResources() {
		if seen[r.GetName()] {
			problems = append(problems, "duplicate name "+r.GetName())
			continue
		}
		seen[r.GetName()] = true
		if at, ok := e.rejected.seen(t, r.GetName(), r.GetResource()); ok {
			e.resent = append(e.resent, Resend{TypeURL: t, Name: r.GetName(), Rejected: at, Resent: time.Now()})
		}
		if r.GetResource().GetTypeUrl() != t {
			problems = append(problems, fmt.Sprintf("%s: type %s does not match %s", r.GetName(), r.GetResource().GetTypeUrl(), t))
			continue
		}
		msg, err := r.GetResource().UnmarshalNew()
		if err != nil {
			problems = append(problems, r.GetName()+": "+err.Error())
			continue
		}
		ups = append(ups, update{name: r.GetName(), res: Resource{Name: r.GetName(), Version: r.GetVersion(), Any: r.GetResource()}, msg: msg})
	}
	for _, n := range resp.GetRemovedResources() {
		if seen[n] {
			problems = append(problems, "duplicate name "+n+" among added and removed")
		}
		seen[n] = true
	}
	if len(problems) == 0 {
		problems = e.apply(t, ups, resp.GetRemovedResources(), false)
	}
	var nack *rpcstatus.Status
	if len(problems) > 0 {
		e.nacks++
		nack = &rpcstatus.Status{Code: 13, Message: strings.Join(problems, "; ")}
	} else {
		st.accepted(resp)
	}
	e.trySend()
	e.acks = append(e.acks, ack{typeURL: t, nonce: resp.GetNonce(), nack: nack})
	e.trySend()
}

func (e *Envoy) handleSotW(resp *discovery.DiscoveryResponse) {
	e.bytes += int64(proto.Size(resp))
	e.responses++
	e.lastRecv = time.Now()
	t := resp.GetTypeUrl()
	st := e.sstate[t]
	if st == nil {
		e.errs = append(e.errs, "response for "+t+", which is not subscribed")
		return
	}
	st.awaiting = time.Time{}
	if last, ok := e.lastNACK[t]; ok && sameResponse(last.resp, resp) {
		e.resent = append(e.resent, Resend{TypeURL: t, Name: "(the whole response)", Rejected: last.at, Resent: time.Now()})
	}
	var problems []string
	var ups []update
	for _, a := range resp.GetResources() {
		if a.GetTypeUrl() != t {
			problems = append(problems, fmt.Sprintf("type %s does not match %s", a.GetTypeUrl(), t))
			continue
		}
		msg, err := a.UnmarshalNew()
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		name := resourceName(msg)
		ups = append(ups, update{name: name, res: Resource{Name: name, Version: resp.GetVersionInfo(), Any: a}, msg: msg})
	}
	if len(problems) == 0 {
		problems = e.apply(t, ups, nil, true)
	}
	st.nonce = resp.GetNonce()
	if len(problems) > 0 {
		e.nacks++
		st.nack = &rpcstatus.Status{Code: 13, Message: strings.Join(problems, "; ")}
		e.lastNACK[t] = nackedResponse{resp, time.Now()}
	} else {
		st.version = resp.GetVersionInfo()
		delete(e.lastNACK, t)
	}
	e.trySend()
	st.want = true
	e.trySend()
}

func sameResponse(a, b *discovery.DiscoveryResponse) bool {
	if len(a.GetResources()) != len(b.GetResources()) {
		return false
	}
	for i := range a.GetResources() {
		if !Same(a.GetResources()[i], b.GetResources()[i]) {
			return false
		}
	}
	return true
}

func resourceName(m proto.Message) string {
	switch m := m.(type) {
	case *clusterpb.Cluster:
		return m.GetName()
	case *endpointpb.ClusterLoadAssignment:
		return m.GetClusterName()
	case *listenerpb.Listener:
		return m.GetName()
	case *routepb.RouteConfiguration:
		return m.GetName()
	case *routepb.VirtualHost:
		return m.GetName()
	}
	return ""
}

// reject asks the Reject hook; it also records the rejection.
func (e *Envoy) reject(typeURL string, u update) error {
	if e.opts.Reject == nil {
		return nil
	}
	if err := e.opts.Reject(typeURL, u.name, u.res.Any); err != nil {
		e.rejected.add(typeURL, u.name, u.res.Any)
		return fmt.Errorf("%s: %w", u.name, err)
	}
	return nil
}

// apply hands a response's resources to the watches of its type, as Envoy's subscribers take them, and
// returns why some were rejected. sotw says the response is the full state of CDS or LDS.
func (e *Envoy) apply(typeURL string, ups []update, removed []string, sotw bool) []string {
	var problems []string
	fail := func(err error) { problems = append(problems, err.Error()) }
	switch typeURL {
	case ClusterType:
		got := map[string]bool{}
		for _, u := range ups {
			got[u.name] = true
			if err := e.reject(typeURL, u); err != nil {
				fail(err)
				continue
			}
			e.addOrUpdateCluster(u.res, u.msg.(*clusterpb.Cluster))
		}
		if sotw {
			for n := range e.clusters {
				if !got[n] {
					removed = append(removed, n)
				}
			}
			for n := range e.warmingClusters {
				if !got[n] && e.clusters[n] == nil {
					removed = append(removed, n)
				}
			}
		}
		for _, n := range removed {
			e.removeCluster(n)
		}
		e.updateEDSInterest()
		if !e.initialized && len(e.warmingClusters) == 0 {
			e.clustersInitialized()
		}
	case EndpointType:
		for _, u := range ups {
			if !e.interest[EndpointType][u.name] {
				continue // no watch for it: watch_map drops it
			}
			if err := e.reject(typeURL, u); err != nil {
				fail(err)
				continue
			}
			e.endpoints[u.name] = u.res
			e.endpointsArrived(u.name)
		}
		for _, n := range removed {
			if e.interest[EndpointType][n] {
				e.endpointsArrived(n) // eds.cc: an empty update ends warming, the hosts stay
			}
		}
	case ListenerType:
		got := map[string]bool{}
		for _, u := range ups {
			got[u.name] = true
			if err := e.reject(typeURL, u); err != nil {
				fail(err)
				continue
			}
			e.addOrUpdateListener(u.res, u.msg.(*listenerpb.Listener))
		}
		if sotw {
			for n := range e.listeners {
				if !got[n] {
					removed = append(removed, n)
				}
			}
			for n := range e.warmingListeners {
				if !got[n] && e.listeners[n] == nil {
					removed = append(removed, n)
				}
			}
		}
		for _, n := range removed {
			e.removeListener(n)
		}
		e.updateRouteInterest()
	case RouteType:
		for _, u := range ups {
			p := e.routes[u.name]
			if p == nil {
				continue
			}
			rc := u.msg.(*routepb.RouteConfiguration)
			if rc.GetVhds() != nil && !e.opts.Delta {
				fail(fmt.Errorf("%s: vhds: ADS must use DELTA_GRPC api_type when used as VHDS config source", u.name))
				continue
			}
			if err := e.reject(typeURL, u); err != nil {
				fail(err)
				continue
			}
			e.routeArrived(p, u.res, rc)
		}
		// Removed route configurations are ignored (rds_route_config_subscription.cc).
	case VirtualHostType:
		for _, u := range ups {
			rc := routeConfigOf(u.name)
			p := e.routes[rc]
			if p == nil || !p.vhds {
				continue // no watch for its route configuration
			}
			if err := e.reject(typeURL, u); err != nil {
				fail(err)
				continue
			}
			if e.vhosts[rc] == nil {
				e.vhosts[rc] = map[string]Resource{}
			}
			e.vhosts[rc][u.name] = u.res
			e.virtualHostsArrived(p)
		}
		for _, n := range removed {
			rc := routeConfigOf(n)
			if p := e.routes[rc]; p != nil && p.vhds {
				delete(e.vhosts[rc], n)
				e.virtualHostsArrived(p)
			}
		}
	}
	return problems
}

// routeConfigOf is the namespace VHDS files a virtual host under: the text before the last "/".
func routeConfigOf(name string) string {
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		return name[:i]
	}
	return ""
}

func (e *Envoy) addOrUpdateCluster(res Resource, c *clusterpb.Cluster) {
	name := res.Name
	if w := e.warmingClusters[name]; w != nil && Same(w.res.Any, res.Any) {
		return
	}
	if a := e.clusters[name]; a != nil && Same(a.res.Any, res.Any) && e.warmingClusters[name] == nil {
		return // unchanged: skipped, no warming
	}
	if w := e.warmingClusters[name]; w != nil {
		w.timer.Stop()
		delete(e.warmingClusters, name)
	}
	nc := &cluster{name: name, res: res, since: time.Now()}
	if c.GetType() == clusterpb.Cluster_EDS || c.GetEdsClusterConfig() != nil {
		nc.eds = c.GetEdsClusterConfig().GetServiceName()
		if nc.eds == "" {
			nc.eds = name
		}
	}
	if nc.eds == "" {
		e.clusters[name] = nc // nothing to fetch: warm at once
		return
	}
	e.warmingClusters[name] = nc
	gen := nc
	nc.timer = time.AfterFunc(e.opts.InitialFetchTimeout, func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.warmingClusters[name] == gen {
			e.timeouts = append(e.timeouts, Timeout{What: "cluster " + name, TypeURL: EndpointType, Name: gen.eds, Waited: time.Since(gen.since)})
			e.clusterWarm(gen)
			e.trySend()
		}
	})
	if st := e.sstate[EndpointType]; st != nil && e.interest[EndpointType][nc.eds] {
		st.want = true // a new watch asks again with the same names (grpc_mux_impl.cc addWatch)
	}
}

func (e *Envoy) removeCluster(name string) {
	if w := e.warmingClusters[name]; w != nil {
		w.timer.Stop()
		delete(e.warmingClusters, name)
	}
	delete(e.clusters, name)
}

// updateEDSInterest makes the EDS watches those of the active and warming EDS clusters.
func (e *Envoy) updateEDSInterest() {
	names := map[string]bool{}
	for _, c := range e.clusters {
		if c.eds != "" {
			names[c.eds] = true
		}
	}
	for _, c := range e.warmingClusters {
		names[c.eds] = true
	}
	e.setInterest(EndpointType, names)
	for n := range e.endpoints {
		if !names[n] {
			delete(e.endpoints, n)
		}
	}
}

// endpointsArrived ends the warming of the clusters waiting for name.
func (e *Envoy) endpointsArrived(name string) {
	for _, n := range slices.Sorted(maps.Keys(e.warmingClusters)) {
		if c := e.warmingClusters[n]; c.eds == name {
			e.clusterWarm(c)
		}
	}
}

func (e *Envoy) clusterWarm(c *cluster) {
	c.timer.Stop()
	delete(e.warmingClusters, c.name)
	e.clusters[c.name] = c
	if len(e.warmingClusters) == 0 && !e.initialized {
		e.clustersInitialized()
	}
}

// clustersInitialized: the first clusters are warm, the listener manager starts (LDS).
func (e *Envoy) clustersInitialized() {
	e.initialized = true
	if !e.ldsStarted {
		e.ldsStarted = true
		e.subscribeType(ListenerType)
	}
}

func (e *Envoy) addOrUpdateListener(res Resource, l *listenerpb.Listener) {
	name := res.Name
	if w := e.warmingListeners[name]; w != nil && Same(w.res.Any, res.Any) {
		return
	}
	if a := e.listeners[name]; a != nil && Same(a.res.Any, res.Any) && e.warmingListeners[name] == nil {
		return
	}
	nl := &listener{name: name, res: res, routes: rdsNames(l), since: time.Now()}
	for _, r := range nl.routes {
		e.holdRoute(r)
	}
	if w := e.warmingListeners[name]; w != nil {
		e.releaseRoutes(w)
	}
	e.warmingListeners[name] = nl
	e.checkListener(nl)
}

func (e *Envoy) removeListener(name string) {
	if w := e.warmingListeners[name]; w != nil {
		e.releaseRoutes(w)
		delete(e.warmingListeners, name)
	}
	if a := e.listeners[name]; a != nil {
		e.releaseRoutes(a)
		delete(e.listeners, name)
	}
}

// checkListener makes a warming listener active once every route configuration it names is ready.
func (e *Envoy) checkListener(l *listener) {
	if e.warmingListeners[l.name] != l {
		return
	}
	for _, r := range l.routes {
		if p := e.routes[r]; p == nil || !p.ready {
			return
		}
	}
	delete(e.warmingListeners, l.name)
	if a := e.listeners[l.name]; a != nil {
		e.releaseRoutes(a)
	}
	e.listeners[l.name] = l
}

// holdRoute shares the route configuration provider of name, creating (and subscribing) it if none exists.
func (e *Envoy) holdRoute(name string) {
	if p := e.routes[name]; p != nil {
		p.refs++
		return
	}
	p := &routeProvider{name: name, refs: 1, since: time.Now()}
	e.routes[name] = p
	p.timer = time.AfterFunc(e.opts.InitialFetchTimeout, func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.routes[name] != p || p.res != nil {
			return
		}
		e.routeTimedOut(p, RouteType, name)
		p.ready = true
		e.routeReady()
		e.trySend()
	})
}

func (e *Envoy) routeTimedOut(p *routeProvider, typeURL, name string) {
	for _, l := range slices.Sorted(maps.Keys(e.warmingListeners)) {
		if slices.Contains(e.warmingListeners[l].routes, p.name) {
			e.timeouts = append(e.timeouts, Timeout{What: "listener " + l, TypeURL: typeURL, Name: name, Waited: time.Since(p.since)})
		}
	}
}

func (e *Envoy) releaseRoutes(l *listener) {
	for _, r := range l.routes {
		p := e.routes[r]
		if p == nil {
			continue
		}
		if p.refs--; p.refs == 0 {
			stop(p.timer)
			stop(p.vhdsTimer)
			delete(e.routes, r)
			delete(e.vhosts, r)
		}
	}
}

// updateRouteInterest makes the RDS watches the route configurations the listeners name, and the VHDS
// watches those of them that use VHDS.
func (e *Envoy) updateRouteInterest() {
	names, vhds := map[string]bool{}, map[string]bool{}
	for n, p := range e.routes {
		names[n] = true
		if p.vhds {
			vhds[n] = true
		}
	}
	e.setInterest(RouteType, names)
	e.setInterest(VirtualHostType, vhds)
}

func (e *Envoy) routeArrived(p *routeProvider, res Resource, rc *routepb.RouteConfiguration) {
	first := p.res == nil
	p.res = &res
	if rc.GetVhds() != nil && !p.vhds {
		p.vhds = true
		if first {
			// The listener waits for the first virtual hosts too (the VHDS init target).
			p.vhdsWaiting = true
			since := time.Now()
			p.vhdsTimer = time.AfterFunc(e.opts.InitialFetchTimeout, func() {
				e.mu.Lock()
				defer e.mu.Unlock()
				if e.routes[p.name] != p || !p.vhdsWaiting {
					return
				}
				p.since = since
				e.routeTimedOut(p, VirtualHostType, p.name+"/*")
				p.vhdsWaiting = false
				p.ready = true
				e.routeReady()
				e.trySend()
			})
		}
		e.updateRouteInterest()
	}
	if first && !p.vhdsWaiting {
		stop(p.timer)
		p.ready = true
		e.routeReady()
	}
	if first && p.vhdsWaiting {
		stop(p.timer)
	}
}

func (e *Envoy) virtualHostsArrived(p *routeProvider) {
	if p.vhdsWaiting {
		p.vhdsWaiting = false
		stop(p.vhdsTimer)
		p.ready = true
		e.routeReady()
	}
}

func (e *Envoy) routeReady() {
	for _, n := range slices.Sorted(maps.Keys(e.warmingListeners)) {
		e.checkListener(e.warmingListeners[n])
	}
	e.updateRouteInterest()
}

// rdsNames returns the route configurations a listener's HttpConnectionManagers fetch through RDS.
func rdsNames(l *listenerpb.Listener) []string {
	var out []string
	chains := slices.Clone(l.GetFilterChains())
	if d := l.GetDefaultFilterChain(); d != nil {
		chains = append(chains, d)
	}
	add := func(a *anypb.Any) {
		var m hcm.HttpConnectionManager
		if a == nil || !a.MessageIs(&m) || a.UnmarshalTo(&m) != nil {
			return
		}
		if n := m.GetRds().GetRouteConfigName(); n != "" && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	for _, fc := range chains {
		for _, f := range fc.GetFilters() {
			add(f.GetTypedConfig())
		}
	}
	add(l.GetApiListener().GetApiListener())
	slices.Sort(out)
	return out
}

// Held returns the resources of a type that Envoy uses now: active clusters and listeners (not warming
// ones), the load assignments and route configurations its watches hold, and the virtual hosts filed under
// the route configurations it holds.
func (e *Envoy) Held(typeURL string) map[string]Resource {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string]Resource{}
	switch typeURL {
	case ClusterType:
		for n, c := range e.clusters {
			out[n] = c.res
		}
	case EndpointType:
		return cloneHeld(e.endpoints)
	case ListenerType:
		for n, l := range e.listeners {
			out[n] = l.res
		}
	case RouteType:
		for n, p := range e.routes {
			if p.res != nil {
				out[n] = *p.res
			}
		}
	case VirtualHostType:
		for _, vs := range e.vhosts {
			maps.Copy(out, vs)
		}
	}
	return out
}

// Subscribed returns the names the type's watches ask for (nil and true for a wildcard type).
func (e *Envoy) Subscribed(typeURL string) (names []string, wildcard bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch typeURL {
	case ClusterType, ListenerType, VirtualHostType:
		return slices.Sorted(maps.Keys(e.explicit[typeURL])), slices.Contains(e.order, typeURL)
	}
	return slices.Sorted(maps.Keys(e.interest[typeURL])), false
}

// Types returns the types subscribed, in order.
func (e *Envoy) Types() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.order)
}

// Warming lists the clusters and listeners still warming, with what they wait for.
func (e *Envoy) Warming() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, n := range slices.Sorted(maps.Keys(e.warmingClusters)) {
		out = append(out, fmt.Sprintf("cluster %s waits for EDS %s", n, e.warmingClusters[n].eds))
	}
	for _, n := range slices.Sorted(maps.Keys(e.warmingListeners)) {
		var waits []string
		for _, r := range e.warmingListeners[n].routes {
			if p := e.routes[r]; p == nil || !p.ready {
				waits = append(waits, r)
			}
		}
		out = append(out, fmt.Sprintf("listener %s waits for RDS %v", n, waits))
	}
	return out
}

// Timeouts returns every wait that ended at initial_fetch_timeout.
func (e *Envoy) Timeouts() []Timeout {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.timeouts)
}

// Unanswered lists requests older than older that the server has not answered: delta subscriptions of
// names neither sent nor removed, unsubscriptions under a wildcard the server said nothing of; in
// state-of-the-world, requests that changed the names and got no response.
func (e *Envoy) Unanswered(older time.Duration) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := time.Now()
	var out []string
	for _, t := range e.order {
		if st := e.dstate[t]; st != nil {
			out = append(out, st.unanswered(now, older)...)
		}
		if st := e.sstate[t]; st != nil && !st.awaiting.IsZero() && now.Sub(st.awaiting) > older {
			out = append(out, fmt.Sprintf("%s: request for %v not answered", t, st.names))
		}
	}
	return out
}

// NACKs is the number of responses rejected.
func (e *Envoy) NACKs() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.nacks
}

// Rejected returns what was rejected on this stream and not replaced by the server since.
func (e *Envoy) Rejected() []Rejection {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.rejected.list()
}

// ResentAfterNACK lists what the server sent again unchanged after it was rejected.
func (e *Envoy) ResentAfterNACK() []Resend {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.resent)
}

// Errors lists protocol errors seen (responses for types not subscribed).
func (e *Envoy) Errors() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.errs)
}

// Stats returns the responses and bytes received, and when the last response arrived.
func (e *Envoy) Stats() (responses int, bytes int64, last time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.responses, e.bytes, e.lastRecv
}

// NodeID returns the node id.
func (e *Envoy) NodeID() string { return e.opts.NodeID }

// Delta reports whether the model speaks delta ADS.
func (e *Envoy) Delta() bool { return e.opts.Delta }
