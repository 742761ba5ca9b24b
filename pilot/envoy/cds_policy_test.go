package envoy

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	"github.com/sextantmesh/sextant/pilot/model"
)

// policyMesh is one HTTP service and the client sleep; each test adds its DestinationRules.
const policyMesh = `
apiVersion: v1
kind: Service
metadata: {name: reviews, namespace: default}
spec:
  clusterIP: 10.0.0.11
  selector: {app: reviews}
  ports: [{name: http, port: 9080}]
---
apiVersion: v1
kind: Service
metadata: {name: sleep, namespace: default}
spec:
  clusterIP: 10.0.0.12
  selector: {app: sleep}
  ports: [{name: http, port: 80}]
`

const reviewsCluster = "outbound|9080||reviews.default.svc.cluster.local"

// policyClusters generates the clusters of a sidecar with labels in namespace default, for policyMesh plus extra.
func policyClusters(t *testing.T, extra string, labels map[string]string) []*cluster.Cluster {
	t.Helper()
	push := pushFromYAML(t, []byte(policyMesh+extra))
	return generate(t, New(Options{}), ClusterType, sidecarIn("default", "10.1.0.1", labels), push, wildcard(ClusterType), newCluster)
}

// Without a DestinationRule, istiod lifts every circuit breaker to the maximum (outbound and inbound),
// balances by LEAST_REQUEST and turns the healthy-panic threshold off on outbound clusters.
func TestClusterDefaultsAsIstiod(t *testing.T) {
	cs := policyClusters(t, "", map[string]string{"app": "sleep"})
	for _, name := range []string{reviewsCluster, InboundClusterName(80)} {
		c := clusterByName(t, cs, name)
		th := c.GetCircuitBreakers().GetThresholds()
		if len(th) != 1 {
			t.Fatalf("%s: thresholds %v", name, th)
		}
		for field, v := range map[string]uint32{
			"max_connections": th[0].GetMaxConnections().GetValue(), "max_pending_requests": th[0].GetMaxPendingRequests().GetValue(),
			"max_requests": th[0].GetMaxRequests().GetValue(), "max_retries": th[0].GetMaxRetries().GetValue(),
		} {
			if v != math.MaxUint32 {
				t.Errorf("%s: %s = %d, want %d", name, field, v, uint32(math.MaxUint32))
			}
		}
	}
	c := clusterByName(t, cs, reviewsCluster)
	if c.LbPolicy != cluster.Cluster_LEAST_REQUEST {
		t.Errorf("lb policy = %v, want LEAST_REQUEST", c.LbPolicy)
	}
	if p := c.GetCommonLbConfig().GetHealthyPanicThreshold(); p == nil || p.GetValue() != 0 {
		t.Errorf("healthy panic threshold = %v, want 0 (set)", p)
	}
	if c.GetCommonLbConfig().GetLocalityWeightedLbConfig() != nil {
		t.Error("locality weighting without a localityLbSetting")
	}
}

// A connection pool lowers only the limits it names; the others stay at the maximum.
func TestConnectionPoolKeepsOtherLimitsAtMax(t *testing.T) {
	cs := policyClusters(t, `
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: default}
spec:
  host: reviews
  trafficPolicy: {connectionPool: {tcp: {maxConnections: 7}}}
`, nil)
	th := clusterByName(t, cs, reviewsCluster).GetCircuitBreakers().GetThresholds()[0]
	if th.GetMaxConnections().GetValue() != 7 || th.GetMaxRequests().GetValue() != math.MaxUint32 ||
		th.GetMaxRetries().GetValue() != math.MaxUint32 {
		t.Errorf("thresholds = %v", th)
	}
}

