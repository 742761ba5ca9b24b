package envoy

import (
	"cmp"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	dfphttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/dynamic_forward_proxy/v3"
	httpinspector "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/http_inspector/v3"
	originalsrc "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_src/v3"
	tlsinspector "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	dfpsni "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/sni_dynamic_forward_proxy/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
)

// outboundListenerKey: the outbound listeners (all but virtualOutbound and virtualInbound) depend on the
// proxy's scope (its namespace, Sidecar and snapshot), and on its labels only through the VirtualService
// tcp and tls matches on sourceLabels they satisfy (l4LabelKey, empty for nearly every proxy), which is
// part of the list's id. The whole set is built, marshaled and cached per id and key in
// Generators.listenerLists.
type outboundListenerKey struct {
	scope   *Scope
	routing any // routingID: TCP and TLS routes come from VirtualServices
	typ     model.ProxyType
	// dnsFamily: the proxy's family (dnsLookupFamily): the one its dynamic forward proxy filters resolve
	// in, and of the unspecified and loopback addresses its listeners take.
	dnsFamily cluster.Cluster_DnsLookupFamily
	// mode: the proxy's IP mode (dnsFamily is its family): it picks a dual-stack Service's VIPs, and a
	// dual-stack proxy's listeners on the unspecified address take [::] too.
	mode ipMode
	// addresses is EndpointAddressesID: services without an address of their own have a listener per
	// endpoint address.
	addresses any
}

// virtualOutboundKey: virtualOutbound depends on the outbound traffic policy, the capture (TPROXY) and the
// proxy's IP family alone; sidecars alike in these share one.
type virtualOutboundKey struct {
	registryOnly, transparent bool
	family                    cluster.Cluster_DnsLookupFamily
}

// inboundListenerKey: virtualInbound is built from what desc spells out (ports, modes, the policies' keys and
// versions) alone; policies also key by index identity, so an edited policy rebuilds it even if a source
// reused a version. Replicas of one workload share it, and snapshots that change neither keep it.
type inboundListenerKey struct {
	policies any
	desc     string
}

// sidecarListeners returns the proxy's listeners sorted by name: one per outbound destination, then
// virtualInbound and virtualOutbound.
func (l listenerGenerator) sidecarListeners(proxy *model.Proxy, push *model.PushContext) (model.Resources, error) {
	scope := l.g.scopeFor(proxy, push)
	labels := l4LabelKey(push, proxy.Labels)
	mode := ipModeOf(proxy.IPAddresses)
	family := mode.family()
	built, err := l.outboundListeners(outboundListenerKey{scope, routingID(push), proxy.Type, family, mode, push.EndpointAddressesID()},
		labels, proxy.Labels, push)
	if err != nil {
		return nil, err
	}
	outbound := built.list
	if len(proxy.IPAddresses) > 0 {
		if own := built.endpointIPs[proxy.IPAddresses[0]]; len(own) > 0 {
			outbound = l.g.withoutOwnListeners(scope, labels, proxy.IPAddresses[0], built.list, own)
		}
	}
	if proxy.Unprivileged && len(built.privileged) > 0 {
		outbound = l.g.withoutPrivileged(scope, labels, proxy, outbound, built.privileged)
	}
	if capturesNothing(proxy) {
		// istiod's proxyNoneMode: no iptables send traffic anywhere, so no capture listeners; the outbound
		// listeners bind ports of their own (the scope's), and inbound ones only a Sidecar's ingress
		// listeners ask for.
		return l.g.sharedMerge(listID{kind: "lds+own", namespace: scope.Namespace, sidecar: scope.Sidecar, captureNone: true,
			variant: string(proxy.Type) + mode.variant(), labels: labels}, outbound, l.boundInboundListeners(proxy, push)), nil
	}
	tproxy := proxy.InterceptionMode == model.InterceptTPROXY
	capture, err := l.g.cached(virtualOutboundKey{scope.RegistryOnly, tproxy, family}, VirtualOutboundListener, func() proto.Message {
		return buildVirtualOutbound(scope.RegistryOnly, tproxy, family)
	})
	if err != nil {
		return nil, err
	}
	in, err := l.inboundListener(proxy, push)
	if err != nil {
		return nil, err
	}
	own := append(model.Resources{capture, in}, l.boundInboundListeners(proxy, push)...)
	sortByName(own)
	// The outbound list is sorted already.
	return l.g.sharedMerge(listID{kind: "lds+own", namespace: scope.Namespace, sidecar: scope.Sidecar, captureNone: scope.captureNone,
		variant: string(proxy.Type) + mode.variant(), labels: labels},
		outbound, own), nil
}

// l4LabelKey names which VirtualService tcp and tls matches on sourceLabels the proxy's labels satisfy:
// the positions of those matches among all of them in the mesh (by VirtualService, oldest first, then
// route and match), "" when none does. Proxies with the same key get the same outbound listeners; the
// walk is over the few VirtualServices with such matches only.
func l4LabelKey(push *model.PushContext, labels map[string]string) string {
	var b []byte
	i := 0
	satisfied := func(sel map[string]string) {
		if len(sel) == 0 {
			return
		}
		i++
		for k, v := range sel {
			if lv, ok := labels[k]; !ok || lv != v {
				return
			}
		}
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, ',')
	}
	for _, vs := range push.L4SourceLabelled() {
		for _, r := range vs.Spec.Tcp {
			for _, m := range r.Match {
				satisfied(m.SourceLabels)
			}
		}
		for _, r := range vs.Spec.Tls {
			for _, m := range r.Match {
				satisfied(m.SourceLabels)
			}
		}
	}
	return string(b)
}

// withoutOwnListeners returns list without the listeners named own, those built for the proxy's own address
// ip as an endpoint of a service it reaches per endpoint address: as istiod, a sidecar has no outbound
// listener for itself (its application reaching its own address is not captured as outbound traffic, and
// the listener would stand beside the inbound one). Shared by the replicas of a scope at that address.
func (g *Generators) withoutOwnListeners(scope *Scope, labels, ip string, list model.Resources, own []string) model.Resources {
	id := listID{kind: "lds-own-address", name: ip, namespace: scope.Namespace, sidecar: scope.Sidecar, captureNone: scope.captureNone, labels: labels}
	out, _ := g.lists.getOrBuild(id, refOf(list), func() (model.Resources, error) {
		kept := make(model.Resources, 0, len(list))
		for _, r := range list {
			if !slices.Contains(own, r.Name) {
				kept = append(kept, r)
			}
		}
		return kept, nil
	})
	return out
}

// withoutPrivileged returns list without the listeners named privileged, bound to ports below 1024: an
// unprivileged proxy (UNPRIVILEGED_POD) cannot bind them, and istiod leaves them out, with a warning.
// Shared by the unprivileged proxies of a scope.
func (g *Generators) withoutPrivileged(scope *Scope, labels string, proxy *model.Proxy, list model.Resources, privileged []string) model.Resources {
	id := listID{kind: "lds-unprivileged", namespace: scope.Namespace, sidecar: scope.Sidecar, captureNone: scope.captureNone, labels: labels}
	out, _ := g.lists.getOrBuild(id, refOf(list), func() (model.Resources, error) {
		slog.Warn("outbound listeners left out: unprivileged proxies (UNPRIVILEGED_POD) cannot bind ports below 1024",
			"proxy", proxy.ID, "namespace", scope.Namespace, "listeners", privileged)
		kept := make(model.Resources, 0, len(list))
		for _, r := range list {
			if !slices.Contains(privileged, r.Name) {
				kept = append(kept, r)
			}
		}
		return kept, nil
	})
	return out
}

// outboundListeners returns the outbound listeners of key's scope for proxies of labels (whose
// l4LabelKey is labelKey), sorted by name, each marshaled on its own: a change to one destination changes
// that listener's bytes (and version) only.
func (l listenerGenerator) outboundListeners(key outboundListenerKey, labelKey string, labels map[string]string, push *model.PushContext) (*listenerList, error) {
	g := l.g
	id := listID{kind: "lds", namespace: key.scope.Namespace, sidecar: key.scope.Sidecar, captureNone: key.scope.captureNone,
		variant: string(key.typ) + key.mode.variant(), labels: labelKey}
	built, err := g.listenerLists.getOrBuild(id, key, func() (*listenerList, error) {
		prev, _ := g.listenerLists.latest(id)
		if next, ok, err := g.deriveOutboundListeners(prev, push, key.scope, key.dnsFamily); ok || err != nil {
			return next, err
		}
		return g.buildOutboundListeners(push, key.scope, labels, labelKey, key.dnsFamily, key.mode)
	})
	if err != nil {
		return nil, err
	}
	return built, nil
}

// sniffedHTTP are the application protocols the http_inspector reports for HTTP traffic.
var sniffedHTTP = []string{"http/1.0", "http/1.1", "h2c"}

// passthroughChain names the chain that takes what no other chain of a listener does, as istiod's.
const passthroughChain = "PassthroughFilterChain"

// catchAllCluster is where traffic to destinations outside the registry goes under the outbound traffic
// policy: PassthroughCluster, or BlackHoleCluster under REGISTRY_ONLY.
func catchAllCluster(registryOnly bool) string {
	if registryOnly {
		return BlackHoleCluster
	}
	return PassthroughCluster
}

