package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"hash/maphash"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

const (
	cdsType   = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	edsType   = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	ldsType   = "type.googleapis.com/envoy.config.listener.v3.Listener"
	rdsType   = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	vhdsType  = "type.googleapis.com/envoy.config.route.v3.VirtualHost"
	addrType  = "type.googleapis.com/istio.workload.Address"
	authzType = "type.googleapis.com/istio.security.Authorization"
	hcmType   = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
)

// info is what the harness needs from one resource. Proxies receive the same content many times, so it is
// decoded once per (type, name, content) and shared.
type info struct {
	eds    bool                // a cluster of type EDS
	addrs  map[string]struct{} // endpoint addresses of a ClusterLoadAssignment
	routes []string            // RDS names a listener references
	vhds   bool                // a route configuration whose virtual hosts come over VHDS
	raw    []byte              // listeners, routes, authorizations: searched for markers
	// content hashes the payload: Envoy warms a cluster again only when its content changed (it skips an
	// update whose hash equals the cluster it holds).
	content uint64
	version string // the delta version it came with, sent back in initial_resource_versions on a new stream
	// Clusters: edsName is the name their load assignment comes under (eds_cluster_config.service_name,
	// else the cluster's); maxConns is the first circuit-breaker threshold's max_connections.
	edsName  string
	maxConns uint32
}

type cacheKey struct {
	typ  string
	name string
	sum  uint64
	ver  uint64
}

type decoder struct {
	seed maphash.Seed
	mu   sync.Mutex
	m    map[cacheKey]*info
}

func newDecoder() *decoder { return &decoder{seed: maphash.MakeSeed(), m: map[cacheKey]*info{}} }

// reset forgets everything (between scenarios, so the cache does not grow without bound).
func (d *decoder) reset() {
	d.mu.Lock()
	d.m = map[cacheKey]*info{}
	d.mu.Unlock()
}

// decode returns what the harness needs of resource name of type typ whose payload is value, received with
// version (nil on SotW). value and version may be part of a received frame: what is kept of them is copied.
func (d *decoder) decode(typ, name string, version, value []byte) (*info, error) {
	k := cacheKey{typ, name, maphash.Bytes(d.seed, value), 0}
	if len(version) > 0 {
		k.ver = maphash.Bytes(d.seed, version)
	}
	d.mu.Lock()
	in := d.m[k]
	d.mu.Unlock()
	if in != nil {
		return in, nil
	}
	in = &info{content: k.sum, version: string(version)}
	switch typ {
	case cdsType:
		var c cluster.Cluster
		if err := proto.Unmarshal(value, &c); err != nil {
			return nil, fmt.Errorf("cluster %s: %w", name, err)
		}
		in.eds = c.GetType() == cluster.Cluster_EDS
		if in.eds {
			in.edsName = c.GetEdsClusterConfig().GetServiceName()
			if in.edsName == "" {
				in.edsName = c.Name
			}
		}
		if th := c.GetCircuitBreakers().GetThresholds(); len(th) > 0 {
			in.maxConns = th[0].GetMaxConnections().GetValue()
		}
	case edsType:
		var c endpoint.ClusterLoadAssignment
		if err := proto.Unmarshal(value, &c); err != nil {
			return nil, fmt.Errorf("endpoints %s: %w", name, err)
		}
		in.addrs = map[string]struct{}{}
		for _, l := range c.Endpoints {
			for _, e := range l.LbEndpoints {
				in.addrs[e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()] = struct{}{}
			}
		}
	case ldsType:
		var l listener.Listener
		if err := proto.Unmarshal(value, &l); err != nil {
			return nil, fmt.Errorf("listener %s: %w", name, err)
		}
		chains := l.FilterChains
		if l.DefaultFilterChain != nil {
			chains = append(chains, l.DefaultFilterChain)
		}
		seen := map[string]bool{}
		for _, fc := range chains {
			for _, f := range fc.Filters {
				if f.GetTypedConfig().GetTypeUrl() != hcmType {
					continue
				}
				var h hcm.HttpConnectionManager
				if err := proto.Unmarshal(f.GetTypedConfig().GetValue(), &h); err != nil {
					return nil, fmt.Errorf("listener %s: %w", name, err)
				}
				if r := h.GetRds().GetRouteConfigName(); r != "" && !seen[r] {
					seen[r] = true
					in.routes = append(in.routes, r)
				}
			}
		}
		in.raw = slices.Clone(value)
	case rdsType:
		var rc route.RouteConfiguration
		if err := proto.Unmarshal(value, &rc); err != nil {
			return nil, fmt.Errorf("route configuration %s: %w", name, err)
		}
		in.vhds = rc.Vhds != nil
		in.raw = slices.Clone(value)
	default:
		in.raw = slices.Clone(value)
	}
	d.mu.Lock()
	d.m[k] = in
	d.mu.Unlock()
	return in, nil
}

