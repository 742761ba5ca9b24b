package envoy

import (
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/store"
)

// reviewsIngress gives the reviews pods (services: 9080 HTTP, 7070 gRPC to 17070) ingress listeners of
// their own: HTTP 9090 to 127.0.0.1:8090, TCP 5000 to the pod's own address on 5001 with a connection pool
// of its own, and 6000 (sniffed) to the original destination; every other inbound cluster gets the
// Sidecar's inboundConnectionPool.
const reviewsIngress = `
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: reviews, namespace: shop}
spec:
  workloadSelector: {labels: {app: reviews}}
  ingress:
  - port: {number: 9090, protocol: HTTP, name: http-admin}
    defaultEndpoint: 127.0.0.1:8090
  - port: {number: 5000, protocol: TCP, name: tcp}
    bind: 0.0.0.0
    defaultEndpoint: 0.0.0.0:5001
    connectionPool: {tcp: {maxConnections: 7}}
  - port: {number: 6000, name: sniffed}
  inboundConnectionPool: {http: {http1MaxPendingRequests: 3, h2UpgradePolicy: UPGRADE}}
`

func inboundClusters(cs []*cluster.Cluster) map[string]*cluster.Cluster {
	out := map[string]*cluster.Cluster{}
	for _, c := range cs {
		if strings.HasPrefix(c.Name, "inbound|") {
			out[c.Name] = c
		}
	}
	return out
}

func staticAddress(t *testing.T, c *cluster.Cluster) string {
	t.Helper()
	eps := c.GetLoadAssignment().GetEndpoints()
	if c.GetType() != cluster.Cluster_STATIC || len(eps) != 1 || len(eps[0].GetLbEndpoints()) != 1 {
		t.Fatalf("%q: %s with %v, want STATIC with one endpoint", c.GetName(), c.GetType(), eps)
	}
	return socketTextOf(eps[0].GetLbEndpoints()[0].GetEndpoint().GetAddress())
}

