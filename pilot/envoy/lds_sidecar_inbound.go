package envoy

import (
	"cmp"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	httpinspector "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/http_inspector/v3"
	originalsrc "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_src/v3"
	tlsinspector "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/envoy/authpolicy"
	"github.com/sextantmesh/sextant/pilot/model"
)

// inboundPort is a port of the proxy's own workload: a target port of a service selecting it, or the port
// of one of its Sidecar's ingress listeners.
type inboundPort struct {
	port     uint32
	protocol model.Protocol
	// ingress: the port is a Sidecar ingress listener's, whose cluster sends to endpoint (below) whatever
	// the mesh's inbound traffic policy; bind names its chains (capture, not bind, decides what arrives).
	ingress bool
	bind    string
	// bound: istiod binds a listener of its own on the port instead of a chain on the capture listener: the
	// ingress listener's captureMode is NONE, or DEFAULT for a proxy that captures nothing.
	bound bool
	// endpoint is where the port's inbound cluster sends: "" the connection's original destination, else
	// an IP or unix://PATH (an ingress listener's defaultEndpoint, resolved); endpointPort is its port.
	endpoint     string
	endpointPort uint32
	// skipCluster: the defaultEndpoint cannot be read, and istiod then builds no cluster for the port.
	skipCluster bool
	// pool is the Sidecar's connection pool for the port's cluster (nil for none).
	pool *networking.ConnectionPoolSettings
	// svc is the first service reaching the port (nil for none), whose DestinationRule's connection pool
	// for svcPort the cluster takes when the Sidecar sets none, as istiod's.
	svc     *model.Service
	svcPort uint32
}

// proxyWorkload finds the proxy's workload and the labels its policies select on: the node's labels, else
// the workload's.
func proxyWorkload(proxy *model.Proxy, push *model.PushContext) (*model.Workload, map[string]string) {
	var w *model.Workload
	for _, ip := range proxy.IPAddresses {
		if w = push.WorkloadByAddress(push.Mesh.Network, ip); w != nil {
			break
		}
	}
	labels := proxy.Labels
	if w != nil && len(labels) == 0 {
		labels = w.Labels
	}
	return w, labels
}

// ldsReservedPorts are the sidecar's own ports besides the capture ports (capturePorts); traffic to them is
// never application traffic.
var ldsReservedPorts = map[uint32]bool{15000: true, 15004: true, 15008: true, 15020: true, 15021: true, 15053: true, 15090: true}

// reserved reports whether port is one of the sidecar's own: its capture listeners' (the mesh's, as istiod's
// conflict check) or another of ldsReservedPorts.
func (in inboundInputs) reserved(port uint32) bool {
	return ldsReservedPorts[port] || port == in.capture[0] || port == in.capture[1]
}

// inboundPortsInputs is what a sidecar's inbound ports depend on besides the proxy itself (whose labels and
// addresses are fixed): its namespace's services, a slice replaced whenever one of them changes, its
// workload, and the Sidecar applying to it (ingress listeners, connection pools).
type inboundPortsInputs struct {
	services *(*model.Service)
	n        int
	workload *model.Workload
	sidecar  *config.Config
}

// sidecarInboundPortsOf is sidecarInboundPorts for proxy, kept while its inputs stand: CDS and LDS ask on
// every push, and a service added in another namespace changes nothing here. For an Envoy sidecar whose
// Sidecar has ingress listeners, those listeners' ports replace the services' (sidecarIngressPorts).
func (g *Generators) sidecarInboundPortsOf(proxy *model.Proxy, push *model.PushContext) (*model.Workload,
	map[string]string, []inboundPort) {
	w, labels := proxyWorkload(proxy, push)
	svcs := push.ServicesInNamespace(proxy.Namespace)
	in := inboundPortsInputs{n: len(svcs), workload: w}
	if len(svcs) > 0 {
		in.services = &svcs[0]
	}
	if proxy.Type == model.Sidecar {
		// The scope's Sidecar: the one chosen by the node's labels, as for the outbound side.
		in.sidecar = push.Sidecar(proxy.Namespace, proxy.Labels)
	}
	ports, _ := g.inboundPorts.GetOrBuild(proxy, in, func() ([]inboundPort, error) {
		ports := sidecarInboundPorts(push, proxy.Namespace, w, labels)
		none := capturesNothing(proxy)
		if in.sidecar != nil && len(in.sidecar.Spec.(*networking.Sidecar).Ingress) > 0 {
			return sidecarIngressPorts(in.sidecar.Spec.(*networking.Sidecar), proxy.IPAddresses, ports, none), nil
		}
		if none {
			// As istiod: without capture a listener on a service's port would take the workload's own port
			// from it, so only a Sidecar's ingress listeners (with their defaultEndpoint) make inbound ports.
			return nil, nil
		}
		if in.sidecar != nil {
			withInboundPool(ports, in.sidecar.Spec.(*networking.Sidecar).GetInboundConnectionPool())
		}
		return ports, nil
	})
	return w, labels, ports
}

