package envoy

// RDS: RouteConfigurations, named and built as istiod names and builds them.
//
//   - Sidecars: one RouteConfiguration per HTTP service port number in the proxy's scope, named by the
//     number ("9080"). It has a virtual host "HOSTNAME:PORT" per service in scope with an HTTP port PORT,
//     one "HOST:PORT" per VirtualService host no such service serves, as istiod (hostVirtualServices),
//     then "allow_any" (domain "*") to PassthroughCluster, or under the outbound traffic policy
//     REGISTRY_ONLY "block_all", which answers 502 (Scope.RegistryOnly). HTTP means HTTP, HTTP2 and GRPC
//     (Protocol.IsHTTP). A port of unknown protocol is sniffed by its outbound listener, whose HTTP chain
//     names "HOSTNAME:PORT" (istiod's name): that service's virtual host alone, domain "*", no catch-all.
//   - Gateways (rds_gateway.go): "http.PORT" for plain HTTP servers and
//     "https.PORT.PORTNAME.GATEWAY.NAMESPACE" for HTTPS servers that terminate TLS.
//   - Proxyless gRPC: "HOST:PORT" as the client's target names its API listener (HOST may be short; also
//     "outbound|PORT||HOST", istiod's form): one virtual host with the domains "HOST:PORT" and "HOST".
//
// Fault injection and CORS are carried per route in typed_per_filter_config under FaultFilterName and
// CORSFilterName; the listener's HttpConnectionManager must list those filters (empty configs) before the
// router, as istiod's does, or Envoy ignores (gRPC rejects) the per-route config.

import (
	"net"
	"slices"
	"strconv"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/model"
)

// FaultFilterName is the HTTP filter whose per-route config carries a VirtualService's fault injection.
const FaultFilterName = "envoy.filters.http.fault"

// CORSFilterName is the HTTP filter whose per-route config carries a VirtualService's corsPolicy.
const CORSFilterName = "envoy.filters.http.cors"

// AllowAnyVirtualHost is the name of the sidecar's catch-all virtual host (outbound traffic policy ALLOW_ANY).
const AllowAnyVirtualHost = "allow_any"

// BlockAllVirtualHost is the name of the sidecar's catch-all virtual host under REGISTRY_ONLY: it answers
// every request itself with 502 (istiod's "block_all").
const BlockAllVirtualHost = "block_all"

type routeGenerator struct{ g *Generators }

// Generate returns the RouteConfigurations the proxy asks for that exist, sorted by name. A wildcard
// subscription (Envoy and gRPC never make one for RDS) gets every route configuration: each HTTP port of a
// sidecar, each server of a gateway, FQDN:PORT of each HTTP service port for gRPC.
func (r routeGenerator) Generate(proxy *model.Proxy, push *model.PushContext, w *model.WatchedResource,
	_ *model.PushRequest) (model.Resources, error) {
	g := r.g
	scope := g.scopeFor(proxy, push)
	var gws []*config.Config
	var gwPorts gatewayPorts
	if proxy.Type == model.Router {
		gws = push.Gateways(proxy.Labels)
		gwPorts = gatewayPortsOf(proxy, push)
	}
	gwKey := gatewaysKey(gws, gwPorts)
	names := requestedNames(w)
	if w == nil || w.Wildcard {
		switch proxy.Type {
		case model.Router:
			names = append(names, gatewayRouteNames(gws, gwPorts)...)
		case model.GRPC:
			names = append(names, grpcRouteNames(scope)...)
		default:
			for _, p := range sidecarRoutePorts(scope) {
				names = append(names, strconv.FormatUint(uint64(p), 10))
			}
		}
		slices.Sort(names)
		names = slices.Compact(names)
	}
	out := make(model.Resources, 0, len(names))
	for _, name := range names {
		res, err := g.routeConfig(proxy, push, scope, gws, gwPorts, gwKey, name)
		if err != nil {
			return nil, err
		}
		if res != nil {
			out = append(out, res)
		}
	}
	return out, nil
}

func requestedNames(w *model.WatchedResource) []string {
	if w == nil {
		return nil
	}
	return slices.Clone(w.ResourceNames.Sorted()) // the caller adds to it
}

