package envoy

import (
	"math"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	proxyprotocol "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/proxy_protocol/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	meshconfig "istio.io/api/mesh/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
)

// applyProxyProtocol sends a PROXY protocol header at the start of every upstream connection, as istiod:
// each transport socket the cluster may pick (its own, or each match's; raw buffer when it has none) is
// wrapped, so the header goes first and TLS, if any, follows.
func applyProxyProtocol(c *cluster.Cluster, pp *networking.TrafficPolicy_ProxyProtocol) {
	if pp == nil {
		return
	}
	wrap := func(inner *core.TransportSocket) *core.TransportSocket {
		a, _ := anypb.New(&proxyprotocol.ProxyProtocolUpstreamTransport{
			Config:          &core.ProxyProtocolConfig{Version: proxyProtocolVersion(pp.Version)},
			TransportSocket: inner,
		})
		return &core.TransportSocket{Name: "envoy.transport_sockets.upstream_proxy_protocol",
			ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: a}}
	}
	if c.TransportSocket == nil && len(c.TransportSocketMatches) == 0 {
		c.TransportSocket = wrap(rawBufferSocket())
		return
	}
	if c.TransportSocket != nil {
		c.TransportSocket = wrap(c.TransportSocket)
	}
	for _, m := range c.TransportSocketMatches {
		m.TransportSocket = wrap(m.TransportSocket)
	}
}

func proxyProtocolVersion(v networking.TrafficPolicy_ProxyProtocol_VERSION) core.ProxyProtocolConfig_Version {
	if v == networking.TrafficPolicy_ProxyProtocol_V2 {
		return core.ProxyProtocolConfig_V2
	}
	return core.ProxyProtocolConfig_V1
}

// maxThresholds are istiod's circuit-breaker defaults: every limit at the maximum, since Envoy's own
// (1024 connections / pending / requests, 3 retries) trip during endpoint churn before the next EDS push
// arrives. A connection pool lowers only the limits it sets.
func maxThresholds() *cluster.CircuitBreakers_Thresholds {
	return &cluster.CircuitBreakers_Thresholds{
		MaxConnections:     wrapperspb.UInt32(math.MaxUint32),
		MaxPendingRequests: wrapperspb.UInt32(math.MaxUint32),
		MaxRequests:        wrapperspb.UInt32(math.MaxUint32),
		MaxRetries:         wrapperspb.UInt32(math.MaxUint32),
		TrackRemaining:     true,
	}
}

