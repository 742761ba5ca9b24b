package envoy

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
)

// Scope is what one proxy can see: the services it may call (exportTo and its Sidecar's egress hosts),
// one per hostname, sorted by hostname.
type Scope struct {
	Namespace string
	Sidecar   *config.Config // nil when none applies
	Services  []*model.Service
	byHost    map[string]*model.Service
	// RegistryOnly is set when traffic to destinations outside Services must be refused (the outbound
	// traffic policy is REGISTRY_ONLY, or names an egress proxy Sextant cannot send to).
	RegistryOnly bool
	// egress are its Sidecar's egress hosts, of every egress listener (nil without a Sidecar). Without
	// listeners (one catch-all) they also choose the VirtualServices the proxy routes by; with listeners,
	// each listener's own hosts do (importsFor).
	egress []egressHost
	// endpointListened are the Services that sidecars reach through a listener per endpoint address
	// (Service.ListensOnEndpoints), by hostname: their endpoints' addresses decide the outbound listeners.
	endpointListened []*model.Service
	// routePorts are the HTTP port numbers of Services, sorted; routePortsByName the same sorted as
	// route configuration names ("10000" before "9080"). Every sidecar push reads them.
	routePorts, routePortsByName []uint32
	// trims are the trimmed copies of services this scope made, handed on to the next scope.
	trims map[trimKey]*model.Service
	// aliased maps a service that ExternalName Services name to its copy carrying their hostnames
	// (Service.Aliases), handed on to the next scope as trims are.
	aliased map[*model.Service]*model.Service
	// listeners are the Sidecar's egress listeners in order, when one has a port, a bind or a capture
	// mode, or the proxies capture nothing; nil otherwise: then one catch-all over Services builds every
	// outbound listener.
	listeners []*egressListener
	// captureNone: the scope of proxies without iptables capture (INTERCEPTION_MODE NONE), as istiod's
	// every egress listener binds a port of its own, on the loopback address unless it names a bind.
	captureNone bool
	// clusterServices are the services the proxy gets clusters and endpoints of, sorted by hostname, one per
	// hostname: Services, and under a Sidecar the destinations of the VirtualServices it imports that its
	// egress hosts leave out (withRoutedDestinations). byClusterHost indexes them.
	clusterServices []*model.Service
	byClusterHost   map[string]*model.Service
	// base is the scope this one adds routed destinations to (nil: none added).
	base *Scope
}

// egressListener is one egress listener of a Sidecar, as istiod's IstioEgressListenerWrapper: the services
// its hosts select (for a listener with a port, only those with that port, trimmed to it).
type egressListener struct {
	// hosts are its egress hosts: they choose its services, and the VirtualServices its listeners and
	// routes take (istiod's egress listener VirtualServices).
	hosts    []egressHost
	port     uint32         // 0: the catch-all, on every port of its services
	protocol model.Protocol // the egress port's: what its listener speaks, whatever the services say
	// bind is the address its listeners take ("": each service's VIP, 0.0.0.0 for HTTP); bindToPort makes
	// them real listeners (captureMode NONE), on 127.0.0.1 without a bind.
	bind       string
	bindToPort bool
	// services are as the listener sees them: ports carry the egress port's protocol. originals are the
	// same services (same order) with their own protocols, for the routes' virtual hosts.
	services, originals []*model.Service
}

// egressForRoute returns the egress listener a route configuration for port serves, as istiod's
// GetEgressListenerForRDS: the listener on that port, else the catch-all; nil for none (or no egress).
func (s *Scope) egressForRoute(port uint32) *egressListener {
	for _, el := range s.listeners {
		if el.port == 0 || el.port == port {
			return el
		}
	}
	return nil
}

// Service returns the service the proxy sees for host, or nil.
func (s *Scope) Service(host string) *model.Service { return s.byHost[host] }

// clusterService returns the service whose clusters the proxy gets for host, or nil.
func (s *Scope) clusterService(host string) *model.Service { return s.byClusterHost[host] }

// scopeID is whom a scope is for. It is built from the services and Sidecars (and not the snapshot version),
// so endpoint-only pushes reuse scopes and everything cached against them.
type scopeID struct {
	namespace   string
	sidecar     *config.Config
	captureNone bool
}