// sidecarInboundPorts lists the workload ports of the services selecting the proxy (their target port,
// a named one resolved through the workload's container ports), the first service naming a port deciding
// its protocol. These are the ports CDS builds inbound|PORT|| clusters for.
func sidecarInboundPorts(push *model.PushContext, ns string, w *model.Workload, labels map[string]string) []inboundPort {
	seen := map[uint32]bool{}
	var out []inboundPort
	for _, svc := range push.ServicesInNamespace(ns) {
		if len(svc.Selector) == 0 || !selectorMatch(svc.Selector, labels) {
			continue
		}
		for _, p := range svc.Ports {
			target := p.Port
			switch {
			case p.TargetPort != 0:
				target = p.TargetPort
			case p.TargetPortName != "" && w != nil:
				if n, ok := w.ContainerPorts[p.TargetPortName]; ok {
					target = n
				}
			}
			if !seen[target] {
				seen[target] = true
				out = append(out, inboundPort{port: target, protocol: p.Protocol, svc: svc, svcPort: p.Port})
			}
		}
	}
	slices.SortFunc(out, func(a, b inboundPort) int { return cmp.Compare(a.port, b.port) })
	return out
}

func selectorMatch(selector, labels map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

type inboundInputs struct {
	ports    []inboundPort
	mtls     model.EffectiveMTLS
	policies model.AuthorizationPolicies
	env      authpolicy.Env
	paths    string // mesh pathNormalization
	// tproxy: the capture is TPROXY, which keeps the client's address: the capture listener is transparent
	// and restores it upstream (original_src), as istiod's.
	tproxy bool
	family cluster.Cluster_DnsLookupFamily // the proxy's (dnsLookupFamily): the listener's address
	// mtlsParams: mesh mTLS's versions and ciphers (the mesh config's meshMTLS); detection: how long the
	// inspectors wait for the client's first bytes (protocolDetectionTimeout).
	mtlsParams *tlsv3.TlsParameters
	detection  *durationpb.Duration
	// tcpStats: the stat_prefix of each port's tcp_proxy under the mesh's inboundClusterStatName (none:
	// the cluster's name); passthroughStat the passthrough chains'.
	tcpStats        map[uint32]string
	passthroughStat string
	// capture: the mesh's capture ports, outbound and inbound; virtualInbound listens on the second.
	capture [2]uint32
	headers proxyHeaders // the proxy's proxyHeaders, which its connection managers follow
}

func (in inboundInputs) describe(ns string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%s|%s|%s|%t|%s/%s|%s|%v|", ns, in.env.Describe(), in.mtls.Mode, in.paths, in.tproxy,
		in.mtlsParams.GetTlsMinimumProtocolVersion(), strings.Join(in.mtlsParams.GetCipherSuites(), ":"), in.detection.AsDuration(),
		in.capture)
	b.WriteString(in.headers.String())
	if in.family != cluster.Cluster_V4_ONLY {
		b.WriteString("v6|") // the listener's address
	}
	for _, p := range in.ports {
		fmt.Fprintf(&b, "%d/%s/%s/%s/%t/%s,", p.port, p.protocol, in.mtls.ModeForPort(p.port), p.bind, p.bound, in.tcpStats[p.port])
	}
	// Port-level modes on other ports have passthrough chains of their own.
	for _, port := range slices.Sorted(maps.Keys(in.mtls.PortModes)) {
		fmt.Fprintf(&b, "%d=%s,", port, in.mtls.PortModes[port])
	}
	b.WriteString(in.passthroughStat)
	b.WriteString(authpolicy.DescribePolicies(in.policies))
	return b.String()
}