func TestOutlierDetectionAsIstiod(t *testing.T) {
	cs := policyClusters(t, `
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: default}
spec:
  host: reviews
  trafficPolicy:
    outlierDetection:
      consecutive5xxErrors: 0
      consecutiveGatewayErrors: 3
      splitExternalLocalOriginErrors: true
      consecutiveLocalOriginFailures: 2
`, nil)
	c := clusterByName(t, cs, reviewsCluster)
	od := c.GetOutlierDetection()
	if od.GetEnforcingSuccessRate() == nil || od.GetEnforcingSuccessRate().GetValue() != 0 {
		t.Errorf("enforcing_success_rate = %v, want 0 (set: Envoy's default is 100)", od.GetEnforcingSuccessRate())
	}
	if od.GetEnforcingConsecutive_5Xx() == nil || od.GetEnforcingConsecutive_5Xx().GetValue() != 0 {
		t.Errorf("consecutive5xxErrors 0: enforcing_consecutive_5xx = %v, want 0", od.GetEnforcingConsecutive_5Xx())
	}
	if od.GetConsecutiveGatewayFailure().GetValue() != 3 || od.GetEnforcingConsecutiveGatewayFailure().GetValue() != 100 {
		t.Errorf("gateway errors = %v / %v", od.GetConsecutiveGatewayFailure(), od.GetEnforcingConsecutiveGatewayFailure())
	}
	if !od.GetSplitExternalLocalOriginErrors() || od.GetConsecutiveLocalOriginFailure().GetValue() != 2 ||
		od.GetEnforcingConsecutiveLocalOriginFailure().GetValue() != 100 {
		t.Errorf("local origin = split %v, failures %v, enforcing %v", od.GetSplitExternalLocalOriginErrors(),
			od.GetConsecutiveLocalOriginFailure(), od.GetEnforcingConsecutiveLocalOriginFailure())
	}
	if od.GetEnforcingLocalOriginSuccessRate() == nil || od.GetEnforcingLocalOriginSuccessRate().GetValue() != 0 {
		t.Errorf("enforcing_local_origin_success_rate = %v, want 0", od.GetEnforcingLocalOriginSuccessRate())
	}
	if p := c.GetCommonLbConfig().GetHealthyPanicThreshold(); p == nil || p.GetValue() != 0 {
		t.Errorf("healthy panic threshold = %v, want 0 (minHealthPercent unset)", p)
	}
}

// warmup becomes Envoy's slow start; maglev keeps its table size; distribute weights localities.
func TestLoadBalancerSettingsAsIstiod(t *testing.T) {
	cs := policyClusters(t, `
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: default}
spec:
  host: reviews
  trafficPolicy:
    loadBalancer:
      warmup: {duration: 30s}
      localityLbSetting:
        distribute: [{from: "region1/*", to: {"region1/*": 80, "region2/*": 20}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: sleep, namespace: default}
spec:
  host: sleep
  trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x-user, maglev: {tableSize: 1031}}}}
`, nil)
	c := clusterByName(t, cs, reviewsCluster)
	ss := c.GetLeastRequestLbConfig().GetSlowStartConfig()
	if c.LbPolicy != cluster.Cluster_LEAST_REQUEST || ss.GetSlowStartWindow().AsDuration().Seconds() != 30 ||
		ss.GetAggression().GetDefaultValue() != 1 || ss.GetMinWeightPercent().GetValue() != 10 {
		t.Errorf("warmup: lb %v, slow start %v", c.LbPolicy, ss)
	}
	if c.GetCommonLbConfig().GetLocalityWeightedLbConfig() == nil {
		t.Error("distribute: no locality-weighted load balancing")
	}
	m := clusterByName(t, cs, "outbound|80||sleep.default.svc.cluster.local")
	if m.LbPolicy != cluster.Cluster_MAGLEV || m.GetMaglevLbConfig().GetTableSize().GetValue() != 1031 {
		t.Errorf("maglev: lb %v, config %v", m.LbPolicy, m.GetMaglevLbConfig())
	}
}

// A DestinationRule with a workloadSelector shapes the clusters of the proxies it selects only, also when
// one generator serves both kinds of proxy from its shared lists.
func TestWorkloadSelectorRestrictsDestinationRule(t *testing.T) {
	push := pushFromYAML(t, []byte(policyMesh+`
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: default}
spec:
  host: reviews
  workloadSelector: {matchLabels: {app: productpage}}
  trafficPolicy: {loadBalancer: {simple: RANDOM}}
`))
	g := New(Options{})
	lb := func(ip string, labels map[string]string, w *model.WatchedResource) cluster.Cluster_LbPolicy {
		cs := generate(t, g, ClusterType, sidecarIn("default", ip, labels), push, w, newCluster)
		return clusterByName(t, cs, reviewsCluster).LbPolicy
	}
	for _, w := range []*model.WatchedResource{wildcard(ClusterType), named(ClusterType, reviewsCluster)} {
		if got := lb("10.1.0.1", map[string]string{"app": "sleep"}, w); got != cluster.Cluster_LEAST_REQUEST {
			t.Errorf("sleep (not selected): lb %v, want the default LEAST_REQUEST", got)
		}
		if got := lb("10.1.0.2", map[string]string{"app": "productpage"}, w); got != cluster.Cluster_RANDOM {
			t.Errorf("productpage (selected): lb %v, want RANDOM", got)
		}
		if got := lb("10.1.0.3", map[string]string{"app": "sleep", "version": "v2"}, w); got != cluster.Cluster_LEAST_REQUEST {
			t.Errorf("another unselected proxy after the selected one: lb %v", got)
		}
	}
}

