package envoy

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/model"
)

// outboundPlanner plans the outbound listeners of services for a proxy of labels, in the order their chains
// claim Envoy's matches: each port's HTTP chain first, then each service's chains for its other ports
// (sniffed HTTP, TLS by SNI, TCP by destination subnet, then the port's own chain). It records in out
// what the list's derivation needs to know.
type outboundPlanner struct {
	push   *model.PushContext
	scope  *Scope
	b      egressBinding
	labels map[string]string
	out    *outboundPlanned
	family cluster.Cluster_DnsLookupFamily
	// wildcard is the proxy's unspecified address; httpIP the address of a port's HTTP listener, which on
	// the unspecified address (0.0.0.0, or [::] for an IPv6-only proxy) takes sniffed plaintext HTTP only.
	wildcard, httpIP string
	byName           map[string]*outboundListener
	// taken holds the matches claimed (claim).
	taken map[string]bool
	key   strings.Builder
}

// outboundPlanned is what planning tells besides the listeners.
type outboundPlanned struct {
	mode ipMode // of the proxies planned for
	// l4Routed: a VirtualService sends TCP or TLS somewhere, so chains depend on other services.
	l4Routed bool
	// readsEndpoints: a service's listeners depend on its endpoints' addresses (Service.ListensOnEndpoints).
	readsEndpoints bool
	// endpointListeners names the listeners planned on an endpoint's address: a sidecar at that address
	// leaves them out (withoutOwnListeners).
	endpointListeners map[string]bool
}

// planOutbound plans the outbound listeners of services, keyed by name, for a proxy of labels: the HTTP
// chains of the ports of httpServices, then the other ports of services. out records what else planning
// tells.
func planOutbound(push *model.PushContext, scope *Scope, httpServices, services []*model.Service, b egressBinding,
	labels map[string]string, out *outboundPlanned, family cluster.Cluster_DnsLookupFamily) map[string]*outboundListener {
	wildcard := wildcardIP(family)
	p := &outboundPlanner{push: push, scope: scope, b: b, labels: labels, out: out, family: family, wildcard: wildcard,
		httpIP: cmp.Or(b.ip, wildcard), byName: map[string]*outboundListener{}, taken: map[string]bool{}}
	p.httpPorts(httpServices)
	// Then TCP, TLS and unknown protocols, service by service.
	for _, svc := range services {
		p.service(svc)
	}
	return p.byName
}

func (p *outboundPlanner) addChain(ol *outboundListener, c chainPlan) {
	ol.chains = append(ol.chains, c)
}

// listenerFor returns the listener on ip and port, planning it on first use.
func (p *outboundPlanner) listenerFor(ip string, port uint32) *outboundListener {
	name := ip + "_" + ldsPortName(port)
	ol := p.byName[name]
	if ol == nil {
		ol = &outboundListener{name: name, ip: ip, port: port, real: p.b.real}
		p.byName[name] = ol
		// A dual-stack proxy's unspecified and loopback addresses are IPv4's and IPv6's (istiod's wildcards
		// and localhosts): where an egress listener binds none, its listeners take IPv6's as an additional
		// address.
		if p.out.mode == dualStack && p.b.ip == "" && ip == p.wildcard {
			ol.extra = []string{"::"}
		} else if p.out.mode == dualStack && p.b.loopback {
			ol.extra = []string{"::1"}
		}
	}
	return ol
}

// claim reserves a match (VIPs, port, SNI or "http" for sniffed HTTP, "" for neither): Envoy refuses two
// chains with the same match, so the first service (HTTP ports first, then by hostname) keeps it.
func (p *outboundPlanner) claim(vips []*core.CidrRange, port uint32, what string) bool {
	k := &p.key
	k.Reset()
	for _, v := range vips {
		k.WriteString(v.AddressPrefix)
		k.WriteByte('/')
		k.WriteString(strconv.FormatUint(uint64(v.PrefixLen.GetValue()), 10))
		k.WriteByte(',')
	}
	k.WriteByte('|')
	k.WriteString(ldsPortName(port))
	k.WriteByte('|')
	k.WriteString(what)
	if p.taken[k.String()] {
		return false
	}
	p.taken[k.String()] = true
	return true
}

