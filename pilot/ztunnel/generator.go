package ztunnel

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"sync"

	lru "github.com/hashicorp/golang-lru/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
)

// Options configure the generators.
type Options struct {
	// AmbientOnly sends only workloads enrolled in ambient (and only services that select one of them or
	// carry a waypoint). By default Sextant does what istiod does: every workload is sent, those outside the
	// mesh with tunnel_protocol NONE, so ztunnel can reach plaintext backends of any service it knows.
	AmbientOnly bool
	// CacheSize bounds the number of marshaled workload and service resources kept (default 65,536).
	CacheSize int
}

// Generators serves ztunnel's two types. It is safe for concurrent use by many connections: output shared
// by all ztunnels (the full state of a snapshot, the delta of a push, each marshaled resource) is computed
// once and cached.
type Generators struct {
	opts    Options
	address *AddressGenerator
	authz   *AuthorizationGenerator

	// resources caches marshaled workloads and services by everything their bytes depend on.
	resources *lru.Cache[any, *model.Resource]
	// pushes holds the shared per-snapshot state of the last few snapshots.
	pushes *lru.Cache[*model.PushContext, *pushState]
	// policies caches converted AuthorizationPolicies by config object and root namespace.
	policies *lru.Cache[policyKey, *convertedPolicy]
}

// AddressGenerator generates type.googleapis.com/istio.workload.Address. It implements model.Generator,
// model.DeltaGenerator and model.PushFilter.
type AddressGenerator struct{ g *Generators }

// AuthorizationGenerator generates type.googleapis.com/istio.security.Authorization. It implements
// model.Generator, model.DeltaGenerator and model.PushFilter.
type AuthorizationGenerator struct{ g *Generators }

var (
	_ model.DeltaGenerator = (*AddressGenerator)(nil)
	_ model.PushFilter     = (*AddressGenerator)(nil)
	_ model.DeltaGenerator = (*AuthorizationGenerator)(nil)
	_ model.PushFilter     = (*AuthorizationGenerator)(nil)
)

// New returns the generators with istiod's defaults.
func New() *Generators { return NewWithOptions(Options{}) }

// NewWithOptions returns the generators configured by opts.
func NewWithOptions(opts Options) *Generators {
	if opts.CacheSize <= 0 {
		opts.CacheSize = 1 << 16
	}
	g := &Generators{opts: opts}
	g.resources, _ = lru.New[any, *model.Resource](opts.CacheSize)
	g.pushes, _ = lru.New[*model.PushContext, *pushState](4)
	g.policies, _ = lru.New[policyKey, *convertedPolicy](4096)
	g.address, g.authz = &AddressGenerator{g}, &AuthorizationGenerator{g}
	return g
}

// ByTypeURL returns the generators to register with the xDS server.
func (g *Generators) ByTypeURL() map[string]model.Generator {
	return map[string]model.Generator{AddressType: g.address, AuthorizationType: g.authz}
}

// Address returns the Address generator.
func (g *Generators) Address() *AddressGenerator { return g.address }

// Authorization returns the Authorization generator.
func (g *Generators) Authorization() *AuthorizationGenerator { return g.authz }

// Notes returns, for the policies of push that ztunnel cannot enforce as written ("namespace/name"), what
// was changed or skipped and why. Operators see them in debug output; the policies still load.
func (g *Generators) Notes(push *model.PushContext) map[string][]string {
	st := g.state(push)
	st.authzOnce.Do(st.buildAuthz)
	return st.notes
}

// state returns the shared per-snapshot state of push.
func (g *Generators) state(push *model.PushContext) *pushState {
	if st, ok := g.pushes.Get(push); ok {
		return st
	}
	st := &pushState{g: g, ps: push, deltas: map[*model.PushRequest]*delta{}}
	if prev, ok, _ := g.pushes.PeekOrAdd(push, st); ok {
		return prev
	}
	return st
}

// pushState is what every connection shares for one snapshot. Each part is built on first use.
type pushState struct {
	g  *Generators
	ps *model.PushContext

	svcOnce    sync.Once
	wlServices map[string][]*model.Service // workload uid → services selecting it

	fullOnce sync.Once
	full     model.Resources // every Address resource, by name
	byName   map[string]*model.Resource

	vipOnce sync.Once
	vips    map[string]*model.Service // NETWORK/VIP → service

	authzOnce sync.Once
	authz     model.Resources
	notes     map[string][]string

	mu     sync.Mutex
	deltas map[*model.PushRequest]*delta
}

// delta is the shared part of an incremental push: the same for every wildcard subscriber.
type delta struct {
	once      sync.Once
	resources model.Resources
	removed   []string
}

// Generate returns every Address the subscription covers: all of them for a wildcard, plus each explicitly
// named one (a workload uid, a service "namespace/hostname" or an on-demand "NETWORK/IP" lookup).
func (a *AddressGenerator) Generate(_ *model.Proxy, push *model.PushContext, w *model.WatchedResource,
	_ *model.PushRequest) (model.Resources, error) {
	st := a.g.state(push)
	var out model.Resources
	if w.Wildcard {
		st.fullOnce.Do(st.buildFull)
		if w.ResourceNames.Len() == 0 {
			return st.full, nil
		}
		out = slices.Clone(st.full)
	}
	for _, name := range w.ResourceNames.Sorted() {
		if w.Wildcard && st.byName[name] != nil {
			continue
		}
		if r, _ := st.resolve(name); r != nil {
			out = append(out, r)
		}
	}
	return out, nil
}

