package xds

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sextantmesh/sextant/pilot/model"
)

// FuzzADS decodes its input into one ADS stream (state of the world or delta): a node, then up to
// fuzzMaxSteps requests, pushes and short waits. The stream runs against one in-process server shared by
// every input. Each stream must end within fuzzStreamTimeout, cleanly (or InvalidArgument for a bad node or
// a request without a type), every response must be well formed with resources that pass ValidateAll, and
// once it ends the server must hold no connection, no in-flight budget and no goroutine of it.
func FuzzADS(f *testing.F) {
	for _, s := range fuzzADSSeeds() {
		f.Add(s)
	}
	fs := newFuzzServer(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		fs.run(t, decodeFuzzStream(data))
	})
}

const (
	fuzzMaxSteps      = 24
	fuzzMaxAwaits     = 2                     // each may wait fuzzAwait: bounds an input's time
	fuzzAwait         = 5 * time.Millisecond  // lets later requests ACK what came back; mostly long enough
	fuzzStreamTimeout = 5 * time.Second       // a stream still open after this is a deadlock
	fuzzSettle        = 3 * time.Second       // for the server to let go of an ended stream
	fuzzPoll          = 50 * time.Microsecond // what the server lets go of is gone in well under a millisecond
)

// fuzzTypes are the types requests choose from: every type the test server serves, one it does not, and
// none. The decoder may also make one up.
var fuzzTypes = []string{ClusterType, EndpointType, ListenerType, RouteType, VirtualHostType, AddressType, SecretType, ""}

// fuzzNames are resource names requests choose from: those in fuzzSnapshot, the wildcard, names that do
// not exist (on demand and not), and VHDS names. The decoder may also make one up.
var fuzzNames = []string{"a", "b", "c", "*", "missing", "net/10.0.0.9", "net/10.0.0.8", "w1", "l1", "80", "8080",
	"80/a:80", "80/b:80", "8080/a:8080", "80/missing"}

// fuzzServedTypes are the types with a generator, which pushes edit.
var fuzzServedTypes = []string{ClusterType, EndpointType, ListenerType, RouteType, VirtualHostType, AddressType}

func fuzzSnapshot() snapshot {
	return snapshot{
		ClusterType:     {"a": "a1", "b": "b1"},
		EndpointType:    {"a": "ea1", "b": "eb1", "c": "ec1"},
		ListenerType:    {"l1": "l1"},
		RouteType:       {"80": "rc80", "8080": "rc8080"},
		VirtualHostType: {"80/a:80": "a", "80/b:80": "b", "8080/a:8080": "a8080"},
		AddressType:     {"w1": "1", "net/10.0.0.9": "1"},
	}
}

// fuzzStream is one decoded input.
type fuzzStream struct {
	delta bool
	node  *core.Node
	steps []fuzzStep
}

type stepKind int

const (
	stepRequest stepKind = iota
	stepPush
	stepAwait
)

// A choice of nonce or version: none, the latest received for the type, the first received (stale), or text.
const (
	choiceNone = iota
	choiceLatest
	choiceFirst
	choiceText
	choices
)

type fuzzStep struct {
	kind stepKind
	// stepRequest
	typeURL         string
	nonce, version  int
	nonceText       string
	versionText     string
	names, unsub    []string // names (SotW) or names to subscribe (delta), and to unsubscribe (delta)
	errorDetail     *string
	withNode        bool
	initialVersions map[string]int // delta: name → choiceLatest (as received), choiceText ("stale") or choiceNone ("")
	// stepPush
	full     bool
	edit     int // 0 none, 1 set, 2 delete
	editType string
	editName string
	payload  string
	services []string
}

// fuzzBytes reads choices from the input; past its end every choice is 0.
type fuzzBytes struct{ b []byte }

func (r *fuzzBytes) done() bool { return len(r.b) == 0 }

func (r *fuzzBytes) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *fuzzBytes) pick(n int) int { return int(r.byte()) % n }

