package envoy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	lru "github.com/hashicorp/golang-lru/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/derive"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pkg/buildcache"
)

// Options configure the generators.
type Options struct {
	// CacheSize bounds the number of shared, marshaled listeners and routes kept (default 20,000); clusters
	// and load assignments keep one entry per name.
	CacheSize int
	// VHDSMinEnvoy is the oldest Envoy ("MAJOR.MINOR", from node.user_agent_build_version) whose delta
	// stream gets its sidecar virtual hosts over VHDS rather than inside the route configurations
	// (default "1.38": older Envoys reject VHDS over ADS). "off" never uses VHDS.
	VHDSMinEnvoy string
	// OutboundHTTPRoutes lays out sidecars' outbound HTTP routes: "service" (the default) or "port", as
	// istiod (routes_by_service.go).
	OutboundHTTPRoutes string
	// SecretAuthorizer, if set, must allow an identity before it is served a key pair over SDS.
	SecretAuthorizer SecretAuthorizer
}

// Generators builds Envoy resources. It is safe for concurrent use by many pushes.
type Generators struct {
	// resources caches marshaled resources shared by proxies, keyed by everything they depend on.
	resources *lru.Cache[any, *model.Resource]
	scopes    *buildcache.Latest[scopeID, [3]any, *Scope]
	// routedScopes are the scopes of proxies under a Sidecar with the destinations its VirtualServices add.
	routedScopes *buildcache.Latest[scopeID, any, *Scope]
	// lists keeps whole lists of resources that many proxies share (a scope's outbound listeners, merged
	// lists, VHDS concatenations), the latest generation of each only.
	lists *buildcache.Latest[listID, any, model.Resources]
	// clusterLists keeps the outbound clusters of each scope, and how they were built, to derive the next
	// snapshot's from.
	clusterLists *buildcache.Latest[listID, derive.Key, *outboundClusters]
	// listenerLists keeps the outbound listeners of each scope, and how they were built, to derive the next
	// snapshot's from.
	listenerLists *buildcache.Latest[listID, derive.Key, *listenerList]
	// listenerFacts keeps, per IP mode and service, what deciding whether its outbound listeners are its own
	// needs; one slot set per mode, so proxies of two families do not evict each other's facts.
	listenerFacts [dualStack + 1]*buildcache.Slots[listenerFactsKey, serviceListenerFacts]
	// listenerNames counts, per IP mode, the services of the mesh taking each outbound listener name.
	listenerNames *buildcache.Latest[ipMode, any, map[string]int]
	// clusters and assignments keep the current build of each cluster and load assignment by name.
	clusters    *buildcache.Slots[outboundClusterKey, *model.Resource]
	assignments *buildcache.Slots[edsKey, *model.Resource]
	// vhosts keeps the VHDS virtual hosts of services without a VirtualService, one per service, port and
	// proxy namespace.
	vhosts *buildcache.Latest[vhostID, any, vhostEntry]
	// routedDomains keeps the domains of services with a VirtualService: their virtual hosts are built
	// again whenever services come or go, their domains rarely change.
	routedDomains *buildcache.Latest[routedDomainsID, *model.Service, vhostEntry]
	// routedVhosts keeps the VHDS virtual hosts of services with a VirtualService (see routedVirtualHost).
	routedVhosts *buildcache.Latest[vhostID, any, routedVhost]
	// outboundListenerRes keeps each sidecar outbound listener by name, namespace and Sidecar, keyed by a
	// description of its chains.
	outboundListenerRes *buildcache.Latest[listID, string, *model.Resource]
	// vhostLists keeps the VHDS virtual hosts of each route configuration of a scope, and how they were
	// built, to derive the next snapshot's from.
	vhostLists *buildcache.Latest[listID, derive.Key, *vhostList]
	// inboundPorts keeps each sidecar's inbound ports (CDS and LDS need them on every push).
	inboundPorts *buildcache.Latest[*model.Proxy, inboundPortsInputs, []inboundPort]
	// vhdsMin is the oldest Envoy served VHDS; vhdsOff disables it.
	vhdsMin [2]uint32
	vhdsOff bool
	// routesByPort: every service's virtual host in its port's shared route configuration, as istiod.
	routesByPort bool
	// vhdsRefusals are the nodes that rejected the VHDS shape (vhds_fallback.go).
	vhdsRefusals vhdsRefusals
	// secretAuthorizer is Options.SecretAuthorizer.
	secretAuthorizer SecretAuthorizer
	// denials are the secrets refused to connected proxies (see SecretDenials).
	denials *secretDenials
	// planTogether plans every outbound listener in the shared owner, as one plan over all services: tests
	// compare it with the lists built owner by owner.
	planTogether bool
}