// buildVirtualOutbound builds the outbound capture listener, istiod's: iptables sends all outbound traffic
// to 15001, use_original_dst hands each connection to the listener for its original destination (see
// buildOutboundListeners), and what no listener takes goes to PassthroughCluster, or under REGISTRY_ONLY
// to BlackHoleCluster (istiod's catch-all chain; the chain keeps one name so only its cluster changes).
// Under TPROXY capture (transparent) the listener takes connections addressed elsewhere, as istiod's. It
// listens on the unspecified address of the proxy's family.
func buildVirtualOutbound(registryOnly, transparent bool, family cluster.Cluster_DnsLookupFamily) *listener.Listener {
	catchAll := catchAllCluster(registryOnly)
	return &listener.Listener{
		Name:             VirtualOutboundListener,
		Address:          socketAddress(wildcardIP(family), VirtualOutboundPort),
		Transparent:      transparentFor(transparent),
		UseOriginalDst:   wrapperspb.Bool(true),
		TrafficDirection: core.TrafficDirection_OUTBOUND,
		ListenerFilters:  []*listener.ListenerFilter{ldsOriginalDst()},
		FilterChains: []*listener.FilterChain{{
			Name:    passthroughChain,
			Filters: []*listener.Filter{ldsTCPProxyFilter(catchAll, []tcpDest{{catchAll, 100}})},
		}},
	}
}

// ldsWildcardReserved are the ports of the sidecar's own listeners on the unspecified address (virtualOutbound,
// virtualInbound, and the bootstrap's health and Prometheus listeners). Envoy refuses a second listener on
// one address, so no outbound listener 0.0.0.0_PORT ([::]_PORT) is built on them (istiod skips them too).
var ldsWildcardReserved = map[uint32]bool{VirtualOutboundPort: true, VirtualInboundPort: true, 15021: true, 15090: true}

// outboundListener collects the chains of one outbound listener.
type outboundListener struct {
	name   string
	ip     string
	port   uint32
	extra  []string // the other VIPs of its services, in the order met: its additional addresses
	chains []chainPlan
	// httpPort: the listener holds the HTTP chain of its port, which takes sniffed plaintext HTTP only.
	httpPort bool
	// real: bound to its address (an egress listener with captureMode NONE), not handed connections.
	real bool
}

// buildOutboundListeners returns a listener (bind_to_port false) per outbound destination of scope, sorted
// by name, marshaled, for virtualOutbound to hand connections to:
//   - "VIP_PORT" (VIP:PORT) for the chains of a service with VIPs (its first one; the others are
//     additional addresses);
//   - "0.0.0.0_PORT" for chains without a VIP: the HTTP chain of the port, services without VIPs, and
//     services with an address block (CIDR), which their chains match as prefix ranges.
//
// Envoy looks for the exact IP:port first, then 0.0.0.0:port. The chains are planned as data first; a
// listener whose plan is the one built before is not built again, so adding a service builds its own
// listeners only.
//
// labels are the proxy's, for tcp and tls matches on sourceLabels; labelKey (l4LabelKey) names what of
// them the listeners may depend on, so the list and its listeners are cached under it.
func (g *Generators) buildOutboundListeners(push *model.PushContext, scope *Scope, labels map[string]string, labelKey string,
	family cluster.Cluster_DnsLookupFamily, mode ipMode) (*listenerList, error) {
	built := &listenerList{scope: scope, routing: routingID(push), mesh: push.Mesh, httpPorts: map[uint32]int{}, contested: map[string]bool{},
		extras: map[string]bool{}, dynamicDNSPorts: map[uint32]bool{}, labelKey: labelKey, endpoints: map[string]*endpointRecord{}, mode: mode}
	var byName map[string]*outboundListener
	if scope.listeners == nil {
		byName = planOutbound(push, scope, scope.Services, egressBinding{imports: scope.egress}, labels, built, family)
	} else {
		// As istiod: each egress listener's services in turn; a listener address:port one has taken is
		// not added to by a later one (the catch-all's services do not join a port a listener with a port
		// set up for its own hosts).
		byName = map[string]*outboundListener{}
		for _, el := range scope.listeners {
			services := el.services
			b := egressBinding{ip: el.bind, real: el.bindToPort, port: el.port != 0, imports: el.hosts}
			if b.real && b.ip == "" {
				b.ip, b.loopback = loopbackIP(family), true
			}
			if b.ip != "" {
				// Every service shares the one address: istiod's first service (the oldest) keeps a match.
				services = slices.SortedStableFunc(slices.Values(services), model.CompareServices)
			}
			for name, ol := range planOutbound(push, scope, services, b, labels, built, family) {
				if _, taken := byName[name]; !taken {
					byName[name] = ol
				}
			}
		}
	}
	// An endpoint's listener another service has chains on (or an additional address of) is not its own
	// alone: an endpoint change then needs a full build (deriveEndpointListeners).
	for _, rec := range built.endpoints {
		for _, n := range rec.names {
			rec.plain = rec.plain && !built.contested[n] && !built.extras[n]
		}
	}
	built.indexEndpointIPs()
	return g.finishOutboundListeners(push, scope, built, byName, family)
}

// egressBinding is where an egress listener's outbound listeners are: ip "" for each service's VIP (and
// 0.0.0.0 for HTTP and services without one), else that address for all; real for listeners bound to a
// port of their own (captureMode NONE) rather than handed connections by virtualOutbound.
type egressBinding struct {
	ip   string
	real bool
	// port: the egress listener names a port; as istiod, only the catch-all one listens per endpoint
	// address of a headless service.
	port bool
	// loopback: ip is the proxy's loopback, the egress listener naming no bind.
	loopback bool
	// imports are the egress hosts whose VirtualServices the listeners' tcp and tls routes come from.
	imports []egressHost
}

// finishOutboundListeners completes the planned listeners and marshals them, sorted by name.
func (g *Generators) finishOutboundListeners(push *model.PushContext, scope *Scope, built *listenerList, byName map[string]*outboundListener,
	family cluster.Cluster_DnsLookupFamily) (*listenerList, error) {
	// A listener whose chains all match on more than the port (SNI, application protocol, address block)
	// sends what none takes where the capture listener would, in its default chain as istiod's: Envoy
	// picks a chain level by level without going back, so a connection a chain on destinationSubnets takes
	// by address but not by server name would find no chain at all, and be closed.
	// On an HTTP port the chain taking the port is the listener's default chain, as istiod's, for the same
	// reason: a connection the HTTP chain's transport protocol (raw_buffer) matches but its application
	// protocol does not.
	catchAll := catchAllCluster(scope.RegistryOnly)
	for _, ol := range byName {
		if len(ol.chains) == 0 {
			continue
		}
		i := slices.IndexFunc(ol.chains, func(c chainPlan) bool { return c.takesPort(ol.ip) })
		if i < 0 {
			ol.chains = append(ol.chains, chainPlan{name: passthroughChain, port: ol.port, dests: []tcpDest{{catchAll, 100}}, isDefault: true})
			continue
		}
		ol.chains[i].isDefault = ol.httpPort
	}

	names := slices.Sorted(maps.Keys(byName))
	// Each address:port belongs to one listener: the listeners' own addresses first, then the additional
	// ones, the first listener (by name) naming an address keeping it.
	owned := map[string]bool{}
	for _, n := range names {
		owned[n] = true
	}
	out := make(model.Resources, 0, len(names))
	for _, n := range names {
		ol := byName[n]
		if len(ol.chains) == 0 { // every chain went to an earlier service: Envoy refuses a listener without
			continue
		}
		if isUnspecifiedIP(ol.ip) && ldsWildcardReserved[ol.port] {
			slog.Debug("outbound listener left out: its address is the sidecar's own", "listener", ol.name, "namespace", scope.Namespace)
			continue
		}
		var additional []string
		for _, ip := range ol.extra {
			if k := ip + "_" + ldsPortName(ol.port); !owned[k] {
				owned[k] = true
				additional = append(additional, ip)
			}
		}
		r, err := g.outboundListenerResource(scope, built.labelKey, ol, additional, push.Mesh.PathNormalization.Normalization, built.mode)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
		if ol.real && ol.port > 0 && ol.port < 1024 {
			built.privileged = append(built.privileged, ol.name)
		}
	}
	built.list = out
	return built, nil
}

// outboundListenerResource returns ol marshaled, rebuilt only when what it is built from changed.
func (g *Generators) outboundListenerResource(scope *Scope, labelKey string, ol *outboundListener, additional []string, paths string,
	mode ipMode) (*model.Resource, error) {
	id := listID{kind: "outbound-listener", name: ol.name, namespace: scope.Namespace, sidecar: scope.Sidecar, captureNone: scope.captureNone,
		labels: labelKey, variant: mode.variant()}
	return g.outboundListenerRes.getOrBuild(id, ol.describe(additional)+"|paths="+paths, func() (*model.Resource, error) {
		return marshal(ol.name, ol.build(additional, paths))
	})
}

// listenerList is a scope's outbound listeners and how they were built, so that the next snapshot's can be
// derived from it (deriveOutboundListeners).
type listenerList struct {
	list      model.Resources
	scope     *Scope
	routing   any
	mesh      *mesh.Config
	httpPorts map[uint32]int // services with an HTTP port, by port: 0.0.0.0_PORT exists while one has it
	// dynamicDNSPorts are the HTTP ports of DYNAMIC_DNS services: which service is the oldest on one decides
	// its connection manager's filters.
	dynamicDNSPorts map[uint32]bool
	contested       map[string]bool // VIP listeners with chains of several services, or a match a service was refused
	extras          map[string]bool // IP_PORT of every additional address a listener asked for
	l4Routed        bool            // a VirtualService sends TCP or TLS somewhere: its chains depend on other services
	labelKey        string          // l4LabelKey of the proxies it was built for
	mode            ipMode          // of the proxies it was built for
	derived         bool            // from the previous list, not from a walk over every service
	// endpoints records, per service of the scope reached per endpoint address (Service.ListensOnEndpoints),
	// by key, the endpoints its listeners were built from; shared with derived lists until one changes.
	endpoints map[string]*endpointRecord
	// endpointIPs names, per endpoint address, the listeners built for it: a sidecar at that address leaves
	// them out (withoutOwnListeners).
	endpointIPs map[string][]string
	// privileged names the listeners that bind a port below 1024, which an unprivileged proxy cannot.
	privileged []string
}

