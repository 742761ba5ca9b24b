package conformance

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	dfpcluster "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/dynamic_forward_proxy/v3"
	dfpcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/dynamic_forward_proxy/v3"
	proxyprotocol "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/proxy_protocol/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	leastrequest "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/least_request/v3"
	maglev "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/maglev/v3"
	ringhash "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/ring_hash/v3"
	roundrobin "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"

	// Registered so the policies and sockets not named above unmarshal from their Any.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/random/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/raw_buffer/v3"
)

// Envoy's defaults for the fields normalised here (envoy/config/cluster/v3/*.proto): a field left unset
// behaves as this value, so an explicit default on one side and an unset field on the other are equal.
const (
	defaultConnectTimeout   = "5s"
	defaultDNSRefreshRate   = "5s"
	defaultMaxConnections   = "1024"
	defaultMaxPending       = "1024"
	defaultMaxRequests      = "1024"
	defaultMaxRetries       = "3"
	defaultPanicThreshold   = "50"
	defaultChoiceCount      = "2"
	defaultHTTPIdleTimeout  = "1h0m0s"
	defaultH2MaxStreams     = "2147483647"
	defaultUnlimitedPerConn = "unlimited"
)

// clusterKey reads a cluster name of the DIRECTION|PORT|SUBSET|HOST form both control planes use for mesh
// destinations, or the outbound_.PORT_.SUBSET_.HOST form of a gateway's SNI-DNAT clusters (keyed apart: the
// name is what an AUTO_PASSTHROUGH chain matches clients' SNI on, and their settings differ), and the two
// passthrough clusters by their names (what unknown destinations and a sidecar's unmatched inbound ports
// get); anything else (BlackHoleCluster, agent and stats clusters) is infrastructure and not compared.
func clusterKey(kind Kind, name string) (Key, bool) {
	if kind == KindCluster && (name == "PassthroughCluster" || name == "InboundPassthroughCluster") {
		return Key{Kind: kind, Host: name}, true
	}
	if rest, ok := strings.CutPrefix(name, "outbound_."); ok {
		parts := strings.Split(rest, "_.")
		if len(parts) != 3 || parts[2] == "" {
			return Key{}, false
		}
		port, err := strconv.ParseUint(parts[0], 10, 32)
		if err != nil {
			return Key{}, false
		}
		return Key{Kind: kind, SNIDNAT: true, Host: parts[2], Port: uint32(port), Subset: parts[1]}, true
	}
	parts := strings.Split(name, "|")
	if len(parts) != 4 {
		return Key{}, false
	}
	port, err := strconv.ParseUint(parts[1], 10, 32)
	if err != nil {
		return Key{}, false
	}
	switch parts[0] {
	case "outbound":
		return Key{Kind: kind, Host: parts[3], Port: uint32(port), Subset: parts[2]}, true
	case "inbound":
		return Key{Kind: kind, Inbound: true, Port: uint32(port), Subset: parts[2]}, true
	}
	return Key{}, false
}

// normaliseClusters adds one entry per mesh cluster, and one endpoints entry for each cluster whose
// endpoints are inline (STATIC and DNS clusters); EDS clusters get theirs from normaliseEndpoints.
func normaliseClusters(out Snapshot, clusters []*cluster.Cluster) error {
	for _, c := range clusters {
		key, ok := clusterKey(KindCluster, c.GetName())
		if !ok {
			continue
		}
		f, err := clusterFields(c)
		if err != nil {
			return fmt.Errorf("cluster %s: %w", c.GetName(), err)
		}
		out[key] = f
		if c.GetLoadAssignment() != nil && c.GetType() != cluster.Cluster_EDS {
			ek := key
			ek.Kind = KindEndpoints
			out[ek] = endpointFields(c.GetLoadAssignment())
		}
	}
	return nil
}