// slotResource returns the marshaled resource for name built from key, building it when the slot holds
// another key.
func slotResource[K comparable](s *buildcache.Slots[K, *model.Resource], name string, key K,
	build func() proto.Message) (*model.Resource, error) {
	return s.Get(name, key, func() (*model.Resource, error) { return marshal(resourceName(name), build()) })
}

// listID is the stable identity of a shared list: what it is (kind, e.g. "cds"; name, e.g. a route
// configuration) and whom it is for (namespace, Sidecar, proxy flavor, labels when they matter).
type listID struct {
	kind, name string
	namespace  string
	sidecar    *config.Config
	variant    string
	labels     string
	labelled   bool
	// captureNone: built for a scope of proxies without capture (Scope.captureNone).
	captureNone bool
}

// resourceName strips the flavor prefix slot names carry.
func resourceName(slotName string) string {
	if i := strings.IndexByte(slotName, 0); i >= 0 {
		return slotName[i+1:]
	}
	return slotName
}

// New returns the generators. It panics on a malformed VHDSMinEnvoy or OutboundHTTPRoutes: check them first
// with ParseVHDSMinEnvoy and ParseOutboundHTTPRoutes.
func New(opts Options) *Generators {
	if opts.CacheSize == 0 {
		opts.CacheSize = 20_000
	}
	resources, _ := lru.New[any, *model.Resource](opts.CacheSize)
	g := &Generators{
		resources:           resources,
		scopes:              buildcache.NewLatest[scopeID, [3]any, *Scope](),
		routedScopes:        buildcache.NewLatest[scopeID, any, *Scope](),
		lists:               buildcache.NewLatest[listID, any, model.Resources](),
		clusterLists:        buildcache.NewLatest[listID, derive.Key, *outboundClusters](),
		listenerLists:       buildcache.NewLatest[listID, derive.Key, *listenerList](),
		listenerNames:       buildcache.NewLatest[ipMode, any, map[string]int](),
		clusters:            buildcache.NewSlots[outboundClusterKey, *model.Resource](),
		assignments:         buildcache.NewSlots[edsKey, *model.Resource](),
		vhosts:              buildcache.NewLatest[vhostID, any, vhostEntry](),
		routedDomains:       buildcache.NewLatest[routedDomainsID, *model.Service, vhostEntry](),
		routedVhosts:        buildcache.NewLatest[vhostID, any, routedVhost](),
		outboundListenerRes: buildcache.NewLatest[listID, string, *model.Resource](),
		vhostLists:          buildcache.NewLatest[listID, derive.Key, *vhostList](),
		inboundPorts:        buildcache.NewLatest[*model.Proxy, inboundPortsInputs, []inboundPort](),
		secretAuthorizer:    opts.SecretAuthorizer,
		denials:             newSecretDenials(),
	}
	for mode := range g.listenerFacts {
		g.listenerFacts[mode] = buildcache.NewSlots[listenerFactsKey, serviceListenerFacts]()
	}
	var err error
	if g.vhdsMin, g.vhdsOff, err = ParseVHDSMinEnvoy(opts.VHDSMinEnvoy); err != nil {
		panic(err)
	}
	if g.routesByPort, err = ParseOutboundHTTPRoutes(opts.OutboundHTTPRoutes); err != nil {
		panic(err)
	}
	return g
}

// ParseVHDSMinEnvoy reads Options.VHDSMinEnvoy: "" (the default), "off", or "MAJOR.MINOR".
func ParseVHDSMinEnvoy(s string) (minVersion [2]uint32, off bool, err error) {
	switch s {
	case "":
		return DefaultVHDSMinEnvoy, false, nil
	case "off":
		return [2]uint32{}, true, nil
	}
	major, minor, ok := strings.Cut(s, ".")
	a, err1 := strconv.ParseUint(major, 10, 32)
	b, err2 := strconv.ParseUint(minor, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return [2]uint32{}, false, fmt.Errorf("VHDS minimum Envoy version %q: want MAJOR.MINOR (e.g. 1.38) or off", s)
	}
	return [2]uint32{uint32(a), uint32(b)}, false, nil
}

// usesVHDS reports whether the proxy gets its sidecar virtual hosts over VHDS: an Envoy sidecar on a delta
// stream, recent enough. Proxyless gRPC has no VHDS; state-of-the-world streams cannot carry it.
func (g *Generators) usesVHDS(p *model.Proxy) bool {
	if g.vhdsOff || !p.Delta || p.Type != model.Sidecar || p.Node.GetUserAgentName() != "envoy" ||
		!p.AtLeast(g.vhdsMin[0], g.vhdsMin[1]) {
		return false
	}
	return !g.vhdsRefusals.refused(p.NodeID)
}