// As istiod, a Sidecar's ingress listeners replace the ports of the services selecting the workload: the
// inbound listener has chains for their ports only (the services' ports fall to the passthrough chains), in
// the port's mTLS mode, and each port's cluster sends to its defaultEndpoint. Before, ingress was ignored.
func TestSidecarIngressReplacesServicePorts(t *testing.T) {
	push := ldsPush(t, nil, reviewsIngress)
	g := New(Options{})
	in := ldsFind(t, ldsGenerate(t, g, ldsReviews, push, wildcard(ListenerType)), VirtualInboundListener)
	// reviews is STRICT, 9080 PERMISSIVE.
	checkInbound(t, in, map[string]inboundCase{
		"ingress http":          {inboundConn{9090, true, meshHTTP}, "mtls http inbound|9090||"},
		"ingress http plain":    {inboundConn{9090, false, []string{"http/1.1"}}, "closed"},
		"ingress tcp":           {inboundConn{5000, true, meshTCP}, "mtls tcp inbound|5000||"},
		"ingress sniffed http":  {inboundConn{6000, true, meshHTTP}, "mtls http inbound|6000||"},
		"ingress sniffed tcp":   {inboundConn{6000, true, meshTCP}, "mtls tcp inbound|6000||"},
		"service port 17070":    {inboundConn{17070, true, meshHTTP}, "mtls http " + InboundPassthroughCluster},
		"service port 9080":     {inboundConn{9080, false, []string{"http/1.1"}}, "plaintext http " + InboundPassthroughCluster},
		"service port 9080 tcp": {inboundConn{9080, true, meshTCP}, "mtls tcp " + InboundPassthroughCluster},
	})
	// Chains keep istiod's names: the bind address, else 0.0.0.0.
	ldsChain(t, in, "inbound_0.0.0.0_5000_tls")

	cs := inboundClusters(generate(t, g, ClusterType, ldsReviews, push, wildcard(ClusterType), newCluster))
	if got := slices.Sorted(maps.Keys(cs)); !slices.Equal(got, []string{"inbound|5000||", "inbound|6000||", "inbound|9090||"}) {
		t.Fatalf("inbound clusters %v, want those of the ingress ports only", got)
	}
	admin, tcp, sniffed := cs["inbound|9090||"], cs["inbound|5000||"], cs["inbound|6000||"]
	if got := staticAddress(t, admin); got != "127.0.0.1:8090" {
		t.Errorf("9090 sends to %s, want 127.0.0.1:8090", got)
	}
	if admin.UpstreamBindConfig != nil {
		t.Errorf("9090 (loopback) binds to %v: istiod binds no loopback cluster", admin.UpstreamBindConfig)
	}
	if got := staticAddress(t, tcp); got != "10.1.0.5:5001" {
		t.Errorf("5000 sends to %s, want the pod's address 10.1.0.5:5001", got)
	}
	if sniffed.GetType() != cluster.Cluster_ORIGINAL_DST || sniffed.LoadAssignment != nil {
		t.Errorf("6000 is %s with %v, want ORIGINAL_DST", sniffed.GetType(), sniffed.LoadAssignment)
	}
	for _, c := range []*cluster.Cluster{tcp, sniffed} {
		if got := c.GetUpstreamBindConfig().GetSourceAddress().GetAddress(); got != "127.0.0.6" {
			t.Errorf("%s binds to %q, want 127.0.0.6", c.Name, got)
		}
	}
	// The ingress listener's own pool replaces the Sidecar's; the Sidecar's applies to the others, without
	// the HTTP/2 upgrade istiod applies outbound only.
	th := func(c *cluster.Cluster) (conns, pending uint32) {
		x := c.GetCircuitBreakers().GetThresholds()[0]
		return x.GetMaxConnections().GetValue(), x.GetMaxPendingRequests().GetValue()
	}
	if conns, pending := th(tcp); conns != 7 || pending != math.MaxUint32 {
		t.Errorf("5000 limits %d connections, %d pending; want 7 and no limit", conns, pending)
	}
	for _, c := range []*cluster.Cluster{admin, sniffed} {
		if conns, pending := th(c); conns != math.MaxUint32 || pending != 3 {
			t.Errorf("%s limits %d connections, %d pending; want no limit and 3", c.Name, conns, pending)
		}
	}
	if admin.TypedExtensionProtocolOptions != nil {
		t.Errorf("9090 (HTTP) has protocol options %v: the inbound pool does not upgrade to HTTP/2", admin.TypedExtensionProtocolOptions)
	}
}

// Without ingress listeners, the Sidecar's inboundConnectionPool applies to the clusters of the services'
// ports, as istiod; before, they kept their defaults.
func TestSidecarInboundConnectionPool(t *testing.T) {
	push := ldsPush(t, nil, `
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: reviews, namespace: shop}
spec:
  workloadSelector: {labels: {app: reviews}}
  inboundConnectionPool: {tcp: {maxConnections: 11, connectTimeout: 2s}}
`)
	cs := inboundClusters(generate(t, New(Options{}), ClusterType, ldsReviews, push, wildcard(ClusterType), newCluster))
	if got := slices.Sorted(maps.Keys(cs)); !slices.Equal(got, []string{"inbound|17070||", "inbound|9080||"}) {
		t.Fatalf("inbound clusters %v, want the services' target ports", got)
	}
	for _, c := range cs {
		if got := c.GetCircuitBreakers().GetThresholds()[0].GetMaxConnections().GetValue(); got != 11 {
			t.Errorf("%s: max connections %d, want 11", c.Name, got)
		}
		if got := c.GetConnectTimeout().AsDuration().String(); got != "2s" {
			t.Errorf("%s: connect timeout %s, want 2s", c.Name, got)
		}
	}
}

