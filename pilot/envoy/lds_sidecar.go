package envoy

import (
	"cmp"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	dfphttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/dynamic_forward_proxy/v3"
	dfpsni "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/sni_dynamic_forward_proxy/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sextantmesh/sextant/pilot/derive"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
)

// virtualOutboundKey: virtualOutbound depends on the outbound traffic policy, the capture (TPROXY) and the
// proxy's IP family alone; sidecars alike in these share one.
type virtualOutboundKey struct {
	registryOnly, transparent bool
	family                    cluster.Cluster_DnsLookupFamily
	port                      uint32
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
	built, err := l.g.outboundListeners(&outboundInputs{g: l.g, push: push, scope: scope, labels: proxy.Labels, labelKey: labels,
		typ: proxy.Type, mode: mode, family: family})
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
	port, _ := capturePorts(push.Mesh)
	capture, err := l.g.cached(virtualOutboundKey{scope.RegistryOnly, tproxy, family, port}, VirtualOutboundListener, func() proto.Message {
		return buildVirtualOutbound(scope.RegistryOnly, tproxy, family, port)
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
	id := listID{kind: "lds-own-address", name: ip, namespace: scope.Namespace, sidecar: scope.Sidecar, captureNone: scope.captureNone,
		labels: labels}
	out, _ := g.lists.GetOrBuild(id, refOf(list), func() (model.Resources, error) {
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
func (g *Generators) withoutPrivileged(scope *Scope, labels string, proxy *model.Proxy, list model.Resources,
	privileged []string) model.Resources {
	id := listID{kind: "lds-unprivileged", namespace: scope.Namespace, sidecar: scope.Sidecar, captureNone: scope.captureNone, labels: labels}
	out, _ := g.lists.GetOrBuild(id, refOf(list), func() (model.Resources, error) {
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

// outboundListeners returns the outbound listeners of c's scope for proxies of c's labels, sorted by name,
// each marshaled on its own (a change to one destination changes that listener's bytes and version only),
// derived from the last list of the same proxies where the declared inputs allow (outboundListenerPlan).
func (g *Generators) outboundListeners(c *outboundInputs) (*listenerList, error) {
	id := listID{kind: "lds", namespace: c.scope.Namespace, sidecar: c.scope.Sidecar, captureNone: c.scope.captureNone,
		variant: string(c.typ) + c.mode.variant(), labels: c.labelKey}
	return g.listenerLists.GetOrBuild(id, outboundListenerInputs.Key(c), func() (*listenerList, error) {
		prev, _ := g.listenerLists.Latest(id)
		var prevList *derive.List[listenerOwner, outboundItem]
		if prev != nil {
			prevList, c.prevShared = prev.derived, prev.shared
		}
		next, err := outboundListenerPlan.Next(prevList, c)
		if err != nil {
			return nil, err
		}
		shared := c.shared
		if shared == nil { // the owners did not change
			shared = prev.shared
		}
		return newListenerList(next, shared, prev), nil
	})
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
// to port (the mesh's proxyListenPort), use_original_dst hands each connection to the listener for its
// original destination (see buildOutboundListeners), and what no listener takes goes to PassthroughCluster,
// or under REGISTRY_ONLY to BlackHoleCluster (istiod's catch-all chain; the chain keeps one name so only its
// cluster changes). A connection addressed to the capture port itself goes to BlackHoleCluster, as istiod's:
// passed through, it would come back to this listener. Under TPROXY capture (transparent) the listener takes
// connections addressed elsewhere, as istiod's. It listens on the unspecified address of the proxy's family.
func buildVirtualOutbound(registryOnly, transparent bool, family cluster.Cluster_DnsLookupFamily, port uint32) *listener.Listener {
	catchAll := catchAllCluster(registryOnly)
	return &listener.Listener{
		Name:             VirtualOutboundListener,
		Address:          socketAddress(wildcardIP(family), port),
		Transparent:      transparentFor(transparent),
		UseOriginalDst:   wrapperspb.Bool(true),
		TrafficDirection: core.TrafficDirection_OUTBOUND,
		ListenerFilters:  []*listener.ListenerFilter{ldsOriginalDst()},
		FilterChains: []*listener.FilterChain{blackholeChain(VirtualOutboundListener+"-blackhole", port), {
			Name:    passthroughChain,
			Filters: []*listener.Filter{ldsTCPProxyFilter(catchAll, []tcpDest{{name: catchAll, weight: 100}})},
		}},
	}
}

// blackholeChain sends connections to port, a capture listener's own, to BlackHoleCluster: istiod's
// virtualOutbound-blackhole and virtualInbound-blackhole chains, which keep a connection from looping.
func blackholeChain(name string, port uint32) *listener.FilterChain {
	return &listener.FilterChain{
		Name:             name,
		FilterChainMatch: &listener.FilterChainMatch{DestinationPort: wrapperspb.UInt32(port)},
		Filters:          []*listener.Filter{ldsTCPProxyFilter(BlackHoleCluster, []tcpDest{{name: BlackHoleCluster, weight: 100}})},
	}
}

// wildcardReserved reports whether port is one of the sidecar's own listeners on the unspecified address
// (virtualOutbound and virtualInbound on the mesh's capture ports, the bootstrap's health and Prometheus
// listeners). Envoy refuses a second listener on one address, so no outbound listener 0.0.0.0_PORT
// ([::]_PORT) is built on them (istiod skips them too).
func wildcardReserved(m *mesh.Config, port uint32) bool {
	out, in := capturePorts(m)
	return port == out || port == in || port == 15021 || port == 15090
}

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

// The outbound listeners (bind_to_port false), one per outbound destination of a scope, sorted by name,
// marshaled, for virtualOutbound to hand connections to:
//   - "VIP_PORT" (VIP:PORT) for the chains of a service with VIPs (its first one; the others are
//     additional addresses);
//   - "0.0.0.0_PORT" for chains without a VIP: the HTTP chain of the port, services without VIPs, and
//     services with an address block (CIDR), which their chains match as prefix ranges.
//
// Envoy looks for the exact IP:port first, then 0.0.0.0:port. The chains are planned as data first
// (outboundPlanner); a listener whose plan is the one built before is not built again.

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
	// byService: HTTP ports of Kubernetes Services go on listeners of their ClusterIPs (routes_by_service.go).
	byService bool
}

// finishOutboundListeners completes the planned listeners, marshals them and appends them to out.
func (g *Generators) finishOutboundListeners(push *model.PushContext, scope *Scope, labelKey string, mode ipMode,
	planned *outboundPlanned, byName map[string]*outboundListener, family cluster.Cluster_DnsLookupFamily,
	out []outboundItem) ([]outboundItem, error) {
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
			ol.chains = append(ol.chains, chainPlan{name: passthroughChain, port: ol.port, dests: []tcpDest{{name: catchAll, weight: 100}},
				isDefault: true})
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
	for _, n := range names {
		ol := byName[n]
		if len(ol.chains) == 0 { // every chain went to an earlier service: Envoy refuses a listener without
			continue
		}
		if isUnspecifiedIP(ol.ip) && wildcardReserved(push.Mesh, ol.port) {
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
		r, err := g.outboundListenerResource(scope, labelKey, ol, additional, push.Mesh.PathNormalization.Normalization,
			meshDetectionTimeout(push.Mesh), mode)
		if err != nil {
			return nil, err
		}
		out = append(out, outboundItem{res: r, onEndpoint: planned.endpointListeners[ol.name],
			privileged: ol.real && ol.port > 0 && ol.port < 1024})
	}
	return out, nil
}

// outboundListenerResource returns ol marshaled, rebuilt only when what it is built from changed.
func (g *Generators) outboundListenerResource(scope *Scope, labelKey string, ol *outboundListener, additional []string, paths string,
	detection *durationpb.Duration, mode ipMode) (*model.Resource, error) {
	id := listID{kind: "outbound-listener", name: ol.name, namespace: scope.Namespace, sidecar: scope.Sidecar, captureNone: scope.captureNone,
		labels: labelKey, variant: mode.variant()}
	inputs := ol.describe(additional) + "|paths=" + paths + "|detection=" + detection.AsDuration().String()
	return g.outboundListenerRes.GetOrBuild(id, inputs, func() (*model.Resource, error) {
		return marshal(ol.name, ol.build(additional, paths, detection))
	})
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
				ImplementationSpecifier: &dfphttp.FilterConfig_DnsCacheConfig{DnsCacheConfig: dfpDNSCache(c.dnsCache, c.dnsFamily)},
			}), hc.HttpFilters[n-1])
		}
		ldsMeshHTTPManager(hc, paths)
		return &listener.FilterChain{Name: c.name, FilterChainMatch: m, Filters: []*listener.Filter{ldsNetworkFilter(ldsHCMFilter, hc)}}
	}
	filters := []*listener.Filter{ldsTCPProxyFilter(tcpStatPrefix(c.dests), c.dests)}
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
			b.WriteByte(':')
			b.WriteString(d.stat)
		}
	}
	return b.String()
}

// build makes the listener. As istiod's, its listener filters wait detection (the mesh's protocol detection
// timeout, 0 by default: no limit, so a client that sends its first bytes late, a pooled connection opened
// ahead of its first request, is not cut off) where the http_inspector runs, and no limit elsewhere.
func (ol *outboundListener) build(additional []string, paths string, detection *durationpb.Duration) *listener.Listener {
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
	for _, f := range lis.ListenerFilters {
		if f.Name == ldsHTTPInspectorFilter {
			lis.ListenerFiltersTimeout = detection
		}
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
