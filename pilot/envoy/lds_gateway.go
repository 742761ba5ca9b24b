package envoy

import (
	"cmp"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsinspector "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	meshconfig "istio.io/api/mesh/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/envoy/authpolicy"
	"github.com/sextantmesh/sextant/pilot/model"
)

// gatewayListenerKey: a gateway listener depends on the snapshot, the Gateways selecting the proxy and the
// VirtualServices bound to them (both in the snapshot), and the AuthorizationPolicies applying to the
// proxy's labels, which two proxies of the same Gateways need not share.
type gatewayListenerKey struct {
	version  uint64
	gateways string
	ports    string
	addr     gatewayAddr
	policies string
	// namespace is the proxy's: the VirtualServices exported to it route its TCP and TLS servers.
	namespace string
	// An AUTO_PASSTHROUGH server's chains follow the services the proxy sees and the DestinationRules it
	// applies (their subsets): set only for a listener with such a server, so others stay shared.
	scope *Scope
	rules string
	// topology is the proxy's own (its PROXY_CONFIG), which gateways of the same Gateways need not share.
	topology gatewayTopology
}

// gatewayAddr is where a gateway listener listens: the servers' bind address (0.0.0.0 when unset) and port.
type gatewayAddr struct {
	bind string
	port uint32
}

// gatewayServer is one server of a Gateway.
type gatewayServer struct {
	gw     *config.Config
	server *networking.Server
}

// gatewayPorts maps a Gateway server's port number to the port the gateway pod listens on for it, as
// istiod's mergeGateways: the target port of the first Service port of that number among the services
// selecting the pod (a Service labelled experimental.istio.io/disable-gateway-port-translation is skipped),
// else the number itself. Traffic sent to a gateway Service's port reaches the pod on its target port.
// Only numbers that change are kept.
type gatewayPorts map[uint32]uint32

func gatewayPortsOf(proxy *model.Proxy, push *model.PushContext) gatewayPorts {
	w, labels := proxyWorkload(proxy, push)
	var out gatewayPorts
	for _, t := range push.ServiceTargets(proxy.Namespace, labels, w) {
		if _, off := t.Service.Labels[model.DisableGatewayPortTranslationLabel]; off {
			continue
		}
		if _, done := out[t.Port.Port]; done {
			continue
		}
		if out == nil {
			out = gatewayPorts{}
		}
		out[t.Port.Port] = t.TargetPort
	}
	for p, target := range out {
		if p == target {
			delete(out, p)
		}
	}
	return out
}

// listen returns the port the gateway listens on for a server on port.
func (m gatewayPorts) listen(port uint32) uint32 {
	if t, ok := m[port]; ok {
		return t
	}
	return port
}

// describe names the mapping for cache keys.
func (m gatewayPorts) describe() string {
	keys := slices.Sorted(maps.Keys(m))
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%d>%d,", k, m[k])
	}
	return b.String()
}