type proxyKind int

const (
	kindSidecar proxyKind = iota
	kindZtunnel
)

// proxy is one simulated Envoy sidecar or ztunnel on its own connection.
type proxy struct {
	h     *harness
	id    int
	kind  proxyKind
	ns    string
	ip    string
	node  *core.Node
	delta bool
	// addr is where start connected; tls, when set, is the secure port's client configuration (-secure).
	addr string
	tls  *tls.Config
	// token, when set, is the service-account token sent on every stream to the secure port (-secure-auth token).
	token string
	// sa is the service account the proxy claims (node metadata SERVICE_ACCOUNT), its pod's.
	sa string

	bytes, responses, nacks atomic.Int64

	mu      sync.Mutex
	res     map[string]map[string]*info // type URL → name → resource
	subs    map[string]map[string]bool  // explicit subscriptions (EDS, RDS) as sent
	got     map[string]bool             // a response of the type arrived
	vhdsOn  bool                        // the VHDS subscription was made
	last    map[string]*discovery.DiscoveryResponse
	waiters []*waiter
	synced  time.Time
	started time.Time
	err     error
	rng     *rand.Rand
	// initialBytes is what the first stream had received when the proxy was first in sync.
	initialBytes int64

	warm warmState // Envoy's cluster warming (warming.go)

	// The current stream, for stop; closed: stopped on purpose, so the stream's end is no error.
	conn    io.Closer
	closed  bool
	resumed resumeState // streams after the first (resume.go)
	// goawayAt is when the current stream's connection got the server's GOAWAY (Unix ns; 0: none).
	goawayAt atomic.Int64
}

// newProxy's service account is the pod's: its service's name for sidecars, ztunnel for ztunnels.
func newProxy(h *harness, id int, kind proxyKind, ns, sa, podName, ip string, labels map[string]string) *proxy {
	typ := "sidecar"
	if kind == kindZtunnel {
		typ = "ztunnel"
	}
	lbl := map[string]any{}
	for k, v := range labels {
		lbl[k] = v
	}
	md, err := structpb.NewStruct(map[string]any{
		"NAMESPACE": ns, "INSTANCE_IPS": ip, "LABELS": lbl, "NAME": podName, "CLUSTER_ID": "Kubernetes",
		"NODE_NAME": fmt.Sprintf("node-%d", id%4), "ISTIO_VERSION": "1.32.0", "SERVICE_ACCOUNT": sa,
	})
	must(err)
	return &proxy{
		h: h, id: id, kind: kind, ns: ns, ip: ip, sa: sa, delta: kind == kindZtunnel || h.cfg.Delta,
		node: &core.Node{Id: fmt.Sprintf("%s~%s~%s.%s~%s.svc.cluster.local", typ, ip, podName, ns, ns), Metadata: md,
			UserAgentName: "envoy", UserAgentVersionType: &core.Node_UserAgentBuildVersion{UserAgentBuildVersion: &core.BuildVersion{
				Version: &typev3.SemanticVersion{MajorNumber: h.cfg.EnvoyVersion[0], MinorNumber: h.cfg.EnvoyVersion[1]}}}},
		res: map[string]map[string]*info{}, subs: map[string]map[string]bool{edsType: {}, rdsType: {}},
		got: map[string]bool{}, last: map[string]*discovery.DiscoveryResponse{},
		rng:  rand.New(rand.NewPCG(uint64(id), 7)),
		warm: newWarmState(h.cfg.InitialFetchTimeout),
	}
}

// envoyWindow is Envoy's default HTTP/2 initial stream and connection window.
const envoyWindow = 256 << 20

