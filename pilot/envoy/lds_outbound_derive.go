package envoy

import (
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sextantmesh/sextant/pilot/derive"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
)

// outboundInputs is what a scope's outbound listeners are built in: the snapshot, the scope, and the facts
// of the proxies sharing the list. Those facts name the list (its listID: proxy type, IP mode and with it
// the family, l4LabelKey of the labels), so they are not declared inputs: they never change under one id.
type outboundInputs struct {
	g        *Generators
	push     *model.PushContext
	scope    *Scope
	labels   map[string]string
	labelKey string
	typ      model.ProxyType
	mode     ipMode
	family   cluster.Cluster_DnsLookupFamily
	// prevShared is the shared owner of the list derived from: kept while what it plans is the same.
	prevShared *sharedListeners
	// owners are the list's owners, found once per context (outboundOwners).
	owners []listenerOwner
	shared *sharedListeners
}

// listenerOwner owns outbound listeners: a service whose listeners hold its chains alone, or (shared set)
// every listener the others plan together.
type listenerOwner struct {
	svc    *model.Service
	shared *sharedListeners
}

// sharedListeners is what the shared owner plans: the ports' HTTP chains, and the services whose listeners
// are not theirs alone (a VIP or endpoint address another service has too, no address of their own, an
// address block), all of them under a Sidecar with egress listeners.
type sharedListeners struct {
	services []*model.Service
	// http spells the HTTP ports of the scope, each with the host of its oldest HTTP service when that one
	// is DYNAMIC_DNS (its connection manager resolves that host): what the ports' HTTP chains are built from.
	http string
}

func (s *sharedListeners) same(o *sharedListeners) bool {
	return o != nil && s.http == o.http && slices.Equal(s.services, o.services)
}

// outboundItem is one outbound listener and what the proxies sharing its list need to know of it.
type outboundItem struct {
	res *model.Resource
	// onEndpoint: planned on an endpoint's address, which a sidecar at that address leaves out.
	onEndpoint bool
	// privileged: bound to a port below 1024, which an unprivileged proxy cannot.
	privileged bool
}

type outboundInput = derive.Input[*outboundInputs, listenerOwner]

// outboundListenerInputs is everything a scope's outbound listeners read: the cache key and what a change
// of each rebuilds follow from it (docs/architecture.md has the table).
var outboundListenerInputs = derive.Declare(
	// Which services own their listeners alone depends on their endpoints' addresses as well.
	outboundInput{Name: "scope", Of: func(c *outboundInputs) any { return [2]any{c.scope, c.push.EndpointAddressesID()} }, Members: true},
	// Listeners per endpoint address (Service.ListensOnEndpoints) follow the addresses.
	outboundInput{Name: "endpoint addresses", Of: func(c *outboundInputs) any { return c.push.EndpointAddressesID() }, Readers: true},
	// TCP and TLS routes come from VirtualServices.
	outboundInput{Name: "routing", Of: func(c *outboundInputs) any { return routingID(c.push) }},
	outboundInput{Name: "mesh config", Of: func(c *outboundInputs) any { return c.push.Mesh }},
)

// outboundListenerPlan builds a scope's outbound listeners owner by owner, and derives the next snapshot's
// from the last: a service add costs its own listeners, not a walk over the mesh per namespace.
var outboundListenerPlan = &derive.Plan[*outboundInputs, listenerOwner, outboundItem]{
	Inputs:  outboundListenerInputs,
	Members: outboundOwners,
	Compare: compareListenerOwners,
	Build:   buildOutboundOwner,
	Name:    func(it outboundItem) string { return it.res.Name },
}

// compareListenerOwners orders the shared owner first (one of another value is an updated one), then
// services by hostname.
func compareListenerOwners(a, b listenerOwner) int {
	switch {
	case a.svc == nil && b.svc == nil:
		return 0
	case a.svc == nil:
		return -1
	case b.svc == nil:
		return 1
	}
	return strings.Compare(a.svc.Hostname, b.svc.Hostname)
}

// buildOutboundOwner appends owner's listeners to out.
func buildOutboundOwner(c *outboundInputs, out []outboundItem, owner listenerOwner, b *derive.Building) ([]outboundItem, error) {
	planned := &outboundPlanned{mode: c.mode}
	var byName map[string]*outboundListener
	if owner.shared != nil {
		byName = c.planShared(owner.shared, planned)
	} else {
		// Its chains claim matches no other service has: planned alone, they are what a plan of all gives.
		byName = planOutbound(c.push, c.scope, nil, []*model.Service{owner.svc}, c.defaultBinding(), c.labels,
			planned, c.family)
	}
	if planned.l4Routed {
		// sidecarTCPRoutes looks at the services routed to, which the declaration does not follow.
		b.Taint("a VirtualService routes TCP or TLS: its chains depend on other services")
	}
	if planned.readsEndpoints {
		b.Read(outboundListenerInputs.Read("endpoint addresses"))
	}
	return c.g.finishOutboundListeners(c.push, c.scope, c.labelKey, c.mode, planned, byName, c.family, out)
}