// endpointRecord is how a service's listeners per endpoint address were built.
type endpointRecord struct {
	eps   *model.ServiceEndpoints // as of the build
	names []string                // its listeners, one per address and port
	// plain: each of them holds the service's chains alone, rebuilt from its endpoints alone.
	plain bool
}

// indexEndpointIPs fills l.endpointIPs from l.endpoints.
func (l *listenerList) indexEndpointIPs() {
	l.endpointIPs = map[string][]string{}
	for _, rec := range l.endpoints {
		for _, n := range rec.names {
			ip := n[:strings.LastIndexByte(n, '_')]
			if !slices.Contains(l.endpointIPs[ip], n) {
				l.endpointIPs[ip] = append(l.endpointIPs[ip], n)
			}
		}
	}
}

// endpointIPs returns the distinct addresses of eps (sorted by address) that are IP addresses, as
// /32 or /128 ranges: a ServiceEntry endpoint may be a hostname, which no listener can stand for (istiod
// skips it too).
func endpointIPs(eps []*model.Endpoint) []*core.CidrRange {
	out := make([]*core.CidrRange, 0, len(eps))
	for i, ep := range eps {
		if i > 0 && eps[i-1].Address == ep.Address {
			continue
		}
		if ip, err := netip.ParseAddr(ep.Address); err == nil {
			out = append(out, &core.CidrRange{AddressPrefix: ip.String(), PrefixLen: wrapperspb.UInt32(uint32(ip.BitLen()))})
		}
	}
	return out
}

// plainVIPService reports whether svc's outbound listeners are its own, whatever else is in scope: one VIP
// (not a block), no TCP or TLS routes, and no port that is sniffed or matched by SNI. Its HTTP ports add
// nothing but to 0.0.0.0_PORT, and every other port is listener VIP_PORT with one tcp_proxy chain to its
// cluster.
func plainVIPService(push *model.PushContext, ns string, svc *model.Service) (*core.CidrRange, bool) {
	if len(svc.Addresses) != 1 {
		return nil, false
	}
	vip := vipCIDR(svc.Addresses[0])
	if vip == nil || vip.PrefixLen.GetValue() < ldsHostBits(vip.AddressPrefix) {
		return nil, false
	}
	if hasL4Routes(push.VirtualServicesForHost(ns, model.MeshGateway, svc.Hostname)) {
		return nil, false
	}
	for _, p := range svc.Ports {
		switch {
		case p.Protocol.IsHTTP():
		case p.Protocol == model.ProtocolUnset, p.Protocol == model.ProtocolTLS, p.Protocol == model.ProtocolHTTPS:
			return nil, false
		}
	}
	return vip, true
}

// deriveOutboundListeners builds the outbound listeners of scope from prev, the list of an earlier scope of
// the same namespace, when the routing config is the same and every service added or removed is a
// plainVIPService: the listeners of the others stay as they are, the removed ones' VIP listeners are
// dropped and the added ones' built. A service add thus costs its own listeners rather than a walk over
// every service of the mesh for each namespace. ok is false when a full build is needed: when one of them
// shares a VIP listener or an additional address with another service, when an HTTP port appears or goes
// away (0.0.0.0_PORT does), or when a VirtualService's TCP or TLS routes depend on other services.
func (g *Generators) deriveOutboundListeners(prev *listenerList, push *model.PushContext, scope *Scope, family cluster.Cluster_DnsLookupFamily) (next *listenerList, ok bool, err error) {
	if prev == nil || prev.routing != routingID(push) || prev.mesh != push.Mesh || prev.l4Routed {
		return nil, false, nil
	}
	if scope.listeners != nil || prev.scope.listeners != nil {
		return nil, false, nil // services reach listeners through the egress listeners selecting them
	}
	removed, added := scopeChanges(prev.scope.Services, scope.Services)
	if len(removed)+len(added) > len(scope.Services)/2 {
		return nil, false, nil // a walk over all is as cheap
	}
	next = &listenerList{scope: scope, routing: prev.routing, mesh: prev.mesh, httpPorts: prev.httpPorts, contested: prev.contested,
		extras: prev.extras, dynamicDNSPorts: prev.dynamicDNSPorts, labelKey: prev.labelKey, mode: prev.mode, derived: true}
	if len(removed) == 0 && len(added) == 0 {
		next.list = prev.list
		return g.deriveEndpointListeners(prev, next, push, scope, family)
	}
	next.httpPorts = maps.Clone(prev.httpPorts)
	drop := map[string]bool{}
	for svc := range removed {
		vip, plain := plainVIPService(push, scope.Namespace, svc)
		if !plain {
			return nil, false, nil
		}
		for _, p := range svc.Ports {
			if p.Protocol.IsHTTP() && prev.dynamicDNSPorts[p.Port] {
				return nil, false, nil // it may have been the port's oldest HTTP service
			}
			if p.Protocol.IsHTTP() {
				next.httpPorts[p.Port]--
				continue
			}
			name := vip.AddressPrefix + "_" + ldsPortName(p.Port)
			if prev.contested[name] || prev.extras[name] {
				return nil, false, nil
			}
			drop[name] = true
		}
	}
	var fresh model.Resources
	freshNames := map[string]bool{}
	for _, svc := range added {
		vip, plain := plainVIPService(push, scope.Namespace, svc)
		if !plain {
			return nil, false, nil
		}
		for _, p := range svc.Ports {
			if p.Protocol.IsHTTP() && prev.dynamicDNSPorts[p.Port] {
				return nil, false, nil // it may be the port's oldest HTTP service
			}
			if p.Protocol.IsHTTP() {
				next.httpPorts[p.Port]++
				continue
			}
			name := vip.AddressPrefix + "_" + ldsPortName(p.Port)
			if prev.extras[name] || prev.contested[name] || freshNames[name] {
				return nil, false, nil
			}
			freshNames[name] = true
			ol := &outboundListener{name: name, ip: vip.AddressPrefix, port: p.Port, chains: []chainPlan{{name: svc.Addresses[0] + "_" + ldsPortName(p.Port), port: p.Port,
				vips: []*core.CidrRange{vip}, dests: []tcpDest{{OutboundClusterName(p.Port, "", svc.Hostname), 100}}}}}
			r, err := g.outboundListenerResource(scope, prev.labelKey, ol, nil, push.Mesh.PathNormalization.Normalization, prev.mode)
			if err != nil {
				return nil, false, err
			}
			fresh = append(fresh, r)
		}
	}
	for port, n := range next.httpPorts {
		if (n > 0) != (prev.httpPorts[port] > 0) {
			return nil, false, nil // 0.0.0.0_PORT comes or goes, and with it matches other services may take
		}
		if n == 0 {
			delete(next.httpPorts, port)
		}
	}
	sortByName(fresh)
	next.list = make(model.Resources, 0, len(prev.list)+len(fresh))
	for _, r := range prev.list {
		if drop[r.Name] && !freshNames[r.Name] {
			continue
		}
		if freshNames[r.Name] && !drop[r.Name] {
			return nil, false, nil // the name of a listener that stays
		}
		if !drop[r.Name] {
			next.list = append(next.list, r)
		}
	}
	next.list = mergeByName(next.list, fresh)
	return g.deriveEndpointListeners(prev, next, push, scope, family)
}

// deriveEndpointListeners brings next, derived from prev, up to date with the endpoints of the scope's
// services reached per endpoint address: one whose endpoints changed has its listeners replaced by those of
// its addresses now, the others' stay. ok is false when a full build is needed: a listener of the service
// is not its own alone, or the name of a new one is taken.
func (g *Generators) deriveEndpointListeners(prev, next *listenerList, push *model.PushContext, scope *Scope,
	family cluster.Cluster_DnsLookupFamily) (*listenerList, bool, error) {
	next.endpoints, next.endpointIPs = prev.endpoints, prev.endpointIPs
	var drop map[string]bool
	var fresh model.Resources
	freshNames := map[string]bool{}
	for _, svc := range scope.endpointListened {
		rec := prev.endpoints[svc.Key()]
		cur := push.Endpoints(svc.Key())
		if rec != nil && rec.eps == cur {
			continue
		}
		if rec == nil || !rec.plain {
			return nil, false, nil
		}
		if drop == nil {
			drop, next.endpoints = map[string]bool{}, maps.Clone(prev.endpoints)
		}
		for _, n := range rec.names {
			drop[n] = true
		}
		fresher := &endpointRecord{eps: cur, plain: true}
		for _, p := range svc.Ports {
			if !svc.ListensOnEndpointPort(p) {
				continue
			}
			eps := push.EndpointsForPort(svc, p.Port, nil)
			if svc.Source.Kind != config.Service && len(eps) == 0 && svc.Selector == nil {
				return nil, false, nil // the port's wildcard listener (buildOutboundListeners)
			}
			for _, ip := range endpointIPs(eps) {
				ol := endpointListenerPlan(svc, p, ip)
				if freshNames[ol.name] || prev.extras[ol.name] || prev.contested[ol.name] {
					return nil, false, nil
				}
				freshNames[ol.name] = true
				fresher.names = append(fresher.names, ol.name)
				r, err := g.outboundListenerResource(scope, prev.labelKey, ol, nil, push.Mesh.PathNormalization.Normalization, prev.mode)
				if err != nil {
					return nil, false, err
				}
				fresh = append(fresh, r)
			}
		}
		next.endpoints[svc.Key()] = fresher
	}
	if drop == nil {
		return next, true, nil
	}
	sortByName(fresh)
	kept := make(model.Resources, 0, len(next.list)+len(fresh))
	for _, r := range next.list {
		if drop[r.Name] {
			continue
		}
		if freshNames[r.Name] {
			return nil, false, nil // another service's listener
		}
		kept = append(kept, r)
	}
	next.list = mergeByName(kept, fresh)
	next.indexEndpointIPs()
	return next, true, nil
}