// httpPorts plans every HTTP port's chain. As istiod's, the port's HTTP chain takes what the
// http_inspector finds to be plaintext HTTP; anything else (TLS, other protocols) to an address no other
// chain matches goes to the port's default chain (portChain).
func (p *outboundPlanner) httpPorts(services []*model.Service) {
	oldestHTTP := map[uint32]*model.Service{}
	for _, svc := range services {
		for _, port := range svc.Ports {
			if !port.Protocol.IsHTTP() {
				continue
			}
			if o := oldestHTTP[port.Port]; o == nil || model.CompareServices(svc, o) < 0 {
				oldestHTTP[port.Port] = svc
			}
			p.httpChain(port.Port)
		}
	}
	// As istiod, a port's connection manager resolves hosts for a DYNAMIC_DNS service's forward proxy
	// cluster when that service is the port's oldest HTTP service, whose listener options istiod keeps.
	// Elsewhere the cluster resolves the host itself when it picks one.
	for port, svc := range oldestHTTP {
		if ol := p.byName[p.httpIP+"_"+ldsPortName(port)]; ol != nil && svc.Resolution == model.DynamicDNS {
			ol.chains[0].dnsCache, ol.chains[0].dnsFamily = svc.Hostname, p.family
		}
	}
}

// httpChain plans port's HTTP chain, once per port.
func (p *outboundPlanner) httpChain(port uint32) {
	// Bound to one address the HTTP chain takes the whole port (Envoy refuses two chains alike).
	what := "http"
	if p.httpIP != p.wildcard {
		what = ""
	}
	if !p.claim(nil, port, what) {
		return
	}
	ol := p.listenerFor(p.httpIP, port)
	if p.httpIP == p.wildcard {
		ol.httpPort = true
		ol.chains = append(ol.chains, chainPlan{name: ol.name, port: port, http: true, alpn: sniffedHTTP, transport: "raw_buffer"})
	} else {
		// Bound to one address, the listener is HTTP's alone: no sniffing, no passthrough.
		ol.chains = append(ol.chains, chainPlan{name: ol.name, port: port, http: true})
	}
}

// serviceAddresses is where a service's non-HTTP chains match.
type serviceAddresses struct {
	vips []*core.CidrRange
	// block: an address is a CIDR block, which no listener address can stand for.
	block bool
	// sniOnly: only the SNI tells the services on the listener apart.
	sniOnly    bool
	namePrefix string
}

// addressesOf returns where svc's chains match: on the VIP when there is one, else on the port.
func (p *outboundPlanner) addressesOf(svc *model.Service) serviceAddresses {
	var a serviceAddresses
	addrs := listenVIPs(svc, p.out.mode)
	for _, addr := range addrs {
		if c := vipCIDR(addr); c != nil {
			a.vips = append(a.vips, c)
			a.block = a.block || c.PrefixLen.GetValue() < ldsHostBits(c.AddressPrefix)
		}
	}
	a.namePrefix = p.wildcard
	if len(a.vips) > 0 {
		a.namePrefix = addrs[0]
	}
	// On a bound address istiod matches no destination addresses (the listener is the address), and
	// tells services apart by SNI only where their own address says nothing: an address block, or
	// none on a bind to the proxy's unspecified address.
	a.sniOnly = len(a.vips) == 0 || a.block
	if p.b.ip != "" {
		a.sniOnly = a.block || len(a.vips) == 0 && p.b.ip == p.wildcard
		a.vips, a.block = nil, false
	}
	return a
}

// service plans svc's TCP, TLS and unknown-protocol ports: on the VIP when there is one, else on the port;
// for a service without an address of its own that sends connections to the address dialled (headless), on
// each of its endpoints' addresses (unless an egress listener binds an address), as istiod: other addresses
// on the port are not the service's.
func (p *outboundPlanner) service(svc *model.Service) {
	a := p.addressesOf(svc)
	// As istiod, the tcp and tls routes of every VirtualService for the host the Sidecar imports, one
	// after the other.
	vss := p.scope.importedVirtualServices(p.push.VirtualServicesForHost(p.scope.Namespace, model.MeshGateway, svc.Hostname), p.b.imports)
	if hasL4Routes(vss) {
		p.out.l4Routed = true
	}
	perEndpoint := svc.ListensOnEndpoints() && p.b.ip == "" && !p.b.port
	p.out.readsEndpoints = p.out.readsEndpoints || perEndpoint
	for _, port := range svc.Ports {
		if p.b.byService && p.b.ip == "" && p.scope.byServiceOn(port.Port) && ownsHTTPListener(p.push.Mesh, svc, port, p.out.mode) {
			p.ownHTTPChain(svc, a, port.Port)
			continue
		}
		if port.Protocol.IsHTTP() || port.Protocol == model.ProtocolUDP {
			continue // HTTP is planned already; as istiod, no listener for UDP
		}
		if perEndpoint && svc.ListensOnEndpointPort(port) && p.endpointListeners(svc, vss, port) {
			continue
		}
		p.portChains(p.serviceListener(a, port.Port), svc, vss, a, port)
	}
}