// start connects and subscribes like the real client; responses are handled on one goroutine. Delta
// proxies speak HTTP/2 themselves (h2Stream); SotW ones use gRPC-Go's client.
func (p *proxy) start(addr string) error {
	p.mu.Lock()
	p.started = time.Now()
	p.addr = addr
	p.mu.Unlock()
	if p.delta {
		stream, err := dialDelta(addr, p.tls, p.token)
		if err != nil {
			return err
		}
		stream.onGoAway = p.noteGoAway
		p.mu.Lock()
		p.conn = stream.conn
		p.resumed.streamStart = p.started
		p.mu.Unlock()
		types := []string{cdsType, ldsType}
		if p.kind == kindZtunnel {
			types = []string{addrType, authzType}
		}
		for i, t := range types {
			req := &discovery.DeltaDiscoveryRequest{TypeUrl: t}
			if i == 0 {
				req.Node = p.node
			}
			if err := stream.Send(req); err != nil {
				return err
			}
		}
		go p.runDelta(stream)
		return nil
	}
	creds := insecure.NewCredentials()
	if p.tls != nil {
		creds = credentials.NewTLS(p.tls)
	}
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30)),
		// Envoy's HTTP/2 windows are fixed (256 MiB by default) and it sends no bandwidth-probing PINGs;
		// gRPC-Go's client would, after every response.
		grpc.WithInitialWindowSize(envoyWindow), grpc.WithInitialConnWindowSize(envoyWindow))
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.conn = cc
	p.mu.Unlock()
	// Proxies live until the harness process exits or stop closes them.
	ctx := context.Background()
	if p.token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+p.token)
	}
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	for i, t := range []string{cdsType, ldsType} {
		req := &discovery.DiscoveryRequest{TypeUrl: t}
		if i == 0 {
			req.Node = p.node
		}
		if err := stream.Send(req); err != nil {
			return err
		}
	}
	go p.runSotW(stream)
	return nil
}

func (p *proxy) fail(err error) {
	p.mu.Lock()
	if p.err == nil && p.h.ctx.Err() == nil && !p.closed {
		p.err = err
	}
	p.mu.Unlock()
}

// nack decides whether to reject this response (the -nack fraction). The state is kept anyway, as when
// Envoy rejects one resource of many: the point is to exercise the server's NACK path.
func (p *proxy) nack() *rpcstatus.Status {
	if p.h.cfg.NackFraction <= 0 || p.rng.Float64() >= p.h.cfg.NackFraction {
		return nil
	}
	p.nacks.Add(1)
	return &rpcstatus.Status{Code: 3, Message: "load harness: simulated rejection"}
}

// shortType names a type URL in reports.
var shortType = map[string]string{cdsType: "CDS", edsType: "EDS", ldsType: "LDS", rdsType: "RDS", vhdsType: "VHDS", addrType: "Address",
	authzType: "Authorization"}

func (p *proxy) count(typ string, size int) {
	if c := p.h.byType[typ]; c != nil {
		c.Add(int64(size))
	}
	p.bytes.Add(int64(size))
	p.responses.Add(1)
	p.h.bytes.Add(int64(size))
	p.h.responses.Add(1)
	p.h.lastResponse.Store(time.Now().UnixNano())
}

