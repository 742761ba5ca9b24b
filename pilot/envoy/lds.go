package envoy

// LDS: the listeners of sidecars, gateways and proxyless gRPC clients, built the way istiod builds them,
// with these simplifications (each one deliberate; tests pin the output in testdata/lds):
//
// Sidecars get istiod's listener layout under iptables capture:
//   - virtualOutbound (0.0.0.0:15001, use_original_dst, original_dst listener filter) receives all outbound
//     traffic and hands each connection to the listener for its original destination: exact IP:port first,
//     then 0.0.0.0:port. What none takes goes through its only chain, PassthroughFilterChain, to
//     PassthroughCluster (ALLOW_ANY), or to BlackHoleCluster under REGISTRY_ONLY (the Sidecar's outbound
//     traffic policy, else the mesh config's). Sidecars with the same policy share it.
//   - One listener per outbound destination (bind_to_port false, traffic_direction OUTBOUND), each its own
//     xDS resource, so adding a service sends its new listener only (versions are content hashes):
//     "VIP_PORT" (VIP:PORT) for a service with VIPs, on its first VIP with the others as
//     additional_addresses (an address already another listener's is left to that one); "IP_PORT" per
//     endpoint address for the TCP and sniffed ports of a service without VIP that sends connections to the
//     address dialled (a headless Service, a ServiceEntry of resolution NONE without addresses), as istiod,
//     so other addresses on the port follow the outbound traffic policy (none for the sidecar's own address;
//     such a ServiceEntry with neither endpoints nor a workload selector stays on 0.0.0.0_PORT, istiod's
//     fallback); "0.0.0.0_PORT" for the HTTP chain of a port, for other services without VIP and for
//     services with an address block (CIDR), which no listener address can stand for. No 0.0.0.0_PORT is
//     built on the sidecar's own ports (15001, 15006, 15021, 15090): Envoy refuses two listeners on one
//     address (istiod skips them too). Each listener has the tls_inspector and http_inspector its chains
//     need.
//   - Addresses follow the proxy's IP family as istiod's under its defaults (addresses.go): an IPv6-only
//     proxy has [::] where the others have 0.0.0.0 (virtualOutbound, virtualInbound, the listeners without
//     a VIP, a gateway's servers), ::1 for 127.0.0.1 and ::6 for 127.0.0.6; a dual-stack proxy's listeners
//     on 0.0.0.0 (and 127.0.0.1) take [::] (::1) as an additional address, its capture listeners do not
//     (ISTIO_DUAL_STACK's), and its InboundPassthroughCluster also binds ::6. A dual-stack Kubernetes
//     Service is reached on its ClusterIPs of the proxy's family (a dual-stack proxy: of its first
//     ClusterIP's family), the others staying out of its listeners and domains; with none of that family,
//     on its first ClusterIP.
//   - Their chains keep the matches one shared capture listener needed (destination port, VIPs as prefix
//     ranges), harmless within one destination's listener. HTTP ports (HTTP, HTTP2, gRPC) match on the
//     destination port and what the http_inspector finds to be plaintext HTTP (raw_buffer, ALPN
//     http/1.0, http/1.1, h2c) and go through an HTTP connection manager whose routes come from RDS under
//     the port number ("9080"); the rest (TLS, other protocols, to an address no chain names) goes to the
//     listener's default chain, as istiod's: a TCP service without VIP on the port, else
//     PassthroughCluster (BlackHoleCluster under REGISTRY_ONLY). Outbound and gateway connection managers
//     carry istio.alpn, which offers the request's HTTP version upstream in Istio's ALPN (istio-http/1.1,
//     istio-h2), except to clusters with TLS of their own (metadata istio.alpn_override "false"). Outbound
//     listener filters have no timeout (istiod's). Other ports: a service with VIPs matches on them (/32, /128, or its
//     address block) and port; one without on the port only, the first service (by hostname) keeping a shared port. They forward with
//     tcp_proxy to the service's outbound cluster, or to the destinations of the first matching `tcp`
//     route of the VirtualService for the host (weighted_clusters for several); a route whose matches
//     all name destinationSubnets gets a chain of its own on them (prefix ranges), as istiod's, and the
//     service's chains leave out the VIPs those hold. TLS/HTTPS ports, as istiod's, take no `tcp` route
//     but get a chain per `tls` route match of the host's VirtualService (server_names = sniHosts as
//     written, prefix ranges = its destinationSubnets, which stay for the later matches), else
//     the service's own chain: on its VIPs, or without a VIP (or with an address block) for its hostname
//     only (server_names = hostname), so ServiceEntries sharing port 443 are told apart by SNI and a
//     connection naming none of them follows the outbound traffic policy (PassthroughFilterChain, as on
//     any listener no chain of which takes the whole port). A DYNAMIC_DNS ServiceEntry (a wildcard host
//     the proxy resolves per request) has dynamic forward proxy clusters (cds.go) sharing one DNS cache
//     with the filters that resolve the host: on its TLS chain an sni_dynamic_forward_proxy filter before
//     tcp_proxy; on an HTTP port a dynamic_forward_proxy HTTP filter before the router, where it is the
//     port's oldest HTTP service (whose listener istiod keeps; elsewhere the cluster resolves the host
//     itself). Ports of unknown protocol are
//     sniffed as istiod does: HTTP (http_inspector) goes through RDS under the port number like an HTTP
//     port, anything else through tcp_proxy. VirtualService tcp/tls matches on port, gateways,
//     sourceNamespace and sourceLabels are decided for the proxy, as istiod's matchTCP/matchTLS: the
//     listeners are shared by the proxies of a scope whose labels satisfy the same sourceLabels matches
//     (l4LabelKey; without such a match in the mesh, by all of them).
//   - virtualInbound (0.0.0.0:15006, the original_dst listener filter but no use_original_dst: a hand-off
//     would skip its mTLS and RBAC for a port an outbound listener also has) has chains per port of the proxy's own workload
//     (the target ports of the services selecting it, or the ports of its Sidecar's ingress listeners
//     instead (lds_sidecar_ingress.go), the same set CDS builds inbound|PORT|| clusters for, ORIGINAL_DST
//     clusters that reach the pod IP and port from 127.0.0.6 unless a defaultEndpoint or the mesh's
//     LOCALHOST inbound traffic policy names an address), HTTP through a connection
//     manager with an inline route to inbound|PORT||, anything else through tcp_proxy, and for every other
//     port passthrough chains to InboundPassthroughCluster, sniffed (HTTP through a connection manager).
//     The chains are istiod's for the port's protocol and PeerAuthentication mode (the passthrough's: the
//     workload-wide mode, or a port-level one): STRICT TLS chains only, DISABLE plaintext ones only;
//     PERMISSIVE tells mesh mTLS (TLS offering Istio's ALPN: "istio", "istio-peer-exchange",
//     "istio-http/*") from plaintext and from the application's own TLS, which a TCP or sniffed port
//     passes to the application and an HTTP port refuses. A sniffed port's HTTP chains match
//     "istio-http/*" over mTLS and "http/1.1"/"h2c" from the http_inspector in plaintext. The
//     tls_inspector and http_inspector run only on the ports whose chains need them. TLS chains terminate
//     mesh mTLS with the SDS secrets "default" and "ROOTCA" from the agent ("sds-grpc") and require a
//     client certificate. Replicas of one workload (same ports, modes and policies) share the listener.
//   - AuthorizationPolicy becomes RBAC filters on every inbound chain (package authpolicy): HTTP chains
//     get envoy.filters.http.rbac, TCP and passthrough chains envoy.filters.network.rbac with the part L4
//     can check; AUDIT policies a LOG filter ahead of them; CUSTOM policies ext_authz ahead of all.
//     RequestAuthentication becomes a jwt_authn filter between ext_authz and RBAC on the HTTP chains. What
//     could not be translated is logged at debug level; a policy made to deny because it cannot be
//     honoured, as a warning.
//
// The interception mode in the node metadata (INTERCEPTION_MODE) changes a sidecar's layout as istiod's:
//   - TPROXY: both capture listeners are transparent, and virtualInbound restores the client's address
//     upstream (original_src, mark 1337).
//   - NONE (no iptables, e.g. a VM): no capture listeners; every outbound listener binds its port on
//     127.0.0.1 (or its egress listener's bind) as under captureMode NONE (Scope.captureNone); no inbound
//     listener or cluster for the services' ports, only a listener bound to each Sidecar ingress port of
//     the default capture mode, on its bind, else the proxy's address.
//   - UNPRIVILEGED_POD: bound listeners on ports below 1024 (a sidecar's, a gateway's) are left out,
//     with a warning.
//
// Gateways (router proxies) get one listener "BIND_PORT" ("0.0.0.0_PORT" without bind) per Gateway server
// address, for the Gateways selecting the proxy's labels. PORT is where the pod receives the server's
// traffic: the target port of the first port of that number of a Service selecting the pod (unless the
// Service is labelled experimental.istio.io/disable-gateway-port-translation), else the server's port, as
// istiod; routes still match the server's port.
//   - HTTP servers share one chain: connection manager with RDS GatewayRouteName ("http.PORT").
//   - HTTPS servers (tls mode SIMPLE, MUTUAL, OPTIONAL_MUTUAL, ISTIO_MUTUAL) get a chain each,
//     server_names = the server's hosts (none for "*"), terminating TLS with the SDS secret
//     "kubernetes://CREDENTIAL" over ADS (MUTUAL also validates clients with "kubernetes://CREDENTIAL-cacert"
//     and the server's subjectAltNames, of any SAN type; ISTIO_MUTUAL uses the mesh "default" and "ROOTCA"
//     and the subjectAltNames), and RDS
//     GatewayRouteName: "https.PORT.PORTNAME.GATEWAY.NAMESPACE", istiod's name, which uses the server's
//     port name. Servers with file certificates (serverCertificate/privateKey, no credentialName) use the
//     files. minProtocolVersion and cipherSuites are not applied.
//   - TLS servers terminating TLS, and TCP servers, forward to the first `tcp` route (matching the port) of
//     a VirtualService bound to the Gateway whose hosts the server allows.
//   - PASSTHROUGH servers get a chain per `tls` route match of the VirtualServices bound to the Gateway,
//     server_names = the match's sniHosts, tcp_proxy to its destinations; a match naming a server name an
//     earlier chain took is left out whole, as istiod's. On a gateway, as istiod's, a tcp or tls match is
//     decided by its port and gateways only (sourceLabels, sourceNamespace, destinationSubnets do not
//     restrict it).
//     AUTO_PASSTHROUGH servers get a chain per mesh service port and subset their hosts cover, server_names =
//     outbound_.PORT_.SUBSET_.HOST with Istio's mTLS ALPNs, tcp_proxy to the SNI-DNAT cluster of that name
//     (CDS sends those clusters to a gateway with such a server), and no RBAC, as istiod's.
//   - The first server on an address decides between HTTP, TLS and TCP; servers of another kind there are
//     ignored (istiod's conflict rule), and an SNI name already matched by an earlier chain is left out. An
//     address left without chains has no listener (Envoy refuses one).
//   - The AuthorizationPolicies applying to the proxy (by selector on its labels, or targetRefs to the
//     Gateway API Gateway of its gateway-name label) become the same RBAC filters as on a sidecar's inbound
//     chains: every connection manager gets the HTTP ones, every TCP chain (plain, terminated or passthrough
//     TLS) the network ones, and the connection managers the jwt_authn filter of the RequestAuthentications
//     attached the same way (package authpolicy). The connection managers use the remote address, so
//     remoteIpBlocks (remote_ip) match the downstream client as the gateway sees it, ipBlocks
//     (direct_remote_ip) the peer.
//
// Proxyless gRPC clients get API listeners "HOST:PORT" (no address): every HTTP/gRPC service port in scope
// for a wildcard subscription, and the names asked for, where HOST may also be a short name ("svc",
// "svc.ns", "svc.ns.svc") completed like a pod's DNS search path; unknown names are left out. Each holds
// a connection manager with RDS over ADS, route config name = the listener name, and the router as its
// only filter (gRPC refuses unknown required filters). Proxyless gRPC servers (xDS-enabled servers) get
// the listeners "xds.istio.io/grpc/lds/inbound/IP:PORT" they ask for on the workload's ports, with its mTLS
// mode and RBAC (lds_grpc_inbound.go).