// text reads up to 23 bytes as a string; protobuf strings must be UTF-8, so invalid bytes are replaced.
func (r *fuzzBytes) text() string {
	n := min(int(r.byte()%24), len(r.b))
	s := string(r.b[:n])
	r.b = r.b[n:]
	return strings.ToValidUTF8(s, "\uFFFD")
}

func (r *fuzzBytes) oneOf(list []string) string {
	if i := r.pick(len(list) + 1); i < len(list) {
		return list[i]
	}
	return r.text()
}

func (r *fuzzBytes) list() []string {
	n := r.pick(5)
	if n == 0 {
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = r.oneOf(fuzzNames)
	}
	return out
}

// metadataValue is a node metadata value of any of the shapes a client may send.
func (r *fuzzBytes) metadataValue() any {
	switch r.pick(5) {
	case 0:
		return r.text()
	case 1:
		return float64(r.byte())
	case 2:
		return map[string]any{r.text(): r.text()}
	case 3:
		return map[string]any{"app": float64(1)}
	default:
		return []any{r.text()}
	}
}

func (r *fuzzBytes) node() *core.Node {
	switch r.pick(8) {
	case 0:
		return sidecar("pod", "ns1")
	case 1:
		return node("router~10.0.0.3~gw.ns1~ns1.svc.cluster.local", nil)
	case 2:
		return node("ztunnel~10.0.0.2~zt-1.istio-system~istio-system.svc.cluster.local", nil)
	case 3:
		return node("grpc-client-"+r.text(), map[string]any{"NAMESPACE": "ns1", "GENERATOR": "grpc"})
	case 4:
		return nil
	case 5:
		return node(r.text(), nil)
	case 6:
		md := map[string]any{}
		for range r.pick(4) {
			key := r.oneOf([]string{"NAMESPACE", "CLUSTER_ID", "INSTANCE_IPS", "LABELS", "GENERATOR", "NAME", "SERVICE_ACCOUNT"})
			md[key] = r.metadataValue()
		}
		return node(r.oneOf([]string{"sidecar~10.0.0.1~pod.ns1~ns1.svc.cluster.local", "sidecar~~pod~", "x~y~z~w"}), md)
	default:
		n := sidecar("pod", "ns1")
		n.UserAgentName = "envoy"
		if r.pick(2) == 0 {
			n.UserAgentVersionType = &core.Node_UserAgentVersion{UserAgentVersion: r.text()}
		}
		return n
	}
}

func (r *fuzzBytes) choice() (int, string) {
	c := r.pick(choices)
	if c == choiceText {
		return c, r.text()
	}
	return c, ""
}

func decodeFuzzStream(data []byte) fuzzStream {
	r := &fuzzBytes{b: data}
	s := fuzzStream{delta: r.byte()&1 == 1, node: r.node()}
	for !r.done() && len(s.steps) < fuzzMaxSteps {
		var st fuzzStep
		switch op := r.pick(8); {
		case op < 6:
			st.kind = stepRequest
			st.typeURL = r.oneOf(fuzzTypes)
			st.nonce, st.nonceText = r.choice()
			st.version, st.versionText = r.choice()
			st.names = r.list()
			if s.delta {
				st.unsub = r.list()
			}
			flags := r.byte()
			if flags&3 == 0 {
				msg := r.text()
				st.errorDetail = &msg
			}
			st.withNode = flags&0x1c == 0
			if s.delta && flags&0x60 == 0 {
				st.initialVersions = map[string]int{}
				for range r.pick(4) {
					st.initialVersions[r.oneOf(fuzzNames)] = r.pick(3)
				}
			}
		case op == 6:
			st.kind = stepPush
			st.full = r.pick(2) == 0
			st.edit = r.pick(3)
			if st.edit > 0 {
				// Only names of the list: the generators' output must be valid for the transport's to be
				// judged, and a made-up name may be empty.
				st.editType = fuzzServedTypes[r.pick(len(fuzzServedTypes))]
				st.editName = fuzzNames[r.pick(len(fuzzNames))]
				st.payload = fmt.Sprintf("p%d", r.pick(3))
			}
			if !st.full {
				for range r.pick(3) + 1 {
					st.services = append(st.services, r.oneOf([]string{"ns1", "istio-system"})+"/"+r.oneOf(fuzzNames))
				}
			}
		default:
			st.kind = stepAwait
		}
		s.steps = append(s.steps, st)
	}
	return s
}