func (l listenerGenerator) gatewayListeners(proxy *model.Proxy, push *model.PushContext) (model.Resources, error) {
	gws := push.Gateways(proxy.Labels)
	if len(gws) == 0 {
		return nil, nil
	}
	// Policies select a gateway's pods as they select a sidecar's (selector, or targetRefs to the Gateway
	// API Gateway named by the pods' gateway-name label); their filters go on every chain.
	policies := push.AuthorizationPolicies(proxy.Namespace, proxy.Labels)
	env := authpolicy.NewEnv(push, policies, OutboundClusterName)
	env.JWT = authpolicy.NewJWTAuthn(push, proxy.Namespace, proxy.Labels, true)
	authz := gatewayAuthz{}
	if !policies.Empty() || env.JWT != nil {
		var notes, tcpNotes []string
		authz.http, notes = authpolicy.HTTPFilters(policies, env)
		authz.tcp, tcpNotes = authpolicy.TCPFilters(policies, env)
		authpolicy.LogNotes(append(notes, tcpNotes...), "namespace", proxy.Namespace, "proxy", proxy.ID)
	}
	policyKey := authpolicy.DescribePolicies(policies) + env.Describe()
	ports := gatewayPortsOf(proxy, push)
	var names []string
	for _, gw := range gws {
		names = append(names, gw.Key.String())
	}
	byAddr := map[gatewayAddr][]gatewayServer{}
	// Servers without a bind listen on the unspecified address of the proxy's family, as istiod's.
	wildcard := wildcardIP(dnsLookupFamily(proxy.IPAddresses))
	for _, gs := range gatewayServersInForce(gws, ports, proxy.ID) {
		s := gs.server
		if s.GetPort().GetNumber() == 0 {
			continue
		}
		bind := s.Bind
		if _, err := netip.ParseAddr(bind); err != nil {
			bind = wildcard // unset, or a unix socket: not supported
		}
		a := gatewayAddr{bind, ports.listen(s.Port.Number)}
		byAddr[a] = append(byAddr[a], gs)
	}
	set := strings.Join(names, ",")
	addrs := make([]gatewayAddr, 0, len(byAddr))
	for a := range byAddr {
		addrs = append(addrs, a)
	}
	slices.SortFunc(addrs, func(a, b gatewayAddr) int {
		return cmp.Or(cmp.Compare(a.port, b.port), strings.Compare(a.bind, b.bind))
	})
	var out model.Resources
	var auto *autoPassthrough
	topo := gatewayTopologyOf(proxy, push.Mesh.DefaultProxyConfig())
	topo.headers = proxyHeadersOf(proxy, push.Mesh)
	for _, a := range addrs {
		if proxy.Unprivileged && a.port < 1024 {
			// As istiod: an unprivileged gateway pod (UNPRIVILEGED_POD) cannot bind the port.
			slog.Warn("gateway listener left out: the proxy is unprivileged (UNPRIVILEGED_POD) and cannot bind a port below 1024",
				"proxy", proxy.ID, "port", a.port)
			continue
		}
		key := gatewayListenerKey{version: push.Version, gateways: set, ports: ports.describe(), addr: a, policies: policyKey,
			namespace: proxy.Namespace, topology: topo}
		if hasAutoPassthroughServer(byAddr[a]) {
			if auto == nil {
				auto = &autoPassthrough{scope: l.g.scopeFor(proxy, push), labels: proxy.Labels}
			}
			key.scope, key.rules = auto.scope, push.DestinationRuleSelection(auto.scope.Namespace, proxy.Labels)
		}
		lis := buildGatewayListener(push, proxy.Namespace, a, byAddr[a], authz, auto, topo)
		if lis == nil {
			continue // no server yields a chain: Envoy refuses a listener without one
		}
		r, err := l.g.cached(key, lis.Name, func() proto.Message { return lis })
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// gatewayServersInForce lists the servers of gws in order but those istiod's gateway merge skips: a server
// with TLS settings that names a host (as written) an earlier such server on the same pod port and bind
// named, since their chains would match the same server names, which Envoy refuses. The skip is logged
// when proxyID is set (the listener generator; the route generator skips silently as it follows suit).
func gatewayServersInForce(gws []*config.Config, ports gatewayPorts, proxyID string) []gatewayServer {
	var out []gatewayServer
	tlsHosts := map[uint32]map[string]string{} // pod port → host → bind of the server that named it
	for _, gw := range gws {
		for _, s := range gw.Spec.(*networking.Gateway).Servers {
			if s.GetTls() != nil {
				port := ports.listen(s.GetPort().GetNumber())
				known := tlsHosts[port]
				if known == nil {
					known = map[string]string{}
					tlsHosts[port] = known
				}
				var dups []string
				for _, h := range s.Hosts {
					if bind, ok := known[h]; ok && bind == s.Bind {
						dups = append(dups, h)
					}
				}
				if len(dups) > 0 {
					if proxyID != "" {
						slog.Warn("gateway server left out, as istiod does: an earlier TLS server on its port names the same hosts",
							"proxy", proxyID, "gateway", gw.Namespace+"/"+gw.Name, "port", s.GetPort().GetNumber(), "hosts", dups)
					}
					continue
				}
				for _, h := range s.Hosts {
					known[h] = s.Bind
				}
			}
			out = append(out, gatewayServer{gw, s})
		}
	}
	return out
}

type gatewayPortClass int

const (
	gatewayHTTP gatewayPortClass = iota
	gatewayTLS
	gatewayTCP
)

func classOf(s *networking.Server) gatewayPortClass {
	switch p := model.ParseProtocol(s.GetPort().GetProtocol()); {
	case p.IsHTTP():
		return gatewayHTTP
	case p == model.ProtocolHTTPS || p == model.ProtocolTLS:
		return gatewayTLS
	}
	return gatewayTCP
}

// gatewayAuthz holds the RBAC filters of the policies applying to a gateway proxy. As in istiod, every chain
// carries them: connection managers ahead of the router, TCP chains (plain, terminated or passthrough TLS)
// ahead of tcp_proxy.
type gatewayAuthz struct {
	http []*hcm.HttpFilter
	tcp  []*listener.Filter
}

func (a gatewayAuthz) httpFilters() []*hcm.HttpFilter {
	return append(slices.Clone(a.http), ldsOutboundHTTPFilters()...)
}

func (a gatewayAuthz) tcpFilters(proxy *listener.Filter) []*listener.Filter {
	return append(slices.Clone(a.tcp), proxy)
}

// ldsGatewayHTTPManager sets what istiod sets on a gateway's connection managers besides the mesh defaults:
// the proxy's proxyHeaders (by default the Server header istio-envoy); the client address is the peer's (or
// the one topo's trusted hops name); and by default a mutual-TLS client's certificate details replace any
// X-Forwarded-Client-Cert the client sent (SANITIZE_SET: subject, certificate, DNS and URI SANs).
func ldsGatewayHTTPManager(hc *hcm.HttpConnectionManager, paths string, topo gatewayTopology) {
	ldsMeshHTTPManager(hc, paths)
	hc.UseRemoteAddress = wrapperspb.Bool(true)
	topo.headers.apply(hc)
	topo.applyHTTP(hc)
}

// buildGatewayListener builds the listener BIND_PORT (0.0.0.0_PORT) for the servers on addr, nil when none
// yields a chain. The first server's class (HTTP, TLS, TCP) decides; servers of another class are ignored.
// addr's port is where the pod listens; routes match each server's own port, as clients address it. auto
// is what AUTO_PASSTHROUGH servers forward to (nil when addr has none).
func buildGatewayListener(push *model.PushContext, proxyNS string, addr gatewayAddr, servers []gatewayServer, authz gatewayAuthz,
	auto *autoPassthrough, topo gatewayTopology) *listener.Listener {
	port := addr.port
	name := addr.bind + "_" + ldsPortName(port)
	statPrefix := "outbound_" + name
	class := classOf(servers[0].server)
	var chains []*listener.FilterChain
	// claim returns the names of sni no earlier chain on the port matches ("" stands for a chain without
	// server_names), so no two chains have the same match, which Envoy refuses.
	claimed := map[string]bool{}
	claim := func(sni []string) (free []string, ok bool) {
		if len(sni) == 0 {
			if claimed[""] {
				return nil, false
			}
			claimed[""] = true
			return nil, true
		}
		for _, n := range sni {
			if !claimed[n] {
				claimed[n] = true
				free = append(free, n)
			}
		}
		return free, len(free) > 0
	}
	for _, gs := range servers {
		s := gs.server
		if classOf(s) != class {
			continue
		}
		gwName := gs.gw.Namespace + "/" + gs.gw.Name
		switch class {
		case gatewayHTTP:
			if len(chains) == 0 {
				hc := ldsRDSManager(statPrefix, GatewayRouteName(gs.gw, s, port), authz.httpFilters())
				ldsGatewayHTTPManager(hc, push.Mesh.PathNormalization.Normalization, topo)
				chains = append(chains, &listener.FilterChain{Name: name, Filters: []*listener.Filter{ldsNetworkFilter(ldsHCMFilter, hc)}})
			}
		case gatewayTCP:
			if dests := gatewayTCPDestinations(push, proxyNS, gs, gwName, s.Port.Number); len(dests) > 0 {
				if _, ok := claim(nil); !ok {
					continue
				}
				chains = append(chains, &listener.FilterChain{Name: name, Filters: authz.tcpFilters(ldsTCPProxyFilter(tcpStatPrefix(dests), dests))})
			}
		case gatewayTLS:
			mode := s.GetTls().GetMode()
			switch mode {
			case networking.ServerTLSSettings_PASSTHROUGH:
				for _, vs := range push.VirtualServices(proxyNS, gwName) {
					if !vsBindsTo(vs, s.Hosts, gs.gw.Namespace) {
						continue
					}
					for _, r := range gatewaySNIRoutes(push, vs, gs.gw.Namespace, gwName, s.Port.Number) {
						// As istiod, a match naming an SNI an earlier chain on the address took is left out whole.
						if slices.ContainsFunc(r.sni, func(n string) bool { return claimed[n] }) {
							continue
						}
						claim(r.sni)
						nameTCPStats(push, proxyNS, r.dests, &model.Port{Name: s.Port.Name, Port: s.Port.Number})
						chains = append(chains, &listener.FilterChain{
							Name:             name + "/" + strings.Join(r.sni, ","),
							FilterChainMatch: &listener.FilterChainMatch{ServerNames: r.sni},
							Filters:          authz.tcpFilters(ldsTCPProxyFilter(tcpStatPrefix(r.dests), r.dests)),
						})
					}
				}
			case networking.ServerTLSSettings_SIMPLE, networking.ServerTLSSettings_MUTUAL,
				networking.ServerTLSSettings_ISTIO_MUTUAL, networking.ServerTLSSettings_OPTIONAL_MUTUAL:
				sni, ok := claim(serverNames(s.Hosts))
				if !ok {
					continue
				}
				isHTTPS := model.ParseProtocol(s.Port.Protocol) == model.ProtocolHTTPS
				var filters []*listener.Filter
				if isHTTPS {
					hc := ldsRDSManager(statPrefix, GatewayRouteName(gs.gw, s, port), authz.httpFilters())
					ldsGatewayHTTPManager(hc, push.Mesh.PathNormalization.Normalization, topo)
					filters = []*listener.Filter{ldsNetworkFilter(ldsHCMFilter, hc)}
				} else if dests := gatewayTCPDestinations(push, proxyNS, gs, gwName, s.Port.Number); len(dests) > 0 {
					filters = authz.tcpFilters(ldsTCPProxyFilter(tcpStatPrefix(dests), dests))
				} else {
					continue
				}
				var match *listener.FilterChainMatch
				if len(sni) > 0 {
					match = &listener.FilterChainMatch{ServerNames: sni}
				}
				chains = append(chains, &listener.FilterChain{
					Name:             name + "/" + cmp.Or(strings.Join(sni, ","), "*"),
					FilterChainMatch: match,
					Filters:          filters,
					TransportSocket:  ldsDownstreamTLSSocket(gatewayDownstreamTLS(s.Tls, isHTTPS, push.Mesh.GetSpec().GetTlsDefaults())),
				})
			case networking.ServerTLSSettings_AUTO_PASSTHROUGH:
				chains = append(chains, auto.chains(push, s, claim)...)
			}
		}
	}
	if len(chains) == 0 {
		return nil
	}
	lis := &listener.Listener{
		Name:             name,
		Address:          socketAddress(addr.bind, port),
		TrafficDirection: core.TrafficDirection_OUTBOUND,
		FilterChains:     chains,
	}
	lis.ListenerFilters = topo.listenerFilters(gatewayInspectors(chains))
	return lis
}

// gatewayInspectors is the tls_inspector when a chain matches on what it reads (server names, ALPN): every
// chain of a gateway matches TLS or nothing, so the http_inspector, which reads plaintext, is never needed.
func gatewayInspectors(chains []*listener.FilterChain) []*listener.ListenerFilter {
	for _, fc := range chains {
		m := fc.GetFilterChainMatch()
		if len(m.GetServerNames()) > 0 || len(m.GetApplicationProtocols()) > 0 ||
			(m.GetTransportProtocol() != "" && m.GetTransportProtocol() != "raw_buffer") {
			return []*listener.ListenerFilter{ldsListenerFilter(ldsTLSInspectorFilter, &tlsinspector.TlsInspector{})}
		}
	}
	return nil
}

// istioMTLSALPNs are the ALPN values of Istio's mTLS (istiod's allIstioMtlsALPNs): an AUTO_PASSTHROUGH chain
// takes only connections that offer one, so what it passes through ends at a sidecar's mTLS chain.
var istioMTLSALPNs = []string{"istio", "istio-peer-exchange", "istio-http/1.0", "istio-http/1.1", "istio-h2"}

// autoPassthrough is what AUTO_PASSTHROUGH servers of a gateway proxy forward to: the services it sees and
// the DestinationRules it applies (labels pick those with a workloadSelector).
type autoPassthrough struct {
	scope  *Scope
	labels map[string]string
}

func hasAutoPassthroughServer(servers []gatewayServer) bool {
	for _, gs := range servers {
		if gs.server.GetTls().GetMode() == networking.ServerTLSSettings_AUTO_PASSTHROUGH {
			return true
		}
	}
	return false
}

// chains builds istiod's builtAutoPassthroughFilterChains for server s: for each mesh service the server's
// hosts cover (their namespace parts ignored, as istiod's), each port but UDP, and its DestinationRule's
// subsets, a chain matching the server name outbound_.PORT_.SUBSET_.HOST and Istio's ALPN that forwards
// the TLS bytes to the SNI-DNAT cluster of that name. Like istiod's, these chains carry no authorization
// filters: the connection is the client's mTLS to the destination, whose sidecar enforces its policies.
func (a *autoPassthrough) chains(push *model.PushContext, s *networking.Server,
	claim func([]string) ([]string, bool)) []*listener.FilterChain {
	var hosts []string
	for _, h := range s.Hosts {
		if _, after, ok := strings.Cut(h, "/"); ok {
			h = after
		}
		hosts = append(hosts, h)
	}
	var out []*listener.FilterChain
	for _, svc := range a.scope.Services {
		if svc.MeshExternal || !slices.ContainsFunc(hosts, func(h string) bool { return model.HostMatches(h, svc.Hostname) }) {
			continue
		}
		dr := push.DestinationRuleFor(a.scope.Namespace, a.labels, svc)
		subsets := []string{""}
		for _, ss := range dr.GetSubsets() {
			subsets = append(subsets, ss.Name)
		}
		for _, port := range svc.Ports {
			if port.Protocol == model.ProtocolUDP {
				continue
			}
			for _, subset := range subsets {
				name := SNIDNATClusterName(port.Port, subset, svc.Hostname)
				if _, ok := claim([]string{name}); !ok {
					continue
				}
				out = append(out, &listener.FilterChain{
					Name:             name,
					FilterChainMatch: &listener.FilterChainMatch{ServerNames: []string{name}, ApplicationProtocols: istioMTLSALPNs},
					Filters:          []*listener.Filter{ldsNetworkFilter(ldsTCPProxyFilterName, autoPassthroughTCPProxy(name, dr, subset))},
				})
			}
		}
	}
	return out
}

// autoPassthroughTCPProxy forwards to the SNI-DNAT cluster name (also the stat prefix), with what istiod takes
// from the DestinationRule: the top-level TCP idle timeout and connection lifetime, and a source-IP hash when
// the subset (else the rule) hashes on it.
func autoPassthroughTCPProxy(name string, dr *model.DestinationRule, subset string) *tcpproxy.TcpProxy {
	tp := ldsTCPProxy(name, []tcpDest{{name: name, weight: 100}})
	var spec *networking.DestinationRule
	if dr != nil {
		spec = dr.Spec
	}
	tcp := spec.GetTrafficPolicy().GetConnectionPool().GetTcp()
	if d := tcp.GetIdleTimeout(); d != nil {
		tp.IdleTimeout = durationpb.New(d.AsDuration())
	}
	if d := tcp.GetMaxConnectionDuration(); d != nil {
		tp.MaxDownstreamConnectionDuration = durationpb.New(d.AsDuration())
	}
	sourceIP := spec.GetTrafficPolicy().GetLoadBalancer().GetConsistentHash().GetUseSourceIp()
	for _, ss := range spec.GetSubsets() {
		if ss.Name != subset || subset == "" {
			continue
		}
		if lb := ss.GetTrafficPolicy().GetLoadBalancer(); lb != nil {
			sourceIP = lb.GetConsistentHash().GetUseSourceIp()
		}
		break
	}
	if sourceIP {
		tp.HashPolicy = []*typev3.HashPolicy{{PolicySpecifier: &typev3.HashPolicy_SourceIp_{SourceIp: &typev3.HashPolicy_SourceIp{}}}}
	}
	return tp
}

// gatewayTCPDestinations forwards a TCP (or terminated TLS) server: the first VirtualService bound to the
// gateway and visible in the proxy's namespace proxyNS, for a host the server allows, with a tcp route
// matching the port.
func gatewayTCPDestinations(push *model.PushContext, proxyNS string, gs gatewayServer, gwName string, port uint32) []tcpDest {
	for _, vs := range push.VirtualServices(proxyNS, gwName) {
		if !vsBindsTo(vs, gs.server.Hosts, gs.gw.Namespace) {
			continue
		}
		if d := gatewayTCPRouteDests(push, vs, gs.gw.Namespace, gwName, port); len(d) > 0 {
			nameTCPStats(push, proxyNS, d, &model.Port{Name: gs.server.Port.Name, Port: port})
			return d
		}
	}
	return nil
}

// vsBindsTo reports whether one of the VirtualService's hosts is allowed by the server's hosts.
func vsBindsTo(vs *model.VirtualService, serverHosts []string, gwNS string) bool {
	for _, h := range vs.Hosts {
		if serverHostsAllow(serverHosts, gwNS, vs.Namespace, h) {
			return true
		}
	}
	return false
}

// serverHostsAllow reports whether a server's hosts ("host", "ns/host", "./host", "*/host") accept host
// from a VirtualService in vsNS (any namespace when vsNS is empty). Either side may be a wildcard.
func serverHostsAllow(serverHosts []string, gwNS, vsNS, host string) bool {
	for _, sh := range serverHosts {
		ns, h, ok := strings.Cut(sh, "/")
		if !ok {
			ns, h = "*", sh
		}
		if ns == "." {
			ns = gwNS
		}
		if vsNS != "" && ns != "*" && ns != vsNS {
			continue
		}
		if model.HostMatches(h, host) || model.HostMatches(host, h) {
			return true
		}
	}
	return false
}

// serverNames are the SNI names of a server: its hosts without namespace, none when one is "*".
func serverNames(hosts []string) []string {
	var out []string
	for _, sh := range hosts {
		_, h, ok := strings.Cut(sh, "/")
		if !ok {
			h = sh
		}
		if h == "*" {
			return nil
		}
		if !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	slices.Sort(out)
	return out
}

// gatewayDownstreamTLS terminates TLS at a gateway: the certificates from credentialName(s) over ADS
// ("kubernetes://NAME"; MUTUAL validates clients with "kubernetes://NAME-cacert", or the CA of
// caCertCredentialName), from files, or the mesh certificate for ISTIO_MUTUAL. The protocol versions,
// ciphers and curves apply to SIMPLE and MUTUAL servers, as istiod's: the server's over the mesh config's
// tlsDefaults (defaults).
func gatewayDownstreamTLS(tls *networking.ServerTLSSettings, http bool,
	defaults *meshconfig.MeshConfig_TLSConfig) *tlsv3.DownstreamTlsContext {
	common := &tlsv3.CommonTlsContext{}
	if http {
		common.AlpnProtocols = []string{"h2", "http/1.1"}
	}
	mode := tls.GetMode()
	mutual := mode == networking.ServerTLSSettings_MUTUAL || mode == networking.ServerTLSSettings_OPTIONAL_MUTUAL
	ctx := &tlsv3.DownstreamTlsContext{CommonTlsContext: common}
	switch {
	case mode == networking.ServerTLSSettings_ISTIO_MUTUAL:
		common.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{sdsSecret(sdsCert)}
		common.ValidationContextType = &tlsv3.CommonTlsContext_CombinedValidationContext{
			CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext:         gatewayClientValidation(tls),
				ValidationContextSdsSecretConfig: sdsSecret(sdsRoot),
			}}
		ctx.RequireClientCertificate = wrapperspb.Bool(true)
		return ctx
	case len(tls.GetCredentialNames()) > 0 || tls.GetCredentialName() != "":
		names := tls.CredentialNames
		if len(names) == 0 {
			names = []string{tls.CredentialName}
		}
		for _, name := range names {
			common.TlsCertificateSdsSecretConfigs = append(common.TlsCertificateSdsSecretConfigs, credentialSecret(name, false))
		}
		// One CA validates clients whatever the certificate (Envoy takes one): the first credential's, or
		// the Secret caCertCredentialName names.
		ca := names[0]
		if tls.CaCertCredentialName != "" {
			ca = tls.CaCertCredentialName
		}
		// SIMPLE asks for no client certificate, so its subjectAltNames check nothing (Warnings says so);
		// istiod's SAN-only validation context there is refused by Envoy, which wants a CA with SANs.
		if mutual {
			common.ValidationContextType = &tlsv3.CommonTlsContext_CombinedValidationContext{
				CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
					DefaultValidationContext:         gatewayClientValidation(tls),
					ValidationContextSdsSecretConfig: credentialSecret(ca, true),
				}}
		}
	default:
		if len(tls.TlsCertificates) > 0 {
			for _, c := range tls.TlsCertificates {
				common.TlsCertificates = append(common.TlsCertificates, &tlsv3.TlsCertificate{
					CertificateChain: fileSource(c.GetServerCertificate()),
					PrivateKey:       fileSource(c.GetPrivateKey()),
				})
			}
		} else {
			common.TlsCertificates = []*tlsv3.TlsCertificate{{
				CertificateChain: fileSource(tls.GetServerCertificate()),
				PrivateKey:       fileSource(tls.GetPrivateKey()),
			}}
		}
		if mutual && tls.GetCaCertificates() != "" {
			v := gatewayClientValidation(tls)
			v.TrustedCa = fileSource(tls.CaCertificates)
			common.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: v}
		}
	}
	if mode == networking.ServerTLSSettings_MUTUAL {
		ctx.RequireClientCertificate = wrapperspb.Bool(true)
	}
	if mode == networking.ServerTLSSettings_SIMPLE || mutual {
		common.TlsParams = gatewayTLSParams(tls, defaults)
	}
	return ctx
}