import (
	"cmp"
	"log/slog"
	"strconv"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	fault "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	router "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	httpinspector "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/http_inspector/v3"
	originaldst "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_dst/v3"
	tlsinspector "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	alpn "istio.io/api/envoy/config/filter/http/alpn/v2alpha1"

	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
)

// Listener names of sidecars, as istiod's, and the default ports of their capture listeners.
const (
	VirtualOutboundListener = "virtualOutbound"
	VirtualInboundListener  = "virtualInbound"
	VirtualOutboundPort     = 15001
	VirtualInboundPort      = 15006
)

// capturePorts are where iptables sends a sidecar's connections, as istiod reads them: the mesh config's
// proxyListenPort (outbound) and proxyInboundListenPort (inbound); the injector writes the pod's rules from
// the same mesh config. The capture listeners listen on them, and no other listener may take them.
func capturePorts(m *mesh.Config) (outbound, inbound uint32) {
	s := m.GetSpec()
	return cmp.Or(uint32(s.GetProxyListenPort()), VirtualOutboundPort), cmp.Or(uint32(s.GetProxyInboundListenPort()), VirtualInboundPort)
}

// ldsServerName is the Server header istiod's gateways and inbound listeners answer with (ProxyConfig
// proxyHeaders.server unset); outbound ones keep Envoy's own, "envoy", as istiod's do.
const ldsServerName = "istio-envoy"