// applyLoadBalancer sets the cluster's LB policy; Envoy clusters default to LEAST_REQUEST and have the
// healthy-panic threshold off unless outlier detection set it, as istiod: with few pods per service,
// Envoy's 50 % panic mode would send traffic to unhealthy hosts. Consistent hashing also needs a hash
// policy on the route, which RDS adds. Zone-aware routing or locality weighting follows the rule's setting,
// else svc's traffic distribution, else the mesh config's (m), its zone-aware setting first.
func applyLoadBalancer(c *cluster.Cluster, lb *networking.LoadBalancerSettings, f flavor, m *mesh.Config, svc *model.Service) {
	if f == flavorEnvoy {
		if c.CommonLbConfig == nil {
			c.CommonLbConfig = &cluster.Cluster_CommonLbConfig{}
		}
		if c.CommonLbConfig.HealthyPanicThreshold == nil {
			c.CommonLbConfig.HealthyPanicThreshold = &typev3.Percent{Value: 0}
		}
		if z := zoneAwareSetting(lb, m, svc); z != nil {
			c.CommonLbConfig.LocalityConfigSpecifier = zoneAwareLbConfig(z)
		} else if localityWeighted(effectiveLocality(lb, m), c.OutlierDetection != nil) || distributionWeighted(svc, lb) {
			c.CommonLbConfig.LocalityConfigSpecifier = &cluster.Cluster_CommonLbConfig_LocalityWeightedLbConfig_{
				LocalityWeightedLbConfig: &cluster.Cluster_CommonLbConfig_LocalityWeightedLbConfig{}}
		}
	}
	if c.GetType() == cluster.Cluster_ORIGINAL_DST {
		return
	}
	switch lb.GetSimple() {
	case networking.LoadBalancerSettings_RANDOM:
		c.LbPolicy = cluster.Cluster_RANDOM
	case networking.LoadBalancerSettings_ROUND_ROBIN:
		c.LbPolicy = cluster.Cluster_ROUND_ROBIN
		if sl := slowStart(lb); sl != nil && f == flavorEnvoy {
			c.LbConfig = &cluster.Cluster_RoundRobinLbConfig_{RoundRobinLbConfig: &cluster.Cluster_RoundRobinLbConfig{SlowStartConfig: sl}}
		}
	case networking.LoadBalancerSettings_PASSTHROUGH:
		c.ClusterDiscoveryType = &cluster.Cluster_Type{Type: cluster.Cluster_ORIGINAL_DST}
		c.LbPolicy = cluster.Cluster_CLUSTER_PROVIDED
		c.EdsClusterConfig = nil
		c.LoadAssignment = nil
		return
	default: // LEAST_REQUEST, LEAST_CONN, unset
		if f == flavorEnvoy || lb.GetSimple() != networking.LoadBalancerSettings_UNSPECIFIED {
			c.LbPolicy = cluster.Cluster_LEAST_REQUEST
		}
		if sl := slowStart(lb); sl != nil && f == flavorEnvoy {
			c.LbConfig = &cluster.Cluster_LeastRequestLbConfig_{LeastRequestLbConfig: &cluster.Cluster_LeastRequestLbConfig{SlowStartConfig: sl}}
		}
	}
	if ch := lb.GetConsistentHash(); ch != nil {
		c.LbConfig = nil
		if mg := ch.GetMaglev(); mg != nil {
			c.LbPolicy = cluster.Cluster_MAGLEV
			if mg.TableSize != 0 {
				c.LbConfig = &cluster.Cluster_MaglevLbConfig_{
					MaglevLbConfig: &cluster.Cluster_MaglevLbConfig{TableSize: wrapperspb.UInt64(mg.TableSize)}}
			}
		} else {
			c.LbPolicy = cluster.Cluster_RING_HASH
			size := ch.GetRingHash().GetMinimumRingSize()
			if size == 0 {
				size = ch.GetMinimumRingSize()
			}
			if size > 0 {
				c.LbConfig = &cluster.Cluster_RingHashLbConfig_{
					RingHashLbConfig: &cluster.Cluster_RingHashLbConfig{MinimumRingSize: wrapperspb.UInt64(size)}}
			}
		}
	}
}

// localityWeighted reports whether a cluster weights localities, as istiod decides: for a distribute
// setting, or for explicit failover when outlier detection can mark a locality unhealthy. Elsewhere it
// would override the LB policy's own choice between hosts.
func localityWeighted(s *networking.LocalityLoadBalancerSetting, outlier bool) bool {
	if s == nil || (s.Enabled != nil && !s.Enabled.GetValue()) {
		return false
	}
	return len(s.Distribute) > 0 || outlier && (len(s.Failover) > 0 || len(s.FailoverPriority) > 0)
}

// slowStart is the warmup of lb (or its older warmupDurationSecs) as Envoy's slow start, with istiod's
// defaults: linear ramp (aggression 1) from 10 % of the weight.
func slowStart(lb *networking.LoadBalancerSettings) *cluster.Cluster_SlowStartConfig {
	if w := lb.GetWarmup(); w != nil {
		aggression, minPercent := 1.0, 10.0
		if w.Aggression != nil {
			aggression = w.Aggression.GetValue()
		}
		if w.MinimumPercent != nil {
			minPercent = w.MinimumPercent.GetValue()
		}
		return &cluster.Cluster_SlowStartConfig{SlowStartWindow: w.Duration,
			Aggression:       &core.RuntimeDouble{DefaultValue: aggression, RuntimeKey: "upstream.slow_start_aggression"},
			MinWeightPercent: &typev3.Percent{Value: minPercent}}
	}
	if d := lb.GetWarmupDurationSecs(); d != nil {
		return &cluster.Cluster_SlowStartConfig{SlowStartWindow: d}
	}
	return nil
}