// scopeFor returns the proxy's scope. Proxies in one namespace under the same Sidecar share it.
// Sidecars that capture nothing (INTERCEPTION_MODE NONE) have scopes of their own, whose listeners bind.
func (g *Generators) scopeFor(proxy *model.Proxy, push *model.PushContext) *Scope {
	sidecar := push.Sidecar(proxy.Namespace, proxy.Labels)
	none := capturesNothing(proxy)
	id, inputs := scopeID{proxy.Namespace, sidecar, none}, [3]any{push.ServicesID(), push.SidecarsID(), push.Mesh}
	s, _ := g.scopes.GetOrBuild(id, inputs, func() (*Scope, error) {
		prev, _ := g.scopes.Latest(id)
		if none {
			return buildEgressScope(push, proxy.Namespace, sidecar, prev, true), nil
		}
		return buildScope(push, proxy.Namespace, sidecar, prev), nil
	})
	if sidecar == nil {
		return s
	}
	// Under a Sidecar the VirtualServices may add destinations: a second step over the VirtualServices alone,
	// so that a VirtualService change walks no service, and keeps the scope when what it adds is the same.
	// Cached under the VirtualService index (no allocation per lookup) and checked to be built on s.
	vss := push.VirtualServicesID()
	build := func() (*Scope, error) {
		prev, _ := g.routedScopes.Latest(id)
		return s.withRoutedDestinations(push, prev), nil
	}
	if r, _ := g.routedScopes.GetOrBuild(id, vss, build); r == s || r.base == s {
		return r
	}
	// Built on an earlier scope of these proxies (their services or Sidecar changed since).
	r, _ := build()
	g.routedScopes.Replace(id, vss, r)
	return r
}

// capturesNothing reports whether proxy is a sidecar without iptables capture (INTERCEPTION_MODE NONE):
// istiod gives it no capture listeners, binds its outbound listeners and builds no inbound ones but those
// of its Sidecar's ingress listeners. Gateways bind their ports whatever the mode.
func capturesNothing(proxy *model.Proxy) bool {
	return proxy.Type == model.Sidecar && proxy.CaptureNone()
}

// buildScope builds the scope of proxies in ns under sidecar. prev, an earlier scope of the same proxies,
// lends the trimmed copies of services that did not change, so that what is cached against them stays.
func buildScope(push *model.PushContext, ns string, sidecar *config.Config, prev *Scope) *Scope {
	if sidecar != nil && needsEgressListeners(sidecar.Spec.(*networking.Sidecar)) {
		return buildEgressScope(push, ns, sidecar, prev, false)
	}
	var egress []egressHost
	if sidecar != nil {
		egressListeners := sidecar.Spec.(*networking.Sidecar).Egress
		if len(egressListeners) == 0 {
			// istiod's default: a Sidecar without egress (one that only sets an outbound traffic policy, say)
			// sees every service, as if there were none.
			egressListeners = []*networking.IstioEgressListener{{Hosts: []string{"*/*"}}}
		}
		for _, eg := range egressListeners {
			for _, h := range eg.Hosts {
				hostNS, host, _ := strings.Cut(h, "/")
				if hostNS == "." {
					hostNS = ns
				}
				egress = append(egress, egressHost{namespace: hostNS, host: host})
			}
		}
	}
	s := &Scope{Namespace: ns, Sidecar: sidecar, byHost: map[string]*model.Service{}, RegistryOnly: registryOnly(push.Mesh, sidecar),
		egress: egress}
	for _, svc := range push.AllServices() {
		if _, seen := s.byHost[svc.Hostname]; seen {
			continue
		}
		chosen := s.visible(push, push.ServiceForHostname(ns, svc.Hostname), prev)
		if chosen == nil {
			continue
		}
		if sidecar != nil && !egressAllows(egress, chosen) {
			continue
		}
		s.byHost[chosen.Hostname] = chosen
		s.Services = append(s.Services, chosen)
		if chosen.ListensOnEndpoints() {
			s.endpointListened = append(s.endpointListened, chosen)
		}
	}
	s.routePorts = httpPorts(s.Services)
	s.routePortsByName = slices.Clone(s.routePorts)
	slices.SortFunc(s.routePortsByName, func(a, b uint32) int {
		return strings.Compare(strconv.FormatUint(uint64(a), 10), strconv.FormatUint(uint64(b), 10))
	})
	s.clusterServices, s.byClusterHost = s.Services, s.byHost
	return s
}

// needsEgressListeners reports whether sc's egress listeners do more than one catch-all: one has a port,
// a bind or captureMode NONE (IPTABLES is the default capture).
func needsEgressListeners(sc *networking.Sidecar) bool {
	for _, eg := range sc.Egress {
		if eg.Port != nil || eg.Bind != "" || eg.CaptureMode == networking.CaptureMode_NONE {
			return true
		}
	}
	return false
}