// upstreamProtocol reads a cluster's upstream HTTP protocol: "http2", "downstream", "http1" (explicit or
// no options at all) and its HTTP/2 stream limit.
func upstreamProtocol(t *testing.T, c *cluster.Cluster) (string, *httpv3.HttpProtocolOptions) {
	t.Helper()
	a := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
	if a == nil {
		return "http1", nil
	}
	opts := &httpv3.HttpProtocolOptions{}
	if err := a.UnmarshalTo(opts); err != nil {
		t.Fatal(err)
	}
	switch {
	case opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() != nil:
		return "http2", opts
	case opts.GetUseDownstreamProtocolConfig() != nil:
		return "downstream", opts
	}
	return "http1", opts
}

// mtlsALPN is the ALPN a cluster's auto-mTLS socket offers to mesh endpoints.
func mtlsALPN(t *testing.T, c *cluster.Cluster) []string {
	t.Helper()
	for _, m := range c.GetTransportSocketMatches() {
		if m.GetName() == "tlsMode-istio" {
			ctx := &tlsv3.UpstreamTlsContext{}
			if err := m.GetTransportSocket().GetTypedConfig().UnmarshalTo(ctx); err != nil {
				t.Fatal(err)
			}
			alpn := ctx.GetCommonTlsContext().GetAlpnProtocols()
			slices.Sort(alpn)
			return alpn
		}
	}
	t.Fatalf("%s: no mTLS socket", c.Name)
	return nil
}

// The upstream protocol follows the port as in istiod: HTTP/2 for grpc and http2 ports (offered in the
// mTLS ALPN), the client's protocol for a sniffed port at a sidecar (a gateway does not sniff), HTTP/1.1
// for an http port even when a connection pool sets HTTP options; h2UpgradePolicy, maxConcurrentStreams,
// and the TCP idle timeout and connection duration are honoured.
func TestUpstreamHTTPProtocolAsIstiod(t *testing.T) {
	push := pushFromYAML(t, []byte(`
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: default}
spec:
  clusterIP: 10.0.0.30
  selector: {app: echo}
  ports:
  - {name: grpc, port: 9090}
  - {name: h2, port: 7070, appProtocol: http2}
  - {name: web, port: 8081}
  - {name: http, port: 80}
  - {name: http-up, port: 81}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: default}
spec:
  host: echo
  trafficPolicy:
    connectionPool:
      tcp: {idleTimeout: 10m, maxConnectionDuration: 1h}
      http: {maxRequestsPerConnection: 5}
    portLevelSettings:
    - port: {number: 81}
      connectionPool: {http: {h2UpgradePolicy: UPGRADE, maxConcurrentStreams: 100}}
`))
	g := New(Options{})
	sidecar := generate(t, g, ClusterType, sidecarIn("default", "10.1.0.9", map[string]string{"app": "echo"}), push,
		wildcard(ClusterType), newCluster)
	gateway := generate(t, g, ClusterType, &model.Proxy{Type: model.Router,
		NodeID: "router~10.1.0.8~gw.default~default.svc.cluster.local", Namespace: "default"},
		push, wildcard(ClusterType), newCluster)
	name := func(port int) string { return fmt.Sprintf("outbound|%d||echo.default.svc.cluster.local", port) }
	cases := []struct {
		cs       []*cluster.Cluster
		cluster  string
		protocol string
	}{
		{sidecar, name(9090), "http2"},
		{sidecar, name(7070), "http2"},
		{sidecar, name(8081), "downstream"},
		{gateway, name(8081), "http1"},
		{sidecar, name(80), "http1"},
		{sidecar, name(81), "http2"},
		{sidecar, InboundClusterName(9090), "http2"},
		{sidecar, InboundClusterName(8081), "downstream"},
		{sidecar, InboundClusterName(80), "http1"},
	}
	for _, c := range cases {
		if got, _ := upstreamProtocol(t, clusterByName(t, c.cs, c.cluster)); got != c.protocol {
			t.Errorf("%s: upstream %s, want %s", c.cluster, got, c.protocol)
		}
	}
	if got := mtlsALPN(t, clusterByName(t, sidecar, name(9090))); !slices.Equal(got, []string{"h2", "istio", "istio-peer-exchange"}) {
		t.Errorf("grpc port: mTLS ALPN %v, want h2 offered", got)
	}
	if got := mtlsALPN(t, clusterByName(t, sidecar, name(80))); !slices.Equal(got, []string{"istio", "istio-peer-exchange"}) {
		t.Errorf("http port: mTLS ALPN %v", got)
	}
	_, up := upstreamProtocol(t, clusterByName(t, sidecar, name(81)))
	if got := up.GetExplicitHttpConfig().GetHttp2ProtocolOptions().GetMaxConcurrentStreams().GetValue(); got != 100 {
		t.Errorf("maxConcurrentStreams = %d, want 100", got)
	}
	_, http1 := upstreamProtocol(t, clusterByName(t, sidecar, name(80)))
	common := http1.GetCommonHttpProtocolOptions()
	if common.GetIdleTimeout().AsDuration() != 10*time.Minute || common.GetMaxConnectionDuration().AsDuration() != time.Hour ||
		common.GetMaxRequestsPerConnection().GetValue() != 5 {
		t.Errorf("common HTTP options = %v", common)
	}
}