// applyConnectionPool sets the circuit breakers (at the maximum where cp says nothing), the connect
// timeout and TCP keepalive: the mesh's keepalive (meshKA), then cp's over it field by field.
func applyConnectionPool(c *cluster.Cluster, cp *networking.ConnectionPoolSettings,
	meshKA *networking.ConnectionPoolSettings_TCPSettings_TcpKeepalive) {
	th := maxThresholds()
	c.CircuitBreakers = &cluster.CircuitBreakers{Thresholds: []*cluster.CircuitBreakers_Thresholds{th}}
	if tcp := cp.GetTcp(); tcp != nil {
		if tcp.MaxConnections > 0 {
			th.MaxConnections = wrapperspb.UInt32(uint32(tcp.MaxConnections))
		}
		if tcp.ConnectTimeout != nil {
			c.ConnectTimeout = durationpb.New(tcp.ConnectTimeout.AsDuration())
		}
	}
	setTCPKeepalive(c, meshKA)
	setTCPKeepalive(c, cp.GetTcp().GetTcpKeepalive())
	if h := cp.GetHttp(); h != nil {
		if h.Http1MaxPendingRequests > 0 {
			th.MaxPendingRequests = wrapperspb.UInt32(uint32(h.Http1MaxPendingRequests))
		}
		if h.Http2MaxRequests > 0 {
			th.MaxRequests = wrapperspb.UInt32(uint32(h.Http2MaxRequests))
		}
		if h.MaxRetries > 0 {
			th.MaxRetries = wrapperspb.UInt32(uint32(h.MaxRetries))
		}
	}
}

// applyHTTPProtocol sets the upstream HTTP protocol and its options as istiod: HTTP/2 for http2 and grpc
// ports or h2UpgradePolicy UPGRADE, the client's protocol for a sniffed port (where sniff: sidecars) or
// useClientProtocol, HTTP/1.1 otherwise; idle timeout, connection duration, requests per connection and
// HTTP/2 streams from the connection pool. meshUpgrade (the mesh's h2UpgradePolicy UPGRADE) upgrades an
// HTTP port's cluster unless the pool says DO_NOT_UPGRADE. It reports whether the cluster speaks HTTP/2
// explicitly, which mesh mTLS then offers in ALPN.
func applyHTTPProtocol(c *cluster.Cluster, cp *networking.ConnectionPoolSettings, port *model.Port, sniffs, meshUpgrade bool) (h2 bool) {
	var opts *httpv3.HttpProtocolOptions
	var h2opts *core.Http2ProtocolOptions
	explicitH2 := func() {
		h2opts = &core.Http2ProtocolOptions{}
		opts.UpstreamProtocolOptions = &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{
			ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
				ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: h2opts}}}
	}
	downstream := func() {
		h2opts = nil
		opts.UpstreamProtocolOptions = &httpv3.HttpProtocolOptions_UseDownstreamProtocolConfig{
			UseDownstreamProtocolConfig: &httpv3.HttpProtocolOptions_UseDownstreamHttpConfig{
				HttpProtocolOptions: &core.Http1ProtocolOptions{}, Http2ProtocolOptions: &core.Http2ProtocolOptions{}}}
	}
	switch {
	case port.Protocol == model.ProtocolHTTP2 || port.Protocol == model.ProtocolGRPC:
		opts = &httpv3.HttpProtocolOptions{}
		explicitH2()
	case port.Protocol == model.ProtocolUnset && sniffs:
		opts = &httpv3.HttpProtocolOptions{}
		downstream()
	}
	h := cp.GetHttp()
	// The pool's UPGRADE names the port HTTP even when it is sniffed; the mesh's upgrades HTTP ports only (as
	// istiod: a sniffed port's server may speak HTTP/1.1 alone). An upstream protocol already chosen stays.
	upgrade := h.GetH2UpgradePolicy() == networking.ConnectionPoolSettings_HTTPSettings_UPGRADE ||
		meshUpgrade && port.Protocol.IsHTTP() && h.GetH2UpgradePolicy() != networking.ConnectionPoolSettings_HTTPSettings_DO_NOT_UPGRADE
	if !h.GetUseClientProtocol() && upgrade && opts == nil {
		opts = &httpv3.HttpProtocolOptions{}
		explicitH2()
	}
	common := &core.HttpProtocolOptions{}
	if h != nil {
		if h.IdleTimeout != nil {
			common.IdleTimeout = durationpb.New(h.IdleTimeout.AsDuration())
		}
		if h.MaxRequestsPerConnection > 0 {
			common.MaxRequestsPerConnection = wrapperspb.UInt32(uint32(h.MaxRequestsPerConnection))
		}
	}
	if tcp := cp.GetTcp(); tcp != nil {
		if common.IdleTimeout == nil && tcp.IdleTimeout != nil {
			common.IdleTimeout = durationpb.New(tcp.IdleTimeout.AsDuration())
		}
		if tcp.MaxConnectionDuration != nil {
			common.MaxConnectionDuration = durationpb.New(tcp.MaxConnectionDuration.AsDuration())
		}
	}
	keepalive := h.GetHttp2KeepAlive()
	if common.IdleTimeout != nil || common.MaxRequestsPerConnection != nil || common.MaxConnectionDuration != nil ||
		h.GetMaxConcurrentStreams() > 0 || keepalive != nil {
		if opts == nil {
			opts = &httpv3.HttpProtocolOptions{}
		}
		opts.CommonHttpProtocolOptions = common
		if h2opts != nil && h.GetMaxConcurrentStreams() > 0 {
			h2opts.MaxConcurrentStreams = wrapperspb.UInt32(uint32(h.GetMaxConcurrentStreams()))
		}
		if h2opts != nil && keepalive != nil {
			h2opts.ConnectionKeepalive = &core.KeepaliveSettings{Interval: keepalive.Interval, Timeout: keepalive.Timeout}
		}
	}
	if h.GetUseClientProtocol() {
		if opts == nil {
			opts = &httpv3.HttpProtocolOptions{}
		}
		downstream()
	}
	if opts == nil {
		return false
	}
	if opts.UpstreamProtocolOptions == nil {
		// Envoy requires an upstream protocol once the options are present: HTTP/1.1, as without them.
		opts.UpstreamProtocolOptions = &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{
			ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
				ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{HttpProtocolOptions: &core.Http1ProtocolOptions{}}}}
	}
	a, _ := anypb.New(opts)
	c.TypedExtensionProtocolOptions = map[string]*anypb.Any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": a}
	return h2opts != nil
}

