package envoy

import (
	"math"
	"strconv"
	"strings"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	dfpcluster "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/dynamic_forward_proxy/v3"
	dfpcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/dynamic_forward_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
)

// defaultConnectTimeout is istiod's default (meshConfig.connectTimeout).
const defaultConnectTimeout = 10 * time.Second

type clusterGenerator struct{ g *Generators }

// Generate returns the proxy's clusters: outbound for every service port in scope (and every DestinationRule
// subset), inbound for the proxy's own ports, and the BlackHole/Passthrough clusters.
func (c clusterGenerator) Generate(proxy *model.Proxy, push *model.PushContext, w *model.WatchedResource,
	_ *model.PushRequest) (model.Resources, error) {
	g := c.g
	scope := g.scopeFor(proxy, push)
	flavor := flavorOf(proxy)
	// DestinationRules with a workloadSelector apply only to the proxies they select: proxies that share a
	// selection (usually none) share the cluster list.
	variant := strconv.Itoa(int(flavor))
	who := proxyView{router: proxy.Type == model.Router, dnsFamily: dnsLookupFamily(proxy.IPAddresses)}
	if who.router {
		variant += "gw"
		if hasAutoPassthrough(push.Gateways(proxy.Labels)) {
			who.sniDNAT = true
			variant += "sni"
		}
	}
	if who.dnsFamily != cluster.Cluster_V4_ONLY {
		variant += "\x00" + who.dnsFamily.String() // DNS clusters resolve the proxy's own family
	}
	if sel := push.DestinationRuleSelection(scope.Namespace, proxy.Labels); sel != "" {
		// Without a selection labels stay nil: the proxy is built as any proxy of the namespace.
		variant += "\x00" + sel
		who.labels = proxy.Labels
	}
	var out model.Resources
	if w.Wildcard {
		// Every proxy of a namespace under one Sidecar gets the same outbound clusters: share the list.
		id := listID{kind: "cds", namespace: scope.Namespace, sidecar: scope.Sidecar, captureNone: scope.captureNone, variant: variant}
		in := clusterInputs{scope: scope, push: push, flavor: flavor, who: who, gen: c}
		built, err := g.clusterLists.GetOrBuild(id, outboundClusterInputs.Key(in), func() (*outboundClusters, error) {
			prev, _ := g.clusterLists.Latest(id)
			return outboundClusterPlan.Next(prev, in)
		})
		if err != nil {
			return nil, err
		}
		out = built.Items // shared and never modified: the extras below are merged into a new list
	} else {
		list, err := c.outbound(scope, push, flavor, who, w)
		if err != nil {
			return nil, err
		}
		out = list
	}
	if flavor == flavorGRPC {
		return out, nil
	}
	var extra model.Resources // merged in below, keeping the output sorted by name
	if proxy.Type == model.Sidecar {
		_, _, ports := g.sidecarInboundPortsOf(proxy, push)
		sidecar := push.Sidecar(proxy.Namespace, proxy.Labels) // names a Sidecar ingress port's statistics
		for _, ip := range ports {
			name := InboundClusterName(ip.port)
			if !wants(w, name) || ip.skipCluster {
				continue
			}
			pool := ip.pool
			if pool == nil && ip.svc != nil {
				// istiod's inbound clusters take the connection pool of the DestinationRule for the service
				// (neither its outlier detection nor its load balancer or TLS); the Sidecar's replaces it.
				pool = inboundRulePool(push.DestinationRule(proxy.Namespace, ip.svc), ip.svcPort)
			}
			if pool == nil {
				// As istiod: the mesh's default pool under the rule's and the Sidecar's, so the receiver's
				// limits match what its clients may send.
				pool = push.Mesh.GetSpec().GetDefaultTrafficPolicy().GetConnectionPool()
			}
			key := inboundClusterKey{port: ip.port, protocol: ip.protocol, endpoint: ip.endpoint, endpointPort: ip.endpointPort, pool: pool,
				family: who.dnsFamily, mesh: push.Mesh, statName: inboundStatName(push.Mesh, ip, sidecar)}
			if !ip.ingress && push.Mesh.InboundTrafficPolicy.Mode == mesh.InboundLocalhost {
				// The mesh's inbound traffic policy LOCALHOST sends a service's port to the loopback (127.0.0.1, ::1
				// for an IPv6-only proxy) at PORT; a Sidecar ingress listener's defaultEndpoint alone decides its own.
				key.endpoint, key.endpointPort = loopbackIP(who.dnsFamily), ip.port
			}
			r, err := g.cached(key, name, func() proto.Message { return buildInboundCluster(key) })
			if err != nil {
				return nil, err
			}
			extra = append(extra, r)
		}
	}
	static := []string{BlackHoleCluster, PassthroughCluster, InboundPassthroughCluster}
	if proxy.Type == model.Router {
		static = static[:1] // as istiod's: a gateway has no capture listener to pass unknown traffic through
	}
	for _, name := range static {
		if !wants(w, name) {
			continue
		}
		key := staticClusterKey{name: name, mesh: push.Mesh}
		if name == InboundPassthroughCluster {
			key.family, key.dual = who.dnsFamily, ipModeOf(proxy.IPAddresses) == dualStack
		}
		r, err := g.cached(key, name, func() proto.Message { return buildStaticCluster(key) })
		if err != nil {
			return nil, err
		}
		extra = append(extra, r)
	}
	sortByName(extra)
	if w.Wildcard {
		return g.sharedMerge(listID{
			kind: "cds+own", namespace: scope.Namespace, sidecar: scope.Sidecar, captureNone: scope.captureNone, variant: variant,
		}, out, extra), nil
	}
	return mergeByName(out, extra), nil
}

