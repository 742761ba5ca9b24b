package envoy

import (
	"slices"
	"strings"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	dfpcluster "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/dynamic_forward_proxy/v3"
	dfpcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/dynamic_forward_proxy/v3"
	dfphttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/dynamic_forward_proxy/v3"
	dfpsni "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/sni_dynamic_forward_proxy/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"

	"github.com/sextantmesh/sextant/pilot/model"
)

// A wildcard ServiceEntry with resolution DYNAMIC_DNS, on an HTTP port of its own (8000), an HTTP port an
// older Kubernetes Service also has (80), a TLS port and a gRPC port.
const dynamicDNSMesh = `
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default, creationTimestamp: "2025-01-01T00:00:00Z"}
spec:
  clusterIP: 10.96.0.30
  selector: {app: web}
  ports: [{name: http, port: 80}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: wildcard, namespace: default, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  hosts: ["*.api.example.com"]
  location: MESH_EXTERNAL
  resolution: DYNAMIC_DNS
  ports:
  - {number: 80, name: http, protocol: HTTP}
  - {number: 8000, name: http-alt, protocol: HTTP}
  - {number: 443, name: tls, protocol: TLS}
  - {number: 9090, name: grpc, protocol: GRPC}
`

// dfpClusterConfig returns the dynamic forward proxy config of c, failing when c is not such a cluster.
func dfpClusterConfig(t *testing.T, c *cluster.Cluster) *dfpcluster.ClusterConfig {
	t.Helper()
	ct := c.GetClusterType()
	if ct.GetName() != "envoy.clusters.dynamic_forward_proxy" {
		t.Fatalf("%s: cluster type %q (discovery type %v), want envoy.clusters.dynamic_forward_proxy", c.Name, ct.GetName(), c.GetType())
	}
	cfg := &dfpcluster.ClusterConfig{}
	if err := ct.GetTypedConfig().UnmarshalTo(cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func wantDNSCache(t *testing.T, where string, got *dfpcommon.DnsCacheConfig) {
	t.Helper()
	wantDNSCacheFamily(t, where, got, cluster.Cluster_V4_ONLY)
}

func wantDNSCacheFamily(t *testing.T, where string, got *dfpcommon.DnsCacheConfig, family cluster.Cluster_DnsLookupFamily) {
	t.Helper()
	want := &dfpcommon.DnsCacheConfig{Name: "*.api.example.com_dfp_dns_cache", DnsLookupFamily: family}
	if !proto.Equal(got, want) {
		t.Errorf("%s: DNS cache %v, want %v", where, got, want)
	}
}

// Resolution DYNAMIC_DNS was an empty STATIC cluster (every request failed): it is now istiod's dynamic
// forward proxy cluster, one per port, whose DNS cache istiod names after the host; the proxy picks the
// host, so CLUSTER_PROVIDED and no EDS, no endpoints, no subsets, and the panic threshold left alone.
func TestDynamicDNSCluster(t *testing.T) {
	push := pushFromYAML(t, []byte(dynamicDNSMesh+`---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: wildcard, namespace: default}
spec:
  host: "*.api.example.com"
  subsets: [{name: v1, labels: {version: v1}}]
`))
	cs := generate(t, New(Options{}), ClusterType, sidecarIn("default", "10.1.9.9", nil), push, wildcard(ClusterType), newCluster)
	for _, c := range cs {
		if err := validateDeep(c); err != nil {
			t.Errorf("%s: %v", c.Name, err)
		}
		if c.Name == "outbound|80|v1|*.api.example.com" {
			t.Errorf("subset cluster %s built for a DYNAMIC_DNS host", c.Name)
		}
	}
	for _, port := range []string{"80", "8000", "443", "9090"} {
		c := clusterByName(t, cs, "outbound|"+port+"||*.api.example.com")
		cfg := dfpClusterConfig(t, c)
		wantDNSCache(t, c.Name, cfg.GetDnsCacheConfig())
		if c.LbPolicy != cluster.Cluster_CLUSTER_PROVIDED || c.EdsClusterConfig != nil || c.LoadAssignment != nil || c.CommonLbConfig != nil {
			t.Errorf("%s: lb %v, eds %v, load assignment %v, common lb %v", c.Name, c.LbPolicy, c.EdsClusterConfig,
				c.LoadAssignment, c.CommonLbConfig)
		}
		if th := c.GetCircuitBreakers().GetThresholds(); len(th) != 1 || th[0].GetMaxConnections().GetValue() != 1<<32-1 {
			t.Errorf("%s: circuit breakers %v, want istiod's maximum", c.Name, th)
		}
		// Envoy loads a forward proxy cluster whose HTTP options lack auto_sni only if it allows that: the
		// gRPC port's HTTP/2 options do; the others have no options of their own.
		if got, want := cfg.AllowInsecureClusterOptions, port == "9090"; got != want {
			t.Errorf("%s: allow_insecure_cluster_options %v, want %v", c.Name, got, want)
		}
	}
}

// TLS origination to a DYNAMIC_DNS host follows the request's host, as istiod: auto SNI and the server's
// certificate checked against that host; a rule fixing the SNI or skipping the check makes the cluster
// allow it, which Envoy otherwise refuses.
func TestDynamicDNSClusterTLS(t *testing.T) {
	for _, tc := range []struct {
		name, tls        string
		autoSNI, autoSAN bool
		insecure         bool
	}{
		{"simple", "{mode: SIMPLE}", true, true, false},
		{"fixed sni", "{mode: SIMPLE, sni: one.api.example.com}", false, true, true},
		{"skip verify", "{mode: SIMPLE, insecureSkipVerify: true}", true, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			push := pushFromYAML(t, []byte(dynamicDNSMesh+`---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: wildcard, namespace: default}
spec:
  host: "*.api.example.com"
  trafficPolicy: {tls: `+tc.tls+`}
`))
			cs := generate(t, New(Options{}), ClusterType, sidecarIn("default", "10.1.9.9", nil), push, wildcard(ClusterType), newCluster)
			c := clusterByName(t, cs, "outbound|8000||*.api.example.com")
			if err := validateDeep(c); err != nil {
				t.Error(err)
			}
			if c.TransportSocket == nil {
				t.Fatal("no TLS transport socket")
			}
			opts := &httpv3.HttpProtocolOptions{}
			if err := c.TypedExtensionProtocolOptions["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].UnmarshalTo(opts); err != nil {
				t.Fatal(err)
			}
			u := opts.GetUpstreamHttpProtocolOptions()
			if u.GetAutoSni() != tc.autoSNI || u.GetAutoSanValidation() != tc.autoSAN {
				t.Errorf("auto_sni %v auto_san_validation %v, want %v %v", u.GetAutoSni(), u.GetAutoSanValidation(), tc.autoSNI, tc.autoSAN)
			}
			if got := dfpClusterConfig(t, c).AllowInsecureClusterOptions; got != tc.insecure {
				t.Errorf("allow_insecure_cluster_options %v, want %v", got, tc.insecure)
			}
		})
	}
}

// The listeners lead to the forward proxy cluster with the same DNS cache: on the TLS port a chain for the
// wildcard's server names whose SNI filter resolves the name before tcp_proxy; on an HTTP port the
// connection manager's filter resolves the Host header before the router, as istiod, when the DYNAMIC_DNS
// service is the port's oldest HTTP service (8000). On port 80 the older Service's listener options stand
// in istiod, without the filter, and the cluster resolves the host itself.
func TestDynamicDNSListeners(t *testing.T) {
	push := pushFromYAML(t, []byte(dynamicDNSMesh))
	ls := ldsGenerate(t, New(Options{}), sidecarIn("default", "10.1.9.9", nil), push, wildcard(ListenerType))

	h := ldsHCMOf(t, ldsChain(t, ldsFind(t, ls, "0.0.0.0_8000"), "0.0.0.0_8000"))
	if got, want := httpFilterNames(h), []string{ldsALPNFilterName, ldsFaultFilter, CORSFilterName, ldsHTTPDynamicForwardProxyFilter,
		ldsRouterFilterName}; !slices.Equal(got, want) {
		t.Fatalf("8000 HTTP filters %v, want %v", got, want)
	}
	fc := &dfphttp.FilterConfig{}
	if err := h.HttpFilters[3].GetTypedConfig().UnmarshalTo(fc); err != nil {
		t.Fatal(err)
	}
	wantDNSCache(t, "8000 filter", fc.GetDnsCacheConfig())

	h80 := ldsHCMOf(t, ldsChain(t, ldsFind(t, ls, "0.0.0.0_80"), "0.0.0.0_80"))
	if got := httpFilterNames(h80); slices.Contains(got, ldsHTTPDynamicForwardProxyFilter) {
		t.Errorf("80 HTTP filters %v: the older Service decides the port's connection manager", got)
	}

	tls := ldsFind(t, ls, "0.0.0.0_443")
	chain := ldsChain(t, tls, "0.0.0.0_443/*.api.example.com")
	if !slices.Equal(chain.FilterChainMatch.ServerNames, []string{"*.api.example.com"}) {
		t.Errorf("443 server names %v", chain.FilterChainMatch.ServerNames)
	}
	if got, want := filterNames(chain), []string{ldsSNIDynamicForwardProxyFilter, ldsTCPProxyFilterName}; !slices.Equal(got, want) {
		t.Fatalf("443 filters %v, want %v", got, want)
	}
	sni := &dfpsni.FilterConfig{}
	if err := chain.Filters[0].GetTypedConfig().UnmarshalTo(sni); err != nil {
		t.Fatal(err)
	}
	wantDNSCache(t, "443 SNI filter", sni.GetDnsCacheConfig())
	if sni.GetPortValue() != 443 {
		t.Errorf("SNI filter port %d, want 443", sni.GetPortValue())
	}
	if got := ldsTCPProxyOf(t, chain).GetCluster(); got != "outbound|443||*.api.example.com" {
		t.Errorf("443 cluster %q", got)
	}
	if !slices.Equal(listenerFilterNames(tls), []string{ldsTLSInspectorFilter}) {
		t.Errorf("443 listener filters %v", listenerFilterNames(tls))
	}
	if got := ldsTCPProxyOf(t, ldsDefaultChain(t, tls, "PassthroughFilterChain")).GetCluster(); got != PassthroughCluster {
		t.Errorf("443 without the wildcard's SNI goes to %q", got)
	}
}

// As istiod (SelectDNSLookupFamily under its defaults), a proxy whose addresses are all IPv6 resolves names
// in IPv6: the forward proxy's DNS cache (its cluster and the listener filters that fill it, which Envoy
// requires to agree) and DNS clusters; a dual-stack or IPv4 proxy keeps IPv4. Proxies of both families in
// one namespace share the generator's caches without getting each other's.
func TestDynamicDNSLookupFamily(t *testing.T) {
	push := pushFromYAML(t, []byte(dynamicDNSMesh+`---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: dns, namespace: default}
spec:
  hosts: [db.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{number: 5432, name: tcp, protocol: TCP}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: dns-rr, namespace: default}
spec:
  hosts: [cache.example.com]
  location: MESH_EXTERNAL
  resolution: DNS_ROUND_ROBIN
  ports: [{number: 6379, name: tcp, protocol: TCP}]
`))
	dual := sidecarIn("default", "10.1.9.8", nil)
	dual.IPAddresses = append(dual.IPAddresses, "fd00::8")
	g := New(Options{})
	for _, tc := range []struct {
		name  string
		proxy *model.Proxy
		want  cluster.Cluster_DnsLookupFamily
	}{
		{"ipv4", sidecarIn("default", "10.1.9.9", nil), cluster.Cluster_V4_ONLY},
		{"ipv6", sidecarIn("default", "fd00::9", nil), cluster.Cluster_V6_ONLY},
		{"dual stack", dual, cluster.Cluster_V4_ONLY},
		{"ipv4 again", sidecarIn("default", "10.1.9.7", nil), cluster.Cluster_V4_ONLY},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := generate(t, g, ClusterType, tc.proxy, push, wildcard(ClusterType), newCluster)
			for _, c := range cs {
				if err := validateDeep(c); err != nil {
					t.Errorf("%s: %v", c.Name, err)
				}
			}
			for _, port := range []string{"80", "8000", "443"} {
				c := clusterByName(t, cs, "outbound|"+port+"||*.api.example.com")
				wantDNSCacheFamily(t, c.Name, dfpClusterConfig(t, c).GetDnsCacheConfig(), tc.want)
			}
			for _, name := range []string{"outbound|5432||db.example.com", "outbound|6379||cache.example.com"} {
				if got := clusterByName(t, cs, name).DnsLookupFamily; got != tc.want {
					t.Errorf("%s: dns_lookup_family %v, want %v", name, got, tc.want)
				}
			}

			ls := ldsGenerate(t, g, tc.proxy, push, wildcard(ListenerType))
			unspecified := "0.0.0.0" // the proxy's unspecified address names its listeners without a VIP
			if tc.want == cluster.Cluster_V6_ONLY {
				unspecified = "::"
			}
			h := ldsHCMOf(t, ldsChain(t, ldsFind(t, ls, unspecified+"_8000"), unspecified+"_8000"))
			fc := &dfphttp.FilterConfig{}
			if err := h.HttpFilters[3].GetTypedConfig().UnmarshalTo(fc); err != nil {
				t.Fatal(err)
			}
			wantDNSCacheFamily(t, "8000 filter", fc.GetDnsCacheConfig(), tc.want)
			chain := ldsChain(t, ldsFind(t, ls, unspecified+"_443"), unspecified+"_443/*.api.example.com")
			sni := &dfpsni.FilterConfig{}
			if err := chain.Filters[0].GetTypedConfig().UnmarshalTo(sni); err != nil {
				t.Fatal(err)
			}
			wantDNSCacheFamily(t, "443 SNI filter", sni.GetDnsCacheConfig(), tc.want)
		})
	}
}