// routeKey identifies a built RouteConfiguration. scope stands for the snapshot, the proxy's namespace and
// its Sidecar; gateways for the Gateways selecting a router; labels is set only for configurations that
// VirtualService sourceLabels made depend on the proxy's labels.
type routeKey struct {
	routing   any // routingID: VirtualServices, DestinationRules and Gateways in force
	proxyType model.ProxyType
	name      string
	scope     *Scope
	gateways  string
	labels    string
	// labelled marks the entry saying "look again with the labels".
	labelled bool
	// vhds: a sidecar route configuration whose virtual hosts come over VHDS.
	vhds bool
	// mode: the proxy's IP mode decides which VIPs of a dual-stack Service are domains (serviceDomains).
	mode ipMode
}

// Markers stored in the resource cache under a routeKey. They are never modified.
var (
	routeAbsent         = &model.Resource{Name: "<absent route configuration>"}
	routeDependsOnLabel = &model.Resource{Name: "<route configuration depends on proxy labels>"}
)

// routeConfig returns the marshaled RouteConfiguration name for proxy, or nil when it does not exist.
func (g *Generators) routeConfig(proxy *model.Proxy, push *model.PushContext, scope *Scope, gws []*config.Config, gwPorts gatewayPorts,
	gwKey, name string) (*model.Resource, error) {
	mode := ipModeOf(proxy.IPAddresses)
	key := routeKey{routing: routingID(push), proxyType: routeProxyType(proxy), name: name, scope: scope, gateways: gwKey,
		vhds: g.usesVHDS(proxy) && scope.listeners == nil, mode: mode} // egress listeners' routes are inline
	if key.vhds {
		var err error
		if key.vhds, err = g.hasVirtualHosts(proxy, push, scope, name); err != nil {
			return nil, err
		}
	}
	r, ok := g.resources.Get(key)
	if ok && r == routeDependsOnLabel {
		key.labels, key.labelled = model.LabelsKey(proxy.Labels), true
		r, ok = g.resources.Get(key)
	}
	if ok {
		if r == routeAbsent {
			return nil, nil
		}
		return r, nil
	}
	b := &routeBuilder{push: push, proxy: proxy, scope: scope, gateways: gws, gatewayPorts: gwPorts,
		grpc: proxy.Type == model.GRPC, mode: mode, byService: !g.routesByPort}
	var rc *route.RouteConfiguration
	switch proxy.Type {
	case model.Router:
		rc = b.gatewayRouteConfig(name)
	case model.GRPC:
		rc = b.grpcRouteConfig(name)
	default:
		if key.vhds {
			rc = b.sidecarVHDSRouteConfig(name)
		} else {
			rc = b.sidecarRouteConfig(name)
		}
	}
	if b.usedLabels && !key.labelled {
		g.resources.Add(key, routeDependsOnLabel)
		key.labels, key.labelled = model.LabelsKey(proxy.Labels), true
	}
	if rc == nil {
		g.resources.Add(key, routeAbsent)
		return nil, nil
	}
	return g.cached(key, name, func() proto.Message { return rc })
}

// routeProxyType folds the Envoy-based types that build the same configuration.
func routeProxyType(p *model.Proxy) model.ProxyType {
	switch p.Type {
	case model.Router, model.GRPC:
		return p.Type
	}
	return model.Sidecar
}

// isHTTPPort reports whether a sidecar serves the port through RDS: HTTP, HTTP2 and gRPC. Ports of unknown
// protocol are not sniffed: the listener generator proxies them as TCP, so they have no routes.
func isHTTPPort(p *model.Port) bool {
	return p.Protocol.IsHTTP()
}

// sidecarRoutePorts returns the HTTP port numbers of the services in scope, sorted. Shared: not to be modified.
func sidecarRoutePorts(scope *Scope) []uint32 { return scope.routePorts }

// httpPorts returns the HTTP port numbers of services, sorted.
func httpPorts(services []*model.Service) []uint32 {
	seen := map[uint32]bool{}
	var out []uint32
	for _, svc := range services {
		for _, p := range svc.Ports {
			if isHTTPPort(p) && !seen[p.Port] {
				seen[p.Port] = true
				out = append(out, p.Port)
			}
		}
	}
	slices.Sort(out)
	return out
}