// fuzzServer is the server every input runs against: starting one per input would cost more than the
// input. Inputs that push restore fuzzSnapshot after themselves, so each input starts from the same state.
type fuzzServer struct {
	e     *testEnv
	ads   discovery.AggregatedDiscoveryServiceClient
	dirty bool
}

func newFuzzServer(f testing.TB) *fuzzServer {
	e := newEnv(f, fuzzSnapshot(), func(e *testEnv, o *Options) {
		// EDS computes incremental pushes, so the transport's partial SotW and delta paths run too.
		o.Generators[EndpointType] = fuzzEDS{&testGen{env: e, typeURL: EndpointType}}
	})
	fs := &fuzzServer{e: e, ads: e.dial(f)}
	// The client connects on its first stream, starting the goroutines of both ends of the connection:
	// a first stream before any input makes them part of every input's goroutine count.
	fs.play(f, decodeFuzzStream(fuzzADSSeeds()[0]))
	fs.reset(f)
	return fs
}

// fuzzEDS answers a non-full push with only the load assignments of the services it names, and the names
// of those that are gone as removed.
type fuzzEDS struct{ *testGen }

func (g fuzzEDS) GenerateDeltas(p *model.Proxy, push *model.PushContext, w *model.WatchedResource,
	req *model.PushRequest) (model.Resources, []string, bool, error) {
	all, err := g.Generate(p, push, w, req)
	if err != nil || req == nil || req.Full || len(req.ServicesUpdated) == 0 {
		return all, nil, false, err
	}
	changed := map[string]bool{}
	for s := range req.ServicesUpdated {
		if _, name, ok := strings.Cut(s, "/"); ok {
			changed[name] = true
		}
	}
	var res model.Resources
	for _, r := range all {
		if changed[r.Name] {
			res = append(res, r)
			delete(changed, r.Name)
		}
	}
	return res, slices.Sorted(maps.Keys(changed)), true, nil
}

// publish pushes the next snapshot and forgets old ones: a long fuzzing run publishes one every few inputs.
func (fs *fuzzServer) publish(full bool, services []string, edit func(snapshot)) {
	v := fs.e.publish(full, services, edit)
	fs.e.mu.Lock()
	for old := range fs.e.snaps {
		if old+4 < v {
			delete(fs.e.snaps, old)
		}
	}
	fs.e.mu.Unlock()
}

// reset restores fuzzSnapshot after an input that pushed, and waits until the push is distributed, so
// that the next stream does not receive it.
func (fs *fuzzServer) reset(t testing.TB) {
	if !fs.dirty {
		return
	}
	fs.publish(true, nil, func(s snapshot) {
		clear(s)
		maps.Copy(s, fuzzSnapshot())
	})
	fs.dirty = false
	deadline := time.Now().Add(fuzzSettle)
	for {
		fs.e.srv.incomingMu.Lock()
		taken := fs.e.srv.incoming == nil
		fs.e.srv.incomingMu.Unlock()
		if taken {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the distributor did not take a push in %v", fuzzSettle)
		}
		time.Sleep(fuzzPoll)
	}
}

// fuzzRun is what a stream has received so far, for the nonces and versions of later requests, and what
// it asked, to judge responses by.
type fuzzRun struct {
	t        testing.TB
	asked    map[string]bool
	nonces   map[string]bool
	first    map[string][2]string // type → [version, nonce] of its first response
	latest   map[string][2]string // type → [version, nonce] of its latest response
	versions map[string]string    // delta: resource name → version received
	awaits   int
	// named holds every name a request subscribed to, by type; wildcard the types a request may have
	// subscribed to everything. A response may hold nothing else.
	named    map[string]map[string]bool
	wildcard map[string]bool
}

