package conformance

import (
	"path/filepath"
	"strings"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	dfpcluster "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/dynamic_forward_proxy/v3"
	dfphttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/dynamic_forward_proxy/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	dfpsni "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/sni_dynamic_forward_proxy/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// sextantDefaults renders the defaults case with Sextant only (no istiod needed).
func sextantDefaults(t *testing.T) (*Case, *Output) {
	t.Helper()
	c, err := LoadCase(filepath.Join("cases", "defaults"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := RenderSextant(c, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return c, out[c.Proxies[0].Name]
}

func normalised(t *testing.T, o *Output) Snapshot {
	t.Helper()
	s, err := o.Normalise(Proxy{Type: "sidecar", IP: "10.1.0.1"}, ProbesOf(o.Listeners))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Changing one default in Sextant's output (the LB policy of one cluster) must surface as a difference
// that names that cluster and that field, and nothing else.
func TestCompareNamesTheClusterAndFieldThatChanged(t *testing.T) {
	c, out := sextantDefaults(t)
	base := normalised(t, out)
	if d := Compare(c.Name, "p", base, normalised(t, out)); len(d) != 0 {
		t.Fatalf("a snapshot differs from itself: %v", d)
	}
	var target *cluster.Cluster
	for _, cl := range out.Clusters {
		if strings.HasPrefix(cl.GetName(), "outbound|9080||reviews.") {
			target = cl
		}
	}
	if target == nil {
		t.Fatal("no outbound reviews cluster in Sextant's output")
	}
	target.LoadBalancingPolicy = nil
	target.LbPolicy = cluster.Cluster_RANDOM
	diffs := Compare(c.Name, "p", base, normalised(t, out))
	want := Key{Kind: KindCluster, Host: "reviews.default.svc.cluster.local", Port: 9080}
	var named bool
	for _, d := range diffs {
		if d.Key != want {
			t.Errorf("difference on a cluster that did not change: %s", d)
		}
		if d.Field == "lb.policy" && d.Sextant == "RANDOM" {
			named = true
		}
	}
	if !named {
		t.Fatalf("changing the LB policy of %s gave %v, want a difference on field lb.policy", want, diffs)
	}
	if got := diffs[0].ID(); !strings.Contains(got, "cluster reviews.default.svc.cluster.local:9080") {
		t.Errorf("diff id %q does not name the cluster", got)
	}
}

// A resource on one side only is one difference, not silence.
func TestCompareReportsAMissingResource(t *testing.T) {
	k := Key{Kind: KindRoute, Host: "a.default.svc.cluster.local", Port: 80}
	diffs := Compare("c", "p", Snapshot{k: Fields{"routes": "1"}}, Snapshot{})
	if len(diffs) != 1 || diffs[0].Field != absentField || diffs[0].Istiod != "present" || diffs[0].Sextant != "absent" {
		t.Fatalf("got %v", diffs)
	}
}

// An unset field and one set to Envoy's default behave the same and must normalise the same.
func TestEnvoyDefaultsNormaliseLikeUnset(t *testing.T) {
	bare := &cluster.Cluster{Name: "outbound|80||a.default.svc.cluster.local"}
	explicit := &cluster.Cluster{
		Name:           bare.Name,
		ConnectTimeout: durationpb.New(5e9),
		CircuitBreakers: &cluster.CircuitBreakers{Thresholds: []*cluster.CircuitBreakers_Thresholds{{
			MaxConnections: wrapperspb.UInt32(1024), MaxPendingRequests: wrapperspb.UInt32(1024),
			MaxRequests: wrapperspb.UInt32(1024), MaxRetries: wrapperspb.UInt32(3),
		}}},
	}
	a, b := Snapshot{}, Snapshot{}
	if err := normaliseClusters(a, []*cluster.Cluster{bare}); err != nil {
		t.Fatal(err)
	}
	if err := normaliseClusters(b, []*cluster.Cluster{explicit}); err != nil {
		t.Fatal(err)
	}
	if d := Compare("c", "p", a, b); len(d) != 0 {
		t.Fatalf("explicit defaults differ from unset: %v", d)
	}
	explicit.CircuitBreakers.Thresholds[0].MaxRetries = wrapperspb.UInt32(4)
	b = Snapshot{}
	if err := normaliseClusters(b, []*cluster.Cluster{explicit}); err != nil {
		t.Fatal(err)
	}
	if d := Compare("c", "p", a, b); len(d) != 1 || d[0].Field != "circuit_breakers.default.max_retries" {
		t.Fatalf("changing max_retries gave %v", d)
	}
}

// An inbound cluster's source address is compared: without 127.0.0.6 the sidecar's connection to its own pod
// address is captured again.
func TestClusterUpstreamBindIsCompared(t *testing.T) {
	bound := &cluster.Cluster{Name: "inbound|9080||",
		UpstreamBindConfig: &core.BindConfig{SourceAddress: &core.SocketAddress{Address: "127.0.0.6"}}}
	bare := &cluster.Cluster{Name: "inbound|9080||"}
	a, b := Snapshot{}, Snapshot{}
	if err := normaliseClusters(a, []*cluster.Cluster{bound}); err != nil {
		t.Fatal(err)
	}
	if err := normaliseClusters(b, []*cluster.Cluster{bare}); err != nil {
		t.Fatal(err)
	}
	if d := Compare("c", "p", a, b); len(d) != 1 || d[0].Field != "upstream_bind" || d[0].Istiod != "127.0.0.6" || d[0].Sextant != "none" {
		t.Fatalf("got %v", d)
	}
}

// An original-destination cluster's upstream port override is compared: without it connections go to the
// port dialled, not the ServiceEntry's targetPort.
func TestClusterOriginalDstPortOverrideIsCompared(t *testing.T) {
	override := &cluster.Cluster{Name: "outbound|5000||db.mesh.internal",
		ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_ORIGINAL_DST},
		LbConfig: &cluster.Cluster_OriginalDstLbConfig_{
			OriginalDstLbConfig: &cluster.Cluster_OriginalDstLbConfig{UpstreamPortOverride: wrapperspb.UInt32(6000)}}}
	dialled := &cluster.Cluster{Name: "outbound|5000||db.mesh.internal",
		ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_ORIGINAL_DST}}
	a, b := Snapshot{}, Snapshot{}
	if err := normaliseClusters(a, []*cluster.Cluster{override}); err != nil {
		t.Fatal(err)
	}
	if err := normaliseClusters(b, []*cluster.Cluster{dialled}); err != nil {
		t.Fatal(err)
	}
	if d := Compare("c", "p", a, b); len(d) != 1 || d[0].Field != "original_dst.port" || d[0].Istiod != "6000" || d[0].Sextant != "<unset>" {
		t.Fatalf("got %v", d)
	}
}

func TestAllowlistMatchesAndReportsStaleEntries(t *testing.T) {
	a := &Allowlist{}
	for _, line := range []string{
		"c1 / p / cluster a:80 / lb.policy: not yet",
		"* / * / cluster * / circuit_breakers.default.*: not yet: defaults",
		"c1 / p / cluster b:80 / outlier: fixed long ago",
		"* / * / cluster *.* / lb.policy == LEAST_REQUEST -> ROUND_ROBIN: not yet: istiod's default",
	} {
		e, err := parseAllowEntry(line)
		if err != nil {
			t.Fatal(err)
		}
		a.Entries = append(a.Entries, e)
	}
	d := Difference{Case: "c1", Proxy: "p", Key: Key{Kind: KindCluster, Host: "a", Port: 80}, Field: "lb.policy"}
	if !a.Allows(d) {
		t.Error("exact entry does not allow its difference")
	}
	d.Field = "circuit_breakers.default.max_requests"
	if !a.Allows(d) {
		t.Error("glob entry does not allow a matching difference")
	}
	d.Field = "connect_timeout"
	if a.Allows(d) {
		t.Error("a difference no entry names is allowed")
	}
	pinned := Difference{Case: "c2", Proxy: "p", Key: Key{Kind: KindCluster, Host: "a.ns", Port: 80}, Field: "lb.policy",
		Istiod: "LEAST_REQUEST", Sextant: "ROUND_ROBIN"}
	if !a.Allows(pinned) {
		t.Error("pinned entry does not allow a difference with its istiod value")
	}
	pinned.Sextant = "RANDOM"
	if a.Allows(pinned) {
		t.Error("pinned entry allows a difference with another sextant value")
	}
	pinned.Istiod, pinned.Sextant = "RING_HASH", "ROUND_ROBIN"
	if a.Allows(pinned) {
		t.Error("pinned entry allows a difference with another istiod value")
	}
	stale := a.Stale(func(string) bool { return true }, true)
	if len(stale) != 1 || stale[0].Field != "outlier" {
		t.Fatalf("stale = %v, want the outlier entry only", stale)
	}
	if s := a.Stale(func(string) bool { return false }, false); len(s) != 0 {
		t.Fatalf("entries of cases that did not run reported stale: %v", s)
	}
	san := Difference{Case: "c3", Proxy: "p", Key: Key{Kind: KindCluster, Host: "a.ns", Port: 80}, Field: "tls(x).san",
		Istiod: "ANY exact:spiffe://td/ns/a/sa/b", Sextant: "URI prefix:spiffe://td/ns/a/sa/"}
	e, err := parseAllowEntry("* / * / cluster * / tls(*).san == ANY exact:* -> URI prefix:spiffe://td/ns/*/sa/: prefix")
	if err != nil {
		t.Fatal(err)
	}
	a.Entries = append(a.Entries, e)
	if !a.Allows(san) {
		t.Error("a glob in a pinned value does not span slashes")
	}
	for _, bad := range []string{"c / p / k / f", "c / p / f: reason", "c / p / k / f:   "} {
		if _, err := parseAllowEntry(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// A dynamic forward proxy works only if its cluster and the filters that resolve hosts for it share one DNS
// cache: renaming the cache of the cluster, of the connection manager's filter or of the SNI filter is each
// a difference naming that resource and field.
func TestCompareSeesTheDNSCacheOfAForwardProxy(t *testing.T) {
	c, err := LoadCase(filepath.Join("cases", "se-dynamic-dns"))
	if err != nil {
		t.Fatal(err)
	}
	render := func() *Output {
		out, err := RenderSextant(c, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return out[c.Proxies[0].Name]
	}
	base := normalised(t, render())
	rename := func(a *anypb.Any, edit func(proto.Message)) {
		m, err := a.UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		edit(m)
		if err := a.MarshalFrom(m); err != nil {
			t.Fatal(err)
		}
	}
	const other = "other_dns_cache"
	for _, tc := range []struct {
		what  string
		edit  func(*Output)
		field string
	}{
		{"cluster", func(o *Output) {
			for _, cl := range o.Clusters {
				if cl.GetName() == "outbound|8000||*.api.example.com" {
					rename(cl.GetClusterType().GetTypedConfig(), func(m proto.Message) {
						m.(*dfpcluster.ClusterConfig).GetDnsCacheConfig().Name = other
					})
				}
			}
		}, "dfp.dns_cache"},
		{"http filter", func(o *Output) {
			for _, l := range o.Listeners {
				for _, fc := range l.GetFilterChains() {
					for _, f := range fc.GetFilters() {
						if f.GetName() != "envoy.filters.network.http_connection_manager" || l.GetName() != "0.0.0.0_8000" {
							continue
						}
						rename(f.GetTypedConfig(), func(m proto.Message) {
							for _, hf := range m.(*hcm.HttpConnectionManager).GetHttpFilters() {
								if hf.GetName() == "envoy.filters.http.dynamic_forward_proxy" {
									rename(hf.GetTypedConfig(), func(m proto.Message) { m.(*dfphttp.FilterConfig).GetDnsCacheConfig().Name = other })
								}
							}
						})
					}
				}
			}
		}, "http.dynamic_forward_proxy.dns_cache"},
		{"sni filter", func(o *Output) {
			for _, l := range o.Listeners {
				for _, fc := range l.GetFilterChains() {
					for _, f := range fc.GetFilters() {
						if f.GetName() == "envoy.filters.network.sni_dynamic_forward_proxy" {
							rename(f.GetTypedConfig(), func(m proto.Message) { m.(*dfpsni.FilterConfig).GetDnsCacheConfig().Name = other })
						}
					}
				}
			}
		}, "net.sni_dynamic_forward_proxy"},
	} {
		out := render()
		tc.edit(out)
		diffs := Compare(c.Name, "p", base, normalised(t, out))
		found := false
		for _, d := range diffs {
			if strings.HasSuffix(d.Field, tc.field) && strings.Contains(d.Sextant, other) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: renaming its DNS cache gave %v, want a difference on %s", tc.what, diffs, tc.field)
		}
	}
}