// The mesh's inbound traffic policy LOCALHOST applies to the services' ports, not to an ingress listener
// without defaultEndpoint, which istiod sends to the original destination.
func TestSidecarIngressIgnoresInboundTrafficPolicy(t *testing.T) {
	m := mesh.Default()
	m.InboundTrafficPolicy.Mode = mesh.InboundLocalhost
	push := ldsPush(t, m, reviewsIngress)
	cs := inboundClusters(generate(t, New(Options{}), ClusterType, ldsReviews, push, wildcard(ClusterType), newCluster))
	if c := cs["inbound|6000||"]; c.GetType() != cluster.Cluster_ORIGINAL_DST {
		t.Errorf("6000 is %s, want ORIGINAL_DST", c.GetType())
	}
	if got := staticAddress(t, cs["inbound|9090||"]); got != "127.0.0.1:8090" {
		t.Errorf("9090 sends to %s", got)
	}
	// The services' ports under LOCALHOST, for the frontend (no Sidecar).
	fe := inboundClusters(generate(t, New(Options{}), ClusterType, ldsFrontend, push, wildcard(ClusterType), newCluster))
	if got := staticAddress(t, fe["inbound|8080||"]); got != "127.0.0.1:8080" {
		t.Errorf("frontend 8080 sends to %s under LOCALHOST", got)
	}
}

// istiod's defaultEndpoint forms, resolved for a proxy's addresses.
func TestIngressEndpoint(t *testing.T) {
	for _, c := range []struct {
		in   string
		ips  []string
		want string
		ok   bool
	}{
		{"", []string{"10.0.0.1"}, ":0", true},
		{":8080", []string{"10.0.0.1"}, ":8080", true},
		{"127.0.0.1:8080", []string{"10.0.0.1"}, "127.0.0.1:8080", true},
		{"127.0.0.1:8080", []string{"fd00::1"}, "::1:8080", true},
		{"[::1]:8080", []string{"10.0.0.1"}, "127.0.0.1:8080", true},
		{"[::1]:8080", []string{"10.0.0.1", "fd00::1"}, "::1:8080", true},
		{"0.0.0.0:8080", []string{"fd00::1", "10.0.0.1"}, "10.0.0.1:8080", true},
		{"0.0.0.0:8080", []string{"fd00::1"}, "127.0.0.1:8080", true},
		{"[::]:8080", []string{"10.0.0.1", "fd00::1"}, "fd00::1:8080", true},
		{"[::]:8080", []string{"10.0.0.1"}, "::1:8080", true},
		{"unix:///var/run/app.sock", nil, "unix:///var/run/app.sock:0", true},
		{"127.0.0.1", nil, "", false},
		{"127.0.0.1:x", nil, "", false},
	} {
		addr, port, ok := ingressEndpoint(c.in, c.ips)
		got := ""
		if ok {
			got = addr + ":" + ldsPortName(port)
		}
		if got != c.want || ok != c.ok {
			t.Errorf("ingressEndpoint(%q, %v) = %q %v, want %q %v", c.in, c.ips, got, ok, c.want, c.ok)
		}
	}
}

// A Unix socket defaultEndpoint is a pipe address, bound to 127.0.0.6 as istiod binds it.
func TestSidecarIngressUnixEndpoint(t *testing.T) {
	push := ldsPush(t, nil, `
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: reviews, namespace: shop}
spec:
  workloadSelector: {labels: {app: reviews}}
  ingress: [{port: {number: 9090, protocol: HTTP, name: http}, defaultEndpoint: "unix:///var/run/app.sock"}]
`)
	c := inboundClusters(generate(t, New(Options{}), ClusterType, ldsReviews, push, wildcard(ClusterType), newCluster))["inbound|9090||"]
	if got := staticAddress(t, c); got != "unix:/var/run/app.sock" {
		t.Errorf("9090 sends to %s", got)
	}
	if got := c.GetUpstreamBindConfig().GetSourceAddress().GetAddress(); got != "127.0.0.6" {
		t.Errorf("binds to %q", got)
	}
}