// subscribed notes the names of a request, and whether it may have made or kept a wildcard subscription.
func (run *fuzzRun) subscribed(typeURL string, names []string, legacy bool) {
	if run.named[typeURL] == nil {
		run.named[typeURL] = map[string]bool{}
	}
	for _, n := range names {
		run.named[typeURL][n] = true
	}
	if slices.Contains(names, "*") || legacy && realPolicies()[typeURL].LegacyWildcard {
		run.wildcard[typeURL] = true
	}
}

// mayHold reports whether a response of typeURL may hold name.
func (run *fuzzRun) mayHold(typeURL, name string) bool {
	return run.wildcard[typeURL] || run.named[typeURL][name]
}

func (fs *fuzzServer) run(t *testing.T, s fuzzStream) {
	fs.reset(t)
	before := runtime.NumGoroutine()
	fs.play(t, s)
	fs.settled(t, before)
}

// play runs s on a new stream and checks how it ended.
func (fs *fuzzServer) play(t testing.TB, s fuzzStream) {
	ctx, cancel := context.WithTimeout(context.Background(), fuzzStreamTimeout)
	defer cancel()
	run := &fuzzRun{t: t, asked: map[string]bool{}, nonces: map[string]bool{}, first: map[string][2]string{},
		latest: map[string][2]string{}, versions: map[string]string{}, named: map[string]map[string]bool{},
		wildcard: map[string]bool{}}
	var end error
	if s.delta {
		open := func(ctx context.Context) (bidiStream[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse], error) {
			return fs.ads.DeltaAggregatedResources(ctx)
		}
		end = runStream(ctx, fs, run, s, open, run.deltaRequest, run.checkDelta)
	} else {
		open := func(ctx context.Context) (bidiStream[discovery.DiscoveryRequest, discovery.DiscoveryResponse], error) {
			return fs.ads.StreamAggregatedResources(ctx)
		}
		end = runStream(ctx, fs, run, s, open, run.sotwRequest, run.checkSotW)
	}
	switch code := status.Code(end); {
	case errors.Is(end, io.EOF):
		if _, err := model.ParseProxy(s.node); err != nil && hasRequest(s) {
			t.Fatalf("a stream whose node is invalid (%v) ended cleanly", err)
		}
	case code == codes.InvalidArgument:
	default:
		t.Fatalf("stream ended with %v", end)
	}
}

// settled waits for the server to let go of the streams that ended: no connection, no budget held, and no
// more goroutines than before them.
func (fs *fuzzServer) settled(t testing.TB, before int) {
	deadline := time.Now().Add(fuzzSettle)
	for {
		conns, used, now := len(fs.e.srv.Connections()), fs.e.srv.inflight.used.Load(), runtime.NumGoroutine()
		if conns == 0 && used == 0 && now <= before {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v after the stream ended: %d connections, %d bytes in flight, %d goroutines (%d before)\n%s",
				fuzzSettle, conns, used, now, before, goroutines())
		}
		time.Sleep(fuzzPoll)
	}
}

func hasRequest(s fuzzStream) bool {
	return slices.ContainsFunc(s.steps, func(st fuzzStep) bool { return st.kind == stepRequest })
}

