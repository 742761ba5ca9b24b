package envoy

import (
	"cmp"
	"strings"

	"github.com/sextantmesh/sextant/pilot/derive"
	"github.com/sextantmesh/sextant/pilot/model"
)

// vhostOwner is what one VHDS virtual host of a route configuration is built for: a service, or (svc nil)
// a host of a VirtualService that no service in scope serves on the port, by its place in
// hostVirtualServices' order, which decides who gets a domain both name. That order changes only with
// the routing or with a service a VirtualService host names, both full builds: the place is the host's
// identity between derivations, and the owner stays a pointer and an int, cheap to hash.
type vhostOwner struct {
	svc *model.Service
	at  int
}

// vhostListInputs is what a route configuration's virtual hosts are built in. The pointers are shared by
// the calls of one build: the VirtualService hosts, found once, and whether routes were chosen by the
// proxy's labels (the list is then that label set's own).
type vhostListInputs struct {
	g        *Generators
	proxy    *model.Proxy
	push     *model.PushContext
	scope    *Scope
	name     string
	port     uint32
	mode     ipMode
	hosts    *[]hostRoutes
	labelled *bool
}

func newVhostListInputs(g *Generators, proxy *model.Proxy, push *model.PushContext, scope *Scope, name string,
	port uint32) vhostListInputs {
	return vhostListInputs{g: g, proxy: proxy, push: push, scope: scope, name: name, port: port, mode: ipModeOf(proxy.IPAddresses)}
}

// building returns in with the state one build shares: made only when a list is built, not for every
// proxy that finds its list cached.
func (in vhostListInputs) building() vhostListInputs {
	in.hosts, in.labelled = new([]hostRoutes), new(bool)
	return in
}

type vhostInput = derive.Input[vhostListInputs, vhostOwner]

// virtualHostInputs is everything a route configuration's virtual hosts read (docs/architecture.md has
// the table).
var virtualHostInputs = derive.Declare(
	// Routes of a VirtualService resolve their destination services by hostname in scope: the virtual
	// hosts built from one are readers, rebuilt when services come or go (cached while those they
	// resolved stay the same).
	vhostInput{Name: "scope", Of: func(in vhostListInputs) any { return in.scope }, Members: true, Readers: true},
	vhostInput{Name: "routing", Of: func(in vhostListInputs) any { return routingID(in.push) }},
	vhostInput{Name: "mesh config", Of: func(in vhostListInputs) any { return in.push.Mesh }},
)

// virtualHostPlan builds a route configuration's virtual hosts owner by owner, and derives the next
// snapshot's from the last: a service add costs its own virtual host, not a walk over the mesh per
// namespace. A domain is held by the first owner to name it (VirtualService hosts, then services by
// hostname), as in the route configuration a proxy without VHDS gets.
var virtualHostPlan = &derive.Plan[vhostListInputs, vhostOwner, *model.Resource]{
	Inputs:    virtualHostInputs,
	Members:   vhostOwners,
	Compare:   compareVhostOwners,
	Build:     buildVirtualHost,
	Name:      func(r *model.Resource) string { return r.Name },
	Derivable: vhostOwnerDerivable,
}

// vhostOwners lists the VirtualService hosts outside the registry, then the scope's services.
func vhostOwners(in vhostListInputs) []vhostOwner {
	hosts := in.virtualServiceHosts()
	out := make([]vhostOwner, 0, len(hosts)+len(in.scope.Services))
	for i := range hosts {
		out = append(out, vhostOwner{at: i})
	}
	for _, svc := range in.scope.Services {
		out = append(out, vhostOwner{svc: svc})
	}
	return out
}

func compareVhostOwners(a, b vhostOwner) int {
	switch {
	case a.svc == nil && b.svc == nil:
		return cmp.Compare(a.at, b.at)
	case a.svc == nil:
		return -1
	case b.svc == nil:
		return 1
	}
	return strings.Compare(a.svc.Hostname, b.svc.Hostname)
}

// vhostOwnerDerivable: a VirtualService host, or a service on the port that a VirtualService host names,
// turns that host from outside the registry into a service or back (and may decide whether the
// VirtualService counts on the port), which only a full build settles.
func vhostOwnerDerivable(in vhostListInputs, o vhostOwner) bool {
	if o.svc == nil {
		return false
	}
	return o.svc.PortByNumber(in.port) == nil ||
		!strings.HasPrefix(o.svc.Hostname, "*") && in.scope.virtualServiceFor(in.push, o.svc.Hostname, in.port) == nil
}

// virtualServiceHosts returns the hosts of the proxy's VirtualServices outside the registry, found once
// per build.
func (in vhostListInputs) virtualServiceHosts() []hostRoutes {
	if *in.hosts == nil {
		b := in.builder()
		hosts := b.hostVirtualServices(in.port)
		if hosts == nil {
			hosts = []hostRoutes{} // found: none
		}
		*in.hosts = hosts
		if b.usedLabels {
			*in.labelled = true
		}
	}
	return *in.hosts
}