// Envoy filter names.
const (
	ldsHCMFilter          = "envoy.filters.network.http_connection_manager"
	ldsTCPProxyFilterName = "envoy.filters.network.tcp_proxy"
	ldsFaultFilter        = "envoy.filters.http.fault"
	// The dynamic forward proxy filters resolve a DYNAMIC_DNS host from the request (Host header, SNI).
	ldsHTTPDynamicForwardProxyFilter = "envoy.filters.http.dynamic_forward_proxy"
	ldsSNIDynamicForwardProxyFilter  = "envoy.filters.network.sni_dynamic_forward_proxy"
	ldsRouterFilterName              = "envoy.filters.http.router"
	ldsTLSInspectorFilter            = "envoy.filters.listener.tls_inspector"
	ldsOriginalDstFilter             = "envoy.filters.listener.original_dst"
	ldsOriginalSrcFilter             = "envoy.filters.listener.original_src"
	ldsHTTPInspectorFilter           = "envoy.filters.listener.http_inspector"
	ldsTLSSocketName                 = "envoy.transport_sockets.tls"
)

// Mesh mTLS: the agent's SDS cluster and secret names (istiod's bootstrap), and the ALPN istiod's inbound
// TLS chains offer.
const (
	sdsCluster = "sds-grpc"
	sdsCert    = "default"
	sdsRoot    = "ROOTCA"
)