// The inbound listener and clusters follow the proxy's Sidecar through incremental snapshots: adding,
// editing and removing it changes them on the next push, as a fresh build would.
func TestSidecarIngressFollowsEdits(t *testing.T) {
	data, err := os.ReadFile("testdata/lds/mesh.yaml")
	if err != nil {
		t.Fatal(err)
	}
	st := storeFromYAML(t, data)
	push := model.Build(st, mesh.Default())
	g := New(Options{})
	step := func(n int, wantClusters ...string) {
		t.Helper()
		cs := inboundClusters(generate(t, g, ClusterType, ldsReviews, push, wildcard(ClusterType), newCluster))
		if got := slices.Sorted(maps.Keys(cs)); !slices.Equal(got, wantClusters) {
			t.Errorf("step %d: inbound clusters %v, want %v", n, got, wantClusters)
		}
		checkSameAsFreshBuild(t, g, ClusterType, ldsReviews, push, n)
		checkSameAsFreshBuild(t, g, ListenerType, ldsReviews, push, n)
	}
	step(0, "inbound|17070||", "inbound|9080||")
	push, _ = applyDocsResult(t, st, push, reviewsIngress)
	step(1, "inbound|5000||", "inbound|6000||", "inbound|9090||")
	push, _ = applyDocsResult(t, st, push, strings.Replace(reviewsIngress, "number: 5000", "number: 5500", 1))
	step(2, "inbound|5500||", "inbound|6000||", "inbound|9090||")
	push, _ = applyDocsResult(t, st, push, strings.Replace(reviewsIngress, "127.0.0.1:8090", "127.0.0.1:8091", 1))
	c := inboundClusters(generate(t, g, ClusterType, ldsReviews, push, wildcard(ClusterType), newCluster))["inbound|9090||"]
	if got := staticAddress(t, c); got != "127.0.0.1:8091" {
		t.Errorf("after editing defaultEndpoint: %s", got)
	}
	step(3, "inbound|5000||", "inbound|6000||", "inbound|9090||")
	old := st.Get(sidecarKey(t, reviewsIngress))
	st.Delete(store.LayerFile, old.Key)
	push, _ = model.Update(push, st, []model.Change{{Key: old.Key, Old: old}})
	step(4, "inbound|17070||", "inbound|9080||")
}

func sidecarKey(t *testing.T, doc string) config.Key {
	t.Helper()
	c, err := config.Parse([]byte(doc), "extra.yaml", 0, "default")
	if err != nil {
		t.Fatal(err)
	}
	return c.Key
}

func socketTextOf(a *core.Address) string {
	if p := a.GetPipe(); p != nil {
		return "unix:" + p.GetPath()
	}
	return a.GetSocketAddress().GetAddress() + ":" + ldsPortName(a.GetSocketAddress().GetPortValue())
}

// As istiod, an inbound cluster takes the connection pool of the DestinationRule for its service (port-level
// settings for the service's port), not its other policies; a Sidecar's pool replaces it. Before, inbound
// clusters ignored DestinationRules.
func TestInboundClusterTakesDestinationRulePool(t *testing.T) {
	const dr = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: shop}
spec:
  host: reviews.shop.svc.cluster.local
  trafficPolicy:
    connectionPool: {tcp: {maxConnections: 21}}
    outlierDetection: {consecutive5xxErrors: 3}
    portLevelSettings:
    - port: {number: 7070}
      connectionPool: {tcp: {maxConnections: 22}}
`
	maxConns := func(c *cluster.Cluster) uint32 {
		return c.GetCircuitBreakers().GetThresholds()[0].GetMaxConnections().GetValue()
	}
	cs := inboundClusters(generate(t, New(Options{}), ClusterType, ldsReviews, ldsPush(t, nil, dr), wildcard(ClusterType), newCluster))
	if got := maxConns(cs["inbound|9080||"]); got != 21 {
		t.Errorf("9080: max connections %d, want the rule's 21", got)
	}
	if got := maxConns(cs["inbound|17070||"]); got != 22 {
		t.Errorf("17070 (service port 7070): max connections %d, want the port-level 22", got)
	}
	if od := cs["inbound|9080||"].OutlierDetection; od != nil {
		t.Errorf("inbound cluster has outlier detection %v", od)
	}
	withSidecar := ldsPush(t, nil, dr, `
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: reviews, namespace: shop}
spec:
  workloadSelector: {labels: {app: reviews}}
  inboundConnectionPool: {http: {http1MaxPendingRequests: 5}}
`)
	cs = inboundClusters(generate(t, New(Options{}), ClusterType, ldsReviews, withSidecar, wildcard(ClusterType), newCluster))
	if got := maxConns(cs["inbound|9080||"]); got != math.MaxUint32 {
		t.Errorf("under the Sidecar's pool: max connections %d, want no limit (its pool replaces the rule's)", got)
	}
}