// GenerateDeltas returns, for an incremental push, only the workloads in req.WorkloadsUpdated (and, in
// AmbientOnly mode, services whose inclusion may have changed) plus the on-demand names they back; the
// uids that are gone or left the mesh are removed. Full pushes return the full state.
func (a *AddressGenerator) GenerateDeltas(p *model.Proxy, push *model.PushContext, w *model.WatchedResource, req *model.PushRequest) (
	model.Resources, []string, bool, error) {
	if req == nil || req.Full {
		res, err := a.Generate(p, push, w, req)
		return res, nil, false, err
	}
	st := a.g.state(push)
	d := st.delta(req)
	res, removed := d.resources, d.removed
	// On-demand names: resend those whose target changed, remove those that no longer resolve.
	first := true
	for _, name := range w.ResourceNames.Sorted() {
		if !isAddressName(name) {
			continue
		}
		if first {
			res, removed, first = slices.Clone(res), slices.Clone(removed), false
		}
		r, target := st.resolve(name)
		switch {
		case r == nil:
			removed = append(removed, name)
		case hasKey(req.WorkloadsUpdated, target) || hasKey(req.ServicesUpdated, target):
			res = append(res, r)
		}
	}
	return res, removed, true, nil
}

func hasKey(m map[string]struct{}, k string) bool {
	_, ok := m[k]
	return ok
}

// NeedsPush: Address changes with workloads, services, namespaces (ambient and waypoint labels), nodes
// (locality), authorization policies (workloads list those selecting them) and peer authentications
// (workloads list the policies enforcing their mutual TLS).
func (a *AddressGenerator) NeedsPush(_ *model.Proxy, _ *model.WatchedResource, req *model.PushRequest) bool {
	if len(req.WorkloadsUpdated) > 0 || len(req.ServicesUpdated) > 0 {
		return true
	}
	if !req.Full {
		return false
	}
	if len(req.ConfigsUpdated) == 0 {
		return true // e.g. the initial push or a mesh config change: everything may have changed
	}
	for k := range req.ConfigsUpdated {
		switch k.Kind {
		case config.Service, config.ServiceEntry, config.Pod, config.WorkloadEntry, config.Namespace, config.Node,
			config.AuthorizationPolicy, config.PeerAuthentication:
			return true
		}
	}
	return false
}

// Generate returns every converted AuthorizationPolicy and PeerAuthentication the subscription covers.
func (z *AuthorizationGenerator) Generate(_ *model.Proxy, push *model.PushContext, w *model.WatchedResource,
	_ *model.PushRequest) (model.Resources, error) {
	st := z.g.state(push)
	st.authzOnce.Do(st.buildAuthz)
	if w.Wildcard {
		return st.authz, nil
	}
	var out model.Resources
	for _, r := range st.authz {
		if w.ResourceNames.Has(r.Name) {
			out = append(out, r)
		}
	}
	return out, nil
}

// GenerateDeltas: full pushes return every policy. An incremental push (workloads changed) returns the
// policies of the namespaces those workloads are in, so a namespace's first workload never arrives before
// its policies; the transport sends only those the ztunnel does not have yet.
func (z *AuthorizationGenerator) GenerateDeltas(p *model.Proxy, push *model.PushContext, w *model.WatchedResource, req *model.PushRequest) (
	model.Resources, []string, bool, error) {
	if req == nil || req.Full {
		res, err := z.Generate(p, push, w, req)
		return res, nil, false, err
	}
	return z.g.state(push).namespacePolicies(req), nil, true, nil
}

// NeedsPush: policies are pushed on full pushes that touch an AuthorizationPolicy, a PeerAuthentication
// (converted to policies, see peerauth.go) or a Namespace, and when workloads change (see GenerateDeltas;
// usually nothing is sent).
func (z *AuthorizationGenerator) NeedsPush(_ *model.Proxy, _ *model.WatchedResource, req *model.PushRequest) bool {
	if len(req.WorkloadsUpdated) > 0 {
		return true
	}
	if !req.Full {
		return false
	}
	if len(req.ConfigsUpdated) == 0 {
		return true
	}
	for k := range req.ConfigsUpdated {
		switch k.Kind {
		case config.AuthorizationPolicy, config.PeerAuthentication, config.Namespace:
			return true
		}
	}
	return false
}

// marshal wraps m in an Any and versions it by a hash of its (deterministic) bytes.
func marshal(name, typeURL string, m proto.Message) *model.Resource {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		panic("ztunnel: marshal " + name + ": " + err.Error()) // only invalid UTF-8 can fail; inputs are validated
	}
	sum := sha256.Sum256(b)
	return &model.Resource{Name: name, Version: hex.EncodeToString(sum[:12]), Any: &anypb.Any{TypeUrl: typeURL, Value: b}}
}

func sortedNames(m map[string]struct{}) []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// isAddressName reports whether name is an on-demand lookup "NETWORK/IP".
func isAddressName(name string) bool {
	_, ip, ok := cutAddressName(name)
	return ok && ip.IsValid()
}

// rename returns r under another name, sharing its bytes.
func rename(r *model.Resource, name string) *model.Resource {
	if r == nil || r.Name == name {
		return r
	}
	return &model.Resource{Name: name, Version: r.Version, Any: r.Any}
}

// meshOf returns the push's mesh settings, defaulted when a test snapshot has none.
func meshOf(ps *model.PushContext) *mesh.Config {
	if ps.Mesh != nil {
		return ps.Mesh
	}
	return defaultMesh
}

var defaultMesh = mesh.Default()

func lookupService(ps *model.PushContext, key string) *model.Service {
	ns, host, ok := strings.Cut(key, "/")
	if !ok {
		return nil
	}
	for _, s := range ps.ServicesForHostname(host) {
		if s.Namespace == ns {
			return s
		}
	}
	return nil
}