// runStream plays s's steps on a new stream, checks every response, closes its send side and returns how
// the stream ended (io.EOF when cleanly).
func runStream[Req, Resp any](ctx context.Context, fs *fuzzServer, run *fuzzRun, s fuzzStream,
	open func(context.Context) (bidiStream[Req, Resp], error),
	request func(st fuzzStep, first bool, n *core.Node) *Req, check func(*Resp)) error {
	t := run.t
	stream, err := open(ctx)
	if err != nil {
		t.Fatalf("opening a stream: %v", err)
	}
	resps := make(chan *Resp, 1024)
	ended := make(chan error, 1)
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				ended <- err
				return
			}
			resps <- r
		}
	}()
	var end error
	drain := func() {
		for {
			select {
			case r := <-resps:
				check(r)
			default:
				return
			}
		}
	}
	sentFirst := false
	for _, st := range s.steps {
		if end != nil {
			break
		}
		drain()
		switch st.kind {
		case stepRequest:
			if err := stream.Send(request(st, !sentFirst, s.node)); err != nil {
				if !errors.Is(err, io.EOF) {
					t.Fatalf("send: %v", err)
				}
				end = err // the server ended the stream; Recv says why
			}
			sentFirst = true
		case stepPush:
			fs.dirty = true
			fs.publish(st.full, st.services, func(snap snapshot) {
				switch st.edit {
				case 1:
					if snap[st.editType] == nil {
						snap[st.editType] = map[string]string{}
					}
					snap[st.editType][st.editName] = st.payload
				case 2:
					delete(snap[st.editType], st.editName)
				}
			})
		case stepAwait:
			if run.awaits++; run.awaits > fuzzMaxAwaits {
				continue
			}
			select {
			case r := <-resps:
				check(r)
			case err := <-ended:
				ended <- err
				end = err
			case <-time.After(fuzzAwait):
			}
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatalf("close send: %v", err)
	}
	for {
		select {
		case r := <-resps:
			check(r)
		case err := <-ended:
			drain()
			return err
		case <-ctx.Done():
			t.Fatalf("stream still open %v after it began (deadlock?)\n%s", fuzzStreamTimeout, goroutines())
		}
	}
}

// bidiStream is either stream of the generated client.
type bidiStream[Req, Resp any] interface {
	Send(*Req) error
	Recv() (*Resp, error)
	CloseSend() error
}

func (run *fuzzRun) nonceAndVersion(st fuzzStep) (nonce, version string) {
	pick := func(c int, text string, idx int) string {
		switch c {
		case choiceLatest:
			return run.latest[st.typeURL][idx]
		case choiceFirst:
			return run.first[st.typeURL][idx]
		case choiceText:
			return text
		}
		return ""
	}
	return pick(st.nonce, st.nonceText, 1), pick(st.version, st.versionText, 0)
}

func (run *fuzzRun) sotwRequest(st fuzzStep, first bool, n *core.Node) *discovery.DiscoveryRequest {
	run.asked[st.typeURL] = true
	run.subscribed(st.typeURL, st.names, len(st.names) == 0)
	req := &discovery.DiscoveryRequest{TypeUrl: st.typeURL, ResourceNames: st.names}
	req.ResponseNonce, req.VersionInfo = run.nonceAndVersion(st)
	if first || st.withNode {
		req.Node = n
	}
	if st.errorDetail != nil {
		req.ErrorDetail = statusProto(*st.errorDetail)
	}
	return req
}

func (run *fuzzRun) deltaRequest(st fuzzStep, first bool, n *core.Node) *discovery.DeltaDiscoveryRequest {
	run.subscribed(st.typeURL, st.names, !run.asked[st.typeURL] && len(st.names) == 0 && len(st.unsub) == 0)
	run.asked[st.typeURL] = true
	req := &discovery.DeltaDiscoveryRequest{TypeUrl: st.typeURL, ResourceNamesSubscribe: st.names,
		ResourceNamesUnsubscribe: st.unsub}
	req.ResponseNonce, _ = run.nonceAndVersion(st)
	if first || st.withNode {
		req.Node = n
	}
	if st.errorDetail != nil {
		req.ErrorDetail = statusProto(*st.errorDetail)
	}
	if st.initialVersions != nil {
		req.InitialResourceVersions = map[string]string{}
		for name, c := range st.initialVersions {
			switch c {
			case choiceLatest:
				req.InitialResourceVersions[name] = run.versions[name]
			case choiceFirst:
				req.InitialResourceVersions[name] = "stale"
			default:
				req.InitialResourceVersions[name] = ""
			}
		}
	}
	return req
}