// inboundInputsOf gathers what the proxy's inbound listeners are built from.
func (l listenerGenerator) inboundInputsOf(proxy *model.Proxy, push *model.PushContext) inboundInputs {
	_, labels, ports := l.g.sidecarInboundPortsOf(proxy, push)
	in := inboundInputs{
		ports:           ports,
		mtls:            push.PeerAuthentication(proxy.Namespace, labels),
		policies:        push.AuthorizationPolicies(proxy.Namespace, labels),
		paths:           push.Mesh.PathNormalization.Normalization,
		tproxy:          proxy.InterceptionMode == model.InterceptTPROXY,
		family:          dnsLookupFamily(proxy.IPAddresses),
		mtlsParams:      meshMTLSParams(push.Mesh),
		detection:       meshDetectionTimeout(push.Mesh),
		tcpStats:        map[uint32]string{},
		passthroughStat: inboundPassthroughStatPrefix(push.Mesh),
	}
	in.capture[0], in.capture[1] = capturePorts(push.Mesh)
	in.headers = proxyHeadersOf(proxy, push.Mesh)
	if push.Mesh.GetSpec().GetInboundClusterStatName() != "" {
		sidecar := push.Sidecar(proxy.Namespace, proxy.Labels) // names a Sidecar ingress port's statistics
		for _, p := range ports {
			in.tcpStats[p.port] = inboundTCPStatPrefix(push.Mesh, p, sidecar)
		}
	}
	in.env = authpolicy.NewEnv(push, in.policies, OutboundClusterName)
	in.env.JWT = authpolicy.NewJWTAuthn(push, proxy.Namespace, labels, false)
	return in
}

func (l listenerGenerator) inboundListener(proxy *model.Proxy, push *model.PushContext) (*model.Resource, error) {
	in := l.inboundInputsOf(proxy, push)
	return l.g.cached(inboundListenerKey{push.PoliciesID(), in.describe(proxy.Namespace)}, VirtualInboundListener, func() proto.Message {
		lis, notes := buildVirtualInbound(in)
		authpolicy.LogNotes(notes, "namespace", proxy.Namespace, "proxy", proxy.ID)
		return lis
	})
}

// boundInboundListeners returns, sorted by name, a listener bound to each inbound port that is bound (a
// Sidecar ingress listener's under captureMode NONE, or under the default capture for a proxy that
// captures nothing), as istiod's inboundCustomListener: on the ingress listener's bind, else the proxy's
// first global unicast address, else the unspecified address of its family, with the port's chains as virtualInbound would have them.
func (l listenerGenerator) boundInboundListeners(proxy *model.Proxy, push *model.PushContext) model.Resources {
	in := l.inboundInputsOf(proxy, push)
	var out model.Resources
	var desc string
	for _, p := range in.ports {
		if !p.bound || in.reserved(p.port) {
			continue
		}
		if proxy.Unprivileged && p.port < 1024 {
			slog.Warn("inbound listener left out: the proxy is unprivileged (UNPRIVILEGED_POD) and cannot bind a port below 1024",
				"proxy", proxy.ID, "port", p.port)
			continue
		}
		if desc == "" {
			desc = in.describe(proxy.Namespace)
		}
		bind := cmp.Or(p.bind, globalUnicastIP(proxy.IPAddresses), wildcardIP(in.family))
		name := bind + "_" + ldsPortName(p.port)
		r, err := l.g.cached(inboundListenerKey{push.PoliciesID(), desc + "|bound " + name}, name, func() proto.Message {
			lis, notes := buildBoundInbound(in, p, bind)
			authpolicy.LogNotes(notes, "namespace", proxy.Namespace, "proxy", proxy.ID)
			return lis
		})
		if err != nil {
			slog.Warn("inbound listener left out: it cannot be marshaled", "proxy", proxy.ID, "listener", name, "error", err)
			continue
		}
		out = append(out, r)
	}
	sortByName(out)
	return out
}

// globalUnicastIP is the first of ips that is a global unicast address (istiod's GlobalUnicastIP), "" for none.
func globalUnicastIP(ips []string) string {
	for _, ip := range ips {
		if a, err := netip.ParseAddr(ip); err == nil && a.IsGlobalUnicast() {
			return ip
		}
	}
	return ""
}

