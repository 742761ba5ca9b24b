package envoy

import (
	"slices"
	"strings"
	"testing"

	"github.com/sextantmesh/sextant/pilot/model"
)

// nodeLocalMesh: reviews-local (internalTrafficPolicy Local) and reviews, each with one endpoint on node-a
// and one on node-b.
const nodeLocalMesh = `
apiVersion: v1
kind: Service
metadata: {name: reviews-local, namespace: default}
spec:
  clusterIP: 10.0.0.12
  internalTrafficPolicy: Local
  ports: [{name: http, port: 9080}]
---
apiVersion: v1
kind: Service
metadata: {name: reviews, namespace: default}
spec:
  clusterIP: 10.0.0.11
  ports: [{name: http, port: 9080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: reviews-local-1, namespace: default, labels: {kubernetes.io/service-name: reviews-local}}
addressType: IPv4
ports: [{name: http, port: 9080}]
endpoints:
- {addresses: [10.1.0.11], conditions: {ready: true}, nodeName: node-a}
- {addresses: [10.1.0.12], conditions: {ready: true}, nodeName: node-b}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: reviews-1, namespace: default, labels: {kubernetes.io/service-name: reviews}}
addressType: IPv4
ports: [{name: http, port: 9080}]
endpoints:
- {addresses: [10.1.0.11], conditions: {ready: true}, nodeName: node-a}
- {addresses: [10.1.0.12], conditions: {ready: true}, nodeName: node-b}
`

// internalTrafficPolicy Local: a sidecar gets only the endpoints on its own node, for that service alone;
// the other services' assignments stay one resource shared by proxies on every node.
func TestNodeLocalServiceEndpoints(t *testing.T) {
	push := pushFromYAML(t, []byte(nodeLocalMesh))
	g := New(Options{})
	local := OutboundClusterName(9080, "", "reviews-local.default.svc.cluster.local")
	shared := OutboundClusterName(9080, "", "reviews.default.svc.cluster.local")
	byNode := map[string]model.Resources{}
	for _, node := range []string{"node-a", "node-b", "node-a"} {
		proxy := sidecarIn("default", "10.1.0.1", nil)
		proxy.NodeName = node
		for _, fl := range []model.ProxyType{model.Sidecar, model.GRPC} {
			proxy.Type = fl
			res, err := g.ByTypeURL()[EndpointType].Generate(proxy, push, named(EndpointType, local, shared), nil)
			if err != nil || len(res) != 2 {
				t.Fatalf("%s %s: %d assignments, %v", node, fl, len(res), err)
			}
			if fl == model.Sidecar {
				if prev, ok := byNode[node]; ok && (prev[0] != res[0] || prev[1] != res[1]) {
					t.Errorf("%s: a second proxy on the node got assignments of its own", node)
				}
				byNode[node] = res
			}
			for _, r := range res {
				cla := newCLA()
				if err := r.Any.UnmarshalTo(cla); err != nil {
					t.Fatal(err)
				}
				if cla.ClusterName != r.Name || r.Name != local && r.Name != shared {
					t.Errorf("%s %s: resource %q holds %q", node, fl, r.Name, cla.ClusterName)
				}
				var got []string
				for _, grp := range cla.Endpoints {
					for _, lb := range grp.LbEndpoints {
						got = append(got, lb.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
					}
				}
				want := []string{"10.1.0.11", "10.1.0.12"}
				if r.Name == local {
					want = want[:1]
					if node == "node-b" {
						want = []string{"10.1.0.12"}
					}
				}
				if slices.Sort(got); !slices.Equal(got, want) {
					t.Errorf("%s %s %s: endpoints %v, want %v", node, fl, r.Name, got, want)
				}
			}
		}
	}
	if a, b := byNode["node-a"], byNode["node-b"]; a[1] != b[1] || a[0] == b[0] {
		t.Errorf("across nodes: the shared service's assignment shared %v, the node-local one's %v", a[1] == b[1], a[0] == b[0])
	}
}

// trafficDistribution PreferClose: with no DestinationRule, and no outlier detection either, localities get
// priorities from the proxy's (network, region, zone), as istiod forces failover for the Service; a rule's
// locality setting takes precedence.
func TestTrafficDistributionPriorities(t *testing.T) {
	for _, spec := range []string{
		"clusterIP: 10.0.0.11\n  trafficDistribution: PreferClose",
		"clusterIP: 10.0.0.11\n  trafficDistribution: Unknown", // the annotation then decides
	} {
		yaml := strings.Replace(localityMesh, "clusterIP: 10.0.0.11", spec, 1)
		yaml = strings.Replace(yaml, "metadata: {name: reviews, namespace: default}",
			"metadata: {name: reviews, namespace: default, annotations: {networking.istio.io/traffic-distribution: preferclose}}", 1)
		got := localityAssignmentOf(t, New(Options{}), pushFromYAML(t, []byte(yaml)))
		for loc, want := range map[string]uint32{"region1/zone-a": 0, "region1/zone-b": 1, "region2/zone-c": 2} {
			if p := got[loc].GetPriority(); p != want {
				t.Errorf("%q: %s: priority %d, want %d", spec, loc, p, want)
			}
		}
		const off = "\n---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: reviews, namespace: default}\n" +
			"spec:\n  host: reviews\n  trafficPolicy: {loadBalancer: {localityLbSetting: {enabled: false}}}\n"
		for loc, grp := range localityAssignmentOf(t, New(Options{}), pushFromYAML(t, []byte(yaml+off))) {
			if grp.GetPriority() != 0 {
				t.Errorf("%q: under a rule turning locality off, %s has priority %d", spec, loc, grp.GetPriority())
			}
		}
	}
}