// endpointListenerPlan is the listener of svc's port p on endpoint address ip when it holds svc's chains
// alone and no VirtualService routes svc's TCP or TLS (as buildOutboundListeners plans it then): a sniffed
// port's HTTP chain, and the chain taking the rest to the service's cluster, which sends it on to ip.
func endpointListenerPlan(svc *model.Service, p *model.Port, ip *core.CidrRange) *outboundListener {
	name := ip.AddressPrefix + "_" + ldsPortName(p.Port)
	vips := []*core.CidrRange{ip}
	ol := &outboundListener{name: name, ip: ip.AddressPrefix, port: p.Port}
	if p.Protocol == model.ProtocolUnset {
		ol.chains = append(ol.chains, chainPlan{name: name + "_http", port: p.Port, vips: vips, alpn: sniffedHTTP, http: true,
			route: hostPort(svc.Hostname, p.Port)})
	}
	ol.chains = append(ol.chains, chainPlan{name: name, port: p.Port, vips: vips,
		dests: []tcpDest{{OutboundClusterName(p.Port, "", svc.Hostname), 100}}})
	return ol
}

// chainPlan is an outbound filter chain as data.
type chainPlan struct {
	name string
	port uint32
	vips []*core.CidrRange
	alpn []string // sniffed HTTP
	// transport is the transport protocol matched: "raw_buffer" for plaintext only.
	transport string
	sni       []string
	http      bool      // an HTTP connection manager on route configuration PORT (or route); else tcp_proxy to dests
	dests     []tcpDest // tcp_proxy
	// route names the route configuration of sniffed HTTP, istiod's HOST:PORT: only the service's routes.
	route string
	// isDefault: the listener's default chain, taking what no other chain matches (no match of its own).
	isDefault bool
	// dnsCache, when set, is the DYNAMIC_DNS hostname whose DNS cache the chain fills before forwarding: a
	// dynamic forward proxy HTTP filter reads the Host header, an SNI one the server name.
	dnsCache  string
	dnsFamily cluster.Cluster_DnsLookupFamily // the family dnsCache resolves in
}

// listenVIPs are the addresses a proxy's outbound listeners take for svc, as istiod's GetAddressForProxy
// and GetExtraAddressesForProxy under its defaults (no ISTIO_DUAL_STACK): a Kubernetes Service's ClusterIPs
// of the proxy's family (every one for a dual-stack proxy, the first its own address and the others
// additional ones), else its first ClusterIP alone; a ServiceEntry's addresses are each its own (istiod
// builds a service per address), whatever their family.
func listenVIPs(svc *model.Service, mode ipMode) []string {
	if vips := serviceVIPs(svc, mode); len(vips) > 0 || len(svc.Addresses) == 0 {
		return vips
	}
	return svc.Addresses[:1]
}

// takesPort reports whether the chain takes every connection reaching listener address ip on its port: it
// matches on no server name or application protocol, and on no address block narrower than the listener's
// (on a VIP listener, its ranges hold the VIP).
func (c chainPlan) takesPort(ip string) bool {
	return len(c.sni) == 0 && len(c.alpn) == 0 &&
		(len(c.vips) == 0 || !isUnspecifiedIP(ip) && (c.vips[0].AddressPrefix == ip || rangesContain(c.vips, ip)))
}

// rangesText spells prefix ranges for names and keys: "10.0.0.0/8,192.168.1.1/32".
func rangesText(ranges []*core.CidrRange) string {
	var b strings.Builder
	for i, r := range ranges {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(r.AddressPrefix)
		b.WriteByte('/')
		b.WriteString(strconv.FormatUint(uint64(r.PrefixLen.GetValue()), 10))
	}
	return b.String()
}

func (c chainPlan) build(paths string) *listener.FilterChain {
	m := &listener.FilterChainMatch{DestinationPort: wrapperspb.UInt32(c.port), PrefixRanges: c.vips,
		ApplicationProtocols: c.alpn, ServerNames: c.sni, TransportProtocol: c.transport}
	if c.isDefault {
		m = nil
	}
	if c.http {
		hc := ldsRDSManager("outbound_"+c.name, cmp.Or(c.route, ldsPortName(c.port)), ldsOutboundHTTPFilters())
		if c.dnsCache != "" { // before the router, which needs the host resolved
			n := len(hc.HttpFilters)
			hc.HttpFilters = append(hc.HttpFilters[:n-1:n-1], ldsHTTPFilter(ldsHTTPDynamicForwardProxyFilter, &dfphttp.FilterConfig{
				ImplementationSpecifier: &dfphttp.FilterConfig_DnsCacheConfig{DnsCacheConfig: dfpDNSCache(c.dnsCache, c.dnsFamily)}}), hc.HttpFilters[n-1])
		}
		ldsMeshHTTPManager(hc, paths)
		return &listener.FilterChain{Name: c.name, FilterChainMatch: m, Filters: []*listener.Filter{ldsNetworkFilter(ldsHCMFilter, hc)}}
	}
	filters := []*listener.Filter{ldsTCPProxyFilter(c.dests[0].name, c.dests)}
	if c.dnsCache != "" {
		filters = append([]*listener.Filter{ldsNetworkFilter(ldsSNIDynamicForwardProxyFilter, &dfpsni.FilterConfig{
			DnsCacheConfig: dfpDNSCache(c.dnsCache, c.dnsFamily), PortSpecifier: &dfpsni.FilterConfig_PortValue{PortValue: c.port}})}, filters...)
	}
	return &listener.FilterChain{Name: c.name, FilterChainMatch: m, Filters: filters}
}

// describe spells out everything the listener is built from, additional its additional addresses.
func (ol *outboundListener) describe(additional []string) string {
	var b strings.Builder
	b.WriteString(ol.ip)
	b.WriteByte('|')
	b.WriteString(strings.Join(additional, ","))
	if ol.real {
		b.WriteString("|real")
	}
	for _, c := range ol.chains {
		b.WriteString("\n")
		b.WriteString(c.name)
		b.WriteByte('|')
		b.WriteString(ldsPortName(c.port))
		b.WriteByte('|')
		for _, v := range c.vips {
			b.WriteString(v.AddressPrefix)
			b.WriteByte('/')
			b.WriteString(strconv.FormatUint(uint64(v.PrefixLen.GetValue()), 10))
			b.WriteByte(',')
		}
		b.WriteByte('|')
		b.WriteString(strings.Join(c.alpn, ","))
		b.WriteByte('|')
		b.WriteString(c.transport)
		b.WriteByte('|')
		b.WriteString(c.route)
		b.WriteByte('|')
		b.WriteString(strings.Join(c.sni, ","))
		b.WriteByte('|')
		if c.http {
			b.WriteString("http")
		}
		if c.isDefault {
			b.WriteString("|default")
		}
		b.WriteByte('|')
		b.WriteString(c.dnsCache)
		if c.dnsCache != "" {
			b.WriteString(c.dnsFamily.String())
		}
		for _, d := range c.dests {
			b.WriteByte('|')
			b.WriteString(d.name)
			b.WriteByte(':')
			b.WriteString(strconv.FormatUint(uint64(d.weight), 10))
		}
	}
	return b.String()
}

// build makes the listener. As istiod's, its listener filters have no timeout: a client that sends its
// first bytes late (a pooled connection opened ahead of its first request) is not cut off by the
// http_inspector's wait, Envoy's 15 s by default.
func (ol *outboundListener) build(additional []string, paths string) *listener.Listener {
	chains := make([]*listener.FilterChain, 0, len(ol.chains))
	var def *listener.FilterChain
	for _, c := range ol.chains {
		if c.isDefault {
			def = c.build(paths)
			continue
		}
		chains = append(chains, c.build(paths))
	}
	lis := &listener.Listener{
		Name:                             ol.name,
		Address:                          socketAddress(ol.ip, ol.port),
		BindToPort:                       wrapperspb.Bool(false),
		TrafficDirection:                 core.TrafficDirection_OUTBOUND,
		ListenerFilters:                  ldsInspectors(chains),
		ListenerFiltersTimeout:           durationpb.New(0),
		ContinueOnListenerFiltersTimeout: true,
		FilterChains:                     chains,
		DefaultFilterChain:               def,
	}
	if ol.real {
		lis.BindToPort = nil // Envoy's default: a socket of its own
	}
	for _, ip := range additional {
		lis.AdditionalAddresses = append(lis.AdditionalAddresses, &listener.AdditionalAddress{Address: socketAddress(ip, ol.port)})
	}
	return lis
}