// inboundPortChains builds the chains of the workload port p: those of its protocol and mTLS mode, as
// istiod's (pilot/pkg/networking/core/filterchain_options.go).
func inboundPortChains(in inboundInputs, p inboundPort, httpRBAC []*hcm.HttpFilter, tcpRBAC []*listener.Filter) []*listener.FilterChain {
	cluster := InboundClusterName(p.port)
	// istiod names a chain by its bind address and port: names only, the match is the port.
	bind := cmp.Or(p.bind, wildcardIP(in.family))
	chainName := "inbound_" + bind + "_" + ldsPortName(p.port)
	manager := ldsInboundManager(cluster, chainName, ldsPortName(p.port), p.protocol, httpRBAC)
	in.headers.applyInbound(manager)
	ldsMeshHTTPManager(manager, in.paths)
	filters := inboundFilters{
		http: []*listener.Filter{ldsNetworkFilter(ldsHCMFilter, manager)},
		tcp:  append(slices.Clone(tcpRBAC), ldsTCPProxyFilter(cmp.Or(in.tcpStats[p.port], cluster), []tcpDest{{name: cluster, weight: 100}})),
	}
	kind := inboundSniffed
	switch {
	case p.protocol.IsHTTP():
		kind = inboundHTTP
	case p.protocol != model.ProtocolUnset:
		kind = inboundTCP
	}
	return inboundChains(chainName, wrapperspb.UInt32(p.port), inboundChainOptions(kind, in.mtls.ModeForPort(p.port)),
		meshMTLSOf(in), filters)
}

// buildBoundInbound builds the listener bound to bind and the inbound port p, istiod's inboundCustomListener:
// the port's chains, the inspectors they need, and no original_dst (nothing redirected the connection).
func buildBoundInbound(in inboundInputs, p inboundPort, bind string) (*listener.Listener, []string) {
	httpRBAC, notes := authpolicy.HTTPFilters(in.policies, in.env)
	tcpRBAC, tcpNotes := authpolicy.TCPFilters(in.policies, in.env)
	chains := inboundPortChains(in, p, httpRBAC, tcpRBAC)
	return &listener.Listener{
		Name:                             bind + "_" + ldsPortName(p.port),
		Address:                          socketAddress(bind, p.port),
		TrafficDirection:                 core.TrafficDirection_INBOUND,
		ListenerFilters:                  inboundInspectors(chains),
		ListenerFiltersTimeout:           in.detection, // as on virtualInbound
		ContinueOnListenerFiltersTimeout: true,
		FilterChains:                     chains,
	}, append(notes, tcpNotes...)
}

// buildVirtualInbound builds the inbound capture listener, and notes on policies it could not translate.
// Its chains are istiod's (pilot/pkg/networking/core/filterchain_options.go): per workload port, those of
// the port's protocol and mTLS mode; for any other port, sniffed passthrough chains in the mesh's mode (and
// in its own mode for a port a PeerAuthentication names).
func buildVirtualInbound(in inboundInputs) (*listener.Listener, []string) {
	httpRBAC, notes := authpolicy.HTTPFilters(in.policies, in.env)
	tcpRBAC, tcpNotes := authpolicy.TCPFilters(in.policies, in.env)
	notes = append(notes, tcpNotes...)

	var chains []*listener.FilterChain
	declared := map[uint32]bool{}
	for _, p := range in.ports {
		if in.reserved(p.port) || p.bound {
			continue
		}
		declared[p.port] = true
		chains = append(chains, inboundPortChains(in, p, httpRBAC, tcpRBAC)...)
	}

	manager := ldsInboundManager(InboundPassthroughCluster, InboundPassthroughCluster, "0", model.ProtocolUnset, httpRBAC)
	in.headers.applyInbound(manager)
	ldsMeshHTTPManager(manager, in.paths)
	passthrough := inboundFilters{
		http: []*listener.Filter{ldsNetworkFilter(ldsHCMFilter, manager)},
		tcp: append(slices.Clone(tcpRBAC), ldsTCPProxyFilter(cmp.Or(in.passthroughStat, InboundPassthroughCluster),
			[]tcpDest{{name: InboundPassthroughCluster, weight: 100}})),
	}
	// A connection to the capture port itself goes nowhere, as istiod's virtualInbound-blackhole: it would loop.
	chains = append(chains, blackholeChain(VirtualInboundListener+"-blackhole", in.capture[1]))
	chains = append(chains, inboundChains("inbound_passthrough", nil, inboundChainOptions(inboundSniffed, in.mtls.Mode),
		meshMTLSOf(in), passthrough)...)
	// A port-level mTLS mode on a port no service declares governs that port's passthrough, as in istiod.
	for _, port := range slices.Sorted(maps.Keys(in.mtls.PortModes)) {
		if declared[port] || in.reserved(port) {
			continue
		}
		chains = append(chains, inboundChains("inbound_passthrough_"+ldsPortName(port), wrapperspb.UInt32(port),
			inboundChainOptions(inboundSniffed, in.mtls.PortModes[port]), meshMTLSOf(in), passthrough)...)
	}

	filters := []*listener.ListenerFilter{ldsOriginalDst()}
	if in.tproxy {
		// TPROXY keeps the client's address: original_src binds the upstream connection to it (marked
		// 1337, which Istio's rules route back through the proxy), as istiod's.
		filters = append(filters, ldsListenerFilter(ldsOriginalSrcFilter, &originalsrc.OriginalSrc{Mark: tproxyMark}))
	}
	// No use_original_dst (istiod has none either): it would hand a connection to the outbound listener
	// 0.0.0.0_PORT of any service on the same port, past this listener's mTLS and RBAC. The original_dst
	// listener filter alone restores the destination the chains match on.
	return &listener.Listener{
		Name:             VirtualInboundListener,
		Address:          socketAddress(wildcardIP(in.family), in.capture[1]),
		Transparent:      transparentFor(in.tproxy),
		TrafficDirection: core.TrafficDirection_INBOUND,
		ListenerFilters:  append(filters, inboundInspectors(chains)...),
		// The mesh's protocolDetectionTimeout, as istiod's (0 by default: the inspectors wait for the client's
		// first bytes, so a server-first protocol must be declared on its port); then the connection goes on.
		ListenerFiltersTimeout:           in.detection,
		ContinueOnListenerFiltersTimeout: true,
		FilterChains:                     chains,
	}, notes
}

