package envoy

import (
	"maps"
	"net/netip"
	"slices"
	"strings"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
)

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
func (g *Generators) deriveOutboundListeners(prev *listenerList, push *model.PushContext, scope *Scope,
	family cluster.Cluster_DnsLookupFamily) (next *listenerList, ok bool, err error) {
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
			ol := &outboundListener{name: name, ip: vip.AddressPrefix, port: p.Port,
				chains: []chainPlan{{name: svc.Addresses[0] + "_" + ldsPortName(p.Port), port: p.Port,
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
