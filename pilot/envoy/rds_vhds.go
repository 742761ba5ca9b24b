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
	"maps"
	"slices"
	"strconv"
	"strings"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	networking "istio.io/api/networking/v1alpha3"

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

// virtualHosts returns the marshaled VHDS virtual hosts of route configuration name, shared by the proxies
// of a scope (and of a label set, when a VirtualService's sourceLabels made them depend on it: labelled).
func (g *Generators) virtualHosts(proxy *model.Proxy, push *model.PushContext, scope *Scope, name string, port uint32) (
	list model.Resources, labelled bool, err error) {
	id := listID{kind: "vhds", name: name, namespace: scope.Namespace, sidecar: scope.Sidecar, captureNone: scope.captureNone,
		variant: ipModeOf(proxy.IPAddresses).variant()}
	inputs := [2]any{routingID(push), scope}
	var mine model.Resources // built for this proxy's labels along the way
	built, err := g.vhostLists.GetOrBuild(id, inputs, func() (*vhostList, error) {
		prev, _ := g.vhostLists.Latest(id)
		if next, ok, err := g.deriveVirtualHosts(prev, proxy, push, scope, name, port); ok || err != nil {
			return next, err
		}
		next, err := g.buildVirtualHosts(proxy, push, scope, name, port)
		if err != nil || !next.usedLabels {
			return next, err
		}
		mine = next.list
		return &vhostList{usedLabels: true}, nil
	})
	if err != nil {
		return nil, false, err
	}
	if !built.usedLabels {
		return built.list, false, nil
	}
	id.labels, id.labelled = model.LabelsKey(proxy.Labels), true
	if mine != nil {
		return g.lists.Put(id, inputs, mine), true, nil
	}
	list, err = g.lists.GetOrBuild(id, inputs, func() (model.Resources, error) {
		next, err := g.buildVirtualHosts(proxy, push, scope, name, port)
		if err != nil {
			return nil, err
		}
		return next.list, nil
	})
	return list, true, err
}

// vhostList is a route configuration's VHDS virtual hosts for a scope and how they were built, so that the
// next snapshot's list can be derived from it (deriveVirtualHosts).
type vhostList struct {
	list    model.Resources
	scope   *Scope
	routing any
	entries []vhostListEntry // in scope.Services order
	// hosts are the virtual hosts of VirtualService hosts outside the registry (hostVirtualServices), listed
	// after the services'; they claimed their domains first.
	hosts      []vhostListEntry
	claimed    claims // every domain of the list, lower-cased
	usedLabels bool   // the list depends on the proxy's labels (list is then unset)
	// retries: the mesh's default retry policy, which routes without retries take.
	retries *networking.HTTPRetry
	// partial is set when a service lost some of its domains to an earlier one (a shared VIP): removing
	// that one would give them back, which only a full build gets right.
	partial bool
}

// vhostListEntry is one service's virtual host in a vhostList, or one VirtualService host's (svc nil).
type vhostListEntry struct {
	svc     *model.Service
	host    *hostRoutes // for a VirtualService host: how it was built (a pointer: entries are copied per service add)
	res     *model.Resource
	vs      *model.VirtualService // the VirtualService its routes come from, or nil
	domains []string              // the domains it names
	lower   []string              // the same, lower-cased
}