// routeBuilder builds the RouteConfigurations of one proxy from one snapshot.
type routeBuilder struct {
	push  *model.PushContext
	proxy *model.Proxy
	scope *Scope
	// gateways are the Gateways selecting a router, oldest first; gatewayPorts where its pod serves them.
	gateways     []*config.Config
	gatewayPorts gatewayPorts
	grpc         bool
	mode         ipMode // the proxy's
	// byService: Kubernetes Services' HTTP ports have route configurations of their own (routes_by_service.go).
	byService bool
	// usedLabels records that the routes depend on the proxy's labels: a VirtualService match on
	// sourceLabels, or a DestinationRule with a workloadSelector, was evaluated against the proxy.
	usedLabels bool
	// deps, when set, collects the destination services the routes resolved.
	deps *[]serviceDep
}

// serviceDep is a service lookup a build depended on: the service host resolved to (nil for none).
type serviceDep struct {
	host string
	svc  *model.Service
}

// sidecarRouteConfig builds the route configuration named by a port number, or nil when no service in
// scope has that HTTP port.
func (b *routeBuilder) sidecarRouteConfig(name string) *route.RouteConfiguration {
	port, ok := routePort(name)
	if !ok {
		return b.sniffedRouteConfig(name)
	}
	services, sniffed := b.scope.Services, false
	if b.scope.listeners != nil {
		el := b.scope.egressForRoute(port)
		if el == nil {
			return nil
		}
		services = el.originals
		// As istiod, the configuration for a listener with a port exists whatever its services' protocols
		// (the catch-all's listeners on another address of the port ask for it too), and those with an
		// HTTP or sniffed port get virtual hosts.
		sniffed = el.port != 0
	}
	vhosts, found := b.sidecarVirtualHosts(services, port, sniffed)
	if !found && !sniffed {
		return nil
	}
	return &route.RouteConfiguration{Name: name, VirtualHosts: append(vhosts, catchAllVirtualHost(b.scope.RegistryOnly)),
		ValidateClusters: wrapperspb.Bool(false)}
}

// sidecarVHDSRouteConfig is sidecarRouteConfig for a proxy that gets the services' virtual hosts over VHDS
// (rds_vhds.go): only the catch-all is inline. Adding a service then sends one small virtual host instead of
// the whole table.
func (b *routeBuilder) sidecarVHDSRouteConfig(name string) *route.RouteConfiguration {
	port, ok := routePort(name)
	if !ok {
		return b.sniffedRouteConfig(name)
	}
	if !b.scopeHasHTTPPort(port) {
		return nil
	}
	return &route.RouteConfiguration{
		Name:         name,
		VirtualHosts: []*route.VirtualHost{catchAllVirtualHost(b.scope.RegistryOnly)},
		Vhds: &route.Vhds{ConfigSource: &core.ConfigSource{
			ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}},
			ResourceApiVersion:    core.ApiVersion_V3,
		}},
		ValidateClusters: wrapperspb.Bool(false),
	}
}

// sniffedRouteConfig builds "HOST:PORT", the route configuration of the sniffed HTTP chain of a service
// port of unknown protocol, as istiod, or of an HTTP port served by service: the service's virtual host
// alone, answering any Host (the listener is the service's own), without a catch-all. nil when the
// service in scope has no such port.
func (b *routeBuilder) sniffedRouteConfig(name string) *route.RouteConfiguration {
	host, ps, err := net.SplitHostPort(name)
	if err != nil {
		return nil
	}
	port, ok := routePort(ps)
	if !ok {
		return nil
	}
	svc := b.scope.Service(host)
	if b.scope.listeners != nil {
		// As istiod, the egress listener on the port (else the catch-all) has the configuration: its own
		// sniffed service's virtual host, none when the service is not its (a catch-all's listener on the
		// port of a listener with a port asks for one).
		el := b.scope.egressForRoute(port)
		if el == nil {
			return nil
		}
		rc := &route.RouteConfiguration{Name: name, ValidateClusters: wrapperspb.Bool(false)}
		for i, s := range el.services {
			sp, op := s.PortByNumber(port), el.originals[i].PortByNumber(port)
			// The chain sniffs (the listener's protocol); the virtual host is there for a service whose own
			// port is HTTP or sniffed.
			sniffed := sp != nil && sp.Protocol == model.ProtocolUnset && (isHTTPPort(op) || op.Protocol == model.ProtocolUnset)
			if s.Hostname == host && (sniffed || op != nil && b.ownsRoute(el.originals[i], op)) {
				rc.VirtualHosts = []*route.VirtualHost{{Name: hostPort(host, port), Domains: []string{"*"},
					Routes: b.serviceRoutes(el.originals[i], port), IncludeRequestAttemptCount: true}}
			}
		}
		return rc
	} else if svc == nil {
		return nil
	} else if sp := svc.PortByNumber(port); sp == nil ||
		sp.Protocol != model.ProtocolUnset && !b.ownsRoute(svc, sp) {
		return nil
	}
	return &route.RouteConfiguration{
		Name: name,
		VirtualHosts: []*route.VirtualHost{{
			Name:                       hostPort(svc.Hostname, port),
			Domains:                    []string{"*"},
			Routes:                     b.serviceRoutes(svc, port),
			IncludeRequestAttemptCount: true,
		}},
		ValidateClusters: wrapperspb.Bool(false),
	}
}