// inferFromEndpoints reports whether istiod decides auto mTLS for a cluster of svc from its endpoints
// (BestEffortInferServiceMTLSMode): for resolution NONE, or when the policy it reads says PASSTHROUGH. That
// policy is the rule's top level for the service's cluster and the subset's own for a subset's, neither
// port-level: a subset cluster that is original destination only by its rule's top level gets mesh mTLS
// to every address, as istiod's.
func inferFromEndpoints(svc *model.Service, dr *model.DestinationRule, subset string) bool {
	if svc.MeshExternal {
		return false
	}
	if svc.Resolution == model.Passthrough {
		return true
	}
	if dr == nil {
		return false
	}
	tp := dr.Spec.GetTrafficPolicy()
	if subset != "" {
		tp = nil
		for _, ss := range dr.Spec.GetSubsets() {
			if ss.GetName() == subset {
				tp = ss.GetTrafficPolicy()
				break
			}
		}
	}
	return tp.GetLoadBalancer().GetSimple() == networking.LoadBalancerSettings_PASSTHROUGH
}

// followsEndpoints reports whether some cluster of svc under dr depends on svc's endpoints: it carries them
// (inlineEndpoints), or its auto mTLS is inferred from them (inferFromEndpoints).
func followsEndpoints(svc *model.Service, dr *model.DestinationRule) bool {
	if inlineEndpoints(svc) || inferFromEndpoints(svc, dr, "") {
		return true
	}
	for _, ss := range dr.GetSubsets() {
		if inferFromEndpoints(svc, dr, ss.GetName()) {
			return true
		}
	}
	return false
}

// inlineEndpoints reports whether a service's cluster carries its endpoints itself: DNS clusters, and
// ServiceEntries with resolution STATIC that list their endpoints (no workloadSelector).
func inlineEndpoints(svc *model.Service) bool {
	return svc.Resolution.ByDNS() || (svc.Resolution == model.ClientSideLB && svc.Source.Kind == config.ServiceEntry && svc.Selector == nil)
}

// proxyView is what of the proxy its outbound clusters depend on beyond namespace, Sidecar and flavor.
type proxyView struct {
	labels map[string]string // nil unless a workloadSelector DestinationRule selects the proxy
	router bool              // a gateway: sniffed ports keep HTTP/1.1 upstream
	// sniDNAT: a gateway with an AUTO_PASSTHROUGH server, which gets an SNI-DNAT cluster per cluster of a
	// mesh service (istiod's buildOutboundSniDnatClusters).
	sniDNAT bool
	// dnsFamily: the address family DNS and dynamic forward proxy clusters resolve (dnsLookupFamily).
	dnsFamily cluster.Cluster_DnsLookupFamily
}