// received checks what every response must have, and keeps its version and nonce for later requests.
func (run *fuzzRun) received(typeURL, version, nonce string) {
	t := run.t
	if !run.asked[typeURL] {
		t.Fatalf("a %q response; the stream never asked for that type", typeURL)
	}
	if _, served := fuzzSnapshot()[typeURL]; !served {
		t.Fatalf("a %q response; no generator serves that type", typeURL)
	}
	if nonce == "" || version == "" {
		t.Fatalf("a %s response with nonce %q and version %q", typeURL, nonce, version)
	}
	if run.nonces[nonce] {
		t.Fatalf("nonce %q sent twice", nonce)
	}
	run.nonces[nonce] = true
	if _, ok := run.first[typeURL]; !ok {
		run.first[typeURL] = [2]string{version, nonce}
	}
	run.latest[typeURL] = [2]string{version, nonce}
}

func (run *fuzzRun) checkSotW(r *discovery.DiscoveryResponse) {
	t := run.t
	run.received(r.TypeUrl, r.VersionInfo, r.Nonce)
	seen := map[string]bool{}
	for _, a := range r.Resources {
		name := checkResource(t, r.TypeUrl, a)
		if !run.mayHold(r.TypeUrl, name) {
			t.Fatalf("%s response %s holds %q, which no request subscribed to", r.TypeUrl, r.Nonce, name)
		}
		if seen[name] {
			t.Fatalf("%s response %s holds %q twice", r.TypeUrl, r.Nonce, name)
		}
		seen[name] = true
	}
}

func (run *fuzzRun) checkDelta(r *discovery.DeltaDiscoveryResponse) {
	t := run.t
	run.received(r.TypeUrl, r.SystemVersionInfo, r.Nonce)
	seen := map[string]bool{}
	for _, res := range r.Resources {
		if res.Name == "" || res.Version == "" || res.Resource == nil {
			t.Fatalf("%s response %s: resource %q with version %q and body %v", r.TypeUrl, r.Nonce, res.Name, res.Version, res.Resource)
		}
		if name := checkResource(t, r.TypeUrl, res.Resource); name != res.Name {
			t.Fatalf("%s response %s: resource named %q holds %q", r.TypeUrl, r.Nonce, res.Name, name)
		}
		if !run.mayHold(r.TypeUrl, res.Name) {
			t.Fatalf("%s response %s holds %q, which no request subscribed to", r.TypeUrl, r.Nonce, res.Name)
		}
		if seen[res.Name] {
			t.Fatalf("%s response %s holds %q twice", r.TypeUrl, r.Nonce, res.Name)
		}
		seen[res.Name] = true
		run.versions[res.Name] = res.Version
	}
	removed := map[string]bool{}
	for _, n := range r.RemovedResources {
		if n == "*" || seen[n] || removed[n] {
			t.Fatalf("%s response %s: %q removed (sent: %v, removed twice: %v)", r.TypeUrl, r.Nonce, n, seen[n], removed[n])
		}
		removed[n] = true
	}
}

// checkResource decodes a resource as its type, checks it with ValidateAll and returns its name.
func checkResource(t testing.TB, typeURL string, a *anypb.Any) string {
	t.Helper()
	if a.GetTypeUrl() != typeURL {
		t.Fatalf("a %s resource in a %s response", a.GetTypeUrl(), typeURL)
	}
	var m interface {
		proto.Message
		ValidateAll() error
	}
	var name func() string
	switch typeURL {
	case ClusterType:
		c := &cluster.Cluster{}
		m, name = c, c.GetName
	case EndpointType:
		c := &endpoint.ClusterLoadAssignment{}
		m, name = c, c.GetClusterName
	case ListenerType:
		l := &listener.Listener{}
		m, name = l, l.GetName
	case RouteType:
		rc := &route.RouteConfiguration{}
		m, name = rc, rc.GetName
	case VirtualHostType:
		v := &route.VirtualHost{}
		m, name = v, v.GetName
	default: // the test generators' stand-in for istio.workload.Address
		l := &core.Locality{}
		m, name = l, l.GetRegion
	}
	if err := proto.Unmarshal(a.GetValue(), m); err != nil {
		t.Fatalf("%s resource does not decode: %v", typeURL, err)
	}
	if err := m.ValidateAll(); err != nil {
		t.Fatalf("%s resource %q is invalid: %v", typeURL, name(), err)
	}
	return name()
}