// routePort reads a sidecar route configuration name: an HTTP port number.
func routePort(name string) (uint32, bool) {
	port64, err := strconv.ParseUint(name, 10, 32)
	if err != nil || port64 == 0 || port64 > 65535 || strconv.FormatUint(port64, 10) != name {
		return 0, false
	}
	return uint32(port64), true
}

func (b *routeBuilder) scopeHasHTTPPort(port uint32) bool {
	for _, svc := range b.scope.Services {
		if sp := svc.PortByNumber(port); sp != nil && isHTTPPort(sp) {
			return true
		}
	}
	return false
}

// sidecarVirtualHosts returns a virtual host "HOSTNAME:PORT" per service of services with HTTP port port
// (or, with sniffed, a port of unknown protocol too), in order, each name claimed by the first service to
// use it (Envoy rejects a table naming a domain twice), and those of VirtualService hosts outside the
// registry (hostVirtualServices) placed among them by name; those claim their names first, as istiod builds
// a VirtualService's before the services'. found is false, unless sniffed (an egress listener's port,
// whose configuration always exists), when no service in scope has that HTTP port.
func (b *routeBuilder) sidecarVirtualHosts(services []*model.Service, port uint32, sniffed bool) (vhosts []*route.VirtualHost, found bool) {
	if _, found = slices.BinarySearch(b.scope.routePorts, port); !found && !sniffed {
		return nil, false
	}
	domains := newDomainSet(16 * len(services))
	var hostVhosts []*route.VirtualHost
	for _, h := range b.hostVirtualServices(port) {
		all := virtualServiceHostDomains(h.host, port)
		if ds := domains.add(all); len(ds) > 0 {
			hostVhosts = append(hostVhosts, &route.VirtualHost{Name: all[1], Domains: ds, Routes: h.routes, IncludeRequestAttemptCount: true})
		}
	}
	for _, svc := range services {
		sp := svc.PortByNumber(port)
		if sp == nil || !isHTTPPort(sp) && !(sniffed && sp.Protocol == model.ProtocolUnset) || b.ownsRoute(svc, sp) {
			continue
		}
		ds := domains.add(serviceDomains(svc, port, b.proxy.Namespace, b.push.Mesh.DomainSuffix, b.mode))
		if len(ds) == 0 {
			continue // every name already belongs to an earlier virtual host
		}
		vhosts = append(vhosts, &route.VirtualHost{
			Name:                       hostPort(svc.Hostname, port),
			Domains:                    ds,
			Routes:                     b.serviceRoutes(svc, port),
			IncludeRequestAttemptCount: true,
		})
	}
	return insertByName(vhosts, hostVhosts, (*route.VirtualHost).GetName), true
}

// insertByName places the virtual hosts of VirtualService hosts among the services' (in scope order, which
// is name order), by name, so a full state is sorted as the transport keeps it, and VHDS and the inline table
// list them alike. hosts is sorted in place.
func insertByName[T any](services, hosts []T, name func(T) string) []T {
	if len(hosts) == 0 {
		return services
	}
	slices.SortStableFunc(hosts, func(a, b T) int { return strings.Compare(name(a), name(b)) })
	out := make([]T, 0, len(services)+len(hosts))
	for _, s := range services {
		for len(hosts) > 0 && name(hosts[0]) < name(s) {
			out, hosts = append(out, hosts[0]), hosts[1:]
		}
		out = append(out, s)
	}
	return append(out, hosts...)
}