func clusterFields(c *cluster.Cluster) (Fields, error) {
	f := Fields{}
	switch {
	case c.GetClusterType() != nil:
		f["type"] = "custom:" + c.GetClusterType().GetName()
		msg, err := c.GetClusterType().GetTypedConfig().UnmarshalNew()
		if err != nil {
			return nil, err
		}
		if dfp, ok := msg.(*dfpcluster.ClusterConfig); ok {
			f["dfp.dns_cache"] = dnsCacheText(dfp.GetDnsCacheConfig())
			f["dfp.allow_insecure_cluster_options"] = strconv.FormatBool(dfp.GetAllowInsecureClusterOptions())
		}
	default:
		f["type"] = c.GetType().String()
		if t := c.GetType(); t == cluster.Cluster_STRICT_DNS || t == cluster.Cluster_LOGICAL_DNS {
			// Which addresses a name resolves to (A or AAAA records) decides where connections go.
			f["dns_lookup_family"] = c.GetDnsLookupFamily().String()
			// How soon a failed lookup is retried (with the TTL respected, a successful one waits for it).
			f["dns_refresh_rate"] = durationOr(c.GetDnsRefreshRate(), defaultDNSRefreshRate)
		}
		if c.GetType() == cluster.Cluster_ORIGINAL_DST {
			// The port an original-destination connection goes to: the one dialled unless overridden (a
			// resolution NONE ServiceEntry's targetPort).
			setIf(f, "original_dst.port", uint32Or(c.GetOriginalDstLbConfig().GetUpstreamPortOverride(), "dialled"), "dialled")
		}
	}
	f["connect_timeout"] = durationOr(c.GetConnectTimeout(), defaultConnectTimeout)
	// The name the cluster's statistics go under, where it is not the cluster's own (istiod ends every one
	// with its stat prefix delimiter ";").
	if alt := c.GetAltStatName(); alt != "" && strings.TrimSuffix(alt, ";") != c.GetName() {
		f["alt_stat_name"] = alt
	}
	if err := lbFields(f, c); err != nil {
		return nil, err
	}
	cbFields(f, c.GetCircuitBreakers())
	outlierFields(f, c.GetOutlierDetection())
	// The source address decides whether iptables captures the connection again: a sidecar's connections to
	// its own workload's pod address must leave from 127.0.0.6 (::6 for IPv6); Envoy picks among the extra
	// source addresses the one of the destination's family.
	f["upstream_bind"] = "none"
	if sa := c.GetUpstreamBindConfig().GetSourceAddress(); sa != nil {
		f["upstream_bind"] = sa.GetAddress()
		for _, e := range c.GetUpstreamBindConfig().GetExtraSourceAddresses() {
			f["upstream_bind"] += "," + e.GetAddress().GetAddress()
		}
	}
	if ka := c.GetUpstreamConnectionOptions().GetTcpKeepalive(); ka != nil {
		f["tcp_keepalive"] = fmt.Sprintf("probes=%s time=%s interval=%s", uint32Or(ka.GetKeepaliveProbes(), "os"),
			uint32Or(ka.GetKeepaliveTime(), "os"), uint32Or(ka.GetKeepaliveInterval(), "os"))
	}
	if err := httpFields(f, c); err != nil {
		return nil, err
	}
	if err := tlsFields(f, c); err != nil {
		return nil, err
	}
	return f, nil
}