// ldsHostBits is the length of a host prefix of ip's family: 32 or 128.
func ldsHostBits(ip string) uint32 {
	if a, err := netip.ParseAddr(ip); err == nil {
		return uint32(a.BitLen())
	}
	return 0
}

// vipCIDR is the /32 (or /128) of an address, nil when it is not an address (or is a CIDR block).
func vipCIDR(a string) *core.CidrRange {
	if p, err := netip.ParsePrefix(a); err == nil {
		return &core.CidrRange{AddressPrefix: p.Addr().String(), PrefixLen: wrapperspb.UInt32(uint32(p.Bits()))}
	}
	ip, err := netip.ParseAddr(a)
	if err != nil {
		return nil
	}
	return &core.CidrRange{AddressPrefix: ip.String(), PrefixLen: wrapperspb.UInt32(uint32(ip.BitLen()))}
}

// sidecarL4Match is istiod's matchTCP / matchTLS for a sidecar: the parts of a tcp or tls match decided
// by the proxy itself (port, gateways, sourceNamespace, sourceLabels), evaluated when its listeners are
// built. destinationSubnets are left to the caller: they become prefix ranges.
func sidecarL4Match(gateways []string, sourceNS string, sourceLabels map[string]string, matchPort, port uint32, proxyNS string,
	labels map[string]string) bool {
	if matchPort != 0 && matchPort != port {
		return false
	}
	if sourceNS != "" && sourceNS != proxyNS {
		return false
	}
	for k, v := range sourceLabels {
		if lv, ok := labels[k]; !ok || lv != v {
			return false
		}
	}
	return len(gateways) == 0 || slices.Contains(gateways, model.MeshGateway)
}

// gatewayL4Match is istiod's l4SingleMatch: on a gateway a tcp or tls match is decided by its port and
// gateways alone; sourceLabels, sourceNamespace and destinationSubnets do not restrict it.
func gatewayL4Match(gateways []string, matchPort, port uint32, gateway, vsNS string) bool {
	if matchPort != 0 && matchPort != port {
		return false
	}
	if len(gateways) == 0 {
		return true
	}
	for _, g := range gateways {
		if g != model.MeshGateway && ldsGatewayName(g, vsNS) == gateway {
			return true
		}
	}
	return false
}

// ldsGatewayName turns "gw", "ns/gw" or "gw.ns.svc.cluster.local" into NAMESPACE/NAME.
func ldsGatewayName(g, ns string) string {
	if strings.Contains(g, "/") {
		return g
	}
	if name, rest, ok := strings.Cut(g, "."); ok {
		gwNS, _, _ := strings.Cut(rest, ".")
		return gwNS + "/" + name
	}
	return ns + "/" + g
}

// l4Route is a chain a VirtualService tcp or tls route asks for on a sidecar's service port.
type l4Route struct {
	dnsCache  string // chainPlan.dnsCache
	dnsFamily cluster.Cluster_DnsLookupFamily
	// subnets are the destinationSubnets it matches as prefix ranges, in place of the service's addresses
	// (nil: the service's).
	subnets []*core.CidrRange
	sni     []string
	dests   []tcpDest
}

// sidecarTCP is what a VirtualService's tcp routes make of a sidecar's TCP port.
type sidecarTCP struct {
	subnetRoutes []l4Route // the routes whose matches all name destinationSubnets, one chain each
	def          []tcpDest // the first route taking every address; nil: the service's cluster
	noDefault    bool      // a subnet route matches the service's own address block: no default chain
}

// sidecarTCPRoutes is istiod's buildSidecarOutboundTCPFilterChainOpts for the tcp routes of vss (the
// VirtualServices for the host, in order) on port, for a proxy in proxyNS with labels: in route order, one
// VirtualService after the other, a route whose applying matches all name destinationSubnets gets a chain
// on them (all its matches' subnets), and the first route with an applying match without (or with no
// match at all) takes the rest and ends the walk over all of them. ownBlock are the service's address
// blocks (istiod's destination CIDRs: a subnet route naming exactly them replaces the default).
func sidecarTCPRoutes(push *model.PushContext, vss []*model.VirtualService, proxyNS string, labels map[string]string, port uint32,
	ownBlock []string) sidecarTCP {
	var out sidecarTCP
	for _, vs := range vss {
		for _, r := range vs.Spec.Tcp {
			if len(r.Route) == 0 {
				continue
			}
			dests := l4Destinations(push, vs, proxyNS, r.Route, port)
			if len(dests) == 0 {
				continue
			}
			if len(r.Match) == 0 {
				out.def = dests
				return out
			}
			var subnets []string
			for _, m := range r.Match {
				if !sidecarL4Match(m.Gateways, m.SourceNamespace, m.SourceLabels, m.Port, port, proxyNS, labels) {
					continue
				}
				if len(m.DestinationSubnets) == 0 {
					out.def = dests
					return out
				}
				subnets = append(subnets, m.DestinationSubnets...)
			}
			if len(subnets) == 0 {
				continue
			}
			out.subnetRoutes = append(out.subnetRoutes, l4Route{subnets: subnetRanges(subnets), dests: dests})
			if len(ownBlock) > 0 && slices.Equal(slices.Sorted(slices.Values(subnets)), slices.Sorted(slices.Values(ownBlock))) {
				out.noDefault = true
			}
		}
	}
	return out
}

// sidecarTLSRoutes is istiod's buildSidecarOutboundTLSFilterChainOpts for the tls routes of vss (the
// VirtualServices for the host, in order) on port: a chain per applying match, on its sniHosts as written
// and its destinationSubnets. As istiod's, a match's subnets stay in force for the matches after it that
// name none, in the later VirtualServices too; an SNI already matched on the same addresses by an earlier
// chain is left out (Envoy refuses two chains of one match).
func sidecarTLSRoutes(push *model.PushContext, vss []*model.VirtualService, proxyNS string, labels map[string]string,
	port uint32) []l4Route {
	var out []l4Route
	var cidrs []string
	claimed := map[string]bool{}
	for _, vs := range vss {
		for _, r := range vs.Spec.Tls {
			if len(r.Route) == 0 {
				continue
			}
			dests := l4Destinations(push, vs, proxyNS, r.Route, port)
			if len(dests) == 0 {
				continue
			}
			for _, m := range r.Match {
				if !sidecarL4Match(m.Gateways, m.SourceNamespace, m.SourceLabels, m.Port, port, proxyNS, labels) {
					continue
				}
				if len(m.DestinationSubnets) > 0 {
					cidrs = m.DestinationSubnets
				}
				var ranges []*core.CidrRange
				if len(cidrs) > 0 {
					ranges = subnetRanges(cidrs)
				}
				at := strings.Join(cidrs, ",") + "|"
				var sni []string
				for _, h := range m.SniHosts {
					if claimed[at+h] {
						continue
					}
					claimed[at+h] = true
					sni = append(sni, h)
				}
				if len(sni) > 0 {
					out = append(out, l4Route{subnets: ranges, sni: sni, dests: dests})
				}
			}
		}
	}
	return out
}

// hasL4Routes reports whether one of vss has tcp or tls routes.
func hasL4Routes(vss []*model.VirtualService) bool {
	return slices.ContainsFunc(vss, func(vs *model.VirtualService) bool { return len(vs.Spec.Tcp) > 0 || len(vs.Spec.Tls) > 0 })
}

// subnetRanges are destinationSubnets as prefix ranges, as istiod's: an address is its /32 (/128), and a
// range on the unspecified address (0.0.0.0/N) is left out, matching every address.
func subnetRanges(subnets []string) []*core.CidrRange {
	sorted := slices.Sorted(slices.Values(subnets))
	out := make([]*core.CidrRange, 0, len(sorted))
	for _, s := range sorted {
		if c := vipCIDR(s); c != nil && c.AddressPrefix != "0.0.0.0" {
			out = append(out, c)
		}
	}
	return out
}

// rangesContain reports whether one of ranges holds address ip.
func rangesContain(ranges []*core.CidrRange, ip string) bool {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return false
	}
	for _, r := range ranges {
		if p, err := netip.ParsePrefix(r.AddressPrefix + "/" + strconv.FormatUint(uint64(r.PrefixLen.GetValue()), 10)); err == nil && p.Masked().Contains(a) {
			return true
		}
	}
	return false
}

// gatewayTCPRouteDests returns the destinations of the first tcp route of vs applying on a gateway's
// server port, nil for none.
func gatewayTCPRouteDests(push *model.PushContext, vs *model.VirtualService, proxyNS, gateway string, port uint32) []tcpDest {
	if vs == nil {
		return nil
	}
	for _, r := range vs.Spec.Tcp {
		matched := len(r.Match) == 0
		for _, m := range r.Match {
			if gatewayL4Match(m.Gateways, m.Port, port, gateway, vs.Namespace) {
				matched = true
				break
			}
		}
		if matched {
			if d := l4Destinations(push, vs, proxyNS, r.Route, port); len(d) > 0 {
				return d
			}
		}
	}
	return nil
}

type sniRoute struct {
	sni       []string
	dests     []tcpDest
	dnsCache  string // chainPlan.dnsCache
	dnsFamily cluster.Cluster_DnsLookupFamily
}