// The server ALPN of istiod's inbound mesh mTLS: HTTP chains offer the HTTP versions alone, so a client
// offering h2 beside Istio's protocols gets h2; TCP chains also istio-peer-exchange (metadata exchange).
var (
	ldsMeshServerHTTPALPN = []string{"h2", "http/1.1"}
	ldsMeshServerTCPALPN  = []string{"istio-peer-exchange", "h2", "http/1.1"}
)

type listenerGenerator struct{ g *Generators }

var _ model.PushFilter = listenerGenerator{}

// Generate returns the proxy's listeners: all of them for a wildcard subscription, else those named.
func (l listenerGenerator) Generate(proxy *model.Proxy, push *model.PushContext, w *model.WatchedResource,
	_ *model.PushRequest) (model.Resources, error) {
	var (
		out model.Resources
		err error
	)
	switch proxy.Type {
	case model.Sidecar:
		out, err = l.sidecarListeners(proxy, push)
	case model.Router:
		out, err = l.gatewayListeners(proxy, push)
	case model.GRPC:
		return l.grpcListeners(proxy, push, w)
	default: // ztunnel has no listeners
		return nil, nil
	}
	if err != nil || w == nil || w.Wildcard {
		return out, err
	}
	kept := out[:0:0]
	for _, r := range out {
		if wants(w, r.Name) {
			kept = append(kept, r)
		}
	}
	return kept, nil
}

// NeedsPush implements model.PushFilter: every full push, and an endpoint push to the sidecars that see a
// service whose endpoint addresses they listen on (Service.ListensOnEndpoints) when those changed. Other
// endpoint changes leave listeners alone, as do all of them for gateways and proxyless clients.
func (l listenerGenerator) NeedsPush(proxy *model.Proxy, _ *model.WatchedResource, req *model.PushRequest) bool {
	if req == nil || req.Full {
		return true
	}
	if len(req.AddressesUpdated) == 0 || proxy == nil || proxy.Type != model.Sidecar {
		return false
	}
	if req.Push == nil {
		return true // a request kept without its snapshot (distribution tracking): whom it concerns is unknown
	}
	scope := l.g.scopeFor(proxy, req.Push)
	for key := range req.AddressesUpdated {
		ns, host, _ := strings.Cut(key, "/")
		if svc := scope.Service(host); svc != nil && svc.Namespace == ns {
			return true
		}
	}
	return false
}

