package envoy

import "testing"

func TestParseClusterName(t *testing.T) {
	for _, tc := range []struct {
		name string
		want ClusterName
		ok   bool
	}{
		{"outbound|80||a.ns.svc.cluster.local", ClusterName{Outbound, 80, "", "a.ns.svc.cluster.local"}, true},
		{"outbound|8080|v1|a.ns.svc.cluster.local", ClusterName{Outbound, 8080, "v1", "a.ns.svc.cluster.local"}, true},
		{"inbound|9090||", ClusterName{Inbound, 9090, "", ""}, true},
		{OutboundClusterName(443, "canary", "b.example.com"), ClusterName{Outbound, 443, "canary", "b.example.com"}, true},
		{"outbound|80|a.ns.svc.cluster.local", ClusterName{}, false},    // three parts
		{"outbound|80||a|b", ClusterName{}, false},                      // five parts
		{"sideways|80||a.ns.svc.cluster.local", ClusterName{}, false},   // no such direction
		{"outbound|http||a.ns.svc.cluster.local", ClusterName{}, false}, // port not a number
		{"outbound|4294967296||a", ClusterName{}, false},                // port beyond 32 bits
		{"BlackHoleCluster", ClusterName{}, false},
	} {
		got, ok := ParseClusterName(tc.name)
		if ok != tc.ok || got != tc.want {
			t.Errorf("ParseClusterName(%q) = %+v, %v; want %+v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	if got := string(appendOutboundClusterName(nil, 8080, "v1", "a.ns.svc.cluster.local")); got !=
		OutboundClusterName(8080, "v1", "a.ns.svc.cluster.local") {
		t.Errorf("appendOutboundClusterName = %q", got)
	}
}

func TestParseSNIDNATClusterName(t *testing.T) {
	for _, tc := range []struct {
		name string
		want ClusterName
		ok   bool
	}{
		{"outbound_.9080_._.reviews.default.svc.cluster.local", ClusterName{Outbound, 9080, "", "reviews.default.svc.cluster.local"}, true},
		{"outbound_.9080_.v1_.reviews.default.svc.cluster.local", ClusterName{Outbound, 9080, "v1", "reviews.default.svc.cluster.local"}, true},
		{SNIDNATClusterName(443, "canary", "b.example.com"), ClusterName{Outbound, 443, "canary", "b.example.com"}, true},
		{"outbound|9080||reviews.default.svc.cluster.local", ClusterName{}, false}, // the standard form
		{"inbound_.9080_._.reviews", ClusterName{}, false},                         // only outbound clusters are SNI-DNATed
		{"outbound_.http_._.reviews", ClusterName{}, false},                        // port not a number
		{"outbound_.9080_._.", ClusterName{}, false},                               // no host
		{"outbound_.9080_.reviews", ClusterName{}, false},                          // three parts
	} {
		got, ok := ParseSNIDNATClusterName(tc.name)
		if ok != tc.ok || got != tc.want {
			t.Errorf("ParseSNIDNATClusterName(%q) = %+v, %v; want %+v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	if got := SNIDNATClusterName(9080, "", "reviews.default.svc.cluster.local"); got != "outbound_.9080_._.reviews.default.svc.cluster.local" {
		t.Errorf("SNIDNATClusterName = %q", got)
	}
}