// DefaultVHDSMinEnvoy is taken as the first Envoy release that accepts VHDS with an ADS config source
// (Envoy PR #42812, early 2026, checks that the ADS stream is delta); earlier ones reject such a route
// configuration with "vhds: only 'DELTA_GRPC' is supported as an api_type".
var DefaultVHDSMinEnvoy = [2]uint32{1, 38}

// ByTypeURL returns the generators to register with the xDS server.
func (g *Generators) ByTypeURL() map[string]model.Generator {
	return map[string]model.Generator{
		ClusterType:     clusterGenerator{g},
		EndpointType:    endpointGenerator{g},
		ListenerType:    listenerGenerator{g},
		RouteType:       routeGenerator{g},
		VirtualHostType: virtualHostGenerator{g},
		SecretType:      secretGenerator{g},
	}
}

// cached returns the resource under key, building and marshaling it on a miss. key must capture
// everything build reads.
func (g *Generators) cached(key any, name string, build func() proto.Message) (*model.Resource, error) {
	if r, ok := g.resources.Get(key); ok {
		return r, nil
	}
	r, err := marshal(name, build())
	if err != nil {
		return nil, err
	}
	g.resources.Add(key, r)
	return r, nil
}

func marshal(name string, m proto.Message) (*model.Resource, error) {
	// Deterministic bytes (map fields sorted) make the content hash below a stable version.
	value, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("marshal %s: %w", name, err)
	}
	a := &anypb.Any{TypeUrl: "type.googleapis.com/" + string(m.ProtoReflect().Descriptor().FullName()), Value: value}
	// The version is the content hash, computed once here rather than per proxy by the transport, so a
	// rebuild with the same bytes is not re-sent over delta xDS.
	sum := sha256.Sum256(a.Value)
	return &model.Resource{Name: name, Version: hex.EncodeToString(sum[:12]), Any: a}, nil
}

// wants reports whether a subscription asks for name.
func wants(w *model.WatchedResource, name string) bool {
	if w == nil || w.Wildcard {
		return true
	}
	return w.ResourceNames.Has(name)
}

// routingID identifies the routing config of a snapshot: output built from VirtualServices,
// DestinationRules or Gateways keys on it, and stays cached across snapshots that did not change them.
func routingID(push *model.PushContext) any {
	return [3]any{push.VirtualServicesID(), push.DestinationRulesID(), push.GatewaysID()}
}

// sortByName sorts resources by name. Generators return full states sorted: the transport then keeps what
// a client has as the list itself instead of a map (xds.sentSet).
func sortByName(res model.Resources) {
	slices.SortFunc(res, func(a, b *model.Resource) int { return strings.Compare(a.Name, b.Name) })
}

// listRef identifies a list that is never modified: by the address of its first element and its length.
type listRef struct {
	first *(*model.Resource)
	n     int
}

func refOf(list model.Resources) listRef {
	if len(list) == 0 {
		return listRef{}
	}
	return listRef{&list[0], len(list)}
}

// mergeKey identifies a merge of a shared list with a proxy's own resources (at most len(own) of them).
type mergeKey struct {
	list listRef
	own  [8]*model.Resource
}

// sharedMerge is mergeByName(list, own) for a proxy of id's scope, shared by every proxy whose own
// resources are the very same: the sidecars of a namespace mostly differ in nothing but their inbound
// listener, so they hold one merged list between them instead of one copy each (which the transport
// keeps as what each was sent: 300 sidecars × 1,200 listeners and clusters).
func (g *Generators) sharedMerge(id listID, list, own model.Resources) model.Resources {
	if len(own) == 0 || len(list) == 0 || len(own) > len(mergeKey{}.own) {
		return mergeByName(list, own)
	}
	k := mergeKey{list: refOf(list)}
	copy(k.own[:], own)
	// Keyed by the own resources' names and contents: sidecars with other inbound ports or policies get lists
	// of their own rather than taking turns replacing one.
	var names strings.Builder
	for _, r := range own {
		names.WriteString(r.Name)
		names.WriteByte('@')
		names.WriteString(r.Version)
		names.WriteByte(',')
	}
	id.name = names.String()
	merged, _ := g.lists.GetOrBuild(id, k, func() (model.Resources, error) { return mergeByName(list, own), nil })
	return merged
}

// mergeByName merges two lists sorted by name into a new one, a's resource first on equal names. b is a
// sidecar's few own resources and a the long shared list: b's places are found by binary search and a is
// copied in runs, instead of comparing 300 listener names per sidecar per push.
func mergeByName(a, b model.Resources) model.Resources {
	if len(b) == 0 {
		return a
	}
	out := make(model.Resources, 0, len(a)+len(b))
	for _, r := range b {
		i := sort.Search(len(a), func(i int) bool { return a[i].Name > r.Name })
		out = append(append(out, a[:i]...), r)
		a = a[i:]
	}
	return append(out, a...)
}