// gatewayClientValidation checks a client certificate as the server asks: its SANs, SPKI and hash pins, and
// the CRL, whatever the source of the CA. istiod applies the pins only with credentials and the CRL only
// without; a pin or CRL left out would accept clients the Gateway refuses. insecureSkipVerify skips the chain.
func gatewayClientValidation(tls *networking.ServerTLSSettings) *tlsv3.CertificateValidationContext {
	v := gatewaySANValidation(tls.SubjectAltNames)
	v.VerifyCertificateSpki = tls.VerifyCertificateSpki
	v.VerifyCertificateHash = tls.VerifyCertificateHash
	if tls.CaCrl != "" {
		v.Crl = fileSource(tls.CaCrl)
	}
	if tls.GetInsecureSkipVerify().GetValue() {
		v.TrustChainVerification = tlsv3.CertificateValidationContext_ACCEPT_UNTRUSTED
	}
	return v
}

// gatewayTLSParams is the server's TLS versions, ciphers and curves over the mesh's tlsDefaults (curves,
// ciphers, a minimum version of TLS 1.2 or 1.3), as istiod lays them; nil when neither sets any. Istio's
// enum values are Envoy's.
func gatewayTLSParams(tls *networking.ServerTLSSettings, defaults *meshconfig.MeshConfig_TLSConfig) *tlsv3.TlsParameters {
	p := &tlsv3.TlsParameters{EcdhCurves: defaults.GetEcdhCurves(), CipherSuites: defaults.GetCipherSuites()}
	switch defaults.GetMinProtocolVersion() {
	case meshconfig.MeshConfig_TLSConfig_TLSV1_3:
		p.TlsMinimumProtocolVersion = tlsv3.TlsParameters_TLSv1_3
	case meshconfig.MeshConfig_TLSConfig_TLSV1_2:
		p.TlsMinimumProtocolVersion = tlsv3.TlsParameters_TLSv1_2
	}
	if tls.MinProtocolVersion != networking.ServerTLSSettings_TLS_AUTO {
		p.TlsMinimumProtocolVersion = tlsv3.TlsParameters_TlsProtocol(tls.MinProtocolVersion)
	}
	if tls.MaxProtocolVersion != networking.ServerTLSSettings_TLS_AUTO {
		p.TlsMaximumProtocolVersion = tlsv3.TlsParameters_TlsProtocol(tls.MaxProtocolVersion)
	}
	if len(tls.CipherSuites) > 0 {
		p.CipherSuites = config.CipherSuites(tls.CipherSuites)
	}
	if len(tls.EcdhCurves) > 0 {
		p.EcdhCurves = tls.EcdhCurves
	}
	if proto.Equal(p, &tlsv3.TlsParameters{}) {
		return nil
	}
	return p
}

// gatewaySANValidation accepts a client certificate with any SAN (DNS, URI, IP, email) equal to one of sans,
// as istiod's untyped SAN matchers.
func gatewaySANValidation(sans []string) *tlsv3.CertificateValidationContext {
	v := &tlsv3.CertificateValidationContext{}
	for _, san := range sans {
		v.MatchSubjectAltNames = append(v.MatchSubjectAltNames, &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: san}})
	}
	return v
}

func fileSource(path string) *core.DataSource {
	return &core.DataSource{Specifier: &core.DataSource_Filename{Filename: path}}
}