// A portLevelSettings entry for the port replaces the top-level connectionPool, loadBalancer,
// outlierDetection and tls whole, and drops the proxyProtocol, as istiod's GetPortLevelTrafficPolicy: what
// the entry leaves unset is the default, not the top level's. A subset's policy then overrides field by
// field, unless the subset has its own entry for the port, which replaces those four settings again.
func TestPortLevelSettingsReplaceTopLevel(t *testing.T) {
	cs := policyClusters(t, `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: default}
spec:
  host: reviews
  trafficPolicy:
    loadBalancer: {simple: RANDOM}
    outlierDetection: {consecutive5xxErrors: 5, interval: 10s}
    tls: {mode: DISABLE}
    proxyProtocol: {version: V2}
    portLevelSettings:
    - port: {number: 9080}
      connectionPool: {tcp: {maxConnections: 20}}
  subsets:
  - name: v1
    labels: {version: v1}
    trafficPolicy:
      outlierDetection: {consecutive5xxErrors: 7, interval: 10s}
  - name: v2
    labels: {version: v2}
    trafficPolicy:
      loadBalancer: {simple: ROUND_ROBIN}
      portLevelSettings:
      - port: {number: 9080}
        outlierDetection: {consecutive5xxErrors: 3, interval: 10s}
`, map[string]string{"app": "sleep"})
	cases := []struct {
		cluster        string
		maxConnections uint32
		consecutive5xx uint32 // 0: no outlier detection
		lb             cluster.Cluster_LbPolicy
	}{
		{reviewsCluster, 20, 0, cluster.Cluster_LEAST_REQUEST},
		{"outbound|9080|v1|reviews.default.svc.cluster.local", 20, 7, cluster.Cluster_LEAST_REQUEST},
		{"outbound|9080|v2|reviews.default.svc.cluster.local", math.MaxUint32, 3, cluster.Cluster_LEAST_REQUEST},
	}
	for _, tc := range cases {
		c := clusterByName(t, cs, tc.cluster)
		if got := c.GetCircuitBreakers().GetThresholds()[0].GetMaxConnections().GetValue(); got != tc.maxConnections {
			t.Errorf("%s: max_connections %d, want %d", tc.cluster, got, tc.maxConnections)
		}
		if got := c.GetOutlierDetection().GetConsecutive_5Xx().GetValue(); got != tc.consecutive5xx ||
			(tc.consecutive5xx == 0) != (c.OutlierDetection == nil) {
			t.Errorf("%s: outlier detection %v, want consecutive 5xx %d", tc.cluster, c.OutlierDetection, tc.consecutive5xx)
		}
		if c.LbPolicy != tc.lb {
			t.Errorf("%s: lb %v, want %v", tc.cluster, c.LbPolicy, tc.lb)
		}
		// The top-level tls DISABLE no longer applies: auto mTLS does; nor does the top-level PROXY protocol.
		if len(c.TransportSocketMatches) == 0 {
			t.Errorf("%s: no auto mTLS: top-level tls DISABLE applied", tc.cluster)
		}
		if c.TransportSocket != nil {
			t.Errorf("%s: transport socket %s: top-level proxyProtocol applied", tc.cluster, c.TransportSocket.Name)
		}
	}
}