// ldsAny marshals m deterministically (RBAC policies are maps), so equal listeners have equal bytes and
// therefore equal versions.
func ldsAny(m proto.Message) *anypb.Any {
	a := &anypb.Any{}
	if err := anypb.MarshalFrom(a, m, proto.MarshalOptions{Deterministic: true}); err != nil {
		// Only an invalid message fails to marshal; every message here is built in this package.
		slog.Error("lds: marshal", "type", proto.MessageName(m), "err", err)
	}
	return a
}

func adsSource() *core.ConfigSource {
	return &core.ConfigSource{
		ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}},
		ResourceApiVersion:    core.ApiVersion_V3,
	}
}

func socketAddress(ip string, port uint32) *core.Address {
	return &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
		Address: ip, PortSpecifier: &core.SocketAddress_PortValue{PortValue: port}}}}
}

// ldsSDSSecret names an SDS secret served by the agent over the sds-grpc cluster.
func sdsSecret(name string) *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{Name: name, SdsConfig: &core.ConfigSource{
		ResourceApiVersion: core.ApiVersion_V3,
		ConfigSourceSpecifier: &core.ConfigSource_ApiConfigSource{ApiConfigSource: &core.ApiConfigSource{
			ApiType:             core.ApiConfigSource_GRPC,
			TransportApiVersion: core.ApiVersion_V3,
			GrpcServices: []*core.GrpcService{{TargetSpecifier: &core.GrpcService_EnvoyGrpc_{
				EnvoyGrpc: &core.GrpcService_EnvoyGrpc{ClusterName: sdsCluster}}}},
			SetNodeOnFirstMessageOnly: true,
		}},
	}}
}

// ldsADSSecret names an SDS secret served over ADS (istiod serves kubernetes:// credentials itself).
func ldsADSSecret(name string) *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{Name: name, SdsConfig: adsSource()}
}

// ldsMeshCiphers are the cipher suites istiod's inbound mesh mTLS offers: ECDHE and AES-GCM only.
var ldsMeshCiphers = []string{
	"ECDHE-ECDSA-AES256-GCM-SHA384",
	"ECDHE-RSA-AES256-GCM-SHA384",
	"ECDHE-ECDSA-AES128-GCM-SHA256",
	"ECDHE-RSA-AES128-GCM-SHA256",
	"AES256-GCM-SHA384",
	"AES128-GCM-SHA256",
}

// ldsMeshDownstreamTLS terminates mesh mTLS: the workload certificate, client certificates required,
// validated against the mesh root and holding a SPIFFE identity of one of trustDomains, the mesh's and its
// aliases (the root may sign other trust domains too, whose workloads are not this mesh's); alpn is the
// server's ALPN, params the versions and ciphers (meshMTLSParams).
func ldsMeshDownstreamTLS(trustDomains []string, alpn []string, params *tlsv3.TlsParameters) *tlsv3.DownstreamTlsContext {
	sans := make([]*matcher.StringMatcher, len(trustDomains))
	for i, td := range trustDomains {
		sans[i] = &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Prefix{Prefix: "spiffe://" + td + "/"}}
	}
	return &tlsv3.DownstreamTlsContext{
		RequireClientCertificate: wrapperspb.Bool(true),
		CommonTlsContext: &tlsv3.CommonTlsContext{
			AlpnProtocols:                  alpn,
			TlsParams:                      params,
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{sdsSecret(sdsCert)},
			ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{
				CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
					DefaultValidationContext: &tlsv3.CertificateValidationContext{
						MatchSubjectAltNames: sans,
					},
					ValidationContextSdsSecretConfig: sdsSecret(sdsRoot),
				}},
		},
	}
}

func ldsDownstreamTLSSocket(ctx *tlsv3.DownstreamTlsContext) *core.TransportSocket {
	return &core.TransportSocket{Name: ldsTLSSocketName, ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: ldsAny(ctx)}}
}