func goroutines() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// fuzzSeed writes an input for decodeFuzzStream, so seeds read as the streams they are.
type fuzzSeed struct {
	b     []byte
	delta bool
}

func newFuzzSeed(delta bool, node ...byte) *fuzzSeed {
	s := &fuzzSeed{delta: delta}
	if delta {
		s.b = append(s.b, 1)
	} else {
		s.b = append(s.b, 0)
	}
	s.b = append(s.b, node...)
	return s
}

func (s *fuzzSeed) text(v string) {
	if len(v) >= 24 {
		panic("seed text longer than fuzzBytes.text reads: " + v)
	}
	s.b = append(s.b, byte(len(v)))
	s.b = append(s.b, v...)
}

func (s *fuzzSeed) oneOf(list []string, v string) {
	if i := slices.Index(list, v); i >= 0 {
		s.b = append(s.b, byte(i))
		return
	}
	s.b = append(s.b, byte(len(list)))
	s.text(v)
}

func (s *fuzzSeed) list(names []string) {
	s.b = append(s.b, byte(len(names)))
	for _, n := range names {
		s.oneOf(fuzzNames, n)
	}
}

// seedRequest is a request of a seed: nonce and version are choices (choiceNone, choiceLatest, ...).
type seedRequest struct {
	typeURL        string
	nonce, version int
	text           string // the nonce or version of choiceText
	names, unsub   []string
	nack           string
	initial        map[string]int
}

func (s *fuzzSeed) req(r seedRequest) *fuzzSeed {
	s.b = append(s.b, 0) // a request
	s.oneOf(fuzzTypes, r.typeURL)
	for _, c := range []int{r.nonce, r.version} {
		s.b = append(s.b, byte(c))
		if c == choiceText {
			s.text(r.text)
		}
	}
	s.list(r.names)
	if s.delta {
		s.list(r.unsub)
	}
	flags := byte(0x7f)
	if r.nack != "" {
		flags &^= 3
	}
	if r.initial != nil {
		flags &^= 0x60
	}
	s.b = append(s.b, flags)
	if r.nack != "" {
		s.text(r.nack)
	}
	if r.initial != nil {
		s.b = append(s.b, byte(len(r.initial)))
		for _, n := range slices.Sorted(maps.Keys(r.initial)) {
			s.oneOf(fuzzNames, n)
			s.b = append(s.b, byte(r.initial[n]))
		}
	}
	return s
}

// ask subscribes (a first request or a change); ack answers the latest response of the type.
func (s *fuzzSeed) ask(typeURL string, names ...string) *fuzzSeed {
	return s.req(seedRequest{typeURL: typeURL, names: names})
}

func (s *fuzzSeed) ack(typeURL string, names ...string) *fuzzSeed {
	return s.req(seedRequest{typeURL: typeURL, nonce: choiceLatest, version: choiceLatest, names: names})
}

func (s *fuzzSeed) wait() *fuzzSeed {
	s.b = append(s.b, 7)
	return s
}

// push publishes a snapshot: edit 0 leaves it as it is, 1 sets name to payload pN, 2 deletes name.
// A non-full push names the services it updated.
func (s *fuzzSeed) push(full bool, edit int, typeURL, name string, payload int, services ...string) *fuzzSeed {
	s.b = append(s.b, 6)
	if full {
		s.b = append(s.b, 0)
	} else {
		s.b = append(s.b, 1)
	}
	s.b = append(s.b, byte(edit))
	if edit > 0 {
		s.b = append(s.b, byte(slices.Index(fuzzServedTypes, typeURL)), byte(slices.Index(fuzzNames, name)))
		s.b = append(s.b, byte(payload))
	}
	if !full {
		s.b = append(s.b, byte(len(services)-1))
		for _, svc := range services {
			ns, name, _ := strings.Cut(svc, "/")
			s.oneOf([]string{"ns1", "istio-system"}, ns)
			s.oneOf(fuzzNames, name)
		}
	}
	return s
}

