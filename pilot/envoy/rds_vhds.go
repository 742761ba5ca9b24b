package envoy

// VHDS: the virtual hosts of a sidecar's per-port route configurations, one resource each.
//
// An Envoy sidecar on a delta stream, recent enough to accept VHDS over ADS (Options.VHDSMinEnvoy), gets
// route configuration "PORT" with only the "allow_any" catch-all inline and a vhds config source; the
// services' virtual hosts come as VirtualHost resources named "PORT/HOSTNAME:PORT" (Envoy files a virtual
// host under the route configuration named before the last "/", and keys it by VirtualHost.name, so both
// names are the same string). Envoy subscribes to VHDS with no names — everything — and the transport sends
// the virtual hosts of a route configuration only after the route configuration itself. Adding a service
// then costs each sidecar one virtual host per HTTP port instead of its whole table.
//
// The virtual hosts are exactly those of the inline route configuration (sidecarVirtualHosts), claims of
// shared domains included, so the table Envoy assembles is the one a proxy without VHDS receives.

import (
	"slices"
	"strconv"
	"strings"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/sextantmesh/sextant/pilot/derive"
	"github.com/sextantmesh/sextant/pilot/model"
)

type virtualHostGenerator struct{ g *Generators }

// Generate returns the virtual hosts of every route configuration of the proxy's scope; the transport holds
// back those whose route configuration the proxy does not have yet. Proxies not using VHDS get none.
func (v virtualHostGenerator) Generate(proxy *model.Proxy, push *model.PushContext, _ *model.WatchedResource,
	_ *model.PushRequest) (model.Resources, error) {
	g := v.g
	if !g.usesVHDS(proxy) {
		return nil, nil
	}
	scope := g.scopeFor(proxy, push)
	lists := make([]model.Resources, 0, len(scope.routePortsByName))
	id := listID{kind: "vhds", name: "*", namespace: scope.Namespace, sidecar: scope.Sidecar, captureNone: scope.captureNone,
		variant: ipModeOf(proxy.IPAddresses).variant()}
	for _, port := range scope.routePortsByName { // the output is sorted by resource name
		list, labelled, err := g.virtualHosts(proxy, push, scope, strconv.FormatUint(uint64(port), 10), port)
		if err != nil {
			return nil, err
		}
		lists = append(lists, list)
		if labelled {
			id.labels, id.labelled = model.LabelsKey(proxy.Labels), true
		}
	}
	concat := func() (model.Resources, error) { return slices.Concat(lists...), nil }
	// The proxies of a scope (and label set, if a list depends on it) get the same lists: they share their
	// concatenation too.
	var key [4]listRef
	if len(lists) > len(key) {
		return concat()
	}
	for i, l := range lists {
		key[i] = refOf(l)
	}
	return g.lists.GetOrBuild(id, key, concat)
}

// hasVirtualHosts reports whether route configuration name has virtual hosts to send over VHDS. One without
// (by service, a port's table may hold only the catch-all) is served inline: Envoy would wait for the
// virtual hosts of a VHDS-shaped configuration until its initial fetch timeout.
func (g *Generators) hasVirtualHosts(proxy *model.Proxy, push *model.PushContext, scope *Scope, name string) (bool, error) {
	port, ok := routePort(name)
	if !ok {
		return true, nil // not a port's table: served inline whatever this says (sniffedRouteConfig)
	}
	list, _, err := g.virtualHosts(proxy, push, scope, name, port)
	return len(list) > 0, err
}

// virtualHosts returns the marshaled VHDS virtual hosts of route configuration name, shared by the proxies
// of a scope (and of a label set, when a VirtualService's sourceLabels made them depend on it: labelled).
func (g *Generators) virtualHosts(proxy *model.Proxy, push *model.PushContext, scope *Scope, name string, port uint32) (
	list model.Resources, labelled bool, err error) {
	id := listID{kind: "vhds", name: name, namespace: scope.Namespace, sidecar: scope.Sidecar, captureNone: scope.captureNone,
		variant: ipModeOf(proxy.IPAddresses).variant()}
	in := newVhostListInputs(g, proxy, push, scope, name, port)
	key := virtualHostInputs.Key(in)
	var mine model.Resources // built for this proxy's labels along the way
	built, err := g.vhostLists.GetOrBuild(id, key, func() (*vhostList, error) {
		var from *derive.List[vhostOwner, *model.Resource]
		if prev, ok := g.vhostLists.Latest(id); ok && !prev.labelled {
			from = prev.list
		}
		b := in.building()
		next, err := virtualHostPlan.Next(from, b)
		if err != nil {
			return nil, err
		}
		if *b.labelled {
			mine = next.Items
		}
		return &vhostList{list: next, labelled: *b.labelled}, nil
	})
	if err != nil {
		return nil, false, err
	}
	if !built.labelled {
		return built.list.Items, false, nil
	}
	id.labels, id.labelled = model.LabelsKey(proxy.Labels), true
	if mine != nil {
		return g.lists.Put(id, key, mine), true, nil
	}
	list, err = g.lists.GetOrBuild(id, key, func() (model.Resources, error) {
		next, err := virtualHostPlan.Next(nil, in.building())
		if err != nil {
			return nil, err
		}
		return next.Items, nil
	})
	return list, true, err
}

// vhostList is a route configuration's VHDS virtual hosts for a scope, as built or derived. A labelled list
// was built for one label set: its proxies get their own (Generators.lists), and the next is built in full.
type vhostList struct {
	list     *derive.List[vhostOwner, *model.Resource]
	labelled bool
}