// lbFields reads the LB policy from either form Envoy accepts: the lb_policy enum with its *_lb_config, or a
// typed load_balancing_policy; both become the same names.
func lbFields(f Fields, c *cluster.Cluster) error {
	f["lb.panic_threshold"] = percentOr(c.GetCommonLbConfig().GetHealthyPanicThreshold().GetValue(),
		c.GetCommonLbConfig().GetHealthyPanicThreshold() != nil, defaultPanicThreshold)
	f["lb.locality_weighted"] = strconv.FormatBool(c.GetCommonLbConfig().GetLocalityWeightedLbConfig() != nil)
	// Envoy's zone-aware routing (on by default where the proxy knows its own cluster's hosts): how much of the
	// traffic it routes, and the size below which it does not.
	za := c.GetCommonLbConfig().GetZoneAwareLbConfig()
	routing := "100"
	if za.GetRoutingEnabled() != nil {
		routing = strconv.FormatFloat(za.GetRoutingEnabled().GetValue(), 'f', -1, 64)
	}
	setIf(f, "lb.zone_aware", fmt.Sprintf("routing=%s%% min_cluster_size=%s fail_on_panic=%t", routing,
		uint64Or(za.GetMinClusterSize(), "6"), za.GetFailTrafficOnPanic()), "routing=100% min_cluster_size=6 fail_on_panic=false")
	if p := c.GetLoadBalancingPolicy(); p != nil && len(p.GetPolicies()) > 0 {
		msg, err := p.GetPolicies()[0].GetTypedExtensionConfig().GetTypedConfig().UnmarshalNew()
		if err != nil {
			return err
		}
		switch m := msg.(type) {
		case *leastrequest.LeastRequest:
			f["lb.policy"] = "LEAST_REQUEST"
			setIf(f, "lb.choice_count", uint32Or(m.GetChoiceCount(), defaultChoiceCount), defaultChoiceCount)
			setIf(f, "lb.slow_start", slowStart(m.GetSlowStartConfig()), "off")
		case *ringhash.RingHash:
			f["lb.policy"] = "RING_HASH"
			setIf(f, "lb.ring_min", uint64Or(m.GetMinimumRingSize(), "1024"), "1024")
		case *maglev.Maglev:
			f["lb.policy"] = "MAGLEV"
			setIf(f, "lb.table_size", uint64Or(m.GetTableSize(), "65537"), "65537")
		case *roundrobin.RoundRobin:
			f["lb.policy"] = "ROUND_ROBIN"
			setIf(f, "lb.slow_start", slowStart(m.GetSlowStartConfig()), "off")
		default:
			f["lb.policy"] = string(msg.ProtoReflect().Descriptor().FullName())
		}
		return nil
	}
	f["lb.policy"] = c.GetLbPolicy().String()
	switch c.GetLbPolicy() {
	case cluster.Cluster_LEAST_REQUEST:
		setIf(f, "lb.choice_count", uint32Or(c.GetLeastRequestLbConfig().GetChoiceCount(), defaultChoiceCount), defaultChoiceCount)
		setIf(f, "lb.slow_start", slowStart(c.GetLeastRequestLbConfig().GetSlowStartConfig()), "off")
	case cluster.Cluster_ROUND_ROBIN:
		setIf(f, "lb.slow_start", slowStart(c.GetRoundRobinLbConfig().GetSlowStartConfig()), "off")
	case cluster.Cluster_RING_HASH:
		setIf(f, "lb.ring_min", uint64Or(c.GetRingHashLbConfig().GetMinimumRingSize(), "1024"), "1024")
	case cluster.Cluster_MAGLEV:
		setIf(f, "lb.table_size", uint64Or(c.GetMaglevLbConfig().GetTableSize(), "65537"), "65537")
	}
	return nil
}

// setIf records a policy's setting only when it is not Envoy's default, so a policy difference is one
// field (lb.policy), not one more per setting the other policy has.
func setIf(f Fields, name, value, def string) {
	if value != def {
		f[name] = value
	}
}

// slowStartConfig is the shape shared by the cluster's and the typed policies' slow start messages.
type slowStartConfig interface {
	GetSlowStartWindow() *durationpb.Duration
	GetAggression() *core.RuntimeDouble
}

// slowStart renders a slow start window and its aggression (Envoy's default 1.0 when unset).
func slowStart(s slowStartConfig) string {
	if s == nil || s.GetSlowStartWindow() == nil {
		return "off"
	}
	aggression := 1.0
	if s.GetAggression() != nil {
		aggression = s.GetAggression().GetDefaultValue()
	}
	return s.GetSlowStartWindow().AsDuration().String() + " aggression=" + fmt.Sprint(aggression)
}

// cbFields flattens the thresholds of each priority; a priority without thresholds has Envoy's defaults.
func cbFields(f Fields, cb *cluster.CircuitBreakers) {
	byPriority := map[core.RoutingPriority]*cluster.CircuitBreakers_Thresholds{}
	for _, th := range cb.GetThresholds() {
		byPriority[th.GetPriority()] = th
	}
	for _, p := range []core.RoutingPriority{core.RoutingPriority_DEFAULT, core.RoutingPriority_HIGH} {
		th := byPriority[p]
		if p == core.RoutingPriority_HIGH && th == nil {
			continue
		}
		prefix := "circuit_breakers." + strings.ToLower(p.String()) + "."
		f[prefix+"max_connections"] = uint32Or(th.GetMaxConnections(), defaultMaxConnections)
		f[prefix+"max_pending_requests"] = uint32Or(th.GetMaxPendingRequests(), defaultMaxPending)
		f[prefix+"max_requests"] = uint32Or(th.GetMaxRequests(), defaultMaxRequests)
		f[prefix+"max_retries"] = uint32Or(th.GetMaxRetries(), defaultMaxRetries)
	}
}