// endpointListeners plans svc's port on each of its endpoints' addresses, and reports whether it did.
func (p *outboundPlanner) endpointListeners(svc *model.Service, vss []*model.VirtualService, port *model.Port) bool {
	eps, ok := endpointsListenedOn(p.push, svc, port)
	if !ok {
		return false
	}
	for _, ip := range endpointIPs(eps) {
		ol := p.listenerFor(ip.AddressPrefix, port.Port)
		if p.out.endpointListeners == nil {
			p.out.endpointListeners = map[string]bool{}
		}
		p.out.endpointListeners[ol.name] = true
		p.portChains(ol, svc, vss, serviceAddresses{vips: []*core.CidrRange{ip}, namePrefix: ip.AddressPrefix}, port)
	}
	return true
}

// endpointsListenedOn returns the endpoints of svc's port whose addresses its listeners stand on; ok is false
// when the port keeps its wildcard listener instead: istiod keeps it for a ServiceEntry with neither
// endpoints nor a workload selector, whose addresses are not known. A Kubernetes Service without endpoints
// has no listener on the port, nor one whose selector selects nothing yet.
func endpointsListenedOn(push *model.PushContext, svc *model.Service, port *model.Port) (eps []*model.Endpoint, ok bool) {
	eps = push.EndpointsForPort(svc, port.Port, nil)
	if svc.Source.Kind != config.Service && len(eps) == 0 && svc.Selector == nil {
		return nil, false
	}
	return eps, true
}

// serviceListener returns the listener of a service's port: on the bound address, the VIP (the others as
// additional addresses), or the unspecified address without a VIP or with an address block.
func (p *outboundPlanner) serviceListener(a serviceAddresses, port uint32) *outboundListener {
	switch {
	case p.b.ip != "":
		return p.listenerFor(p.b.ip, port)
	case len(a.vips) == 0 || a.block:
		return p.listenerFor(p.wildcard, port)
	}
	ol := p.listenerFor(a.vips[0].AddressPrefix, port)
	for _, v := range a.vips[1:] {
		ol.extra = append(ol.extra, v.AddressPrefix)
	}
	return ol
}

// portRoutes is what the VirtualServices decide for one port of a service: its chains' names, matches and
// destinations.
type portRoutes struct {
	name string // the chains' name prefix
	// at scopes a destinationSubnets claim to a VIP listener, where such a chain's match is the listener's alone.
	at        string
	own       []tcpDest // the service's own cluster
	dests     []tcpDest // the port chain's: a tcp route without match, else own
	tcp       sidecarTCP
	tlsRoutes []l4Route
	// chainVIPs are the VIPs the service's own chains match: those a subnet chain holds are left out.
	chainVIPs []*core.CidrRange
	// portOnly: a chain takes every connection to the listener on this port.
	portOnly bool
}

// routesOf resolves the tcp or tls routes of svc's port: as istiod, a TLS port takes tls routes only, any
// other port tcp routes only.
func (p *outboundPlanner) routesOf(ol *outboundListener, svc *model.Service, vss []*model.VirtualService, a serviceAddresses,
	port *model.Port) portRoutes {
	var ownBlock []string // istiod's destination CIDRs of the service: its addresses when they are blocks
	if a.block {
		ownBlock = svc.Addresses
	}
	own := tcpDest{name: OutboundClusterName(port.Port, "", svc.Hostname), weight: 100, host: svc.Hostname}
	r := portRoutes{name: a.namePrefix + "_" + ldsPortName(port.Port), own: []tcpDest{own}}
	if r.name == ol.name && ol.httpPort {
		r.name += "_tcp" // the HTTP chain has the listener's name
	}
	if ol.ip != p.wildcard {
		r.at = ol.name + "|"
	}
	if port.Protocol == model.ProtocolTLS || port.Protocol == model.ProtocolHTTPS {
		r.tlsRoutes = sidecarTLSRoutes(p.push, vss, p.scope.Namespace, p.labels, port.Port)
	} else {
		r.tcp = sidecarTCPRoutes(p.push, vss, p.scope.Namespace, p.labels, port.Port, ownBlock)
	}
	// istiod leaves a VIP service's own chains without prefix ranges, so a chain on destinationSubnets
	// holding one of its VIPs takes every connection to that VIP (Envoy prefers a matching prefix). Here
	// its chains match its VIPs: those a subnet chain holds are left out of them.
	r.chainVIPs = a.vips
	if len(a.vips) > 0 && !a.block {
		var subnets []*core.CidrRange
		for _, route := range append(slices.Clone(r.tcp.subnetRoutes), r.tlsRoutes...) {
			subnets = append(subnets, route.subnets...)
		}
		if len(subnets) > 0 {
			r.chainVIPs = slices.DeleteFunc(slices.Clone(a.vips), func(v *core.CidrRange) bool { return rangesContain(subnets, v.AddressPrefix) })
		}
	}
	// Named here, where the listener's port is known; as istiod's, the service's own route by the port's
	// number alone.
	nameTCPStats(p.push, p.scope.Namespace, r.own, &model.Port{Port: port.Port})
	nameTCPStats(p.push, p.scope.Namespace, r.tcp.def, port)
	for _, route := range append(slices.Clone(r.tcp.subnetRoutes), r.tlsRoutes...) {
		nameTCPStats(p.push, p.scope.Namespace, route.dests, port)
	}
	r.dests = r.own
	if len(r.tcp.def) > 0 {
		r.dests = r.tcp.def
	}
	r.portOnly = !r.tcp.noDefault
	return r
}