func optionalUInt32(v uint32) *wrapperspb.UInt32Value {
	if v == 0 {
		return nil
	}
	return wrapperspb.UInt32(v)
}

func optionalSeconds(d *durationpb.Duration) *wrapperspb.UInt32Value {
	if d == nil {
		return nil
	}
	return wrapperspb.UInt32(uint32(d.AsDuration() / time.Second))
}

// applyOutlierDetection follows istiod: success-rate ejection off (Istio exposes no success-rate knobs),
// an error count of 0 turns that ejection off, and the healthy-panic threshold is minHealthPercent (0, off,
// when unset).
func applyOutlierDetection(c *cluster.Cluster, od *networking.OutlierDetection) {
	if od == nil {
		return
	}
	out := &cluster.OutlierDetection{EnforcingSuccessRate: wrapperspb.UInt32(0)}
	if e := od.Consecutive_5XxErrors; e != nil {
		out.Consecutive_5Xx = wrapperspb.UInt32(e.GetValue())
		out.EnforcingConsecutive_5Xx = wrapperspb.UInt32(enforcing(e.GetValue()))
	}
	if e := od.ConsecutiveGatewayErrors; e != nil {
		out.ConsecutiveGatewayFailure = wrapperspb.UInt32(e.GetValue())
		out.EnforcingConsecutiveGatewayFailure = wrapperspb.UInt32(enforcing(e.GetValue()))
	}
	if od.Interval != nil {
		out.Interval = durationpb.New(od.Interval.AsDuration())
	}
	if od.BaseEjectionTime != nil {
		out.BaseEjectionTime = durationpb.New(od.BaseEjectionTime.AsDuration())
	}
	if od.MaxEjectionPercent > 0 {
		out.MaxEjectionPercent = wrapperspb.UInt32(uint32(od.MaxEjectionPercent))
	}
	if od.SplitExternalLocalOriginErrors {
		out.SplitExternalLocalOriginErrors = true
		if n := od.ConsecutiveLocalOriginFailures.GetValue(); n > 0 {
			out.ConsecutiveLocalOriginFailure = wrapperspb.UInt32(n)
			out.EnforcingConsecutiveLocalOriginFailure = wrapperspb.UInt32(100)
		}
		out.EnforcingLocalOriginSuccessRate = wrapperspb.UInt32(0)
	}
	if c.CommonLbConfig == nil {
		c.CommonLbConfig = &cluster.Cluster_CommonLbConfig{}
	}
	c.CommonLbConfig.HealthyPanicThreshold = &typev3.Percent{Value: float64(max(od.MinHealthPercent, 0))}
	c.OutlierDetection = out
}

// enforcing is the enforcement percentage for an error count: ejection on (100) unless the count is 0.
func enforcing(count uint32) uint32 {
	if count == 0 {
		return 0
	}
	return 100
}

// effectivePolicy is a DestinationRule's traffic policy for a subset and a service port, as istiod's
// MergeSubsetTrafficPolicy: the rule's policy resolved for the port (forPort), then the subset's, resolved
// the same way, over it: field by field, or for the four port-level settings whole when the subset has a
// portLevelSettings entry for the port.
func effectivePolicy(dr *model.DestinationRule, subset string, port uint32) *networking.TrafficPolicy {
	return clusterPolicy(dr, subset, port, nil)
}