func (p *proxy) runDelta(stream *h2Stream) {
	for {
		resp, err := stream.Recv()
		if err != nil {
			// A stream whose connection the server sent GOAWAY on has been asked to move: like Envoy, open a
			// new one (on a new connection) and resume. Any other end is an error.
			if p.goawayAt.Load() != 0 {
				next, rerr := p.resume(err)
				if rerr == nil {
					stream = next
					continue
				}
				err = fmt.Errorf("%w; reconnecting: %w", err, rerr)
			}
			p.fail(fmt.Errorf("stream: %w", err))
			return
		}
		p.count(resp.TypeUrl, resp.size)
		typ := resp.TypeUrl
		now := time.Now()
		p.mu.Lock()
		// Timeouts first: a warming past it is over, whatever this response brings.
		p.warm.sweep(now)
		m := p.res[typ]
		if m == nil {
			m = map[string]*info{}
			p.res[typ] = m
		}
		var derr error
		for _, r := range resp.Resources {
			// Like Envoy, a virtual host is kept only under a route configuration held with VHDS.
			if typ == vhdsType && !p.takesVirtualHosts(r.Name) {
				continue
			}
			in, err := p.h.dec.decode(typ, r.Name, r.Version, r.Value)
			if err != nil {
				derr = err
				continue
			}
			switch typ {
			case cdsType:
				p.warm.cluster(r.Name, m[r.Name], in, now)
			case edsType:
				p.warm.assignment(r.Name, now)
			}
			m[r.Name] = in
		}
		for _, n := range resp.RemovedResources {
			switch typ {
			case cdsType:
				p.warm.clusterGone(n)
			case edsType:
				// Envoy's EDS cluster takes a removal as an empty assignment: its warming ends.
				p.warm.assignment(n, now)
			}
			delete(m, n)
		}
		p.got[typ] = true
		var sub, unsub map[string][]string
		if typ == cdsType {
			sub, unsub = p.followClusters(resp)
		} else {
			sub, unsub = p.follow(typ)
		}
		// The first route configuration with VHDS opens the VHDS subscription: no names, i.e. everything.
		startVHDS := typ == rdsType && !p.vhdsOn && p.anyVHDS()
		if startVHDS {
			p.vhdsOn = true
		}
		p.mu.Unlock()
		if derr != nil {
			p.fail(derr)
		}
		ack := &discovery.DeltaDiscoveryRequest{TypeUrl: typ, ResponseNonce: resp.Nonce, ErrorDetail: p.nack()}
		if err := stream.Send(ack); err != nil {
			p.fail(err)
			return
		}
		for t, names := range sub {
			if err := stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: t, ResourceNamesSubscribe: names,
				ResourceNamesUnsubscribe: unsub[t]}); err != nil {
				p.fail(err)
				return
			}
			delete(unsub, t)
		}
		for t, names := range unsub {
			if err := stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: t, ResourceNamesUnsubscribe: names}); err != nil {
				p.fail(err)
				return
			}
		}
		if startVHDS {
			if err := stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: vhdsType}); err != nil {
				p.fail(err)
				return
			}
		}
		p.check()
	}
}

// takesVirtualHosts reports whether a VHDS resource ROUTE_CONFIG/NAME has its route configuration, held
// with VHDS: Envoy drops the others. Called with p.mu held.
func (p *proxy) takesVirtualHosts(name string) bool {
	i := strings.LastIndexByte(name, '/')
	if i < 0 {
		return false
	}
	rc, ok := p.res[rdsType][name[:i]]
	return ok && rc.vhds
}

// anyVHDS reports whether a route configuration held takes its virtual hosts over VHDS. Called with p.mu held.
func (p *proxy) anyVHDS() bool {
	for _, in := range p.res[rdsType] {
		if in.vhds {
			return true
		}
	}
	return false
}

func (p *proxy) runSotW(stream grpc.BidiStreamingClient[discovery.DiscoveryRequest, discovery.DiscoveryResponse]) {
	for {
		resp, err := stream.Recv()
		if err != nil {
			p.fail(fmt.Errorf("stream: %w", err))
			return
		}
		p.count(resp.TypeUrl, proto.Size(resp))
		typ := resp.TypeUrl
		now := time.Now()
		p.mu.Lock()
		p.warm.sweep(now)
		m := p.res[typ]
		old := m
		if m == nil || typ == cdsType || typ == ldsType {
			m = map[string]*info{} // the full state of a wildcard type
			p.res[typ] = m
		}
		var derr error
		for _, a := range resp.Resources {
			name, err := resourceName(typ, a)
			if err != nil {
				derr = err
				continue
			}
			in, err := p.h.dec.decode(typ, name, nil, a.GetValue())
			if err != nil {
				derr = err
				continue
			}
			switch typ {
			case cdsType:
				p.warm.cluster(name, old[name], in, now)
			case edsType:
				p.warm.assignment(name, now)
			}
			m[name] = in
		}
		if typ == cdsType {
			for name := range old {
				if _, ok := m[name]; !ok {
					p.warm.clusterGone(name)
				}
			}
		}
		p.got[typ] = true
		p.last[typ] = resp
		sub, unsub := p.follow(typ)
		var reqs []*discovery.DiscoveryRequest
		for _, t := range []string{edsType, rdsType} {
			if sub[t] == nil && unsub[t] == nil {
				continue
			}
			names := make([]string, 0, len(p.subs[t]))
			for n := range p.subs[t] {
				names = append(names, n)
			}
			req := &discovery.DiscoveryRequest{TypeUrl: t, ResourceNames: names}
			if last := p.last[t]; last != nil {
				req.VersionInfo, req.ResponseNonce = last.VersionInfo, last.Nonce
			}
			// SotW: forget resources no longer asked for.
			for _, n := range unsub[t] {
				delete(p.res[t], n)
			}
			reqs = append(reqs, req)
		}
		var names []string
		if typ == edsType || typ == rdsType {
			for n := range p.subs[typ] {
				names = append(names, n)
			}
		}
		p.mu.Unlock()
		if derr != nil {
			p.fail(derr)
		}
		ack := &discovery.DiscoveryRequest{TypeUrl: typ, VersionInfo: resp.VersionInfo, ResponseNonce: resp.Nonce,
			ResourceNames: names, ErrorDetail: p.nack()}
		if ack.ErrorDetail != nil {
			ack.VersionInfo = "" // a NACK carries the last good version; the harness keeps it simple
		}
		if err := stream.Send(ack); err != nil {
			p.fail(err)
			return
		}
		for _, r := range reqs {
			if err := stream.Send(r); err != nil {
				p.fail(err)
				return
			}
		}
		p.check()
	}
}