func ldsNetworkFilter(name string, m proto.Message) *listener.Filter {
	return &listener.Filter{Name: name, ConfigType: &listener.Filter_TypedConfig{TypedConfig: ldsAny(m)}}
}

func ldsListenerFilter(name string, m proto.Message) *listener.ListenerFilter {
	return &listener.ListenerFilter{Name: name, ConfigType: &listener.ListenerFilter_TypedConfig{TypedConfig: ldsAny(m)}}
}

func ldsOriginalDst() *listener.ListenerFilter {
	return ldsListenerFilter(ldsOriginalDstFilter, &originaldst.OriginalDst{})
}

func ldsHTTPFilter(name string, m proto.Message) *hcm.HttpFilter {
	return &hcm.HttpFilter{Name: name, ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: ldsAny(m)}}
}

// ldsEnvoyHTTPFilters is the tail of every Envoy connection manager, as istiod's: fault and CORS (both
// configured per route by RDS, and inert on routes that do not), then the router.
func ldsEnvoyHTTPFilters() []*hcm.HttpFilter {
	return []*hcm.HttpFilter{ldsHTTPFilter(ldsFaultFilter, &fault.HTTPFault{}),
		ldsHTTPFilter(CORSFilterName, &corsv3.Cors{}), ldsRouterFilter()}
}

func ldsRouterFilter() *hcm.HttpFilter { return ldsHTTPFilter(ldsRouterFilterName, &router.Router{}) }

// ldsALPNFilterName is Istio's ALPN override filter, built into Istio's proxy.
const ldsALPNFilterName = "istio.alpn"

// ldsALPNFilter is istiod's istio.alpn: the upstream mTLS connection offers the request's HTTP version in
// Istio's own ALPN ("istio-http/1.1", "istio-h2"), from which the server sidecar's inbound chains tell HTTP
// from TCP on a port of unknown protocol. "istio" keeps older servers matching, and the plain names give a
// server outside the mesh a protocol it knows. Clusters with TLS of their own (SIMPLE, MUTUAL) turn it off
// with the cluster metadata istio.alpn_override "false".
func ldsALPNFilter() *hcm.HttpFilter {
	return ldsHTTPFilter(ldsALPNFilterName, &alpn.FilterConfig{AlpnOverride: []*alpn.FilterConfig_AlpnOverride{
		{UpstreamProtocol: alpn.FilterConfig_HTTP10, AlpnOverride: []string{"istio-http/1.0", "istio", "http/1.0"}},
		{UpstreamProtocol: alpn.FilterConfig_HTTP11, AlpnOverride: []string{"istio-http/1.1", "istio", "http/1.1"}},
		{UpstreamProtocol: alpn.FilterConfig_HTTP2, AlpnOverride: []string{"istio-h2", "istio", "h2"}},
	}})
}

// ldsOutboundHTTPFilters ends the connection managers of sidecar outbound chains and gateways (not inbound
// ones, whose upstream is the local application): the ALPN override, then the Envoy filters.
func ldsOutboundHTTPFilters() []*hcm.HttpFilter {
	return append([]*hcm.HttpFilter{ldsALPNFilter()}, ldsEnvoyHTTPFilters()...)
}

// ldsRDSManager is a connection manager whose routes come from RDS over ADS.
func ldsRDSManager(statPrefix, routeName string, filters []*hcm.HttpFilter) *hcm.HttpConnectionManager {
	return &hcm.HttpConnectionManager{
		CodecType:  hcm.HttpConnectionManager_AUTO,
		StatPrefix: statPrefix,
		RouteSpecifier: &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{
			ConfigSource: adsSource(), RouteConfigName: routeName}},
		HttpFilters: filters,
	}
}