// gatewaySNIRoutes returns a chain per tls route match of vs applying on a gateway's server port: its
// sniHosts as written, as istiod's (not narrowed to the server's hosts), and the route's destinations.
func gatewaySNIRoutes(push *model.PushContext, vs *model.VirtualService, proxyNS, gateway string, port uint32) []sniRoute {
	if vs == nil {
		return nil
	}
	var out []sniRoute
	for _, r := range vs.Spec.Tls {
		dests := l4Destinations(push, vs, proxyNS, r.Route, port)
		if len(r.Route) == 0 || len(dests) == 0 {
			continue
		}
		for _, m := range r.Match {
			if gatewayL4Match(m.Gateways, m.Port, port, gateway, vs.Namespace) && len(m.SniHosts) > 0 {
				out = append(out, sniRoute{sni: slices.Compact(slices.Sorted(slices.Values(m.SniHosts))), dests: dests})
			}
		}
	}
	return out
}

// l4Destinations turns route destinations into clusters. A destination without a port takes the only
// port of its service, else port. Weights matter only with several destinations; zero weights are left out.
func l4Destinations(push *model.PushContext, vs *model.VirtualService, proxyNS string, dests []*networking.RouteDestination, port uint32) []tcpDest {
	var out []tcpDest
	for _, d := range dests {
		dst := d.GetDestination()
		if dst.GetHost() == "" {
			continue
		}
		host := model.ResolveHost(dst.Host, vs.Namespace, push.Mesh.DomainSuffix)
		p := dst.GetPort().GetNumber()
		if p == 0 {
			p = port
			if svc := push.ServiceForHostname(proxyNS, host); svc != nil && len(svc.Ports) == 1 {
				p = svc.Ports[0].Port
			}
		}
		if len(dests) > 1 && d.Weight <= 0 {
			continue
		}
		out = append(out, tcpDest{OutboundClusterName(p, dst.Subset, host), uint32(max(d.Weight, 1))})
	}
	return out
}

// inboundPort is a port of the proxy's own workload: a target port of a service selecting it, or the port
// of one of its Sidecar's ingress listeners.
type inboundPort struct {
	port     uint32
	protocol model.Protocol
	// ingress: the port is a Sidecar ingress listener's, whose cluster sends to endpoint (below) whatever
	// the mesh's inbound traffic policy; bind names its chains (capture, not bind, decides what arrives).
	ingress bool
	bind    string
	// bound: istiod binds a listener of its own on the port instead of a chain on the capture listener: the
	// ingress listener's captureMode is NONE, or DEFAULT for a proxy that captures nothing.
	bound bool
	// endpoint is where the port's inbound cluster sends: "" the connection's original destination, else
	// an IP or unix://PATH (an ingress listener's defaultEndpoint, resolved); endpointPort is its port.
	endpoint     string
	endpointPort uint32
	// skipCluster: the defaultEndpoint cannot be read, and istiod then builds no cluster for the port.
	skipCluster bool
	// pool is the Sidecar's connection pool for the port's cluster (nil for none).
	pool *networking.ConnectionPoolSettings
	// svc is the first service reaching the port (nil for none), whose DestinationRule's connection pool
	// for svcPort the cluster takes when the Sidecar sets none, as istiod's.
	svc     *model.Service
	svcPort uint32
}

// proxyWorkload finds the proxy's workload and the labels its policies select on: the node's labels, else
// the workload's.
func proxyWorkload(proxy *model.Proxy, push *model.PushContext) (*model.Workload, map[string]string) {
	var w *model.Workload
	for _, ip := range proxy.IPAddresses {
		if w = push.WorkloadByAddress(push.Mesh.Network, ip); w != nil {
			break
		}
	}
	labels := proxy.Labels
	if w != nil && len(labels) == 0 {
		labels = w.Labels
	}
	return w, labels
}

// ldsReservedPorts are the sidecar's own ports; traffic to them is never application traffic.
var ldsReservedPorts = map[uint32]bool{15000: true, 15001: true, 15004: true, 15006: true, 15008: true, 15020: true, 15021: true, 15053: true, 15090: true}

// inboundPortsInputs is what a sidecar's inbound ports depend on besides the proxy itself (whose labels and
// addresses are fixed): its namespace's services, a slice replaced whenever one of them changes, its
// workload, and the Sidecar applying to it (ingress listeners, connection pools).
type inboundPortsInputs struct {
	services *(*model.Service)
	n        int
	workload *model.Workload
	sidecar  *config.Config
}

// sidecarInboundPortsOf is sidecarInboundPorts for proxy, kept while its inputs stand: CDS and LDS ask on
// every push, and a service added in another namespace changes nothing here. For an Envoy sidecar whose
// Sidecar has ingress listeners, those listeners' ports replace the services' (sidecarIngressPorts).
func (g *Generators) sidecarInboundPortsOf(proxy *model.Proxy, push *model.PushContext) (*model.Workload, map[string]string, []inboundPort) {
	w, labels := proxyWorkload(proxy, push)
	svcs := push.ServicesInNamespace(proxy.Namespace)
	in := inboundPortsInputs{n: len(svcs), workload: w}
	if len(svcs) > 0 {
		in.services = &svcs[0]
	}
	if proxy.Type == model.Sidecar {
		// The scope's Sidecar: the one chosen by the node's labels, as for the outbound side.
		in.sidecar = push.Sidecar(proxy.Namespace, proxy.Labels)
	}
	ports, _ := g.inboundPorts.getOrBuild(proxy, in, func() ([]inboundPort, error) {
		ports := sidecarInboundPorts(push, proxy.Namespace, w, labels)
		none := capturesNothing(proxy)
		if in.sidecar != nil && len(in.sidecar.Spec.(*networking.Sidecar).Ingress) > 0 {
			return sidecarIngressPorts(in.sidecar.Spec.(*networking.Sidecar), proxy.IPAddresses, ports, none), nil
		}
		if none {
			// As istiod: without capture a listener on a service's port would take the workload's own port
			// from it, so only a Sidecar's ingress listeners (with their defaultEndpoint) make inbound ports.
			return nil, nil
		}
		if in.sidecar != nil {
			withInboundPool(ports, in.sidecar.Spec.(*networking.Sidecar).GetInboundConnectionPool())
		}
		return ports, nil
	})
	return w, labels, ports
}

// sidecarInboundPorts lists the workload ports of the services selecting the proxy (their target port,
// a named one resolved through the workload's container ports), the first service naming a port deciding
// its protocol. These are the ports CDS builds inbound|PORT|| clusters for.
func sidecarInboundPorts(push *model.PushContext, ns string, w *model.Workload, labels map[string]string) []inboundPort {
	seen := map[uint32]bool{}
	var out []inboundPort
	for _, svc := range push.ServicesInNamespace(ns) {
		if len(svc.Selector) == 0 || !selectorMatch(svc.Selector, labels) {
			continue
		}
		for _, p := range svc.Ports {
			target := p.Port
			switch {
			case p.TargetPort != 0:
				target = p.TargetPort
			case p.TargetPortName != "" && w != nil:
				if n, ok := w.ContainerPorts[p.TargetPortName]; ok {
					target = n
				}
			}
			if !seen[target] {
				seen[target] = true
				out = append(out, inboundPort{port: target, protocol: p.Protocol, svc: svc, svcPort: p.Port})
			}
		}
	}
	slices.SortFunc(out, func(a, b inboundPort) int { return cmp.Compare(a.port, b.port) })
	return out
}