// resourceName reads the name of a SotW resource.
func resourceName(typ string, a *anypb.Any) (string, error) {
	switch typ {
	case cdsType:
		var c cluster.Cluster
		err := proto.Unmarshal(a.Value, &c)
		return c.Name, err
	case edsType:
		var c endpoint.ClusterLoadAssignment
		err := proto.Unmarshal(a.Value, &c)
		return c.ClusterName, err
	case ldsType:
		var l listener.Listener
		err := proto.Unmarshal(a.Value, &l)
		return l.Name, err
	default:
		// RouteConfiguration: the name is field 1; the rest need not be decoded.
		return protoName(a.Value)
	}
}

// protoName reads string field 1 without decoding the rest.
func protoName(b []byte) (string, error) {
	if len(b) < 2 || b[0] != 0x0a {
		return "", fmt.Errorf("resource without a name")
	}
	n, i := 0, 1
	for shift := 0; i < len(b); shift += 7 {
		c := b[i]
		i++
		n |= int(c&0x7f) << shift
		if c < 0x80 {
			break
		}
	}
	if i+n > len(b) {
		return "", fmt.Errorf("truncated name")
	}
	return string(b[i : i+n]), nil
}

// follow updates EDS and RDS subscriptions after a CDS or LDS update, as Envoy does: EDS for every EDS
// cluster, RDS for every route configuration a listener names. Called with p.mu held.
// followClusters is follow for a delta CDS response: like Envoy, only the clusters it adds, changes or removes
// touch the EDS subscriptions, so a response costs its own size rather than the mesh's. Called with p.mu held.
func (p *proxy) followClusters(resp *deltaResponse) (sub, unsub map[string][]string) {
	have := p.subs[edsType]
	var add, drop []string
	for _, r := range resp.Resources {
		c, ok := p.res[cdsType][r.Name]
		switch {
		case ok && c.eds && !have[r.Name]:
			add = append(add, r.Name)
			have[r.Name] = true
		case (!ok || !c.eds) && have[r.Name]:
			drop = append(drop, r.Name)
		}
	}
	for _, n := range resp.RemovedResources {
		if have[n] {
			drop = append(drop, n)
		}
	}
	for _, n := range drop {
		delete(have, n)
		delete(p.res[edsType], n)
	}
	if add != nil {
		sub = map[string][]string{edsType: add}
	}
	if drop != nil {
		unsub = map[string][]string{edsType: drop}
	}
	return sub, unsub
}

func (p *proxy) follow(typ string) (sub, unsub map[string][]string) {
	var dep string
	have := p.subs[edsType]
	switch typ {
	case cdsType:
		dep = edsType
		// Clusters map one to one to EDS names: compare counts first, the common case being no change.
		sub, unsub = map[string][]string{}, map[string][]string{}
		n := 0
		for name, in := range p.res[cdsType] {
			if in.eds {
				n++
				if !have[name] {
					sub[dep] = append(sub[dep], name)
				}
			}
		}
		for _, name := range sub[dep] {
			have[name] = true
		}
		if len(have) > n {
			for name := range have {
				if c, ok := p.res[cdsType][name]; !ok || !c.eds {
					unsub[dep] = append(unsub[dep], name)
					delete(have, name)
					delete(p.res[dep], name)
				}
			}
		}
	case ldsType:
		dep = rdsType
		have = p.subs[rdsType]
		want := map[string]bool{}
		for _, in := range p.res[ldsType] {
			for _, r := range in.routes {
				want[r] = true
			}
		}
		sub, unsub = map[string][]string{}, map[string][]string{}
		for n := range want {
			if !have[n] {
				sub[dep] = append(sub[dep], n)
				have[n] = true
			}
		}
		for n := range have {
			if !want[n] {
				unsub[dep] = append(unsub[dep], n)
				delete(have, n)
				delete(p.res[dep], n)
				for vh := range p.res[vhdsType] {
					if strings.HasPrefix(vh, n+"/") {
						delete(p.res[vhdsType], vh)
					}
				}
			}
		}
	default:
		return nil, nil
	}
	if len(sub) == 0 {
		sub = nil
	}
	if len(unsub) == 0 {
		unsub = nil
	}
	return sub, unsub
}