// buildEgressScope is buildScope for a Sidecar whose egress listeners differ, as istiod's sidecar scope:
// each listener selects services from its hosts (one with a port only those with that port, trimmed to
// it), and the scope's services are their union, ports merged, so that clusters exist for the selected
// ports only. captureNone is for proxies without capture: every listener binds (istiod's proxyNoneMode),
// and without a Sidecar (or egress listeners) one catch-all over every host does.
func buildEgressScope(push *model.PushContext, ns string, sidecar *config.Config, prev *Scope, captureNone bool) *Scope {
	s := &Scope{Namespace: ns, Sidecar: sidecar, byHost: map[string]*model.Service{}, RegistryOnly: registryOnly(push.Mesh, sidecar),
		captureNone: captureNone}
	trim := newTrimmer(s, prev)
	// The service each hostname resolves to for ns, by hostname.
	var all []*model.Service
	seen := map[string]bool{}
	for _, svc := range push.AllServices() {
		if seen[svc.Hostname] {
			continue
		}
		seen[svc.Hostname] = true
		if c := s.visible(push, push.ServiceForHostname(ns, svc.Hostname), prev); c != nil {
			all = append(all, c)
		}
	}
	wholly := map[string]bool{}       // a catch-all selects the service: every port
	selected := map[string][]uint32{} // the ports listeners with a port selected
	routePorts := map[uint32]bool{}
	var egress []*networking.IstioEgressListener
	if sidecar != nil {
		egress = sidecar.Spec.(*networking.Sidecar).Egress
	}
	if len(egress) == 0 {
		// istiod's default egress listener, as in buildScope.
		egress = []*networking.IstioEgressListener{{Hosts: []string{"*/*"}}}
	}
	for _, eg := range egress {
		hosts := egressHosts(eg.Hosts, ns)
		if sidecar != nil {
			s.egress = append(s.egress, hosts...)
		}
		el := &egressListener{hosts: hosts, bind: eg.Bind, bindToPort: captureNone || eg.CaptureMode == networking.CaptureMode_NONE}
		if eg.Port != nil {
			el.port, el.protocol = eg.Port.Number, model.ParseProtocol(eg.Port.Protocol)
			if el.protocol.IsHTTP() {
				routePorts[el.port] = true
			}
		}
		for _, svc := range all {
			if !egressAllows(hosts, svc) {
				continue
			}
			if el.port == 0 {
				wholly[svc.Hostname] = true
				el.services = append(el.services, svc)
				el.originals = append(el.originals, svc)
				continue
			}
			if svc.PortByNumber(el.port) == nil {
				continue
			}
			selected[svc.Hostname] = append(selected[svc.Hostname], el.port)
			el.originals = append(el.originals, trim(svc, []uint32{el.port}, ""))
			el.services = append(el.services, trim(svc, []uint32{el.port}, el.protocol))
		}
		if el.port == 0 {
			for _, p := range httpPorts(el.services) {
				routePorts[p] = true
			}
		}
		s.listeners = append(s.listeners, el)
	}
	for _, svc := range all {
		switch {
		case wholly[svc.Hostname]:
		case len(selected[svc.Hostname]) > 0:
			ports := slices.Sorted(slices.Values(selected[svc.Hostname]))
			svc = trim(svc, slices.Compact(ports), "")
		default:
			continue
		}
		s.byHost[svc.Hostname] = svc
		s.Services = append(s.Services, svc)
	}
	s.routePorts = slices.Sorted(maps.Keys(routePorts))
	s.routePortsByName = slices.Clone(s.routePorts)
	slices.SortFunc(s.routePortsByName, func(a, b uint32) int {
		return strings.Compare(strconv.FormatUint(uint64(a), 10), strconv.FormatUint(uint64(b), 10))
	})
	s.clusterServices, s.byClusterHost = s.Services, s.byHost
	return s
}