// Node choices of fuzzBytes.node that read no more input.
const (
	seedSidecar byte = 0
	seedRouter  byte = 1
	seedZtunnel byte = 2
	seedNoNode  byte = 4
)

func fuzzADSSeeds() [][]byte {
	seeds := []*fuzzSeed{
		// Envoy over SotW: CDS, EDS, LDS, RDS, each ACKed, then a push and a NACK of it.
		newFuzzSeed(false, seedSidecar).
			ask(ClusterType).wait().ack(ClusterType).
			ask(EndpointType, "a", "b").wait().ack(EndpointType, "a", "b").
			ask(ListenerType).wait().ack(ListenerType).
			ask(RouteType, "80").wait().ack(RouteType, "80").
			push(true, 1, ClusterType, "c", 1).wait().
			req(seedRequest{typeURL: ClusterType, nonce: choiceLatest, version: choiceFirst, nack: "rejected"}).
			push(false, 1, EndpointType, "a", 2, "ns1/a", "ns1/missing").wait().ack(EndpointType, "a", "b"),
		// SotW edge requests: a stale nonce, a changed subscription, an unknown type, then no type at all.
		newFuzzSeed(false, seedRouter).
			ask(EndpointType, "a").wait().
			req(seedRequest{typeURL: EndpointType, nonce: choiceText, text: "old-nonce", names: []string{"b"}}).
			req(seedRequest{typeURL: EndpointType, nonce: choiceLatest, version: choiceLatest, names: []string{"*", "c"}}).
			ask(SecretType, "default").ask("example.com/Made.Up").wait().ask(""),
		// No node: refused.
		newFuzzSeed(false, seedNoNode).ask(ClusterType),
		// Closed before the first request.
		newFuzzSeed(false, seedSidecar),
		newFuzzSeed(true, seedSidecar),
		// Envoy over delta: wildcard CDS, EDS by name, RDS and VHDS, unsubscribing, pushes that add and remove.
		newFuzzSeed(true, seedSidecar).
			ask(ClusterType).wait().ack(ClusterType).
			ask(EndpointType, "a", "b").wait().ack(EndpointType).
			ask(RouteType, "80").ask(VirtualHostType).wait().ack(RouteType).wait().ack(VirtualHostType).
			push(true, 1, ClusterType, "a", 2).wait().ack(ClusterType).
			push(false, 2, EndpointType, "b", 0, "ns1/b").wait().
			req(seedRequest{typeURL: EndpointType, unsub: []string{"a"}}).
			req(seedRequest{typeURL: ClusterType, names: []string{"a"}, unsub: []string{"*"}}).
			push(true, 2, RouteType, "80", 0).wait().ack(RouteType),
		// On-demand ztunnel: "*" subscribed and unsubscribed at once, then lookups, one NACKed.
		newFuzzSeed(true, seedZtunnel).
			req(seedRequest{typeURL: AddressType, names: []string{"*"}, unsub: []string{"*"}}).wait().ack(AddressType).
			ask(AddressType, "net/10.0.0.9", "net/10.0.0.8").wait().
			req(seedRequest{typeURL: AddressType, nonce: choiceLatest, nack: "bad address"}).
			push(false, 1, AddressType, "net/10.0.0.8", 1, "istio-system/net/10.0.0.8").wait(),
		// A delta reconnect claiming what it had, some of it stale.
		newFuzzSeed(true, seedSidecar).
			req(seedRequest{typeURL: ClusterType, initial: map[string]int{"a": choiceFirst, "b": choiceNone, "c": choiceFirst}}).wait().
			req(seedRequest{typeURL: EndpointType, names: []string{"a", "c"}, initial: map[string]int{"a": choiceFirst}}).wait(),
	}
	out := make([][]byte, len(seeds))
	for i, s := range seeds {
		out[i] = s.b
	}
	return out
}