// outbound builds the outbound clusters for every service port in scope (and DestinationRule subset) that
// w wants, for a proxy with labels (nil: one no workloadSelector selects).
func (c clusterGenerator) outbound(scope *Scope, push *model.PushContext, flavor flavor, who proxyView,
	w *model.WatchedResource) (model.Resources, error) {
	var out model.Resources
	for _, svc := range scope.clusterServices {
		var err error
		if out, _, err = c.serviceClusters(out, svc, scope, push, flavor, who, w); err != nil {
			return nil, err
		}
	}
	sortByName(out)
	return out, nil
}

// serviceClusters appends svc's outbound clusters that w wants (nil: all) to out, and says whether they
// depend on svc's endpoints (followsEndpoints).
func (c clusterGenerator) serviceClusters(out model.Resources, svc *model.Service, scope *Scope, push *model.PushContext, flavor flavor,
	who proxyView, w *model.WatchedResource) (_ model.Resources, follows bool, _ error) {
	dr := push.DestinationRuleFor(scope.Namespace, who.labels, svc)
	follows = followsEndpoints(svc, dr)
	accounts := joinAccounts(push.ServiceAccounts(svc))
	for _, port := range svc.Ports {
		if port.Protocol == model.ProtocolUDP {
			continue
		}
		if svc.Resolution == model.DynamicDNS && flavor == flavorGRPC {
			continue // gRPC's xDS client has no dynamic forward proxy
		}
		names := []string{""}
		for _, ss := range dr.GetSubsets() {
			if svc.Resolution == model.DynamicDNS {
				break // as istiod: the forward proxy picks the host, a subset has no endpoints to choose
			}
			names = append(names, ss.Name)
		}
		for _, subset := range names {
			name := OutboundClusterName(port.Port, subset, svc.Hostname)
			if !wants(w, name) {
				continue
			}
			key := outboundClusterKey{svc: svc, port: port, subset: subset, dr: dr, flavor: flavor, mesh: push.Mesh,
				plaintextServer: !svc.MeshExternal && push.NamespaceMTLSMode(svc.Namespace) == model.MTLSDisable,
				accounts:        accounts}
			if inlineEndpoints(svc) {
				key.endpoints = push.Endpoints(svc.Key())
				key.peerAuthn = push.PeerAuthenticationsOf(svc.Namespace) // the endpoints' tlsMode follows them
			}
			if inferFromEndpoints(svc, dr, subset) {
				key.plaintextEndpoint = !push.Endpoints(svc.Key()).AllAcceptMeshTLS(port.Port)
			}
			slot := slotName(flavor, name)
			if who.router && flavor == flavorEnvoy {
				// Only a sniffed port's cluster and a Passthrough service's differ at a gateway: their own
				// slot, so that sidecars' and gateways' clusters do not replace each other.
				key.sniffedAtGateway = port.Protocol == model.ProtocolUnset
				key.passthroughAtGateway = svc.Resolution == model.Passthrough
				if key.sniffedAtGateway || key.passthroughAtGateway {
					slot = "gateway\x00" + slot
				}
			}
			family := "" // IPv4 and IPv6 proxies do not replace each other's DNS clusters
			if svc.Resolution.ByDNS() || svc.Resolution == model.DynamicDNS {
				key.dnsFamily = who.dnsFamily
				if who.dnsFamily != cluster.Cluster_V4_ONLY {
					family = who.dnsFamily.String() + "\x00"
				}
			}
			slot = family + slot
			r, err := slotResource(c.g.clusters, slot, key, func() proto.Message { return buildOutboundCluster(push, key) })
			if err != nil {
				return nil, false, err
			}
			out = append(out, r)
			if !who.sniDNAT || svc.MeshExternal || flavor != flavorEnvoy {
				continue
			}
			// The SNI-DNAT twin, its own slot: the same cluster without upstream TLS, where an
			// AUTO_PASSTHROUGH server sends a client's mTLS connection as it is.
			sni := SNIDNATClusterName(port.Port, subset, svc.Hostname)
			if !wants(w, sni) {
				continue
			}
			key.sniDNAT = true
			r, err = slotResource(c.g.clusters, family+slotName(flavor, sni), key, func() proto.Message { return buildOutboundCluster(push, key) })
			if err != nil {
				return nil, false, err
			}
			out = append(out, r)
		}
	}
	return out, follows, nil
}