// visible returns what the scope holds for svc: nothing for an ExternalName Service (istiod builds no
// cluster, listener or virtual host of its own for an alias), a copy carrying its aliases' hostnames for
// a service they name (its virtual hosts answer those names), svc itself otherwise. prev lends its copies.
func (s *Scope) visible(push *model.PushContext, svc *model.Service, prev *Scope) *model.Service {
	if svc == nil || svc.Resolution == model.Alias {
		return nil
	}
	names := push.AliasesOf(svc.Hostname)
	if s.egress != nil && len(names) > 0 {
		names = importedAliases(s.egress, svc, names)
	}
	if len(names) == 0 {
		return svc
	}
	if s.aliased == nil {
		s.aliased = map[*model.Service]*model.Service{}
	}
	c := s.aliased[svc]
	if c == nil && prev != nil {
		c = prev.aliased[svc]
	}
	if c == nil || !slices.Equal(c.Aliases, names) {
		cp := *svc
		cp.Aliases = names
		c = &cp
	}
	s.aliased[svc] = c
	return c
}

// importedAliases keeps of names, the aliases of svc, those a Sidecar's egress hosts import, as istiod's
// matchingAliasService: matched against the hosts of the namespace svc was imported through (its own when
// one of those hosts matches it, else "*").
func importedAliases(egress []egressHost, svc *model.Service, names []string) []string {
	var own, anyNS []string
	for _, e := range egress {
		switch e.namespace {
		case svc.Namespace:
			own = append(own, e.host)
		case "*":
			anyNS = append(anyNS, e.host)
		}
	}
	hosts := anyNS
	if slices.ContainsFunc(own, func(h string) bool { return model.HostMatches(h, svc.Hostname) }) {
		hosts = own
	}
	var out []string
	for _, n := range names {
		if slices.ContainsFunc(hosts, func(h string) bool { return model.HostMatches(h, n) }) {
			out = append(out, n)
		}
	}
	return out
}

// trimmer makes copies of services with some of their ports (and, for an egress listener's view of one,
// the egress port's protocol), each made once per scope, and taken from the previous scope when it made
// the same: what is cached against a copy stays valid.
type trimmer func(svc *model.Service, ports []uint32, proto model.Protocol) *model.Service

func newTrimmer(s *Scope, prev *Scope) trimmer {
	if s.trims == nil {
		s.trims = map[trimKey]*model.Service{}
	}
	var prevTrims map[trimKey]*model.Service
	if prev != nil {
		prevTrims = prev.trims
	}
	return func(svc *model.Service, ports []uint32, proto model.Protocol) *model.Service {
		k := trimKey{svc, fmt.Sprint(ports), proto}
		if t, ok := s.trims[k]; ok {
			return t
		}
		t, ok := prevTrims[k]
		if !ok {
			c := *svc
			c.Ports = nil
			for _, p := range svc.Ports {
				if slices.Contains(ports, p.Port) {
					if proto != "" {
						cp := *p
						cp.Protocol = proto
						p = &cp
					}
					c.Ports = append(c.Ports, p)
				}
			}
			t = &c
		}
		s.trims[k] = t
		return t
	}
}

// withRoutedDestinations returns s with the cluster services of a Sidecar's proxies: its Services, and the
// services that the VirtualServices each egress listener imports route or mirror to, on the ports they name
// (a listener with a port: on that port alone), as istiod's collectImportedServices. A destination the
// egress hosts left out thus gets its clusters and endpoints (no listener or route of its own), and one
// they selected on some ports gets the ports routed to as well; without that, the route led to a cluster
// the proxy did not have. s itself when they add nothing; prev, the previous result for the same proxies,
// when it is s with the same additions, so what is cached against it stays.
func (s *Scope) withRoutedDestinations(push *model.PushContext, prev *Scope) *Scope {
	listeners := s.listeners
	if listeners == nil {
		listeners = []*egressListener{{hosts: s.egress}}
	}
	c := *s
	c.trims = nil
	if !c.addRoutedDestinations(push, listeners, newTrimmer(&c, prev)) {
		return s
	}
	if prev != nil && prev.base == s && slices.Equal(prev.clusterServices, c.clusterServices) {
		return prev
	}
	c.base = s
	return &c
}

