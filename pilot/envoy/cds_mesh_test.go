package envoy

import (
	"os"
	"testing"
	"time"

	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
)

// The mesh config's connect timeout and TCP keepalive reach outbound, inbound and passthrough clusters (a
// DestinationRule's timeout wins), and
// one generator serving snapshots of two mesh configs in turn builds each snapshot's clusters from its own
// config: the cached clusters are keyed by it.
func TestCDSMeshConnectTimeoutAndKeepalive(t *testing.T) {
	data, err := os.ReadFile("testdata/cds/mesh.yaml")
	if err != nil {
		t.Fatal(err)
	}
	st := storeFromYAML(t, data)
	set := mesh.Default()
	if err := mesh.Parse([]byte("connectTimeout: 2s\ntcpKeepalive: {probes: 4, time: 300s}\n"), set); err != nil {
		t.Fatal(err)
	}
	g := New(Options{})
	proxy := sidecarIn("shop", "10.1.0.1", map[string]string{"app": "reviews", "version": "v1"})
	for _, step := range []struct {
		mesh      *mesh.Config
		timeout   time.Duration
		keepalive bool
	}{{mesh.Default(), 10 * time.Second, false}, {set, 2 * time.Second, true}, {mesh.Default(), 10 * time.Second, false}} {
		cs := generate(t, g, ClusterType, proxy, model.Build(st, step.mesh), wildcard(ClusterType), newCluster)
		// reviews' DestinationRule sets its own timeout, which wins (port 7070's own settings have no pool).
		if got := clusterByName(t, cs, "outbound|9080||reviews.shop.svc.cluster.local").GetConnectTimeout().AsDuration(); got != 3*time.Second {
			t.Errorf("reviews: connect timeout %v, want its rule's 3s", got)
		}
		for _, name := range []string{"outbound|3306||db.shop.svc.cluster.local", InboundClusterName(7070), PassthroughCluster} {
			c := clusterByName(t, cs, name)
			if got := c.GetConnectTimeout().AsDuration(); got != step.timeout {
				t.Errorf("%s: connect timeout %v, want %v", c.Name, got, step.timeout)
			}
			ka := c.GetUpstreamConnectionOptions().GetTcpKeepalive()
			merged := ka.GetKeepaliveProbes().GetValue() == 4 && ka.GetKeepaliveTime().GetValue() == 300 && ka.KeepaliveInterval == nil
			if step.keepalive && !merged {
				t.Errorf("%s: keepalive %v, want probes 4, time 300 s, the OS's interval", c.Name, ka)
			}
			if !step.keepalive && ka != nil {
				t.Errorf("%s: keepalive %v, want none", c.Name, ka)
			}
		}
	}
}