// hostRoutes is a VirtualService host no service in scope serves on a route configuration's port, with the
// routes the VirtualService gives it there; deps the destination services those resolved.
type hostRoutes struct {
	vs     *model.VirtualService
	host   string // lower-cased, as istiod names it
	routes []*route.Route
	deps   []serviceDep
	// labelled: the routes were chosen by the proxy's labels (sourceLabels).
	labelled bool
}

// hostVirtualServices returns the hosts of the proxy's VirtualServices that no service in scope has port
// for, each with the VirtualService's routes on that port, as istiod's sidecar route configuration gives
// them virtual hosts of their own (its nonServiceRegistryHosts): on port 80 those of every VirtualService
// (its special case for hosts outside the registry, e.g. a VirtualService for reviews, which has no port 80,
// answers reviews:80 and sends it to outbound|80||reviews), on another port those of the VirtualServices
// that also route a service in scope with that HTTP port. The first VirtualService (in istiod's order) to name a host
// keeps it. A VirtualService none of whose routes apply on the port gives none.
func (b *routeBuilder) hostVirtualServices(port uint32) []hostRoutes {
	var out []hostRoutes
	var taken map[string]bool
	imports := b.scope.importsFor(port)
	for _, vs := range b.push.VirtualServices(b.proxy.Namespace, model.MeshGateway) {
		if !b.scope.importsVirtualService(vs, imports) {
			continue
		}
		hosts, served := b.unservedHosts(vs, port)
		if len(hosts) == 0 || port != 80 && !served {
			continue
		}
		var deps []serviceDep
		sub := &routeBuilder{push: b.push, proxy: b.proxy, scope: b.scope, deps: &deps, mode: b.mode}
		routes := sub.virtualServiceRoutes(vs, model.MeshGateway, port)
		b.usedLabels = b.usedLabels || sub.usedLabels
		if b.deps != nil {
			*b.deps = append(*b.deps, deps...)
		}
		if len(routes) == 0 {
			continue
		}
		for _, h := range hosts {
			if taken[h] {
				continue
			}
			if taken == nil {
				taken = map[string]bool{}
			}
			taken[h] = true
			out = append(out, hostRoutes{vs: vs, host: h, routes: routes, deps: deps, labelled: sub.usedLabels})
		}
	}
	return out
}

// unservedHosts returns vs's hosts (lower-cased) that no service in scope has port for: exact hosts first,
// then wildcards that overlap no such service, as istiod orders them. served reports that vs routes a
// service in scope whose port is HTTP (or of unknown protocol): an exact host, or one its wildcard is the
// proxy's VirtualService for.
func (b *routeBuilder) unservedHosts(vs *model.VirtualService, port uint32) (hosts []string, served bool) {
	var wildcards []string
	for _, h := range vs.Hosts {
		h = strings.ToLower(h)
		if strings.HasPrefix(h, "*") {
			wildcards = append(wildcards, h)
			continue
		}
		if svc := b.scope.Service(h); svc != nil {
			if sp := svc.PortByNumber(port); sp != nil {
				served = served || routedPort(sp)
				continue
			}
		}
		hosts = append(hosts, h)
	}
	for _, w := range wildcards {
		overlaps := false
		for _, svc := range b.scope.Services {
			sp := svc.PortByNumber(port)
			if sp == nil || !hostsOverlap(w, svc.Hostname) {
				continue
			}
			overlaps = true
			if routedPort(sp) && b.scope.virtualServiceFor(b.push, svc.Hostname, port) == vs {
				served = true
			}
		}
		if !overlaps {
			hosts = append(hosts, w)
		}
	}
	return hosts, served
}

// routedPort: a port istiod gives a sidecar virtual host, HTTP or of unknown protocol (sniffed).
func routedPort(p *model.Port) bool { return p.Protocol.IsHTTP() || p.Protocol == model.ProtocolUnset }

// hostsOverlap reports whether two host patterns match a common name (istiod's host.Name.Matches).
func hostsOverlap(a, b string) bool { return model.HostMatches(a, b) || model.HostMatches(b, a) }

// virtualServiceHostDomains are the names of a VirtualService host's own virtual host: the host, without and
// with the port (an IPv6 address in brackets). The second is also the virtual host's name.
func virtualServiceHostDomains(host string, port uint32) []string {
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return []string{host, hostPort(host, port)}
}