// planShared plans the shared owner's listeners: every port's HTTP chain, then its services' other ports;
// under a Sidecar with egress listeners each listener's services in turn.
func (c *outboundInputs) planShared(s *sharedListeners, planned *outboundPlanned) map[string]*outboundListener {
	scope := c.scope
	if scope.listeners == nil {
		return planOutbound(c.push, scope, scope.Services, s.services, c.defaultBinding(), c.labels, planned, c.family)
	}
	// As istiod: each egress listener's services in turn; a listener address:port one has taken is not
	// added to by a later one (the catch-all's services do not join a port a listener with a port set up
	// for its own hosts).
	byName := map[string]*outboundListener{}
	for _, el := range scope.listeners {
		services := el.services
		b := egressBinding{ip: el.bind, real: el.bindToPort, port: el.port != 0, imports: el.hosts, byService: !c.g.routesByPort}
		if b.real && b.ip == "" {
			b.ip, b.loopback = loopbackIP(c.family), true
		}
		if b.ip != "" {
			// Every service shares the one address: istiod's first service (the oldest) keeps a match.
			services = slices.SortedStableFunc(slices.Values(services), model.CompareServices)
		}
		for name, ol := range planOutbound(c.push, scope, services, services, b, c.labels, planned, c.family) {
			if _, taken := byName[name]; !taken {
				byName[name] = ol
			}
		}
	}
	return byName
}

// defaultBinding is where outbound listeners go without egress listeners: on each service's addresses.
func (c *outboundInputs) defaultBinding() egressBinding {
	return egressBinding{imports: c.scope.egress, byService: !c.g.routesByPort}
}

// outboundOwners returns the owners of a scope's outbound listeners: the shared owner, then each service
// whose listeners hold its chains alone, by hostname.
func outboundOwners(c *outboundInputs) []listenerOwner {
	if c.owners != nil {
		return c.owners
	}
	shared := &sharedListeners{http: httpPortsText(c.scope.Services)}
	owners := make([]listenerOwner, 1, len(c.scope.Services)+1) // the shared owner first
	if c.scope.listeners != nil || c.g.planTogether {
		shared.services = c.scope.Services
		c.setOwners(shared, owners)
		return c.owners
	}
	use := c.g.listenerNameUse(c.push, c.mode)
	for _, svc := range c.scope.Services {
		f := c.g.listenerFactsOf(c.push, svc, c.mode)
		own := f.alone
		for _, n := range f.names {
			own = own && use[n] == 1
		}
		switch {
		case own:
			owners = append(owners, listenerOwner{svc: svc})
		case f.otherPorts:
			shared.services = append(shared.services, svc)
		}
	}
	c.setOwners(shared, owners)
	return c.owners
}

// listenerNameUse counts, per listener name, the services of the mesh whose listeners take it: those of one
// scope are a subset, so a name counted once is one service's alone in every scope. Counted once per
// snapshot rather than per scope.
func (g *Generators) listenerNameUse(push *model.PushContext, mode ipMode) map[string]int {
	use, _ := g.listenerNames.GetOrBuild(mode, [2]any{push.ServicesID(), push.EndpointAddressesID()}, func() (map[string]int, error) {
		use := map[string]int{}
		for _, svc := range push.AllServices() {
			for _, n := range g.listenerFactsOf(push, svc, mode).names {
				use[n]++
			}
		}
		return use, nil
	})
	return use
}

// setOwners sets the owners, the first of which is the shared one, which it keeps from the previous list
// when that plans the same.
func (c *outboundInputs) setOwners(shared *sharedListeners, owners []listenerOwner) {
	if shared.same(c.prevShared) {
		shared = c.prevShared
	}
	owners[0] = listenerOwner{shared: shared}
	c.shared, c.owners = shared, owners
}

// serviceListenerFacts is what outboundOwners needs to know of one service.
type serviceListenerFacts struct {
	// names are the listeners its non-HTTP ports take on addresses of their own (each VIP, or each endpoint
	// address), once each: a listener another service takes too is not either's alone.
	names []string
	// alone: its non-HTTP ports go on listeners of its own addresses (listensAlone).
	alone bool
	// otherPorts: it has a port other than HTTP and UDP, which the shared owner plans when it is not alone.
	otherPorts bool
}

// listenerFactsKey is what a service's facts are found from, under one IP mode: the service, its endpoints
// when its listeners stand on their addresses, and the mesh's capture ports (an HTTP port on one has no
// listener of its own).
type listenerFactsKey struct {
	svc     *model.Service
	eps     *model.ServiceEndpoints
	capture [2]uint32
}

// listenerFactsOf returns svc's facts, found once per service, endpoints and IP mode rather than once per
// scope and snapshot.
func (g *Generators) listenerFactsOf(push *model.PushContext, svc *model.Service, mode ipMode) serviceListenerFacts {
	key := listenerFactsKey{svc: svc}
	key.capture[0], key.capture[1] = capturePorts(push.Mesh)
	if svc.ListensOnEndpoints() {
		key.eps = push.Endpoints(svc.Key())
	}
	f, _ := g.listenerFacts[mode].Get(svc.Key(), key, func() (serviceListenerFacts, error) {
		byService := !g.routesByPort
		return serviceListenerFacts{names: listenerNamesOf(push, svc, mode, byService), alone: listensAlone(push, svc, mode, byService),
			otherPorts: hasOtherPorts(push.Mesh, svc, mode, byService)}, nil
	})
	return f
}