// isSynced reports whether the proxy has its whole initial config. Called with p.mu held.
func (p *proxy) isSynced() bool {
	if p.kind == kindZtunnel {
		return p.got[addrType] && p.got[authzType]
	}
	if !p.got[cdsType] || !p.got[ldsType] {
		return false
	}
	for _, t := range []string{edsType, rdsType} {
		for n := range p.subs[t] {
			if _, ok := p.res[t][n]; !ok {
				return false
			}
		}
	}
	return !p.anyVHDS() || p.got[vhdsType]
}

// waiter is one proxy's part of a measured change.
type waiter struct {
	pred  func(p *proxy) bool // called with p.mu held
	start time.Time
	lat   time.Duration
	done  func(time.Duration)
	owner any // the change it belongs to
}

// expect registers pred; done is called once, with the latency, when it first holds.
func (p *proxy) expect(owner any, start time.Time, pred func(*proxy) bool, done func(time.Duration)) {
	p.mu.Lock()
	if pred(p) {
		p.mu.Unlock()
		done(time.Since(start))
		return
	}
	p.waiters = append(p.waiters, &waiter{pred: pred, start: start, done: done, owner: owner})
	p.mu.Unlock()
}

// check fires satisfied waiters and notes the initial sync.
func (p *proxy) check() {
	now := time.Now()
	p.mu.Lock()
	if p.synced.IsZero() && p.isSynced() {
		p.synced = now
		p.initialBytes = p.bytes.Load()
		p.h.syncedCount.Add(1)
	}
	p.warm.sweep(now)
	kept := p.waiters[:0]
	var fired []*waiter
	for _, w := range p.waiters {
		if w.pred(p) {
			w.lat = now.Sub(w.start)
			fired = append(fired, w)
		} else {
			kept = append(kept, w)
		}
	}
	clear(p.waiters[len(kept):])
	p.waiters = kept
	p.mu.Unlock()
	for _, w := range fired {
		w.done(w.lat)
	}
}

// dropWaiters forgets the pending waiters of one change (that timed out).
func (p *proxy) dropWaiters(owner any) {
	p.mu.Lock()
	p.waiters = slices.DeleteFunc(p.waiters, func(w *waiter) bool { return w.owner == owner })
	p.mu.Unlock()
}

// Predicates, called with p.mu held.

// lacksClusters holds once none of names is in the proxy's CDS, whatever their endpoints.
func lacksClusters(names []string) func(*proxy) bool {
	return func(p *proxy) bool {
		for _, name := range names {
			if _, ok := p.res[cdsType][name]; ok {
				return false
			}
		}
		return true
	}
}

func hasCluster(name string) func(*proxy) bool {
	return func(p *proxy) bool {
		c, ok := p.res[cdsType][name]
		if !ok {
			return false
		}
		if !c.eds {
			return true
		}
		e, ok := p.res[edsType][name]
		return ok && len(e.addrs) > 0
	}
}

func watchesEDS(p *proxy, name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.subs[edsType][name]
}

func endpointIs(cluster, ip string, present bool) func(*proxy) bool {
	return func(p *proxy) bool {
		e, ok := p.res[edsType][cluster]
		if !ok {
			return !present
		}
		_, has := e.addrs[ip]
		return has == present
	}
}

// anyContains reports whether a resource of one of the types holds marker.
func anyContains(marker string, types ...string) func(*proxy) bool {
	mb := []byte(marker)
	return func(p *proxy) bool {
		for _, typ := range types {
			for _, in := range p.res[typ] {
				if containsBytes(in.raw, mb) {
					return true
				}
			}
		}
		return false
	}
}

func resourceIs(typ, name string, present bool) func(*proxy) bool {
	return func(p *proxy) bool {
		_, ok := p.res[typ][name]
		return ok == present
	}
}