// hasAutoPassthrough reports whether one of a gateway proxy's Gateways has an AUTO_PASSTHROUGH server, which
// makes istiod send it the SNI-DNAT clusters.
func hasAutoPassthrough(gws []*config.Config) bool {
	for _, gw := range gws {
		for _, s := range gw.Spec.(*networking.Gateway).Servers {
			if s.GetPort().GetNumber() != 0 && s.GetTls().GetMode() == networking.ServerTLSSettings_AUTO_PASSTHROUGH {
				return true
			}
		}
	}
	return false
}

// slotName keys a per-name cache slot by client flavor too: the same cluster is built differently for
// Envoy and for gRPC clients.
func slotName(f flavor, name string) string {
	if f == flavorGRPC {
		return "grpc\x00" + name
	}
	return name
}

type flavor int

const (
	flavorEnvoy flavor = iota
	flavorGRPC
)

func flavorOf(p *model.Proxy) flavor {
	if p.Type == model.GRPC {
		return flavorGRPC
	}
	return flavorEnvoy
}

// outboundClusterKey is everything an outbound cluster depends on. Services and DestinationRules are
// immutable and replaced on change, so their pointers identify their content.
type outboundClusterKey struct {
	svc       *model.Service
	port      *model.Port
	subset    string
	dr        *model.DestinationRule
	flavor    flavor
	endpoints *model.ServiceEndpoints
	mesh      *mesh.Config
	// sniffedAtGateway: a port without protocol at a gateway, which does not sniff, so its cluster does
	// not follow the client's protocol.
	sniffedAtGateway bool
	// passthroughAtGateway: a Passthrough service's cluster at a gateway, which cannot send a connection
	// to its own original destination: EDS over the service's endpoints, as istiod's convertResolution.
	passthroughAtGateway bool
	// plaintextServer: the service's namespace (or the mesh) disables mTLS by PeerAuthentication, so auto
	// mTLS sends plaintext, as istiod infers it.
	plaintextServer bool
	// plaintextEndpoint: istiod infers the cluster's mTLS from its endpoints (inferFromEndpoints) and one
	// of the port's endpoints has no sidecar (or there are none), so auto mTLS sends plaintext. Set only
	// where it is inferred, so that other clusters are not rebuilt when endpoints change.
	plaintextEndpoint bool
	// peerAuthn: for inline endpoints, the PeerAuthentications that decide their tlsMode.
	peerAuthn model.PeerAuthenticationsKey
	// accounts: the service's identities, which mesh mTLS checks (joinAccounts).
	accounts string
	// sniDNAT: the cluster named outbound_.PORT_.SUBSET_.HOST an AUTO_PASSTHROUGH gateway forwards to. It
	// originates no TLS and sends no PROXY header: the client's own mTLS connection passes through.
	sniDNAT bool
	// dnsFamily: for DNS and DYNAMIC_DNS services, the family the proxy resolves names in.
	dnsFamily cluster.Cluster_DnsLookupFamily
}

type inboundClusterKey struct {
	port     uint32
	protocol model.Protocol
	// endpoint is where the cluster sends: "" the original destination, else an IP (127.0.0.1 under the
	// mesh's inbound traffic policy LOCALHOST, or a Sidecar ingress listener's defaultEndpoint) or
	// unix://PATH, at endpointPort.
	endpoint     string
	endpointPort uint32
	// pool is the connection pool (the Sidecar's, else the DestinationRule's), nil for none: the snapshot's
	// objects are immutable, so a pointer stands for its content.
	pool *networking.ConnectionPoolSettings
	// family is the proxy's (dnsLookupFamily): the loopback and source addresses follow it.
	family cluster.Cluster_DnsLookupFamily
	// mesh gives the connect timeout and TCP keepalive; it is replaced whole on change.
	mesh *mesh.Config
	// statName is the cluster's alt_stat_name by the mesh's inboundClusterStatName ("" for its name).
	statName string
}

// staticClusterKey: BlackHoleCluster and PassthroughCluster are the same for every proxy;
// InboundPassthroughCluster's source addresses follow the proxy's family (and dual stack).
type staticClusterKey struct {
	name   string
	family cluster.Cluster_DnsLookupFamily
	dual   bool
	mesh   *mesh.Config // connect timeout, TCP keepalive
}