// hostVirtualHost returns the marshaled VHDS virtual host of a VirtualService host outside the registry. The
// last one built is reused while the VirtualService, the DestinationRules, the domains and the destination
// services its routes resolved are the same, so a full build of the list (a proxy label set, a service
// added) hands out the same resources; routes chosen by the proxy's labels are marshaled each time.
func (g *Generators) hostVirtualHost(proxyNS string, h hostRoutes, port uint32, rules any, retries *networking.HTTPRetry,
	routeConfig string, domains []string) (*model.Resource, error) {
	name := routeConfig + "/" + virtualServiceHostDomains(h.host, port)[1]
	build := func() (*model.Resource, error) {
		return marshal(name, &route.VirtualHost{Name: name, Domains: domains, Routes: h.routes, IncludeRequestAttemptCount: true})
	}
	if h.labelled {
		return build()
	}
	id := vhostID{service: "VirtualService host " + h.host, port: port, namespace: proxyNS}
	inputs := routedVhostInputs{vs: h.vs, rules: rules, retries: retries, domains: strings.Join(domains, ",")}
	if e, ok := g.routedVhosts.Get(id, inputs); ok && slices.Equal(e.deps, h.deps) {
		return e.res, nil
	}
	r, err := build()
	if err != nil {
		return nil, err
	}
	g.routedVhosts.Replace(id, inputs, routedVhost{res: r, deps: h.deps})
	return r, nil
}

// vhostID identifies the virtual host of a service without a VirtualService, as seen from a namespace.
type vhostID struct {
	service   string // namespace/hostname
	port      uint32
	namespace string
	mode      ipMode // the proxies': a dual-stack Service's VIPs per family
}

// vhostInputs is what such a virtual host is built from besides its identity.
type vhostInputs struct {
	svc   *model.Service
	rules any // DestinationRulesID: consistent-hash policies
	// retries: the mesh's default retry policy, which the default route takes.
	retries *networking.HTTPRetry
}

// vhostEntry is a marshaled virtual host with every domain it names.
type vhostEntry struct {
	res            *model.Resource
	domains, lower []string // lower: the domains lower-cased, for claiming them
}

// plainVirtualHost returns the virtual host of svc, without a VirtualService, on port for b's proxy's namespace.
func (g *Generators) plainVirtualHost(b *routeBuilder, svc *model.Service, port uint32, rules any, routeConfig string) (vhostEntry, error) {
	build := func() (vhostEntry, error) {
		ds := serviceDomains(svc, port, b.proxy.Namespace, b.push.Mesh.DomainSuffix, b.mode)
		r, err := marshal(routeConfig+"/"+hostPort(svc.Hostname, port), b.virtualHost(svc, port, routeConfig, ds))
		return vhostEntry{res: r, domains: ds, lower: lowerAll(ds)}, err
	}
	// A DestinationRule with a workloadSelector for svc makes its hash policy the proxy's labels' own.
	if _, byLabels := b.push.DestinationRuleByLabels(b.proxy.Namespace, b.proxy.Labels, svc); byLabels {
		return build()
	}
	id, inputs := vhostID{svc.Key(), port, b.proxy.Namespace, b.mode}, vhostInputs{svc, rules, b.push.Mesh.DefaultRetries()}
	return g.vhosts.GetOrBuild(id, inputs, build)
}

// virtualHost is the VHDS virtual host ROUTE_CONFIG/HOSTNAME:PORT of svc, naming domains.
func (b *routeBuilder) virtualHost(svc *model.Service, port uint32, routeConfig string, domains []string) *route.VirtualHost {
	return &route.VirtualHost{
		Name:                       routeConfig + "/" + hostPort(svc.Hostname, port),
		Domains:                    domains,
		Routes:                     b.serviceRoutes(svc, port),
		IncludeRequestAttemptCount: true,
	}
}

// routedVirtualHost returns the virtual host of svc whose routes come from VirtualService vs. The last build
// is reused while vs, the service, the DestinationRules, the domains and every destination service the
// routes resolved are the same: adding an unrelated service rebuilds none. Routes that depend on the
// proxy's labels (sourceLabels) are built each time.
func (g *Generators) routedVirtualHost(b *routeBuilder, svc *model.Service, port uint32, rules any, vs *model.VirtualService,
	routeConfig string, domains []string) (*model.Resource, error) {
	id := vhostID{svc.Key(), port, b.proxy.Namespace, b.mode}
	inputs := routedVhostInputs{vs: vs, svc: svc, rules: rules, retries: b.push.Mesh.DefaultRetries(), domains: strings.Join(domains, ",")}
	if e, ok := g.routedVhosts.Get(id, inputs); ok && depsHold(b.push, b.proxy.Namespace, e.deps) {
		return e.res, nil
	}
	var deps []serviceDep
	sub := &routeBuilder{push: b.push, proxy: b.proxy, scope: b.scope, deps: &deps, mode: b.mode}
	r, err := marshal(routeConfig+"/"+hostPort(svc.Hostname, port), sub.virtualHost(svc, port, routeConfig, domains))
	if err != nil {
		return nil, err
	}
	if sub.usedLabels {
		b.usedLabels = true
		return r, nil
	}
	g.routedVhosts.Replace(id, inputs, routedVhost{res: r, deps: deps})
	return r, nil
}

type routedVhostInputs struct {
	vs    *model.VirtualService
	svc   *model.Service
	rules any
	// retries: the mesh's default retry policy, which routes without retries take.
	retries *networking.HTTPRetry
	domains string
}

type routedVhost struct {
	res  *model.Resource
	deps []serviceDep
}

// depsHold reports whether every recorded lookup still finds the same service.
func depsHold(push *model.PushContext, ns string, deps []serviceDep) bool {
	for _, d := range deps {
		if push.ServiceForHostname(ns, d.host) != d.svc {
			return false
		}
	}
	return true
}