// outlierFields: no outlier_detection means no ejection at all; a present one ejects with Envoy's defaults
// for every field left unset (consecutive 5xx and success rate both enforcing at 100 %).
func outlierFields(f Fields, od *cluster.OutlierDetection) {
	if od == nil {
		f["outlier"] = "off"
		return
	}
	f["outlier"] = "on"
	f["outlier.consecutive_5xx"] = uint32Or(od.GetConsecutive_5Xx(), "5")
	f["outlier.enforcing_consecutive_5xx"] = uint32Or(od.GetEnforcingConsecutive_5Xx(), "100")
	f["outlier.consecutive_gateway_failure"] = uint32Or(od.GetConsecutiveGatewayFailure(), "5")
	f["outlier.enforcing_consecutive_gateway_failure"] = uint32Or(od.GetEnforcingConsecutiveGatewayFailure(), "0")
	f["outlier.split_external_local_origin_errors"] = strconv.FormatBool(od.GetSplitExternalLocalOriginErrors())
	f["outlier.consecutive_local_origin_failure"] = uint32Or(od.GetConsecutiveLocalOriginFailure(), "5")
	f["outlier.enforcing_local_origin_success_rate"] = uint32Or(od.GetEnforcingLocalOriginSuccessRate(), "100")
	f["outlier.enforcing_success_rate"] = uint32Or(od.GetEnforcingSuccessRate(), "100")
	f["outlier.interval"] = durationOr(od.GetInterval(), "10s")
	f["outlier.base_ejection_time"] = durationOr(od.GetBaseEjectionTime(), "30s")
	f["outlier.max_ejection_time"] = durationOr(od.GetMaxEjectionTime(), "5m0s")
	f["outlier.max_ejection_percent"] = uint32Or(od.GetMaxEjectionPercent(), "10")
}

const httpOptionsName = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

// httpFields reads the upstream HTTP protocol from HttpProtocolOptions or the cluster's older fields.
func httpFields(f Fields, c *cluster.Cluster) error {
	protocol := "http1"
	autoSNI, autoSAN := false, false
	common := c.GetCommonHttpProtocolOptions()
	h2 := c.GetHttp2ProtocolOptions()
	if h2 != nil {
		protocol = "http2"
	}
	if c.GetProtocolSelection() == cluster.Cluster_USE_DOWNSTREAM_PROTOCOL {
		protocol = "downstream"
	}
	if a, ok := c.GetTypedExtensionProtocolOptions()[httpOptionsName]; ok {
		var o upstreamhttp.HttpProtocolOptions
		if err := a.UnmarshalTo(&o); err != nil {
			return err
		}
		common = o.GetCommonHttpProtocolOptions()
		// SNI and SAN taken from each request's Host instead of the cluster's fixed values.
		autoSNI = o.GetUpstreamHttpProtocolOptions().GetAutoSni()
		autoSAN = o.GetUpstreamHttpProtocolOptions().GetAutoSanValidation()
		switch {
		case o.GetExplicitHttpConfig().GetHttp2ProtocolOptions() != nil:
			protocol, h2 = "http2", o.GetExplicitHttpConfig().GetHttp2ProtocolOptions()
		case o.GetExplicitHttpConfig() != nil:
			protocol = "http1"
		case o.GetUseDownstreamProtocolConfig() != nil:
			protocol, h2 = "downstream", o.GetUseDownstreamProtocolConfig().GetHttp2ProtocolOptions()
		case o.GetAutoConfig() != nil:
			protocol, h2 = "auto", o.GetAutoConfig().GetHttp2ProtocolOptions()
		}
	}
	f["http.protocol"] = protocol
	f["http.auto_sni"] = strconv.FormatBool(autoSNI)
	f["http.auto_san_validation"] = strconv.FormatBool(autoSAN)
	f["http.idle_timeout"] = durationOr(common.GetIdleTimeout(), defaultHTTPIdleTimeout)
	perConn := uint32Or(common.GetMaxRequestsPerConnection(), defaultUnlimitedPerConn)
	if c.GetMaxRequestsPerConnection() != nil { //nolint:staticcheck // the older field still configures Envoy
		perConn = uint32Or(c.GetMaxRequestsPerConnection(), defaultUnlimitedPerConn) //nolint:staticcheck
	}
	f["http.max_requests_per_connection"] = perConn
	f["http.max_connection_duration"] = durationOr(common.GetMaxConnectionDuration(), "unlimited")
	if protocol != "http1" {
		setIf(f, "http2.max_concurrent_streams", uint32Or(h2.GetMaxConcurrentStreams(), defaultH2MaxStreams), defaultH2MaxStreams)
	}
	return nil
}

// endpointClasses are the two kinds of endpoint a mesh cluster holds, by the metadata transport_socket_matches
// read: one with a sidecar (tlsMode istio) and one without. The upstream transport is compared per class.
var endpointClasses = []struct {
	name     string
	metadata map[string]string
}{
	{"mtls-endpoint", map[string]string{"tlsMode": "istio"}},
	{"plain-endpoint", map[string]string{}},
}