func (in vhostListInputs) builder() *routeBuilder {
	return &routeBuilder{push: in.push, proxy: in.proxy, scope: in.scope, mode: in.mode}
}

// labelledRoutes taints a list whose routes were chosen by the proxy's labels.
const labelledRoutes = "routes chosen by the proxy's labels"

func (in vhostListInputs) byLabels(b *derive.Building) {
	*in.labelled = true
	b.Taint(labelledRoutes)
}

// buildVirtualHost appends o's virtual host, naming the domains it holds.
func buildVirtualHost(in vhostListInputs, out []*model.Resource, o vhostOwner, b *derive.Building) ([]*model.Resource, error) {
	if o.svc == nil {
		return in.hostVirtualHostOf(out, o, b)
	}
	svc := o.svc
	if sp := svc.PortByNumber(in.port); sp == nil || !isHTTPPort(sp) || in.ownsRoute(svc, sp) {
		return out, nil
	}
	rb, rules := in.builder(), in.push.DestinationRulesID()
	vs := in.scope.virtualServiceFor(in.push, svc.Hostname, in.port)
	if vs == nil {
		// Without a VirtualService the virtual host depends on the service, the port, the proxy's
		// namespace (short names, DestinationRule precedence) and the DestinationRules only: built once,
		// and reused by every later snapshot that keeps the service.
		e, err := in.g.plainVirtualHost(rb, svc, in.port, rules, in.name)
		if err != nil {
			return out, err
		}
		ds := claimDomains(b, e.domains, e.lower)
		switch {
		case len(ds) == len(e.domains):
			return append(out, e.res), nil
		case len(ds) == 0:
			return out, nil // every name already belongs to an earlier virtual host
		}
		// Another owner holds some of its names (a shared VIP): built with the rest.
		r, err := marshal(in.name+"/"+hostPort(svc.Hostname, in.port), rb.virtualHost(svc, in.port, in.name, ds))
		return append(out, r), err
	}
	b.Read(virtualHostInputs.Read("scope"))
	all := in.routedDomains(svc)
	ds := claimDomains(b, all.domains, all.lower)
	if len(ds) == 0 {
		return out, nil
	}
	r, err := in.g.routedVirtualHost(rb, svc, in.port, rules, vs, in.name, ds)
	if err != nil {
		return out, err
	}
	if rb.usedLabels {
		in.byLabels(b)
	}
	return append(out, r), nil
}

// routedDomains returns the domains of svc's virtual host on the port, as seen from the proxy's namespace.
func (in vhostListInputs) routedDomains(svc *model.Service) vhostEntry {
	id := routedDomainsID{vhostID{svc.Key(), in.port, in.proxy.Namespace, in.mode}, in.push.Mesh.DomainSuffix}
	e, _ := in.g.routedDomains.GetOrBuild(id, svc, func() (vhostEntry, error) {
		ds := serviceDomains(svc, in.port, in.proxy.Namespace, in.push.Mesh.DomainSuffix, in.mode)
		return vhostEntry{domains: ds, lower: lowerAll(ds)}, nil
	})
	return e
}

// routedDomainsID keys the domains by everything but the service itself, the cache's inputs: a pointer
// in an interface costs no allocation per lookup.
type routedDomainsID struct {
	vhostID
	suffix string
}

// hostVirtualHostOf appends the virtual host of a VirtualService host outside the registry.
func (in vhostListInputs) hostVirtualHostOf(out []*model.Resource, o vhostOwner, b *derive.Building) ([]*model.Resource, error) {
	hosts := in.virtualServiceHosts()
	if o.at >= len(hosts) {
		b.Taint("VirtualService hosts moved") // owners are listed from these very hosts: not expected
		return out, nil
	}
	h := hosts[o.at]
	b.Read(virtualHostInputs.Read("scope"))
	if h.labelled {
		in.byLabels(b)
	}
	all := virtualServiceHostDomains(h.host, in.port)
	ds := claimDomains(b, all, lowerAll(all))
	if len(ds) == 0 {
		return out, nil
	}
	r, err := in.g.hostVirtualHost(in.proxy.Namespace, h, in.port, in.push.DestinationRulesID(), in.push.Mesh.DefaultRetries(),
		in.name, ds)
	if err != nil {
		return out, err
	}
	return append(out, r), nil
}

// claimDomains claims domains by their lower-case forms and returns those the owner holds.
func claimDomains(b *derive.Building, domains, lower []string) []string {
	got := b.Claim(lower)
	if len(got) == len(lower) {
		return domains
	}
	out := make([]string, 0, len(got))
	for i, j := 0, 0; i < len(lower) && j < len(got); i++ {
		if lower[i] == got[j] {
			out = append(out, domains[i])
			j++
		}
	}
	return out
}

// ownsRoute reports whether svc's port sp has a route configuration of its own (routes by service), so no
// virtual host in the port's.
func (in vhostListInputs) ownsRoute(svc *model.Service, sp *model.Port) bool {
	return !in.g.routesByPort && in.scope.byServiceOn(in.port) && ownsHTTPListener(in.push.Mesh, svc, sp, in.mode)
}