// tproxyMark is the socket mark istiod's original_src sets under TPROXY capture.
const tproxyMark = 1337

// transparentFor is a listener's transparent setting: set (true) for TPROXY capture, else Envoy's default.
func transparentFor(transparent bool) *wrapperspb.BoolValue {
	if transparent {
		return wrapperspb.Bool(true)
	}
	return nil
}

// inboundKind is how an inbound port's protocol decides its chains.
type inboundKind int

const (
	inboundTCP     inboundKind = iota
	inboundHTTP                // the connection manager on every chain
	inboundSniffed             // no protocol declared: HTTP by ALPN or the http_inspector, anything else TCP
)

// inboundChainOption is one filter chain istiod builds for an inbound port: the transport protocol and
// application protocols it takes, whether it runs the connection manager (else tcp_proxy), and whether it
// terminates mesh mTLS (else the bytes go to the application as they came).
type inboundChainOption struct {
	suffix    string
	transport string
	alpn      []string
	http      bool
	mtls      bool
}

// The application protocols istiod's inbound chains match (pilot/pkg/networking/core/listener.go): what a
// client sidecar's ALPN says over mesh mTLS (istio-http/* for HTTP it detected, istio-peer-exchange and
// istio otherwise), and what the http_inspector reports for plaintext (HTTP/1.0 is left to the TCP chain,
// which the connection manager would refuse).
var (
	ldsInboundPlainHTTPALPN = []string{"http/1.1", "h2c"}
	ldsInboundMTLSHTTPALPN  = []string{"istio-http/1.0", "istio-http/1.1", "istio-h2"}
	ldsInboundMTLSTCPALPN   = []string{"istio-peer-exchange", "istio"}
	ldsInboundMTLSALPN      = []string{"istio", "istio-peer-exchange", "istio-http/1.0", "istio-http/1.1", "istio-h2"}
)