// endpointClass names the class of an endpoint from its transport match metadata.
func endpointClass(pairs string) string {
	for _, p := range strings.Split(pairs, ",") {
		if p == "tlsMode=istio" {
			return "mtls-endpoint"
		}
	}
	return "plain-endpoint"
}

// tlsFields describes the upstream transport by what each class of endpoint gets, as Envoy picks it: the
// first transport_socket_match whose criteria the endpoint's metadata satisfies, else the cluster's
// transport_socket, else plaintext. Match names and how the choice is spelled do not matter.
func tlsFields(f Fields, c *cluster.Cluster) error {
	for _, class := range endpointClasses {
		socket := c.GetTransportSocket()
		for _, m := range c.GetTransportSocketMatches() {
			if metadataSubset(m.GetMatch(), class.metadata) {
				socket = m.GetTransportSocket()
				break
			}
		}
		if err := socketFields(f, "tls("+class.name+")", socket); err != nil {
			return err
		}
	}
	return nil
}

// metadataSubset reports whether every criterion of match is in metadata.
func metadataSubset(match *structpb.Struct, metadata map[string]string) bool {
	for k, v := range match.GetFields() {
		if metadata[k] != valueText(v) {
			return false
		}
	}
	return true
}

func socketFields(f Fields, prefix string, s *core.TransportSocket) error {
	if s == nil || s.GetTypedConfig() == nil {
		f[prefix+".mode"] = "plaintext"
		return nil
	}
	msg, err := s.GetTypedConfig().UnmarshalNew()
	if err != nil {
		return err
	}
	// A PROXY protocol header is a wrapper around the real transport: record it, then describe the inner one.
	if pp, ok := msg.(*proxyprotocol.ProxyProtocolUpstreamTransport); ok {
		f[prefix+".proxy_protocol"] = pp.GetConfig().GetVersion().String()
		return socketFields(f, prefix, pp.GetTransportSocket())
	}
	ctx, ok := msg.(*tlsv3.UpstreamTlsContext)
	if !ok {
		name := string(msg.ProtoReflect().Descriptor().FullName())
		if strings.HasSuffix(name, ".RawBuffer") {
			name = "plaintext"
		}
		f[prefix+".mode"] = name
		return nil
	}
	f[prefix+".mode"] = "tls"
	f[prefix+".sni"] = ctx.GetSni()
	common := ctx.GetCommonTlsContext()
	f[prefix+".alpn"] = joinSorted(common.GetAlpnProtocols())
	var certs []string
	for _, c := range common.GetTlsCertificates() {
		certs = append(certs, "file:"+dataSource(c.GetCertificateChain()))
	}
	for _, c := range common.GetTlsCertificateSdsSecretConfigs() {
		certs = append(certs, sdsSource(c.GetName()))
	}
	f[prefix+".cert"] = joinSorted(certs)
	var ca string
	var sans []string
	var vc *tlsv3.CertificateValidationContext
	switch v := common.GetValidationContextType().(type) {
	case *tlsv3.CommonTlsContext_ValidationContext:
		vc = v.ValidationContext
	case *tlsv3.CommonTlsContext_CombinedValidationContext:
		vc = v.CombinedValidationContext.GetDefaultValidationContext()
		ca = sdsSource(v.CombinedValidationContext.GetValidationContextSdsSecretConfig().GetName())
	case *tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig:
		ca = sdsSource(v.ValidationContextSdsSecretConfig.GetName())
	}
	if vc.GetTrustedCa() != nil {
		ca = "file:" + dataSource(vc.GetTrustedCa())
	}
	for _, m := range vc.GetMatchTypedSubjectAltNames() {
		sans = append(sans, m.GetSanType().String()+" "+stringMatcher(m.GetMatcher()))
	}
	for _, m := range vc.GetMatchSubjectAltNames() { //nolint:staticcheck // still honoured by Envoy
		sans = append(sans, "ANY "+stringMatcher(m))
	}
	f[prefix+".ca"] = ca
	f[prefix+".san"] = joinSorted(sans)
	upstreamTLSParams(f, prefix, common.GetTlsParams())
	return nil
}