func buildOutboundCluster(push *model.PushContext, k outboundClusterKey) *cluster.Cluster {
	name := OutboundClusterName(k.port.Port, k.subset, k.svc.Hostname)
	if k.sniDNAT {
		name = SNIDNATClusterName(k.port.Port, k.subset, k.svc.Hostname)
	}
	c := &cluster.Cluster{
		Name:           name,
		AltStatName:    name,
		ConnectTimeout: meshConnectTimeout(k.mesh),
		Metadata:       clusterMetadata(k.svc, k.subset),
	}
	switch k.svc.Resolution {
	case model.ClientSideLB:
		c.ClusterDiscoveryType = &cluster.Cluster_Type{Type: cluster.Cluster_EDS}
		c.EdsClusterConfig = &cluster.Cluster_EdsClusterConfig{EdsConfig: adsSource(), ServiceName: name}
		if inlineEndpoints(k.svc) {
			c.ClusterDiscoveryType = &cluster.Cluster_Type{Type: cluster.Cluster_STATIC}
			c.EdsClusterConfig = nil
			c.LoadAssignment = inlineLoadAssignment(name, k.endpoints, k.port.Port, clusterMTLS(push, k.dr, k.subset, k.port.Port))
		}
	case model.DNSLB:
		c.ClusterDiscoveryType = &cluster.Cluster_Type{Type: cluster.Cluster_STRICT_DNS}
		c.DnsLookupFamily = k.dnsFamily
		c.RespectDnsTtl = true
		c.DnsRefreshRate = meshDNSRefreshRate(k.mesh)
		c.LoadAssignment = inlineLoadAssignment(name, k.endpoints, k.port.Port, clusterMTLS(push, k.dr, k.subset, k.port.Port))
	case model.DNSRoundRobinLB:
		// One address of the name at a time, as istiod's DNS_ROUND_ROBIN.
		c.ClusterDiscoveryType = &cluster.Cluster_Type{Type: cluster.Cluster_LOGICAL_DNS}
		c.DnsLookupFamily = k.dnsFamily
		c.RespectDnsTtl = true
		c.DnsRefreshRate = meshDNSRefreshRate(k.mesh)
		var eps []*model.Endpoint
		if k.endpoints != nil {
			if ep := model.RoundRobinEndpoint(k.endpoints.ByPort[k.port.Port]); ep != nil {
				eps = []*model.Endpoint{ep}
			}
		}
		c.LoadAssignment = loadAssignment(name, eps, nil, flavorEnvoy, clusterMTLS(push, k.dr, k.subset, k.port.Port))
	case model.Passthrough:
		if k.passthroughAtGateway {
			c.ClusterDiscoveryType = &cluster.Cluster_Type{Type: cluster.Cluster_EDS}
			c.EdsClusterConfig = &cluster.Cluster_EdsClusterConfig{EdsConfig: adsSource(), ServiceName: name}
			break
		}
		c.ClusterDiscoveryType = &cluster.Cluster_Type{Type: cluster.Cluster_ORIGINAL_DST}
		c.LbPolicy = cluster.Cluster_CLUSTER_PROVIDED
		if k.port.TargetPort != 0 && k.svc.Source.Kind == config.ServiceEntry {
			// A resolution NONE ServiceEntry's targetPort: connections go to it, not to the port dialled
			// (istiod's PassthroughTargetPorts). Clients of a headless Service dial its pods' ports themselves.
			c.LbConfig = &cluster.Cluster_OriginalDstLbConfig_{OriginalDstLbConfig: &cluster.Cluster_OriginalDstLbConfig{
				UpstreamPortOverride: wrapperspb.UInt32(k.port.TargetPort)}}
		}
	case model.DynamicDNS:
		// Envoy's dynamic forward proxy picks the host (its cluster type is set below, once the options it
		// checks are known).
		c.LbPolicy = cluster.Cluster_CLUSTER_PROVIDED
	}

	policy := clusterPolicy(k.dr, k.subset, k.port.Port, k.mesh.GetSpec().GetDefaultTrafficPolicy())
	if k.flavor == flavorGRPC {
		// Proxyless gRPC: EDS from ADS, plain round robin; it understands few of Envoy's knobs.
		applyLoadBalancer(c, policy.GetLoadBalancer(), flavorGRPC, push.Mesh, k.svc)
		return c
	}
	if p := k.mesh.GetSpec().GetOutboundClusterStatName(); p != "" && (k.svc.Resolution != model.DynamicDNS || k.sniDNAT) {
		// As istiod: not a forward proxy's cluster, which keeps its name.
		c.AltStatName = clusterStatName(p, k.svc, k.subset, k.port, 0)
	}
	applyConnectionPool(c, policy.GetConnectionPool(), meshTCPKeepalive(k.mesh))
	h2 := applyHTTPProtocol(c, policy.GetConnectionPool(), k.port, !k.sniffedAtGateway, meshH2Upgrade(k.mesh))
	applyOutlierDetection(c, policy.GetOutlierDetection())
	if k.svc.Resolution != model.DynamicDNS {
		// As istiod: a forward proxy's load balancer is its own, so the DestinationRule's has no say.
		applyLoadBalancer(c, policy.GetLoadBalancer(), flavorEnvoy, push.Mesh, k.svc)
	}
	if k.sniDNAT {
		// As istiod's sni-dnat cluster mode: no TLS origination, no PROXY protocol.
		if k.svc.Resolution == model.DynamicDNS {
			setDynamicForwardProxy(c, k.svc.Hostname, k.dnsFamily, nil)
		}
		return c
	}
	applyTLS(c, policy.GetTls(), k, h2)
	if k.svc.Resolution == model.DynamicDNS {
		setDynamicForwardProxy(c, k.svc.Hostname, k.dnsFamily, policy.GetTls())
	}
	applyProxyProtocol(c, policy.GetProxyProtocol())
	return c
}