// ldsMeshHTTPManager applies what istiod sets on every connection manager of a sidecar or gateway:
// WebSocket upgrades allowed; no stream idle timeout (Envoy's 5 minutes would reset long polls and quiet
// gRPC streams); "Expect: 100-continue" forwarded to the upstream, which answers it; and the mesh's
// pathNormalization, so that routes and RBAC see /a/../b as /b (Envoy leaves paths as sent by default).
func ldsMeshHTTPManager(hc *hcm.HttpConnectionManager, normalization string) {
	hc.UpgradeConfigs = []*hcm.HttpConnectionManager_UpgradeConfig{{UpgradeType: "websocket"}}
	hc.StreamIdleTimeout = durationpb.New(0)
	hc.Proxy_100Continue = true
	hc.PathWithEscapedSlashesAction = hcm.HttpConnectionManager_KEEP_UNCHANGED
	switch normalization {
	case mesh.PathNormalizationNone:
		hc.NormalizePath = wrapperspb.Bool(false)
	case mesh.PathNormalizationMergeSlashes:
		hc.NormalizePath, hc.MergeSlashes = wrapperspb.Bool(true), true
	case mesh.PathNormalizationDecodeAndMergeSlashes:
		hc.NormalizePath, hc.MergeSlashes = wrapperspb.Bool(true), true
		hc.PathWithEscapedSlashesAction = hcm.HttpConnectionManager_UNESCAPE_AND_FORWARD
	default: // BASE, DEFAULT, and unset (the default)
		hc.NormalizePath = wrapperspb.Bool(true)
	}
}

// tcpProxy forwards to one cluster, or to several by weight.
func ldsTCPProxy(statPrefix string, dests []tcpDest) *tcpproxy.TcpProxy {
	tp := &tcpproxy.TcpProxy{StatPrefix: statPrefix}
	if len(dests) == 1 {
		tp.ClusterSpecifier = &tcpproxy.TcpProxy_Cluster{Cluster: dests[0].name}
		return tp
	}
	wc := &tcpproxy.TcpProxy_WeightedCluster{}
	for _, d := range dests {
		wc.Clusters = append(wc.Clusters, &tcpproxy.TcpProxy_WeightedCluster_ClusterWeight{Name: d.name, Weight: d.weight})
	}
	tp.ClusterSpecifier = &tcpproxy.TcpProxy_WeightedClusters{WeightedClusters: wc}
	return tp
}

func ldsTCPProxyFilter(statPrefix string, dests []tcpDest) *listener.Filter {
	return ldsNetworkFilter(ldsTCPProxyFilterName, ldsTCPProxy(statPrefix, dests))
}

// tcpStatPrefix is the stat_prefix of a tcp_proxy to dests: a lone destination's name under the mesh's
// outboundClusterStatName, else the first cluster's name.
func tcpStatPrefix(dests []tcpDest) string {
	if len(dests) == 1 && dests[0].stat != "" {
		return dests[0].stat
	}
	return dests[0].name
}

type tcpDest struct {
	name   string
	weight uint32
	// host and subset are the route's destination; stat its statistics' name when it is the only one
	// (nameTCPStats), "" for the cluster's name.
	host, subset, stat string
}

// nameTCPStats names the statistics of a lone destination of dests under the mesh's outboundClusterStatName,
// as istiod's: the pattern with the destination's service (as the proxy in proxyNS sees it), its subset and
// the listener's port; a host no service has keeps the cluster's name.
func nameTCPStats(push *model.PushContext, proxyNS string, dests []tcpDest, port *model.Port) {
	pattern := push.Mesh.GetSpec().GetOutboundClusterStatName()
	if pattern == "" || len(dests) != 1 || dests[0].host == "" {
		return
	}
	if svc := push.ServiceForHostname(proxyNS, dests[0].host); svc != nil {
		dests[0].stat = statPrefix(pattern, svc, dests[0].subset, port, "0")
	}
}

func ldsPortName(p uint32) string { return strconv.FormatUint(uint64(p), 10) }

// ldsInspectors returns the listener filters that find what the chains match on: the tls_inspector for
// server names and transport protocols, the http_inspector for sniffed HTTP.
func ldsInspectors(chains []*listener.FilterChain) []*listener.ListenerFilter {
	var tls, http bool
	for _, fc := range chains {
		m := fc.GetFilterChainMatch()
		// raw_buffer is what Envoy reports without the tls_inspector.
		tls = tls || len(m.GetServerNames()) > 0 || (m.GetTransportProtocol() != "" && m.GetTransportProtocol() != "raw_buffer")
		http = http || len(m.GetApplicationProtocols()) > 0
	}
	var out []*listener.ListenerFilter
	if tls {
		out = append(out, ldsListenerFilter(ldsTLSInspectorFilter, &tlsinspector.TlsInspector{}))
	}
	if http {
		out = append(out, ldsListenerFilter(ldsHTTPInspectorFilter, &httpinspector.HttpInspector{}))
	}
	return out
}