// buildVirtualHosts builds the virtual hosts of route configuration name for proxy.
func (g *Generators) buildVirtualHosts(proxy *model.Proxy, push *model.PushContext, scope *Scope, name string,
	port uint32) (*vhostList, error) {
	b := &routeBuilder{push: push, proxy: proxy, scope: scope, mode: ipModeOf(proxy.IPAddresses)}
	rules := push.DestinationRulesID()
	domains := newDomainSet(16 * len(scope.Services))
	out := &vhostList{scope: scope, routing: routingID(push), claimed: claims{base: domains}, retries: push.Mesh.DefaultRetries()}
	for _, h := range b.hostVirtualServices(port) {
		all := virtualServiceHostDomains(h.host, port)
		ds := domains.add(all)
		if len(ds) < len(all) {
			out.partial = true
		}
		if len(ds) == 0 {
			continue
		}
		r, err := g.hostVirtualHost(b.proxy.Namespace, h, port, rules, push.Mesh.DefaultRetries(), name, ds)
		if err != nil {
			return nil, err
		}
		out.hosts = append(out.hosts, vhostListEntry{host: &h, res: r, domains: ds, lower: lowerAll(ds)})
	}
	for _, svc := range scope.Services {
		sp := svc.PortByNumber(port)
		if sp == nil || !isHTTPPort(sp) {
			continue
		}
		var ds []string
		if vs := scope.virtualServiceFor(push, svc.Hostname, port); vs == nil {
			// Without a VirtualService the virtual host depends on the service, the port, the proxy's
			// namespace (short names, DestinationRule precedence) and the DestinationRules only: built once,
			// and reused by every later snapshot that keeps the service, so adding a service builds one.
			e, err := g.plainVirtualHost(b, svc, port, rules, name)
			if err != nil {
				return nil, err
			}
			if ds = domains.addLowered(e.domains, e.lower); len(ds) == len(e.domains) {
				out.add(vhostListEntry{svc: svc, res: e.res, domains: e.domains, lower: e.lower})
				continue
			}
			// Another service claimed some of its names (a shared VIP): built with the rest.
			out.partial = true
		} else {
			all := serviceDomains(svc, port, proxy.Namespace, push.Mesh.DomainSuffix, b.mode)
			if ds = domains.add(all); len(ds) < len(all) {
				out.partial = true
			}
			if len(ds) == 0 {
				continue
			}
			r, err := g.routedVirtualHost(b, svc, port, rules, vs, name, ds)
			if err != nil {
				return nil, err
			}
			out.add(vhostListEntry{svc: svc, res: r, vs: vs, domains: ds, lower: lowerAll(ds)})
			continue
		}
		if len(ds) == 0 {
			continue // every name already belongs to an earlier virtual host
		}
		r, err := marshal(name+"/"+hostPort(svc.Hostname, port), b.virtualHost(svc, port, name, ds))
		if err != nil {
			return nil, err
		}
		out.add(vhostListEntry{svc: svc, res: r, domains: ds, lower: lowerAll(ds)})
	}
	out.addHosts()
	out.usedLabels = b.usedLabels
	return out, nil
}