// inboundChainOptions are istiod's chains for a port of kind in mode. Under PERMISSIVE only TLS offering
// Istio's ALPN is mesh mTLS; other TLS is the application's own: on a TCP or sniffed port it passes to the
// application untouched, on an HTTP port no chain takes it. STRICT has TLS chains alone; DISABLE none.
func inboundChainOptions(kind inboundKind, mode model.MTLSMode) []inboundChainOption {
	const tls, raw = "tls", "raw_buffer"
	switch kind {
	case inboundHTTP:
		switch mode {
		case model.MTLSStrict:
			return []inboundChainOption{{"_tls", tls, nil, true, true}}
		case model.MTLSDisable:
			return []inboundChainOption{{"_plaintext", raw, nil, true, false}}
		}
		return []inboundChainOption{{"_tls", tls, ldsInboundMTLSALPN, true, true}, {"_plaintext", raw, nil, true, false}}
	case inboundSniffed:
		switch mode {
		case model.MTLSStrict:
			return []inboundChainOption{{"_http_tls", tls, ldsInboundMTLSHTTPALPN, true, true}, {"_tls", tls, nil, false, true}}
		case model.MTLSDisable:
			return []inboundChainOption{{"_http_plaintext", raw, ldsInboundPlainHTTPALPN, true, false}, {"_plaintext", raw, nil, false, false}}
		}
		return []inboundChainOption{
			{"_http_tls", tls, ldsInboundMTLSHTTPALPN, true, true},
			{"_http_plaintext", raw, ldsInboundPlainHTTPALPN, true, false},
			{"_tls", tls, ldsInboundMTLSTCPALPN, false, true},
			{"_plaintext", raw, nil, false, false},
			{"_app_tls", tls, nil, false, false},
		}
	}
	switch mode {
	case model.MTLSStrict:
		return []inboundChainOption{{"_tls", tls, nil, false, true}}
	case model.MTLSDisable:
		return []inboundChainOption{{"_plaintext", raw, nil, false, false}}
	}
	return []inboundChainOption{{"_tls", tls, ldsInboundMTLSALPN, false, true}, {"_app_tls", tls, nil, false, false},
		{"_plaintext", raw, nil, false, false}}
}

// inboundFilters are a port's network filters: the connection manager's (with the HTTP RBAC) and tcp_proxy's
// (with the L4 RBAC).
type inboundFilters struct{ http, tcp []*listener.Filter }

// meshMTLS is how a sidecar terminates mesh mTLS: client certificates of trustDomains, TLS params.
type meshMTLS struct {
	trustDomains []string
	params       *tlsv3.TlsParameters
}

func meshMTLSOf(in inboundInputs) meshMTLS {
	return meshMTLS{trustDomains: in.env.TrustDomains(), params: in.mtlsParams}
}

// inboundChains builds the chains of opts for one port (nil: any port), terminating mesh mTLS as mt says.
func inboundChains(name string, port *wrapperspb.UInt32Value, opts []inboundChainOption, mt meshMTLS,
	filters inboundFilters) []*listener.FilterChain {
	out := make([]*listener.FilterChain, 0, len(opts))
	for _, o := range opts {
		fc := &listener.FilterChain{
			Name:             name + o.suffix,
			FilterChainMatch: &listener.FilterChainMatch{DestinationPort: port, TransportProtocol: o.transport, ApplicationProtocols: o.alpn},
			Filters:          filters.tcp,
		}
		if o.http {
			fc.Filters = filters.http
		}
		if o.mtls {
			// istiod's server ALPN: HTTP and TCP as the client offers them, and metadata exchange over TCP.
			alpn := ldsMeshServerTCPALPN
			if o.http {
				alpn = ldsMeshServerHTTPALPN
			}
			fc.TransportSocket = ldsDownstreamTLSSocket(ldsMeshDownstreamTLS(mt.trustDomains, alpn, mt.params))
		}
		out = append(out, fc)
	}
	return out
}