// clusterPolicy is effectivePolicy with the mesh's defaultTrafficPolicy (def) under the rule's policy for the
// port, as istiod's cluster builder: each of its two blocks applies where the rule (or its port-level entry)
// leaves that block unset, before a subset's policy goes over them. istiod's endpoints ignore it: EDS reads
// effectivePolicy.
func clusterPolicy(dr *model.DestinationRule, subset string, port uint32,
	def *meshconfig.MeshConfig_DefaultTrafficPolicy) *networking.TrafficPolicy {
	var policy *networking.TrafficPolicy
	if dr != nil {
		policy, _ = forPort(dr.Spec.TrafficPolicy, port)
	}
	policy = withMeshDefault(def, policy)
	if dr == nil || subset == "" {
		return policy
	}
	for _, ss := range dr.Spec.Subsets {
		if ss.Name != subset || ss.TrafficPolicy == nil {
			continue
		}
		sp, portLevel := forPort(ss.TrafficPolicy, port)
		if policy == nil {
			return sp
		}
		return overlayPolicy(policy, sp, portLevel)
	}
	return policy
}

// withMeshDefault is policy with the mesh default's connectionPool and outlierDetection where policy sets
// none (istiod's applyDefaultTrafficPolicy); policy itself when nothing is added.
func withMeshDefault(def *meshconfig.MeshConfig_DefaultTrafficPolicy, policy *networking.TrafficPolicy) *networking.TrafficPolicy {
	pool := def.GetConnectionPool() != nil && policy.GetConnectionPool() == nil
	outlier := def.GetOutlierDetection() != nil && policy.GetOutlierDetection() == nil
	if !pool && !outlier {
		return policy
	}
	out := &networking.TrafficPolicy{}
	if policy != nil {
		out = &networking.TrafficPolicy{LoadBalancer: policy.LoadBalancer, ConnectionPool: policy.ConnectionPool,
			OutlierDetection: policy.OutlierDetection, Tls: policy.Tls, ProxyProtocol: policy.ProxyProtocol}
	}
	if pool {
		out.ConnectionPool = def.GetConnectionPool()
	}
	if outlier {
		out.OutlierDetection = def.GetOutlierDetection()
	}
	return out
}

// forPort is the policy p gives port, and whether a portLevelSettings entry matched (istiod's
// GetPortLevelTrafficPolicy). The first entry for the port replaces p whole: connectionPool, loadBalancer,
// outlierDetection and tls are the entry's, default where it sets none (never p's top level), and p's
// proxyProtocol no longer applies. Every per-port reading of a DestinationRule's cluster settings goes here.
func forPort(p *networking.TrafficPolicy, port uint32) (*networking.TrafficPolicy, bool) {
	if p == nil {
		return nil, false
	}
	for _, pl := range p.PortLevelSettings {
		if pl.GetPort() != nil && pl.GetPort().GetNumber() == port {
			return &networking.TrafficPolicy{LoadBalancer: pl.LoadBalancer, ConnectionPool: pl.ConnectionPool,
				OutlierDetection: pl.OutlierDetection, Tls: pl.Tls}, true
		}
	}
	return p, false
}

// overlayPolicy is base with the settings over sets (istiod's MergeTrafficPolicy); with replace (over came
// from a port-level entry) connectionPool, loadBalancer, outlierDetection and tls are over's even when unset.
func overlayPolicy(base, over *networking.TrafficPolicy, replace bool) *networking.TrafficPolicy {
	out := &networking.TrafficPolicy{LoadBalancer: base.LoadBalancer, ConnectionPool: base.ConnectionPool,
		OutlierDetection: base.OutlierDetection, Tls: base.Tls, ProxyProtocol: base.ProxyProtocol}
	if over.LoadBalancer != nil || replace {
		out.LoadBalancer = over.LoadBalancer
	}
	if over.ConnectionPool != nil || replace {
		out.ConnectionPool = over.ConnectionPool
	}
	if over.OutlierDetection != nil || replace {
		out.OutlierDetection = over.OutlierDetection
	}
	if over.Tls != nil || replace {
		out.Tls = over.Tls
	}
	if over.ProxyProtocol != nil {
		out.ProxyProtocol = over.ProxyProtocol
	}
	return out
}