// dnsCacheName is the DNS cache a DYNAMIC_DNS host's cluster shares with the dynamic forward proxy filters of
// the listeners that lead to it (istiod's name): the filters resolve the request's host into the cache the
// cluster then picks it from.
func dnsCacheName(hostname string) string { return hostname + "_dfp_dns_cache" }

// dfpDNSCache is the DNS cache configuration of a DYNAMIC_DNS host, the same in its cluster and its filters:
// Envoy requires one cache name to have one configuration, so both resolve the proxy's family.
func dfpDNSCache(hostname string, family cluster.Cluster_DnsLookupFamily) *dfpcommon.DnsCacheConfig {
	return &dfpcommon.DnsCacheConfig{Name: dnsCacheName(hostname), DnsLookupFamily: family}
}

// dnsLookupFamily is the address family a proxy with addresses ips resolves DNS names in, istiod's
// SelectDNSLookupFamily under its defaults (no ISTIO_DUAL_STACK, no extra IPv4 listener for IPv6 pods):
// IPv6 only for a proxy whose addresses are all IPv6, else IPv4 only (also dual-stack and address-less).
func dnsLookupFamily(ips []string) cluster.Cluster_DnsLookupFamily {
	return ipModeOf(ips).family()
}

// setDynamicForwardProxy makes c the dynamic forward proxy cluster of hostname: each request's host (the
// Host header, or the SNI its listener's filter read) is resolved and connected to, on the cluster's port.
// Envoy loads such a cluster only if each connection's SNI and certificate check follow that host
// (auto_sni, auto_san_validation) or the cluster says it allows less; as istiod, TLS settles it: no fixed SNI
// and the certificate checked against the host, unless the rule fixes an SNI or turns checking off. A
// plaintext cluster with HTTP options of its own allows less outright (no TLS, nothing to check).
func setDynamicForwardProxy(c *cluster.Cluster, hostname string, family cluster.Cluster_DnsLookupFamily,
	tls *networking.ClientTLSSettings) {
	insecure := false
	switch {
	case c.TransportSocket != nil:
		autoSNI := tls.GetSni() == ""
		autoSAN := !tls.GetInsecureSkipVerify().GetValue()
		if autoSNI && tls.GetMode() == networking.ClientTLSSettings_ISTIO_MUTUAL {
			// istioMutualTLS names the cluster when the rule names no SNI: here the host does.
			ctx := &tlsv3.UpstreamTlsContext{}
			if err := c.TransportSocket.GetTypedConfig().UnmarshalTo(ctx); err == nil {
				ctx.Sni = ""
				c.TransportSocket = tlsSocket(ctx)
			}
		}
		setUpstreamHTTPOptions(c, func(o *core.UpstreamHttpProtocolOptions) {
			o.AutoSni, o.AutoSanValidation = autoSNI, autoSAN
		})
		insecure = !autoSNI || !autoSAN
	case c.TypedExtensionProtocolOptions != nil:
		insecure = true
	}
	c.ClusterDiscoveryType = &cluster.Cluster_ClusterType{ClusterType: &cluster.Cluster_CustomClusterType{
		Name: "envoy.clusters.dynamic_forward_proxy",
		TypedConfig: ldsAny(&dfpcluster.ClusterConfig{
			ClusterImplementationSpecifier: &dfpcluster.ClusterConfig_DnsCacheConfig{DnsCacheConfig: dfpDNSCache(hostname, family)},
			AllowInsecureClusterOptions:    insecure,
		}),
	}}
}