// portChains plans the chains of svc's port on ol, matching a.vips, in the order they claim matches.
func (p *outboundPlanner) portChains(ol *outboundListener, svc *model.Service, vss []*model.VirtualService, a serviceAddresses,
	port *model.Port) {
	r := p.routesOf(ol, svc, vss, a, port)
	switch port.Protocol {
	case model.ProtocolUnset: // sniffed: HTTP through RDS like an HTTP port, the rest TCP
		p.sniffedHTTPChain(ol, svc, a, port.Port, r)
	case model.ProtocolTLS, model.ProtocolHTTPS:
		p.tlsChains(ol, svc, a, port.Port, &r)
	}
	for _, route := range r.tcp.subnetRoutes {
		if !p.claim(route.subnets, port.Port, r.at) {
			continue
		}
		p.addChain(ol, chainPlan{name: r.name + "@" + rangesText(route.subnets), port: port.Port, vips: route.subnets, dests: route.dests})
	}
	if !r.portOnly {
		return
	}
	if p.claim(a.vips, port.Port, "") {
		p.addChain(ol, chainPlan{name: r.name, port: port.Port, vips: r.chainVIPs, dests: r.dests})
	}
}

// ownHTTPChain plans the HTTP chain of a service's HTTP port served by service (routes_by_service.go): on
// the service's listener, taking plaintext HTTP as the port's shared chain does, to the service's own route
// configuration. Its stats are the port's, as the shared chain's: one set per port, not per service.
func (p *outboundPlanner) ownHTTPChain(svc *model.Service, a serviceAddresses, port uint32) {
	if !p.claim(a.vips, port, "http") {
		return
	}
	p.addChain(p.serviceListener(a, port), chainPlan{name: p.wildcard + "_" + ldsPortName(port), port: port, vips: a.vips,
		alpn: sniffedHTTP, transport: "raw_buffer", http: true, route: hostPort(svc.Hostname, port)})
}

// sniffedHTTPChain plans the HTTP chain of a sniffed port.
func (p *outboundPlanner) sniffedHTTPChain(ol *outboundListener, svc *model.Service, a serviceAddresses, port uint32, r portRoutes) {
	if !p.claim(a.vips, port, "http") {
		return
	}
	// istiod's route is the service's own, HOST:PORT, except on a bind to the proxy's unspecified address:
	// PORT.
	route := hostPort(svc.Hostname, port)
	if p.b.ip == p.wildcard {
		route = ""
	}
	p.addChain(ol, chainPlan{name: r.name + "_http", port: port, vips: r.chainVIPs, alpn: sniffedHTTP, http: true, route: route})
}

// tlsChains plans a TLS port's chains. As istiod: the VirtualService's tls routes by SNI, else the service's
// own chain; without a VIP (or with an address block) only the SNI tells the hosts sharing the port apart,
// so only connections naming the host reach it and the rest fall through to the traffic policy.
func (p *outboundPlanner) tlsChains(ol *outboundListener, svc *model.Service, a serviceAddresses, port uint32, r *portRoutes) {
	routes := r.tlsRoutes
	switch {
	case len(routes) > 0:
		r.portOnly = false
	case a.sniOnly:
		routes = []l4Route{{sni: []string{svc.Hostname}, dests: r.own}}
		if svc.Resolution == model.DynamicDNS {
			routes[0].dnsCache = svc.Hostname // the SNI names the host the forward proxy resolves
			routes[0].dnsFamily = p.family
		}
		r.portOnly = false
	}
	for _, route := range routes {
		ranges, claimRanges, where := r.chainVIPs, a.vips, ""
		if route.subnets != nil {
			ranges, claimRanges, where = route.subnets, route.subnets, r.at
		}
		var sni []string
		for _, n := range route.sni {
			if p.claim(claimRanges, port, where+n) {
				sni = append(sni, n)
			}
		}
		if len(sni) == 0 {
			continue
		}
		chainName := r.name + "/" + strings.Join(sni, ",")
		if route.subnets != nil {
			chainName += "@" + rangesText(route.subnets)
		}
		p.addChain(ol, chainPlan{name: chainName, port: port, vips: ranges, sni: sni, dests: route.dests, dnsCache: route.dnsCache,
			dnsFamily: route.dnsFamily})
	}
}