// As istiod, a DestinationRule's load balancer and subsets do nothing for a DYNAMIC_DNS host (the forward
// proxy picks each request's address; no subset cluster is built): each such field is warned, naming the
// object and the field, and a rule's other fields or rules of other hosts are not.
func TestDynamicDNSDestinationRuleWarnings(t *testing.T) {
	push := pushFromYAML(t, []byte(dynamicDNSMesh+`---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: wildcard, namespace: default}
spec:
  host: "*.api.example.com"
  trafficPolicy:
    loadBalancer: {simple: LEAST_REQUEST}
    connectionPool: {tcp: {maxConnections: 10}}
    portLevelSettings:
    - port: {number: 8000}
      loadBalancer: {consistentHash: {httpHeaderName: x-user}}
    - port: {number: 7777}
      loadBalancer: {simple: RANDOM}
  subsets: [{name: v1, labels: {version: v1}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: web, namespace: default}
spec:
  host: web
  trafficPolicy: {loadBalancer: {simple: RANDOM}}
  subsets: [{name: v1, labels: {version: v1}}]
`))
	cs := generate(t, New(Options{}), ClusterType, sidecarIn("default", "10.1.9.9", nil), push, wildcard(ClusterType), newCluster)
	if c := clusterByName(t, cs, "outbound|8000||*.api.example.com"); c.LbPolicy != cluster.Cluster_CLUSTER_PROVIDED {
		t.Errorf("lb policy %v, want CLUSTER_PROVIDED", c.LbPolicy)
	}
	var got []string
	for _, p := range push.DynamicDNSProblems() {
		if !p.Warning || p.Kind != "DestinationRule" || p.Namespace != "default" || p.Name != "wildcard" ||
			!strings.Contains(p.Message, "*.api.example.com") {
			t.Errorf("warning %+v", p)
		}
		got = append(got, p.Field)
	}
	want := []string{"spec.subsets[0]", "spec.trafficPolicy.loadBalancer", "spec.trafficPolicy.portLevelSettings[0].loadBalancer"}
	if !slices.Equal(got, want) {
		t.Errorf("warned fields %v, want %v", got, want)
	}
}