// addRoutedDestinations adds to s's cluster services the destinations of the VirtualServices listeners
// import, making port-limited copies with trim, and reports whether it added any.
func (s *Scope) addRoutedDestinations(push *model.PushContext, listeners []*egressListener, trim trimmer) bool {
	type routed struct {
		svc   *model.Service
		all   bool
		ports []uint32
	}
	var want map[string]*routed
	vss := push.VirtualServices(s.Namespace, model.MeshGateway)
	dests := make([]map[string]map[uint32]bool, len(vss)) // each VirtualService's, read once for all listeners
	for _, el := range listeners {
		for i, vs := range vss {
			if !s.importsVirtualService(vs, el.hosts) {
				continue
			}
			if dests[i] == nil {
				dests[i] = virtualServiceDestinations(vs, s.Namespace, push.Mesh.DomainSuffix)
			}
			for host, ports := range dests[i] {
				svc := push.ServiceForHostname(s.Namespace, host)
				if svc == nil || svc.Resolution == model.Alias {
					continue
				}
				if c := s.aliased[svc]; c != nil {
					svc = c // the copy the scope holds, with its aliases
				}
				r := want[svc.Hostname]
				if r == nil {
					r = &routed{svc: svc}
				}
				switch {
				case el.port != 0:
					if svc.PortByNumber(el.port) == nil {
						continue
					}
					r.ports = append(r.ports, el.port)
				case ports[0]:
					r.all = true
				default:
					n := len(r.ports)
					for p := range ports {
						if svc.PortByNumber(p) != nil {
							r.ports = append(r.ports, p)
						}
					}
					if len(r.ports) == n {
						continue // none of the ports routed to: istiod adds nothing
					}
				}
				if want == nil {
					want = map[string]*routed{}
				}
				want[svc.Hostname] = r
			}
		}
	}
	changed := false
	byHost := s.byHost
	for host, r := range want {
		cur := s.byHost[host]
		if cur == r.svc {
			continue // every port already
		}
		ports := slices.Clone(r.ports)
		if cur != nil {
			for _, p := range cur.Ports {
				ports = append(ports, p.Port)
			}
		}
		slices.Sort(ports)
		ports = slices.Compact(ports)
		next := r.svc
		if !r.all && len(ports) < len(r.svc.Ports) {
			next = trim(r.svc, ports, "")
		}
		if next == cur {
			continue
		}
		if !changed {
			byHost, changed = maps.Clone(s.byHost), true
		}
		byHost[host] = next
	}
	if !changed {
		return false
	}
	s.byClusterHost = byHost
	s.clusterServices = slices.SortedFunc(maps.Values(byHost), func(a, b *model.Service) int {
		return strings.Compare(a.Hostname, b.Hostname)
	})
	return true
}

// virtualServiceDestinations returns the hosts vs routes or mirrors to, resolved in its namespace, each
// with the port numbers the destinations name (0 for one that names none), as istiod's
// virtualServiceDestinationsFilteredBySourceNamespace: an http route whose matches all name another
// sourceNamespace than ns is left out.
func virtualServiceDestinations(vs *model.VirtualService, ns, suffix string) map[string]map[uint32]bool {
	out := map[string]map[uint32]bool{}
	add := func(d interface {
		GetHost() string
		GetPort() *networking.PortSelector
	}) {
		if d == nil || d.GetHost() == "" {
			return
		}
		host := model.ResolveHost(d.GetHost(), vs.Namespace, suffix)
		if out[host] == nil {
			out[host] = map[uint32]bool{}
		}
		out[host][d.GetPort().GetNumber()] = true
	}
	for _, h := range vs.Spec.GetHttp() {
		fromNS := true
		for _, m := range h.GetMatch() {
			if m.GetSourceNamespace() != "" {
				if m.GetSourceNamespace() == ns {
					fromNS = true
					break
				}
				fromNS = false
			}
		}
		if !fromNS {
			continue
		}
		for _, r := range h.GetRoute() {
			add(r.GetDestination())
		}
		add(h.GetMirror())
		for _, m := range h.GetMirrors() {
			add(m.GetDestination())
		}
	}
	for _, t := range vs.Spec.GetTcp() {
		for _, r := range t.GetRoute() {
			add(r.GetDestination())
		}
	}
	for _, t := range vs.Spec.GetTls() {
		for _, r := range t.GetRoute() {
			add(r.GetDestination())
		}
	}
	return out
}

// trimKey names a copy of a service with some of its ports (and, for an egress listener's view of it,
// the protocol of the egress port).
type trimKey struct {
	svc      *model.Service
	ports    string
	protocol model.Protocol
}

// egressHosts reads an egress listener's hosts, "." standing for ns.
func egressHosts(hosts []string, ns string) []egressHost {
	out := make([]egressHost, 0, len(hosts))
	for _, h := range hosts {
		hostNS, host, _ := strings.Cut(h, "/")
		if hostNS == "." {
			hostNS = ns
		}
		out = append(out, egressHost{namespace: hostNS, host: host})
	}
	return out
}