// addHosts lists the VirtualService hosts' virtual hosts among the services', by name (insertByName).
func (l *vhostList) addHosts() {
	if len(l.hosts) == 0 {
		return
	}
	hosts := make(model.Resources, len(l.hosts))
	for i, e := range l.hosts {
		hosts[i] = e.res
	}
	l.list = insertByName(l.list, hosts, func(r *model.Resource) string { return r.Name })
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

func (l *vhostList) add(e vhostListEntry) {
	l.entries = append(l.entries, e)
	l.list = append(l.list, e.res)
}

// deriveVirtualHosts builds the list for scope from prev, the list of an earlier scope of the same
// namespace and route configuration, when the routing config is the same and only some services changed:
// the virtual hosts of the services that stayed are kept (those with a VirtualService are checked against
// the services their routes resolved), the removed ones dropped and the new ones built. A service add thus
// costs its own virtual host rather than a walk over every service of the mesh for each namespace. ok is
// false when a full build is needed: no usable prev, or a domain claimed by two services.
func (g *Generators) deriveVirtualHosts(prev *vhostList, proxy *model.Proxy, push *model.PushContext, scope *Scope, name string,
	port uint32) (next *vhostList, ok bool, err error) {
	routing := routingID(push)
	if prev == nil || prev.usedLabels || prev.partial || prev.routing != routing || prev.retries != push.Mesh.DefaultRetries() {
		return nil, false, nil
	}
	removed, added := scopeChanges(prev.scope.Services, scope.Services)
	if len(removed) == 0 && len(added) == 0 {
		next := *prev
		next.scope = scope
		return &next, true, nil
	}
	// A service on the port that a VirtualService host names turns that host from outside the registry into
	// a service or back (and may decide whether the VirtualService counts on the port): a full build's call.
	namedByVS := func(svc *model.Service) bool {
		return svc.PortByNumber(port) != nil && (strings.HasPrefix(svc.Hostname, "*") ||
			scope.virtualServiceFor(push, svc.Hostname, port) != nil)
	}
	if slices.ContainsFunc(added, namedByVS) {
		return nil, false, nil
	}
	for svc := range removed {
		if namedByVS(svc) {
			return nil, false, nil
		}
	}
	next = &vhostList{scope: scope, routing: routing, claimed: prev.claimed.edit(), retries: prev.retries}
	var kept []vhostListEntry
	for _, e := range prev.entries {
		if removed[e.svc] {
			next.claimed.release(e.lower)
		} else {
			kept = append(kept, e)
		}
	}
	b := &routeBuilder{push: push, proxy: proxy, scope: scope, mode: ipModeOf(proxy.IPAddresses)}
	rules := push.DestinationRulesID()
	var fresh []vhostListEntry
	for _, svc := range added {
		sp := svc.PortByNumber(port)
		if sp == nil || !isHTTPPort(sp) {
			continue
		}
		e := vhostListEntry{svc: svc, vs: scope.virtualServiceFor(push, svc.Hostname, port)}
		if e.vs == nil {
			plain, err := g.plainVirtualHost(b, svc, port, rules, name)
			if err != nil {
				return nil, false, err
			}
			e.res, e.domains, e.lower = plain.res, plain.domains, plain.lower
		} else {
			e.domains = serviceDomains(svc, port, proxy.Namespace, push.Mesh.DomainSuffix, b.mode)
			e.lower = lowerAll(e.domains)
		}
		for _, d := range e.lower {
			if next.claimed.has(d) {
				return nil, false, nil // a domain shared with another service: which one gets it is a full build's call
			}
			next.claimed.claim(d)
		}
		fresh = append(fresh, e)
	}
	// Kept and fresh entries merged in hostname order, as a full build lists them.
	next.entries = make([]vhostListEntry, 0, len(kept)+len(fresh))
	for len(kept) > 0 || len(fresh) > 0 {
		var e vhostListEntry
		if len(fresh) == 0 || len(kept) > 0 && kept[0].svc.Hostname < fresh[0].svc.Hostname {
			e, kept = kept[0], kept[1:]
		} else {
			e, fresh = fresh[0], fresh[1:]
		}
		if e.vs != nil {
			// Routes resolve destination services by hostname: rebuilt when one of those changed.
			r, err := g.routedVirtualHost(b, e.svc, port, rules, e.vs, name, e.domains)
			if err != nil {
				return nil, false, err
			}
			e.res = r
		}
		next.add(e)
	}
	// The VirtualService hosts stay; their routes are built again when a destination they resolved changed.
	// (A list with routes chosen by labels is never derived.)
	for _, e := range prev.hosts {
		if !depsHold(push, proxy.Namespace, e.host.deps) {
			var deps []serviceDep
			sub := &routeBuilder{push: push, proxy: proxy, scope: scope, deps: &deps, mode: ipModeOf(proxy.IPAddresses)}
			h := *e.host // prev's entry is left as it was
			h.routes, h.deps = sub.virtualServiceRoutes(h.vs, model.MeshGateway, port), deps
			h.labelled = sub.usedLabels
			b.usedLabels = b.usedLabels || sub.usedLabels
			e.host = &h
			if e.res, err = g.hostVirtualHost(proxy.Namespace, h, port, rules, push.Mesh.DefaultRetries(), name, e.domains); err != nil {
				return nil, false, err
			}
		}
		next.hosts = append(next.hosts, e)
	}
	next.addHosts()
	if b.usedLabels {
		return nil, false, nil
	}
	next.claimed.settle(next.entries, next.hosts)
	return next, true, nil
}

// claims is the set of domains a VHDS list's virtual hosts name: a set shared with the lists it was derived
// from, and the changes since on top, so deriving a list for one new service does not copy 1,500 domains.
// A claims value is not changed once its list is stored.
type claims struct {
	base            domainSet // shared, read only
	added, released map[string]bool
}

func (c *claims) has(d string) bool { return c.added[d] || c.base[d] && !c.released[d] }

// edit returns a copy whose changes do not show in c.
func (c claims) edit() claims {
	return claims{base: c.base, added: maps.Clone(c.added), released: maps.Clone(c.released)}
}

func (c *claims) claim(d string) {
	if c.added == nil {
		c.added = map[string]bool{}
	}
	if c.base[d] && c.released[d] {
		delete(c.released, d)
	} else {
		c.added[d] = true
	}
}

func (c *claims) release(domains []string) {
	for _, d := range domains {
		if c.added[d] {
			delete(c.added, d)
		} else if c.base[d] {
			if c.released == nil {
				c.released = map[string]bool{}
			}
			c.released[d] = true
		}
	}
}

// claimsSettleAt is how many changes claims carry on top of their shared set.
var claimsSettleAt = 256

// settle folds the changes into a new shared set once they are many, rebuilding it from the entries.
func (c *claims) settle(lists ...[]vhostListEntry) {
	if len(c.added)+len(c.released) < claimsSettleAt {
		return
	}
	base := newDomainSet(8 * len(lists[0]))
	for _, entries := range lists {
		for _, e := range entries {
			for _, d := range e.lower {
				base[d] = true
			}
		}
	}
	*c = claims{base: base}
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
