package envoy

// Gateway RouteConfigurations, named as istiod names them:
//
//	http.PORT[.BIND]                                   plain HTTP (HTTP, HTTP2, GRPC) servers the pod serves
//	                                                   on PORT (gatewayPorts: the gateway Service's target
//	                                                   port), all Gateways selecting the proxy merged
//	https.PORT.PORTNAME.GATEWAY.NAMESPACE[.BIND]       an HTTPS server terminating TLS (PORT and PORTNAME
//	                                                   are the server's); PASSTHROUGH and AUTO_PASSTHROUGH
//	                                                   servers have no routes (SNI filter chains instead)
//
// Each has one virtual host per host shared by a server and a VirtualService bound to its Gateway, named
// HOST:PORT (the server's port) with the domain HOST, the port ignored in host matching as istiod does (a
// client may address the gateway on any port); routes of several VirtualServices for one host are
// concatenated, oldest first, each matching its server's port. A configuration without any gets istiod's
// "blackhole:PORT" virtual host ("*", no routes: 404).

import (
	"slices"
	"strconv"
	"strings"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/model"
)

// GatewayRouteName returns the RouteConfiguration name of server in Gateway gw, served on the pod's port
// listenPort, or "" when the server's traffic does not go through RDS (TCP, TLS, HTTPS passthrough). The
// listener generator uses it in its HttpConnectionManager's rds.route_config_name.
func GatewayRouteName(gw *config.Config, server *networking.Server, listenPort uint32) string {
	if server.GetPort() == nil {
		return ""
	}
	bind := ""
	if server.Bind != "" {
		bind = "." + server.Bind
	}
	switch p := model.ParseProtocol(server.Port.Protocol); {
	case p.IsHTTP():
		return "http." + strconv.FormatUint(uint64(listenPort), 10) + bind
	case p == model.ProtocolHTTPS && !isPassthroughServer(server):
		port := strconv.FormatUint(uint64(server.Port.Number), 10)
		return "https." + port + "." + server.Port.Name + "." + gw.Name + "." + gw.Namespace + bind
	}
	return ""
}

func isPassthroughServer(s *networking.Server) bool {
	switch s.GetTls().GetMode() {
	case networking.ServerTLSSettings_PASSTHROUGH, networking.ServerTLSSettings_AUTO_PASSTHROUGH:
		return true
	}
	return false
}

// gatewaysKey names the Gateways selecting a router and the ports its pod serves them on, for the cache key.
// Within one snapshot a name stands for one content.
func gatewaysKey(gws []*config.Config, ports gatewayPorts) string {
	if len(gws) == 0 && len(ports) == 0 {
		return "" // a sidecar's: every RDS request passes here
	}
	var b strings.Builder
	b.WriteString(ports.describe())
	b.WriteByte(0)
	for _, gw := range gws {
		b.WriteString(gw.Namespace)
		b.WriteByte('/')
		b.WriteString(gw.Name)
		b.WriteByte(0)
	}
	return b.String()
}

// gatewayRouteNames returns every route configuration name of the Gateways, sorted.
func gatewayRouteNames(gws []*config.Config, ports gatewayPorts) []string {
	var out []string
	for _, gs := range gatewayServersInForce(gws, ports, "") {
		if n := GatewayRouteName(gs.gw, gs.server, ports.listen(gs.server.GetPort().GetNumber())); n != "" {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// gatewayRouteConfig builds route configuration name of a router, or nil when none of its Gateways has it.
func (b *routeBuilder) gatewayRouteConfig(name string) *route.RouteConfiguration {
	var servers []gatewayServer
	for _, gs := range gatewayServersInForce(b.gateways, b.gatewayPorts, "") {
		if GatewayRouteName(gs.gw, gs.server, b.gatewayPorts.listen(gs.server.GetPort().GetNumber())) == name {
			servers = append(servers, gs)
		}
	}
	if len(servers) == 0 {
		return nil
	}
	domains := newDomainSet(0)
	var vhosts []*route.VirtualHost
	type vhostState struct {
		vh  *route.VirtualHost
		vss []*model.VirtualService
	}
	byHost := map[string]*vhostState{}
	for _, gs := range servers {
		gwName := gs.gw.Namespace + "/" + gs.gw.Name
		port := gs.server.Port.Number
		for _, vs := range b.push.VirtualServices(b.proxy.Namespace, gwName) {
			hosts := serverVirtualServiceHosts(gs.server, gs.gw.Namespace, vs)
			if len(hosts) == 0 {
				continue
			}
			routes := b.virtualServiceRoutes(vs, gwName, port)
			if len(routes) == 0 {
				continue
			}
			for _, host := range hosts {
				if st := byHost[host]; st != nil {
					if !slices.Contains(st.vss, vs) {
						st.vss = append(st.vss, vs)
						st.vh.Routes = append(st.vh.Routes, routes...)
					}
					continue
				}
				ds := domains.add([]string{host})
				if len(ds) == 0 {
					continue
				}
				vh := &route.VirtualHost{
					Name:                       hostPort(host, port),
					Domains:                    ds,
					Routes:                     slices.Clone(routes),
					IncludeRequestAttemptCount: true,
				}
				if gs.server.GetTls().GetHttpsRedirect() {
					vh.RequireTls = route.VirtualHost_ALL
				}
				byHost[host] = &vhostState{vh: vh, vss: []*model.VirtualService{vs}}
				vhosts = append(vhosts, vh)
			}
		}
	}
	if len(vhosts) == 0 {
		vhosts = []*route.VirtualHost{{Name: hostPort("blackhole", servers[0].server.Port.Number), Domains: []string{"*"},
			Routes: []*route.Route{}}}
	}
	return &route.RouteConfiguration{Name: name, VirtualHosts: vhosts, ValidateClusters: wrapperspb.Bool(false),
		IgnorePortInHostMatching: true}
}

// serverVirtualServiceHosts returns the hosts where server (of a Gateway in gwNS) and vs meet: for each pair
// of a server host ([NAMESPACE/]HOST, NAMESPACE "*", "." or a name) and a VirtualService host that match,
// the more specific of the two.
func serverVirtualServiceHosts(server *networking.Server, gwNS string, vs *model.VirtualService) []string {
	var out []string
	for _, sh := range server.Hosts {
		ns, host := "*", sh
		if n, h, ok := strings.Cut(sh, "/"); ok {
			ns, host = n, h
		}
		if ns == "." {
			ns = gwNS
		}
		if ns == "~" || (ns != "*" && ns != vs.Namespace) {
			continue
		}
		for _, vh := range vs.Hosts {
			var h string
			switch {
			case model.HostMatches(host, vh):
				h = vh
			case model.HostMatches(vh, host):
				h = host
			default:
				continue
			}
			if !slices.Contains(out, h) {
				out = append(out, h)
			}
		}
	}
	return out
}