// registryOnly is the outbound traffic policy of a proxy under sidecar (nil: none): its Sidecar's, else the
// mesh's. An egress proxy is not implemented; refusing what it would have carried keeps the lock-down it is
// usually there for, where passing it through directly would bypass it.
func registryOnly(m *mesh.Config, sidecar *config.Config) bool {
	if sidecar != nil {
		if otp := sidecar.Spec.(*networking.Sidecar).GetOutboundTrafficPolicy(); otp != nil {
			return otp.GetMode() == networking.OutboundTrafficPolicy_REGISTRY_ONLY || otp.GetEgressProxy() != nil
		}
	}
	return m.OutboundTrafficPolicy.Mode == mesh.RegistryOnly
}

type egressHost struct{ namespace, host string }

// importsFor returns the egress hosts that choose the VirtualServices of port's route configuration: those
// of the egress listener that has it (egressForRoute; none when no listener has), or without listeners the
// Sidecar's. Only meaningful with a Sidecar.
func (s *Scope) importsFor(port uint32) []egressHost {
	if s.listeners == nil {
		return s.egress
	}
	if el := s.egressForRoute(port); el != nil {
		return el.hosts
	}
	return nil
}

// importsVirtualService reports whether egress hosts imports vs (istiod's SelectVirtualServices): some host
// of it overlaps an egress host of its namespace or of "*". Without a Sidecar every visible one is imported.
func (s *Scope) importsVirtualService(vs *model.VirtualService, imports []egressHost) bool {
	if s.Sidecar == nil {
		return true
	}
	for _, e := range imports {
		if e.namespace != "*" && e.namespace != vs.Namespace {
			continue
		}
		for _, h := range vs.Hosts {
			if h == e.host || hostsOverlap(e.host, h) {
				return true
			}
		}
	}
	return false
}

// importedVirtualServices returns those of vss that egress hosts imports, in their order: istiod's egress
// listener VirtualServices, whose tcp and tls routes the listeners take. vss itself when all are.
func (s *Scope) importedVirtualServices(vss []*model.VirtualService, imports []egressHost) []*model.VirtualService {
	refused := func(vs *model.VirtualService) bool { return !s.importsVirtualService(vs, imports) }
	if s.Sidecar == nil || !slices.ContainsFunc(vss, refused) {
		return vss
	}
	return slices.DeleteFunc(slices.Clone(vss), refused)
}

// virtualServiceFor is the VirtualService for host among those imported on port (istiod picks among the
// VirtualServices of the port's egress listener), with VirtualServiceForHost's precedence: an exact host
// first, then the most specific wildcard, the first of equals.
func (s *Scope) virtualServiceFor(push *model.PushContext, host string, port uint32) *model.VirtualService {
	vs := push.VirtualServiceForHost(s.Namespace, model.MeshGateway, host)
	if vs == nil || s.Sidecar == nil {
		return vs
	}
	imports := s.importsFor(port)
	if s.importsVirtualService(vs, imports) {
		return vs
	}
	var best *model.VirtualService
	bestHost := ""
	for _, c := range s.importedVirtualServices(push.VirtualServicesForHost(s.Namespace, model.MeshGateway, host), imports) {
		for _, h := range c.Hosts {
			if !model.HostMatches(h, host) {
				continue
			}
			if hw, bw := strings.HasPrefix(h, "*"), strings.HasPrefix(bestHost, "*"); best == nil || hw != bw && !hw ||
				hw == bw && len(h) > len(bestHost) {
				best, bestHost = c, h
			}
		}
	}
	return best
}

func egressAllows(egress []egressHost, svc *model.Service) bool {
	for _, e := range egress {
		if e.namespace == "~" {
			continue
		}
		if e.namespace != "*" && e.namespace != svc.Namespace {
			continue
		}
		if model.HostMatches(e.host, svc.Hostname) {
			return true
		}
	}
	return false
}

// scopeChanges compares two scopes' services: those of old that cur does not hold, and those of cur that old
// does not hold (a changed service is in both). Both lists are sorted by hostname, one service per hostname,
// so one walk finds them.
func scopeChanges(old, cur []*model.Service) (removed map[*model.Service]bool, added []*model.Service) {
	removed = map[*model.Service]bool{}
	for i, j := 0, 0; i < len(old) || j < len(cur); {
		switch {
		case i < len(old) && j < len(cur) && old[i] == cur[j]:
			i, j = i+1, j+1
		case j == len(cur) || i < len(old) && old[i].Hostname <= cur[j].Hostname:
			removed[old[i]] = true
			i++
		default:
			added = append(added, cur[j])
			j++
		}
	}
	return removed, added
}