func selectorMatch(selector, labels map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

type inboundInputs struct {
	ports    []inboundPort
	mtls     model.EffectiveMTLS
	policies model.AuthorizationPolicies
	env      authzEnv
	paths    string // mesh pathNormalization
	// tproxy: the capture is TPROXY, which keeps the client's address: the capture listener is transparent
	// and restores it upstream (original_src), as istiod's.
	tproxy bool
	family cluster.Cluster_DnsLookupFamily // the proxy's (dnsLookupFamily): the listener's address
}

func (in inboundInputs) describe(ns string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%s|%s|%s|%t|", ns, in.env.describe(), in.mtls.Mode, in.paths, in.tproxy)
	if in.family != cluster.Cluster_V4_ONLY {
		b.WriteString("v6|") // the listener's address
	}
	for _, p := range in.ports {
		fmt.Fprintf(&b, "%d/%s/%s/%s/%t,", p.port, p.protocol, in.mtls.ModeForPort(p.port), p.bind, p.bound)
	}
	// Port-level modes on other ports have passthrough chains of their own.
	for _, port := range slices.Sorted(maps.Keys(in.mtls.PortModes)) {
		fmt.Fprintf(&b, "%d=%s,", port, in.mtls.PortModes[port])
	}
	b.WriteString(describePolicies(in.policies))
	return b.String()
}

// inboundInputsOf gathers what the proxy's inbound listeners are built from.
func (l listenerGenerator) inboundInputsOf(proxy *model.Proxy, push *model.PushContext) inboundInputs {
	_, labels, ports := l.g.sidecarInboundPortsOf(proxy, push)
	in := inboundInputs{
		ports:    ports,
		mtls:     push.PeerAuthentication(proxy.Namespace, labels),
		policies: push.AuthorizationPolicies(proxy.Namespace, labels),
		paths:    push.Mesh.PathNormalization.Normalization,
		tproxy:   proxy.InterceptionMode == model.InterceptTPROXY,
		family:   dnsLookupFamily(proxy.IPAddresses),
	}
	in.env = newAuthzEnv(push, in.policies)
	in.env.jwt = newJWTAuthn(push, proxy.Namespace, labels, false)
	return in
}

func (l listenerGenerator) inboundListener(proxy *model.Proxy, push *model.PushContext) (*model.Resource, error) {
	in := l.inboundInputsOf(proxy, push)
	return l.g.cached(inboundListenerKey{push.PoliciesID(), in.describe(proxy.Namespace)}, VirtualInboundListener, func() proto.Message {
		lis, notes := buildVirtualInbound(in)
		logAuthzNotes(notes, "namespace", proxy.Namespace, "proxy", proxy.ID)
		return lis
	})
}

// boundInboundListeners returns, sorted by name, a listener bound to each inbound port that is bound (a
// Sidecar ingress listener's under captureMode NONE, or under the default capture for a proxy that
// captures nothing), as istiod's inboundCustomListener: on the ingress listener's bind, else the proxy's
// first global unicast address, else the unspecified address of its family, with the port's chains as virtualInbound would have them.
func (l listenerGenerator) boundInboundListeners(proxy *model.Proxy, push *model.PushContext) model.Resources {
	in := l.inboundInputsOf(proxy, push)
	var out model.Resources
	var desc string
	for _, p := range in.ports {
		if !p.bound || ldsReservedPorts[p.port] {
			continue
		}
		if proxy.Unprivileged && p.port < 1024 {
			slog.Warn("inbound listener left out: the proxy is unprivileged (UNPRIVILEGED_POD) and cannot bind a port below 1024",
				"proxy", proxy.ID, "port", p.port)
			continue
		}
		if desc == "" {
			desc = in.describe(proxy.Namespace)
		}
		bind := cmp.Or(p.bind, globalUnicastIP(proxy.IPAddresses), wildcardIP(in.family))
		name := bind + "_" + ldsPortName(p.port)
		r, err := l.g.cached(inboundListenerKey{push.PoliciesID(), desc + "|bound " + name}, name, func() proto.Message {
			lis, notes := buildBoundInbound(in, p, bind)
			logAuthzNotes(notes, "namespace", proxy.Namespace, "proxy", proxy.ID)
			return lis
		})
		if err != nil {
			slog.Warn("inbound listener left out: it cannot be marshaled", "proxy", proxy.ID, "listener", name, "error", err)
			continue
		}
		out = append(out, r)
	}
	sortByName(out)
	return out
}

// globalUnicastIP is the first of ips that is a global unicast address (istiod's GlobalUnicastIP), "" for none.
func globalUnicastIP(ips []string) string {
	for _, ip := range ips {
		if a, err := netip.ParseAddr(ip); err == nil && a.IsGlobalUnicast() {
			return ip
		}
	}
	return ""
}

// inboundPortChains builds the chains of the workload port p: those of its protocol and mTLS mode, as
// istiod's (pilot/pkg/networking/core/filterchain_options.go).
func inboundPortChains(in inboundInputs, p inboundPort, httpRBAC []*hcm.HttpFilter, tcpRBAC []*listener.Filter) []*listener.FilterChain {
	cluster := InboundClusterName(p.port)
	// istiod names a chain by its bind address and port: names only, the match is the port.
	bind := cmp.Or(p.bind, wildcardIP(in.family))
	chainName := "inbound_" + bind + "_" + ldsPortName(p.port)
	manager := ldsInboundManager(cluster, chainName, ldsPortName(p.port), p.protocol, httpRBAC)
	ldsMeshHTTPManager(manager, in.paths)
	filters := inboundFilters{
		http: []*listener.Filter{ldsNetworkFilter(ldsHCMFilter, manager)},
		tcp:  append(slices.Clone(tcpRBAC), ldsTCPProxyFilter(cluster, []tcpDest{{cluster, 100}})),
	}
	kind := inboundSniffed
	switch {
	case p.protocol.IsHTTP():
		kind = inboundHTTP
	case p.protocol != model.ProtocolUnset:
		kind = inboundTCP
	}
	return inboundChains(chainName, wrapperspb.UInt32(p.port), inboundChainOptions(kind, in.mtls.ModeForPort(p.port)), in.env.trustDomain, filters)
}

// buildBoundInbound builds the listener bound to bind and the inbound port p, istiod's inboundCustomListener:
// the port's chains, the inspectors they need, and no original_dst (nothing redirected the connection).
func buildBoundInbound(in inboundInputs, p inboundPort, bind string) (*listener.Listener, []string) {
	httpRBAC, notes := buildHTTPRBAC(in.policies, in.env)
	tcpRBAC, tcpNotes := buildTCPRBAC(in.policies, in.env)
	chains := inboundPortChains(in, p, httpRBAC, tcpRBAC)
	return &listener.Listener{
		Name:                             bind + "_" + ldsPortName(p.port),
		Address:                          socketAddress(bind, p.port),
		TrafficDirection:                 core.TrafficDirection_INBOUND,
		ListenerFilters:                  inboundInspectors(chains),
		ListenerFiltersTimeout:           durationpb.New(0), // istiod's protocol detection timeout, as on virtualInbound
		ContinueOnListenerFiltersTimeout: true,
		FilterChains:                     chains,
	}, append(notes, tcpNotes...)
}

// buildVirtualInbound builds the inbound capture listener, and notes on policies it could not translate.
// Its chains are istiod's (pilot/pkg/networking/core/filterchain_options.go): per workload port, those of
// the port's protocol and mTLS mode; for any other port, sniffed passthrough chains in the mesh's mode (and
// in its own mode for a port a PeerAuthentication names).
func buildVirtualInbound(in inboundInputs) (*listener.Listener, []string) {
	httpRBAC, notes := buildHTTPRBAC(in.policies, in.env)
	tcpRBAC, tcpNotes := buildTCPRBAC(in.policies, in.env)
	notes = append(notes, tcpNotes...)

	var chains []*listener.FilterChain
	declared := map[uint32]bool{}
	for _, p := range in.ports {
		if ldsReservedPorts[p.port] || p.bound {
			continue
		}
		declared[p.port] = true
		chains = append(chains, inboundPortChains(in, p, httpRBAC, tcpRBAC)...)
	}

	manager := ldsInboundManager(InboundPassthroughCluster, InboundPassthroughCluster, "0", model.ProtocolUnset, httpRBAC)
	ldsMeshHTTPManager(manager, in.paths)
	passthrough := inboundFilters{
		http: []*listener.Filter{ldsNetworkFilter(ldsHCMFilter, manager)},
		tcp:  append(slices.Clone(tcpRBAC), ldsTCPProxyFilter(InboundPassthroughCluster, []tcpDest{{InboundPassthroughCluster, 100}})),
	}
	chains = append(chains, inboundChains("inbound_passthrough", nil, inboundChainOptions(inboundSniffed, in.mtls.Mode), in.env.trustDomain, passthrough)...)
	// A port-level mTLS mode on a port no service declares governs that port's passthrough, as in istiod.
	for _, port := range slices.Sorted(maps.Keys(in.mtls.PortModes)) {
		if declared[port] || ldsReservedPorts[port] {
			continue
		}
		chains = append(chains, inboundChains("inbound_passthrough_"+ldsPortName(port), wrapperspb.UInt32(port),
			inboundChainOptions(inboundSniffed, in.mtls.PortModes[port]), in.env.trustDomain, passthrough)...)
	}

	filters := []*listener.ListenerFilter{ldsOriginalDst()}
	if in.tproxy {
		// TPROXY keeps the client's address: original_src binds the upstream connection to it (marked
		// 1337, which Istio's rules route back through the proxy), as istiod's.
		filters = append(filters, ldsListenerFilter(ldsOriginalSrcFilter, &originalsrc.OriginalSrc{Mark: tproxyMark}))
	}
	// No use_original_dst (istiod has none either): it would hand a connection to the outbound listener
	// 0.0.0.0_PORT of any service on the same port, past this listener's mTLS and RBAC. The original_dst
	// listener filter alone restores the destination the chains match on.
	return &listener.Listener{
		Name:             VirtualInboundListener,
		Address:          socketAddress(wildcardIP(in.family), VirtualInboundPort),
		Transparent:      transparentFor(in.tproxy),
		TrafficDirection: core.TrafficDirection_INBOUND,
		ListenerFilters:  append(filters, inboundInspectors(chains)...),
		// istiod's protocol detection has no timeout (mesh protocolDetectionTimeout 0s): the inspectors wait
		// for the client's first bytes, so a server-first protocol must be declared on its port.
		ListenerFiltersTimeout:           durationpb.New(0),
		ContinueOnListenerFiltersTimeout: true,
		FilterChains:                     chains,
	}, notes
}

// tproxyMark is the socket mark istiod's original_src sets under TPROXY capture.
const tproxyMark = 1337

// transparentFor is a listener's transparent setting: set (true) for TPROXY capture, else Envoy's default.
func transparentFor(transparent bool) *wrapperspb.BoolValue {
	if transparent {
		return wrapperspb.Bool(true)
	}
	return nil
}

// inboundKind is how an inbound port's protocol decides its chains.
type inboundKind int

const (
	inboundTCP     inboundKind = iota
	inboundHTTP                // the connection manager on every chain
	inboundSniffed             // no protocol declared: HTTP by ALPN or the http_inspector, anything else TCP
)

// inboundChainOption is one filter chain istiod builds for an inbound port: the transport protocol and
// application protocols it takes, whether it runs the connection manager (else tcp_proxy), and whether it
// terminates mesh mTLS (else the bytes go to the application as they came).
type inboundChainOption struct {
	suffix    string
	transport string
	alpn      []string
	http      bool
	mtls      bool
}

// The application protocols istiod's inbound chains match (pilot/pkg/networking/core/listener.go): what a
// client sidecar's ALPN says over mesh mTLS (istio-http/* for HTTP it detected, istio-peer-exchange and
// istio otherwise), and what the http_inspector reports for plaintext (HTTP/1.0 is left to the TCP chain,
// which the connection manager would refuse).
var (
	ldsInboundPlainHTTPALPN = []string{"http/1.1", "h2c"}
	ldsInboundMTLSHTTPALPN  = []string{"istio-http/1.0", "istio-http/1.1", "istio-h2"}
	ldsInboundMTLSTCPALPN   = []string{"istio-peer-exchange", "istio"}
	ldsInboundMTLSALPN      = []string{"istio", "istio-peer-exchange", "istio-http/1.0", "istio-http/1.1", "istio-h2"}
)

// inboundChainOptions are istiod's chains for a port of kind in mode. Under PERMISSIVE only TLS offering
// Istio's ALPN is mesh mTLS; other TLS is the application's own: on a TCP or sniffed port it passes to the
// application untouched, on an HTTP port no chain takes it. STRICT has TLS chains alone; DISABLE none.
func inboundChainOptions(kind inboundKind, mode model.MTLSMode) []inboundChainOption {
	const tls, raw = "tls", "raw_buffer"
	switch kind {
	case inboundHTTP:
		switch mode {
		case model.MTLSStrict:
			return []inboundChainOption{{"_tls", tls, nil, true, true}}
		case model.MTLSDisable:
			return []inboundChainOption{{"_plaintext", raw, nil, true, false}}
		}
		return []inboundChainOption{{"_tls", tls, ldsInboundMTLSALPN, true, true}, {"_plaintext", raw, nil, true, false}}
	case inboundSniffed:
		switch mode {
		case model.MTLSStrict:
			return []inboundChainOption{{"_http_tls", tls, ldsInboundMTLSHTTPALPN, true, true}, {"_tls", tls, nil, false, true}}
		case model.MTLSDisable:
			return []inboundChainOption{{"_http_plaintext", raw, ldsInboundPlainHTTPALPN, true, false}, {"_plaintext", raw, nil, false, false}}
		}
		return []inboundChainOption{
			{"_http_tls", tls, ldsInboundMTLSHTTPALPN, true, true},
			{"_http_plaintext", raw, ldsInboundPlainHTTPALPN, true, false},
			{"_tls", tls, ldsInboundMTLSTCPALPN, false, true},
			{"_plaintext", raw, nil, false, false},
			{"_app_tls", tls, nil, false, false},
		}
	}
	switch mode {
	case model.MTLSStrict:
		return []inboundChainOption{{"_tls", tls, nil, false, true}}
	case model.MTLSDisable:
		return []inboundChainOption{{"_plaintext", raw, nil, false, false}}
	}
	return []inboundChainOption{{"_tls", tls, ldsInboundMTLSALPN, false, true}, {"_app_tls", tls, nil, false, false}, {"_plaintext", raw, nil, false, false}}
}

// inboundFilters are a port's network filters: the connection manager's (with the HTTP RBAC) and tcp_proxy's
// (with the L4 RBAC).
type inboundFilters struct{ http, tcp []*listener.Filter }

// inboundChains builds the chains of opts for one port (nil: any port). Mesh mTLS accepts only client
// certificates of trustDomain.
func inboundChains(name string, port *wrapperspb.UInt32Value, opts []inboundChainOption, trustDomain string, filters inboundFilters) []*listener.FilterChain {
	out := make([]*listener.FilterChain, 0, len(opts))
	for _, o := range opts {
		fc := &listener.FilterChain{
			Name:             name + o.suffix,
			FilterChainMatch: &listener.FilterChainMatch{DestinationPort: port, TransportProtocol: o.transport, ApplicationProtocols: o.alpn},
			Filters:          filters.tcp,
		}
		if o.http {
			fc.Filters = filters.http
		}
		if o.mtls {
			// istiod's server ALPN: HTTP and TCP as the client offers them, and metadata exchange over TCP.
			alpn := ldsMeshServerTCPALPN
			if o.http {
				alpn = ldsMeshServerHTTPALPN
			}
			fc.TransportSocket = ldsDownstreamTLSSocket(ldsMeshDownstreamTLS(trustDomain, alpn))
		}
		out = append(out, fc)
	}
	return out
}

// inboundInspectors are the listener filters the chains need, each enabled only on the ports whose chains
// match on what it detects, as istiod's: the tls_inspector where a chain matches TLS, the http_inspector
// where one matches HTTP by ALPN (it waits for the client's first bytes). Port-less chains decide every
// other port.
func inboundInspectors(chains []*listener.FilterChain) []*listener.ListenerFilter {
	type need struct{ tls, http bool }
	byPort := map[uint32]need{}
	for _, fc := range chains {
		m := fc.GetFilterChainMatch()
		n := byPort[m.GetDestinationPort().GetValue()]
		n.tls = n.tls || m.GetTransportProtocol() == "tls"
		n.http = n.http || slices.ContainsFunc(m.GetApplicationProtocols(), func(p string) bool { return p == "http/1.1" || p == "h2c" })
		byPort[m.GetDestinationPort().GetValue()] = n
	}
	inspector := func(name string, m proto.Message, needs func(need) bool) *listener.ListenerFilter {
		var on, off []uint32
		for _, port := range slices.Sorted(maps.Keys(byPort)) {
			switch {
			case port == 0:
			case needs(byPort[port]):
				on = append(on, port)
			default:
				off = append(off, port)
			}
		}
		f := ldsListenerFilter(name, m)
		if needs(byPort[0]) {
			f.FilterDisabled = ldsPortsMatch(off) // on but for the ports none of whose chains need it
		} else if len(on) == 0 {
			return nil
		} else {
			f.FilterDisabled = &listener.ListenerFilterChainMatchPredicate{Rule: &listener.ListenerFilterChainMatchPredicate_NotMatch{NotMatch: ldsPortsMatch(on)}}
		}
		return f
	}
	var out []*listener.ListenerFilter
	// The tls_inspector comes first: the http_inspector leaves a connection it found to be TLS alone.
	if f := inspector(ldsTLSInspectorFilter, &tlsinspector.TlsInspector{}, func(n need) bool { return n.tls }); f != nil {
		out = append(out, f)
	}
	if f := inspector(ldsHTTPInspectorFilter, &httpinspector.HttpInspector{}, func(n need) bool { return n.http }); f != nil {
		out = append(out, f)
	}
	return out
}

// ldsPortsMatch matches connections to any of ports (nil when there are none: no connection).
func ldsPortsMatch(ports []uint32) *listener.ListenerFilterChainMatchPredicate {
	var ranges []*listener.ListenerFilterChainMatchPredicate
	for _, p := range ports {
		ranges = append(ranges, &listener.ListenerFilterChainMatchPredicate{Rule: &listener.ListenerFilterChainMatchPredicate_DestinationPortRange{
			DestinationPortRange: &typev3.Int32Range{Start: int32(p), End: int32(p) + 1}}}) // [start, end)
	}
	switch len(ranges) {
	case 0:
		return nil
	case 1:
		return ranges[0]
	}
	return &listener.ListenerFilterChainMatchPredicate{Rule: &listener.ListenerFilterChainMatchPredicate_OrMatch{
		OrMatch: &listener.ListenerFilterChainMatchPredicate_MatchSet{Rules: ranges}}}
}

// ldsInboundManager sends every request to cluster (the workload port's, or the passthrough for other
// ports), after the RBAC filters, with istiod's inbound default route: no timeout, a gRPC client's
// grpc-timeout header honoured, and a request retried twice when the connection to the application resets
// before it is sent (not on gRPC ports, where a stream may be reset after part of it went out).
func ldsInboundManager(cluster, statPrefix, portName string, protocol model.Protocol, rbac []*hcm.HttpFilter) *hcm.HttpConnectionManager {
	var retry *route.RetryPolicy
	if protocol != model.ProtocolGRPC {
		retry = &route.RetryPolicy{RetryOn: "reset-before-request", NumRetries: wrapperspb.UInt32(2)}
	}
	filters := append(slices.Clone(rbac), ldsEnvoyHTTPFilters()...)
	return &hcm.HttpConnectionManager{
		CodecType:  hcm.HttpConnectionManager_AUTO,
		StatPrefix: statPrefix,
		RouteSpecifier: &hcm.HttpConnectionManager_RouteConfig{RouteConfig: &route.RouteConfiguration{
			Name: cluster,
			VirtualHosts: []*route.VirtualHost{{
				Name:    "inbound|http|" + portName,
				Domains: []string{"*"},
				Routes: []*route.Route{{
					Name:  "default",
					Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
					Action: &route.Route_Route{Route: &route.RouteAction{
						ClusterSpecifier: &route.RouteAction_Cluster{Cluster: cluster},
						Timeout:          durationpb.New(0),
						MaxStreamDuration: &route.RouteAction_MaxStreamDuration{
							MaxStreamDuration: durationpb.New(0), GrpcTimeoutHeaderMax: durationpb.New(0)},
						RetryPolicy: retry,
					}},
					Decorator: &route.Decorator{Operation: cluster + "/*"},
				}},
			}},
			ValidateClusters: wrapperspb.Bool(false),
		}},
		HttpFilters:              filters,
		ForwardClientCertDetails: hcm.HttpConnectionManager_APPEND_FORWARD,
		SetCurrentClientCertDetails: &hcm.HttpConnectionManager_SetCurrentClientCertDetails{
			Subject: wrapperspb.Bool(true), Dns: true, Uri: true},
	}
}