// catchAllVirtualHost is the last virtual host of a sidecar's route configuration, for Host names no
// service in scope answers to: passed through to the original destination, or under REGISTRY_ONLY refused.
func catchAllVirtualHost(registryOnly bool) *route.VirtualHost {
	if registryOnly {
		return &route.VirtualHost{
			Name:    BlockAllVirtualHost,
			Domains: []string{"*"},
			Routes: []*route.Route{{
				Name:   BlockAllVirtualHost,
				Match:  &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
				Action: &route.Route_DirectResponse{DirectResponse: &route.DirectResponseAction{Status: 502}},
			}},
			IncludeRequestAttemptCount: true,
		}
	}
	return &route.VirtualHost{
		Name:    AllowAnyVirtualHost,
		Domains: []string{"*"},
		Routes: []*route.Route{{
			Name:  AllowAnyVirtualHost,
			Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
			Action: &route.Route_Route{Route: &route.RouteAction{
				ClusterSpecifier:  &route.RouteAction_Cluster{Cluster: PassthroughCluster},
				Timeout:           durationpb.New(0),
				MaxStreamDuration: &route.RouteAction_MaxStreamDuration{GrpcTimeoutHeaderMax: durationpb.New(0)},
			}},
		}},
		IncludeRequestAttemptCount: true,
	}
}

// serviceRoutes returns the routes of a sidecar (or gRPC) virtual host for svc on port: its VirtualService's
// when one applies and yields routes for the port, else the default route.
func (b *routeBuilder) serviceRoutes(svc *model.Service, port uint32) []*route.Route {
	if vs := b.scope.virtualServiceFor(b.push, svc.Hostname, port); vs != nil {
		if routes := b.virtualServiceRoutes(vs, model.MeshGateway, port); len(routes) > 0 {
			return routes
		}
	}
	return []*route.Route{b.defaultRoute(svc, port)}
}

// hostPort is HOST:PORT.
func hostPort(host string, port uint32) string {
	return host + ":" + strconv.FormatUint(uint64(port), 10)
}

// serviceDomains returns the names a sidecar in proxyNS may use for svc on port, istiod's list
// (generateVirtualHostDomains), for the hostname and each of its aliases (ExternalName Services naming it):
// the name, the name as an absolute name with its trailing dot, for a
// hostname NAME.NAMESPACE.svc.SUFFIX the shorter forms a pod's DNS search path resolves (NAME only from
// that namespace, NAME.NAMESPACE, NAME.NAMESPACE.svc), for a headless Service each of those with a "*."
// prefix, and each VIP (of a Kubernetes Service, those of the proxy's family: kubeVIPs); each with and
// without ":PORT".
func serviceDomains(svc *model.Service, port uint32, proxyNS, suffix string, mode ipMode) []string {
	var names []string
	for _, h := range append([]string{svc.Hostname}, svc.Aliases...) {
		names = append(names, h)
		if net.ParseIP(h) == nil {
			names = append(names, h+".")
		}
		// Read from the hostname, as istiod does, so a ServiceEntry host of that form gets them too.
		if base, ok := strings.CutSuffix(h, ".svc."+suffix); ok {
			if name, ns, ok := strings.Cut(base, "."); ok && name != "" && ns != "" {
				if ns == proxyNS {
					names = append(names, name)
				}
				names = append(names, base, base+".svc")
			}
		}
	}
	// A headless Service's pods have names of their own under its hostname (POD.NAME.NAMESPACE.svc.SUFFIX,
	// from a StatefulSet): istiod's virtual host takes every name below each of its names too.
	if svc.Resolution == model.Passthrough && svc.Source.Kind == config.Service {
		for _, n := range names {
			names = append(names, "*."+n)
		}
	}
	for _, addr := range serviceVIPs(svc, mode) {
		if addr == "" || isUnspecifiedIP(addr) || strings.Contains(addr, "/") {
			continue
		}
		if strings.Contains(addr, ":") {
			addr = "[" + addr + "]"
		}
		names = append(names, addr)
	}
	out := make([]string, 0, 2*len(names))
	p := ":" + strconv.FormatUint(uint64(port), 10)
	for _, n := range names {
		out = append(out, n, n+p)
	}
	return out
}