func clusterMetadata(svc *model.Service, subset string) *core.Metadata {
	fields := map[string]*structpb.Value{
		"services": structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{
			structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
				"host":      structpb.NewStringValue(svc.Hostname),
				"name":      structpb.NewStringValue(svc.Name),
				"namespace": structpb.NewStringValue(svc.Namespace),
			}}),
		}}),
	}
	if subset != "" {
		fields["subset"] = structpb.NewStringValue(subset)
	}
	return &core.Metadata{FilterMetadata: map[string]*structpb.Struct{"istio": {Fields: fields}}}
}

// inlineLoadAssignment carries endpoints inside the cluster, for DNS and static clusters.
func inlineLoadAssignment(name string, se *model.ServiceEndpoints, port uint32, mtls serverMTLS) *endpoint.ClusterLoadAssignment {
	var eps []*model.Endpoint
	if se != nil {
		eps = se.ByPort[port]
	}
	return loadAssignment(name, eps, nil, flavorEnvoy, mtls)
}

// buildInboundCluster forwards to the workload at the connection's original destination (its pod IP and
// port), as istiod's inbound clusters do under the default inbound traffic policy (PASSTHROUGH): an
// application listening on the pod IP alone is reached, not only one on 127.0.0.1. With an endpoint (the
// mesh's LOCALHOST policy, a Sidecar ingress listener's defaultEndpoint) it is a STATIC cluster to it, as
// istiod's. Its connection pool is the Sidecar's for the port (the ingress listener's own, else
// inboundConnectionPool), else that of the DestinationRule of the port's service.
func buildInboundCluster(k inboundClusterKey) *cluster.Cluster {
	name := InboundClusterName(k.port)
	c := &cluster.Cluster{
		Name:           name,
		AltStatName:    k.statName,
		ConnectTimeout: meshConnectTimeout(k.mesh),
	}
	if k.endpoint == "" {
		c.ClusterDiscoveryType = &cluster.Cluster_Type{Type: cluster.Cluster_ORIGINAL_DST}
		c.LbPolicy = cluster.Cluster_CLUSTER_PROVIDED
		// The hosts are the workload's own addresses: never clean them up (istiod's ~292 years).
		c.CleanupInterval = &durationpb.Duration{Seconds: inboundCleanupSeconds}
	} else {
		addr := socketAddress(k.endpoint, k.endpointPort)
		if path, ok := strings.CutPrefix(k.endpoint, unixAddressPrefix); ok {
			addr = &core.Address{Address: &core.Address_Pipe{Pipe: &core.Pipe{Path: path}}}
		}
		c.ClusterDiscoveryType = &cluster.Cluster_Type{Type: cluster.Cluster_STATIC}
		c.LoadAssignment = &endpoint.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpoint.LocalityLbEndpoints{{
			LbEndpoints: []*endpoint.LbEndpoint{{HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
				Address: addr}}}},
		}}}
	}
	if k.endpoint != "127.0.0.1" && k.endpoint != "::1" {
		// Bound to 127.0.0.6 (::6) so that iptables does not capture the sidecar's own connection to the pod
		// (istiod binds every inbound cluster but a loopback one, a Unix socket's too).
		c.UpstreamBindConfig = &core.BindConfig{SourceAddress: socketAddress(inboundSourceIP(k.family), 0).GetSocketAddress()}
	}
	// istiod's inbound clusters lift the circuit breakers (where the pool sets no limit), so the proxy never
	// limits its own workload; the pool applies as on an outbound cluster, but never upgrades to HTTP/2.
	pool := inboundPool(k.pool)
	applyConnectionPool(c, pool, meshTCPKeepalive(k.mesh))
	// Towards its own workload a sidecar speaks the port's protocol too (the client's on a sniffed port).
	applyHTTPProtocol(c, pool, &model.Port{Port: k.port, Protocol: k.protocol}, true, false)
	return c
}