// Where a port-level entry drops the rule's tls, the cluster does auto mTLS, yet istiod's endpoints still
// take the rule's mode for the port (a port-level tls, else the top level's; the subset's, else the
// rule's): a mode other than ISTIO_MUTUAL takes tlsMode istio off them, so the proxy connects in plaintext.
func TestEndpointTLSModeUnderPortLevelSettings(t *testing.T) {
	push := pushFromYAML(t, []byte(`
apiVersion: v1
kind: Service
metadata: {name: reviews, namespace: default}
spec:
  clusterIP: 10.0.0.11
  selector: {app: reviews}
  ports: [{name: http, port: 9080}]
---
apiVersion: v1
kind: Pod
metadata: {name: reviews-v1, namespace: default, labels: {app: reviews, version: v1, security.istio.io/tlsMode: istio}}
spec: {serviceAccountName: reviews, containers: [{name: app, image: reviews}]}
status: {podIP: 10.1.0.2, phase: Running, conditions: [{type: Ready, status: "True"}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: reviews-1, namespace: default, labels: {kubernetes.io/service-name: reviews}}
addressType: IPv4
ports: [{name: http, port: 9080}]
endpoints:
- addresses: [10.1.0.2]
  conditions: {ready: true}
  targetRef: {kind: Pod, name: reviews-v1, namespace: default}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: default}
spec:
  host: reviews
  trafficPolicy:
    tls: {mode: SIMPLE}
    portLevelSettings:
    - port: {number: 9080}
      connectionPool: {tcp: {maxConnections: 20}}
  subsets:
  - name: v1
    labels: {version: v1}
    trafficPolicy:
      tls: {mode: ISTIO_MUTUAL}
      portLevelSettings:
      - port: {number: 9080}
        connectionPool: {tcp: {maxConnections: 30}}
`))
	want := map[string]string{reviewsCluster: "disabled", "outbound|9080|v1|reviews.default.svc.cluster.local": "istio"}
	proxy := sidecarIn("default", "10.1.0.1", map[string]string{"app": "sleep"})
	g := New(Options{})
	res, err := g.ByTypeURL()[EndpointType].Generate(proxy, push, named(EndpointType, slices.Sorted(maps.Keys(want))...), nil)
	if err != nil {
		t.Fatal(err)
	}
	var clas []*endpoint.ClusterLoadAssignment
	for _, r := range res {
		cla := newCLA()
		if err := r.Any.UnmarshalTo(cla); err != nil {
			t.Fatal(err)
		}
		if err := cla.ValidateAll(); err != nil {
			t.Errorf("%s: %v", cla.ClusterName, err)
		}
		clas = append(clas, cla)
	}
	cs := generate(t, g, ClusterType, proxy, push, wildcard(ClusterType), newCluster)
	if len(clas) != len(want) {
		t.Fatalf("got %d assignments, want %d", len(clas), len(want))
	}
	for _, cla := range clas {
		if c := clusterByName(t, cs, cla.ClusterName); c.TransportSocket != nil || len(c.TransportSocketMatches) == 0 {
			t.Errorf("%s: not auto mTLS: %v", cla.ClusterName, c.TransportSocket)
		}
		lb := cla.GetEndpoints()[0].GetLbEndpoints()[0]
		got := lb.GetMetadata().GetFilterMetadata()["envoy.transport_socket_match"].GetFields()["tlsMode"].GetStringValue()
		if got != want[cla.ClusterName] {
			t.Errorf("%s: endpoint tlsMode %q, want %q", cla.ClusterName, got, want[cla.ClusterName])
		}
	}
}