// upstreamTLSParams records the versions, ciphers and curves a client offers; unset ones are Envoy's client
// defaults (TLS 1.2 only, its own lists).
func upstreamTLSParams(f Fields, prefix string, params *tlsv3.TlsParameters) {
	f[prefix+".versions"] = tlsVersion(params.GetTlsMinimumProtocolVersion(), "TLSv1_2") + "-" +
		tlsVersion(params.GetTlsMaximumProtocolVersion(), "TLSv1_2")
	f[prefix+".ciphers"] = cmp.Or(strings.Join(params.GetCipherSuites(), ":"), "envoy default")
	f[prefix+".ecdh_curves"] = cmp.Or(strings.Join(params.GetEcdhCurves(), ":"), "envoy default")
}

// sdsSource names where an SDS secret comes from. Istio's agent serves files under the names
// file-cert:CERT~KEY and file-root:CA (file-root:system for the system roots); they read the same files a
// cluster naming them directly would, so both spell "file:PATH".
func sdsSource(name string) string {
	if rest, ok := strings.CutPrefix(name, "file-cert:"); ok {
		cert, _, _ := strings.Cut(rest, "~")
		return "file:" + cert
	}
	if rest, ok := strings.CutPrefix(name, "file-root:"); ok {
		if rest == "system" {
			return "system roots"
		}
		return "file:" + rest
	}
	return "sds:" + name
}

func dataSource(d *core.DataSource) string {
	switch {
	case d.GetFilename() != "":
		return d.GetFilename()
	case d.GetInlineString() != "":
		return "inline"
	case len(d.GetInlineBytes()) > 0:
		return "inline"
	}
	return ""
}

// stringMatcher renders a matcher as "exact:x", "prefix:x", ..., "/i" marking ignore_case.
func stringMatcher(m *matcher.StringMatcher) string {
	var s string
	switch p := m.GetMatchPattern().(type) {
	case *matcher.StringMatcher_Exact:
		s = "exact:" + p.Exact
	case *matcher.StringMatcher_Prefix:
		s = "prefix:" + p.Prefix
	case *matcher.StringMatcher_Suffix:
		s = "suffix:" + p.Suffix
	case *matcher.StringMatcher_Contains:
		s = "contains:" + p.Contains
	case *matcher.StringMatcher_SafeRegex:
		s = "regex:" + p.SafeRegex.GetRegex()
	default:
		s = "none"
	}
	if m.GetIgnoreCase() {
		s += "/i"
	}
	return s
}

// structText renders a metadata struct as sorted key=value pairs, nested keys joined by dots.
func structText(s *structpb.Struct) string {
	var pairs []string
	var walk func(prefix string, st *structpb.Struct)
	walk = func(prefix string, st *structpb.Struct) {
		for k, v := range st.GetFields() {
			if sub := v.GetStructValue(); sub != nil {
				walk(prefix+k+".", sub)
				continue
			}
			pairs = append(pairs, prefix+k+"="+valueText(v))
		}
	}
	walk("", s)
	return joinSorted(pairs)
}

func valueText(v *structpb.Value) string {
	switch x := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return x.StringValue
	case *structpb.Value_NumberValue:
		return strconv.FormatFloat(x.NumberValue, 'g', -1, 64)
	case *structpb.Value_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	case *structpb.Value_ListValue:
		var items []string
		for _, i := range x.ListValue.GetValues() {
			items = append(items, valueText(i))
		}
		return "[" + strings.Join(items, ",") + "]"
	}
	return ""
}

func durationOr(d *durationpb.Duration, def string) string {
	if d == nil {
		return def
	}
	return d.AsDuration().String()
}

func uint32Or(v *wrapperspb.UInt32Value, def string) string {
	if v == nil {
		return def
	}
	return strconv.FormatUint(uint64(v.GetValue()), 10)
}

func uint64Or(v *wrapperspb.UInt64Value, def string) string {
	if v == nil {
		return def
	}
	return strconv.FormatUint(v.GetValue(), 10)
}

func percentOr(v float64, set bool, def string) string {
	if !set {
		return def
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// dnsCacheText describes a dynamic forward proxy's DNS cache by what decides its lookups: its name (a
// cluster and the filters that fill its cache must agree on it), address family, host limit and refresh,
// Envoy's defaults filled in.
func dnsCacheText(c *dfpcommon.DnsCacheConfig) string {
	if c == nil {
		return "none"
	}
	return fmt.Sprintf("name=%s family=%s max_hosts=%s refresh=%s", c.GetName(), c.GetDnsLookupFamily(),
		uint32Or(c.GetMaxHosts(), "1024"), durationOr(c.GetDnsRefreshRate(), "1m0s"))
}