// inboundRulePool is the connection pool a DestinationRule gives an inbound cluster for the service port
// port, as istiod's: port-level settings for the port replace the top level whole (a port-level entry
// without a connection pool leaves none), and subsets play no part.
func inboundRulePool(dr *model.DestinationRule, port uint32) *networking.ConnectionPoolSettings {
	if dr == nil {
		return nil
	}
	policy, _ := forPort(dr.Spec.GetTrafficPolicy(), port)
	return policy.GetConnectionPool()
}

// inboundPool is pool without its h2UpgradePolicy, which istiod applies to outbound clusters only.
func inboundPool(pool *networking.ConnectionPoolSettings) *networking.ConnectionPoolSettings {
	if pool.GetHttp().GetH2UpgradePolicy() == networking.ConnectionPoolSettings_HTTPSettings_DEFAULT {
		return pool
	}
	pool = proto.Clone(pool).(*networking.ConnectionPoolSettings)
	pool.Http.H2UpgradePolicy = networking.ConnectionPoolSettings_HTTPSettings_DEFAULT
	return pool
}

// passthroughHTTPOptions are istiod's for the passthrough clusters: upstream HTTP in the client's protocol
// (HTTP/1.1 or HTTP/2), idle connections closed after 5 minutes.
func passthroughHTTPOptions() map[string]*anypb.Any {
	return map[string]*anypb.Any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": ldsAny(&httpv3.HttpProtocolOptions{
		CommonHttpProtocolOptions: &core.HttpProtocolOptions{IdleTimeout: durationpb.New(5 * time.Minute)},
		UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_UseDownstreamProtocolConfig{
			UseDownstreamProtocolConfig: &httpv3.HttpProtocolOptions_UseDownstreamHttpConfig{
				HttpProtocolOptions: &core.Http1ProtocolOptions{}, Http2ProtocolOptions: &core.Http2ProtocolOptions{}}},
	})}
}

// inboundCleanupSeconds is the longest whole-second time.Duration, as istiod sets it.
const inboundCleanupSeconds = (math.MaxInt64 - 999999999) / int64(time.Second)

func buildStaticCluster(k staticClusterKey) *cluster.Cluster {
	name := k.name
	c := &cluster.Cluster{Name: name, ConnectTimeout: meshConnectTimeout(k.mesh)}
	switch name {
	case BlackHoleCluster:
		c.ClusterDiscoveryType = &cluster.Cluster_Type{Type: cluster.Cluster_STATIC}
	default:
		c.ClusterDiscoveryType = &cluster.Cluster_Type{Type: cluster.Cluster_ORIGINAL_DST}
		c.LbPolicy = cluster.Cluster_CLUSTER_PROVIDED
		// As istiod's passthrough clusters (not the black hole): the mesh's default pool, its circuit breakers
		// at the maximum where it sets no limit, its connect timeout, the mesh's keepalive under its own; the
		// pool's HTTP settings do not reach them.
		applyConnectionPool(c, k.mesh.GetSpec().GetDefaultTrafficPolicy().GetConnectionPool(), meshTCPKeepalive(k.mesh))
		c.TypedExtensionProtocolOptions = passthroughHTTPOptions()
		if name == InboundPassthroughCluster {
			// istiod builds it as a copy of PassthroughCluster, whose statistics it keeps.
			c.AltStatName = PassthroughCluster + ";"
			// Istio binds inbound passthrough connections to 127.0.0.6 (::6) so they are not redirected again.
			// Envoy cannot bind one family and connect to the other: a dual-stack proxy also gets ::6, which
			// Envoy picks for IPv6 destinations (istiod's, whatever ISTIO_DUAL_STACK says).
			c.UpstreamBindConfig = &core.BindConfig{SourceAddress: socketAddress(inboundSourceIP(k.family), 0).GetSocketAddress()}
			if k.dual {
				c.UpstreamBindConfig.ExtraSourceAddresses = []*core.ExtraSourceAddress{{Address: socketAddress("::6", 0).GetSocketAddress()}}
			}
		}
	}
	return c
}