// domainSet keeps the domains of one RouteConfiguration unique: Envoy rejects a configuration naming a
// domain twice (case-insensitively). The first virtual host to claim a domain keeps it.
type domainSet map[string]bool

// newDomainSet returns a set sized for about n domains (a table of 300 services names ~4,000: growing the map
// step by step was a fifth of building one).
func newDomainSet(n int) domainSet { return make(domainSet, n) }

// add returns the domains not yet claimed, claiming them.
func (s domainSet) add(domains []string) []string {
	return s.addLowered(domains, lowerAll(domains))
}

// addLowered is add with the domains' lower-case forms given (lower[i] is domains[i] lower-cased).
func (s domainSet) addLowered(domains, lower []string) []string {
	out := make([]string, 0, len(domains))
	for i, d := range domains {
		k := lower[i]
		if s[k] {
			continue
		}
		s[k] = true
		out = append(out, d)
	}
	return out
}

// lowerAll lower-cases domains, returning domains itself when nothing changes (the usual case).
func lowerAll(domains []string) []string {
	var out []string
	for i, d := range domains {
		if l := strings.ToLower(d); l != d {
			if out == nil {
				out = slices.Clone(domains[:i])
			}
			out = append(out, l)
		} else if out != nil {
			out = append(out, d)
		}
	}
	if out == nil {
		return domains
	}
	return out
}

// grpcRouteConfig answers a proxyless gRPC client. The listener generator names the route configuration of
// its API listener as the client's target, HOST:PORT, where HOST may be short ("echo", "echo.ns", resolved
// from the client's namespace as a pod's DNS search path does); istiod's "outbound|PORT||HOST" is accepted
// too. It exists when the host is a service with that port, or no service but a VirtualService host that
// yields routes for the port. Domains: the target as written (with and without the port), then the full
// hostname (with and without the port).
func (b *routeBuilder) grpcRouteConfig(name string) *route.RouteConfiguration {
	asked, port, ok := parseGRPCRouteName(name)
	if !ok {
		return nil
	}
	var svc *model.Service
	host := asked
	for _, h := range grpcCandidates(asked, b.proxy.Namespace, b.push.Mesh.DomainSuffix) {
		if s := b.push.ServiceForHostname(b.proxy.Namespace, h); s != nil {
			svc, host = s, h
			break
		}
	}
	if svc != nil && svc.PortByNumber(port) == nil {
		return nil // the service exists without that port
	}
	var routes []*route.Route
	if vs := b.scope.virtualServiceFor(b.push, host, port); vs != nil {
		routes = b.virtualServiceRoutes(vs, model.MeshGateway, port)
	}
	if len(routes) == 0 {
		if svc == nil {
			return nil
		}
		routes = []*route.Route{b.defaultRoute(svc, port)}
	}
	domains := newDomainSet(4).add([]string{hostPort(asked, port), asked, hostPort(host, port), host})
	return &route.RouteConfiguration{
		Name: name,
		VirtualHosts: []*route.VirtualHost{{
			Name:    hostPort(host, port),
			Domains: domains,
			Routes:  routes,
		}},
	}
}

// grpcRouteNames are the route configurations of a wildcard gRPC subscription: FQDN:PORT for every HTTP
// port in scope, as the listener generator's API listeners.
func grpcRouteNames(scope *Scope) []string {
	var out []string
	for _, svc := range scope.Services {
		for _, p := range svc.Ports {
			if p.Protocol.IsHTTP() {
				out = append(out, hostPort(svc.Hostname, p.Port))
			}
		}
	}
	return out
}

func parseGRPCRouteName(name string) (string, uint32, bool) {
	if cn, ok := ParseClusterName(name); ok {
		if cn.Direction != Outbound || cn.Subset != "" || cn.Host == "" || cn.Port == 0 || cn.Port > 65535 {
			return "", 0, false
		}
		return cn.Host, cn.Port, true
	}
	host, ps, err := net.SplitHostPort(name)
	if err != nil || host == "" || strings.ContainsAny(host, "|/*") {
		return "", 0, false
	}
	p, err := strconv.ParseUint(ps, 10, 32)
	if err != nil || p == 0 || p > 65535 || strconv.FormatUint(p, 10) != ps {
		return "", 0, false
	}
	return host, uint32(p), true
}