// inboundInspectors are the listener filters the chains need, each enabled only on the ports whose chains
// match on what it detects, as istiod's: the tls_inspector where a chain matches TLS, the http_inspector
// where one matches HTTP by ALPN (it waits for the client's first bytes). Port-less chains decide every
// other port.
func inboundInspectors(chains []*listener.FilterChain) []*listener.ListenerFilter {
	type need struct{ tls, http bool }
	byPort := map[uint32]need{}
	for _, fc := range chains {
		m := fc.GetFilterChainMatch()
		n := byPort[m.GetDestinationPort().GetValue()]
		n.tls = n.tls || m.GetTransportProtocol() == "tls"
		n.http = n.http || slices.ContainsFunc(m.GetApplicationProtocols(), func(p string) bool { return p == "http/1.1" || p == "h2c" })
		byPort[m.GetDestinationPort().GetValue()] = n
	}
	inspector := func(name string, m proto.Message, needs func(need) bool) *listener.ListenerFilter {
		var on, off []uint32
		for _, port := range slices.Sorted(maps.Keys(byPort)) {
			switch {
			case port == 0:
			case needs(byPort[port]):
				on = append(on, port)
			default:
				off = append(off, port)
			}
		}
		f := ldsListenerFilter(name, m)
		if needs(byPort[0]) {
			f.FilterDisabled = ldsPortsMatch(off) // on but for the ports none of whose chains need it
		} else if len(on) == 0 {
			return nil
		} else {
			f.FilterDisabled = &listener.ListenerFilterChainMatchPredicate{
				Rule: &listener.ListenerFilterChainMatchPredicate_NotMatch{NotMatch: ldsPortsMatch(on)}}
		}
		return f
	}
	var out []*listener.ListenerFilter
	// The tls_inspector comes first: the http_inspector leaves a connection it found to be TLS alone.
	if f := inspector(ldsTLSInspectorFilter, &tlsinspector.TlsInspector{}, func(n need) bool { return n.tls }); f != nil {
		out = append(out, f)
	}
	if f := inspector(ldsHTTPInspectorFilter, &httpinspector.HttpInspector{}, func(n need) bool { return n.http }); f != nil {
		out = append(out, f)
	}
	return out
}

// ldsPortsMatch matches connections to any of ports (nil when there are none: no connection).
func ldsPortsMatch(ports []uint32) *listener.ListenerFilterChainMatchPredicate {
	var ranges []*listener.ListenerFilterChainMatchPredicate
	for _, p := range ports {
		ranges = append(ranges, &listener.ListenerFilterChainMatchPredicate{
			Rule: &listener.ListenerFilterChainMatchPredicate_DestinationPortRange{
				DestinationPortRange: &typev3.Int32Range{Start: int32(p), End: int32(p) + 1}}}) // [start, end)
	}
	switch len(ranges) {
	case 0:
		return nil
	case 1:
		return ranges[0]
	}
	return &listener.ListenerFilterChainMatchPredicate{Rule: &listener.ListenerFilterChainMatchPredicate_OrMatch{
		OrMatch: &listener.ListenerFilterChainMatchPredicate_MatchSet{Rules: ranges}}}
}

// ldsInboundManager sends every request to cluster (the workload port's, or the passthrough for other
// ports), after the RBAC filters, with istiod's inbound default route: no timeout, a gRPC client's
// grpc-timeout header honoured, and a request retried twice when the connection to the application resets
// before it is sent (not on gRPC ports, where a stream may be reset after part of it went out).
func ldsInboundManager(cluster, statPrefix, portName string, protocol model.Protocol, rbac []*hcm.HttpFilter) *hcm.HttpConnectionManager {
	var retry *route.RetryPolicy
	if protocol != model.ProtocolGRPC {
		retry = &route.RetryPolicy{RetryOn: "reset-before-request", NumRetries: wrapperspb.UInt32(2)}
	}
	filters := append(slices.Clone(rbac), ldsEnvoyHTTPFilters()...)
	return &hcm.HttpConnectionManager{
		CodecType:  hcm.HttpConnectionManager_AUTO,
		StatPrefix: statPrefix,
		RouteSpecifier: &hcm.HttpConnectionManager_RouteConfig{RouteConfig: &route.RouteConfiguration{
			Name: cluster,
			VirtualHosts: []*route.VirtualHost{{
				Name:    "inbound|http|" + portName,
				Domains: []string{"*"},
				Routes: []*route.Route{{
					Name:  "default",
					Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
					Action: &route.Route_Route{Route: &route.RouteAction{
						ClusterSpecifier: &route.RouteAction_Cluster{Cluster: cluster},
						Timeout:          durationpb.New(0),
						MaxStreamDuration: &route.RouteAction_MaxStreamDuration{
							MaxStreamDuration: durationpb.New(0), GrpcTimeoutHeaderMax: durationpb.New(0)},
						RetryPolicy: retry,
					}},
					Decorator: &route.Decorator{Operation: cluster + "/*"},
				}},
			}},
			ValidateClusters: wrapperspb.Bool(false),
		}},
		HttpFilters:              filters,
		ServerName:               ldsServerName,
		ForwardClientCertDetails: hcm.HttpConnectionManager_APPEND_FORWARD,
		SetCurrentClientCertDetails: &hcm.HttpConnectionManager_SetCurrentClientCertDetails{
			Subject: wrapperspb.Bool(true), Dns: true, Uri: true},
	}
}