// hasOtherPorts reports whether svc has a port on listeners of its own addresses (listenedPort), which the
// shared owner plans when it is not alone.
func hasOtherPorts(m *mesh.Config, svc *model.Service, mode ipMode, byService bool) bool {
	return slices.ContainsFunc(svc.Ports, func(p *model.Port) bool { return listenedPort(m, svc, p, mode, byService) })
}

// listensAlone reports whether svc's non-HTTP ports go on listeners of its own addresses, whatever else is in
// scope, provided no other service takes those names (outboundOwners counts them): on each port a listener
// per VIP (not a block) or per endpoint address. Its TCP and TLS routes then match within its own
// listeners; that they read other services taints the list (buildOutboundOwner).
func listensAlone(push *model.PushContext, svc *model.Service, mode ipMode, byService bool) bool {
	vips := listenVIPs(svc, mode)
	for _, p := range svc.Ports {
		if !listenedPort(push.Mesh, svc, p, mode, byService) {
			continue
		}
		if svc.ListensOnEndpoints() && svc.ListensOnEndpointPort(p) {
			if _, ok := endpointsListenedOn(push, svc, p); !ok {
				return false // the port's wildcard listener
			}
			continue
		}
		if len(vips) == 0 {
			return false
		}
		for _, v := range vips {
			if r := vipCIDR(v); r == nil || r.PrefixLen.GetValue() < ldsHostBits(r.AddressPrefix) || isUnspecifiedIP(r.AddressPrefix) {
				return false
			}
		}
	}
	return true
}

// listenerNamesOf returns serviceListenerFacts.names.
func listenerNamesOf(push *model.PushContext, svc *model.Service, mode ipMode, byService bool) []string {
	var out []string
	vips := listenVIPs(svc, mode)
	for _, p := range svc.Ports {
		if !listenedPort(push.Mesh, svc, p, mode, byService) {
			continue
		}
		port := ldsPortName(p.Port)
		if svc.ListensOnEndpoints() && svc.ListensOnEndpointPort(p) {
			eps, _ := endpointsListenedOn(push, svc, p)
			for _, ip := range endpointIPs(eps) {
				out = append(out, ip.AddressPrefix+"_"+port)
			}
			continue
		}
		for _, v := range vips {
			if r := vipCIDR(v); r != nil {
				out = append(out, r.AddressPrefix+"_"+port)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// httpPortsText spells the HTTP ports of services, each with the host of its oldest HTTP service when that
// one is DYNAMIC_DNS (outboundPlanner.httpPorts).
func httpPortsText(services []*model.Service) string {
	oldest := map[uint32]*model.Service{}
	for _, svc := range services {
		for _, p := range svc.Ports {
			if o := oldest[p.Port]; p.Protocol.IsHTTP() && (o == nil || model.CompareServices(svc, o) < 0) {
				oldest[p.Port] = svc
			}
		}
	}
	var b []byte
	for _, port := range slices.Sorted(maps.Keys(oldest)) {
		b = strconv.AppendUint(b, uint64(port), 10)
		if svc := oldest[port]; svc.Resolution == model.DynamicDNS {
			b = append(b, '=')
			b = append(b, svc.Hostname...)
		}
		b = append(b, ',')
	}
	return string(b)
}

// listenerList is a scope's outbound listeners, derived owner by owner, with what the proxies sharing it need.
type listenerList struct {
	derived *derive.List[listenerOwner, outboundItem]
	shared  *sharedListeners
	list    model.Resources
	// endpointIPs names, per endpoint address, the listeners planned on it: a sidecar at that address leaves
	// them out (withoutOwnListeners).
	endpointIPs map[string][]string
	// privileged names the listeners that bind a port below 1024, which an unprivileged proxy cannot.
	privileged []string
}

// newListenerList returns the proxies' view of l, reusing prev's when l has prev's listeners.
func newListenerList(l *derive.List[listenerOwner, outboundItem], shared *sharedListeners, prev *listenerList) *listenerList {
	out := &listenerList{derived: l, shared: shared}
	if prev != nil && len(l.Items) == len(prev.derived.Items) && (len(l.Items) == 0 || &l.Items[0] == &prev.derived.Items[0]) {
		out.list, out.endpointIPs, out.privileged = prev.list, prev.endpointIPs, prev.privileged
		return out
	}
	out.list = make(model.Resources, len(l.Items))
	for i, it := range l.Items {
		out.list[i] = it.res
		if it.onEndpoint {
			if out.endpointIPs == nil {
				out.endpointIPs = map[string][]string{}
			}
			ip := it.res.Name[:strings.LastIndexByte(it.res.Name, '_')]
			out.endpointIPs[ip] = append(out.endpointIPs[ip], it.res.Name)
		}
		if it.privileged {
			out.privileged = append(out.privileged, it.res.Name)
		}
	}
	return out
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
