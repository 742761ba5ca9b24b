package envoy

import (
	"fmt"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
)

// localityMesh: reviews with one endpoint in each of three localities.
const localityMesh = `
apiVersion: v1
kind: Service
metadata: {name: reviews, namespace: default}
spec:
  clusterIP: 10.0.0.11
  ports: [{name: http, port: 9080}]
---
apiVersion: v1
kind: Node
metadata: {name: node-a, labels: {topology.kubernetes.io/region: region1, topology.kubernetes.io/zone: zone-a}}
---
apiVersion: v1
kind: Node
metadata: {name: node-b, labels: {topology.kubernetes.io/region: region1, topology.kubernetes.io/zone: zone-b}}
---
apiVersion: v1
kind: Node
metadata: {name: node-c, labels: {topology.kubernetes.io/region: region2, topology.kubernetes.io/zone: zone-c}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: reviews-1, namespace: default, labels: {kubernetes.io/service-name: reviews}}
addressType: IPv4
ports: [{name: http, port: 9080}]
endpoints:
- {addresses: [10.1.0.11], conditions: {ready: true}, nodeName: node-a}
- {addresses: [10.1.0.12], conditions: {ready: true}, nodeName: node-b}
- {addresses: [10.1.0.13], conditions: {ready: true}, nodeName: node-c}
`

// localityAssignment generates reviews' assignment for a sidecar in region1/zone-a under rule.
func localityAssignment(t *testing.T, rule string) map[string]*endpoint.LocalityLbEndpoints {
	t.Helper()
	return localityAssignmentOf(t, New(Options{}), pushFromYAML(t, []byte(localityMesh+rule)))
}

// localityAssignmentOf generates reviews' assignment for a sidecar in region1/zone-a with g from push.
func localityAssignmentOf(t *testing.T, g *Generators, push *model.PushContext) map[string]*endpoint.LocalityLbEndpoints {
	t.Helper()
	proxy := sidecarIn("default", "10.1.0.1", nil)
	proxy.Locality = &core.Locality{Region: "region1", Zone: "zone-a"}
	res, err := g.ByTypeURL()[EndpointType].Generate(proxy, push, named(EndpointType, reviewsCluster), nil)
	if err != nil || len(res) != 1 {
		t.Fatalf("%d assignments, %v", len(res), err)
	}
	cla := newCLA()
	if err := res[0].Any.UnmarshalTo(cla); err != nil {
		t.Fatal(err)
	}
	if err := cla.ValidateAll(); err != nil {
		t.Error(err)
	}
	out := map[string]*endpoint.LocalityLbEndpoints{}
	for _, grp := range cla.Endpoints {
		out[grp.Locality.GetRegion()+"/"+grp.Locality.GetZone()] = grp
	}
	return out
}

// With outlier detection, localities get priorities by what they share with the proxy's, as istiod does
// by default; without it, every locality stays at priority 0 (Envoy could never fail over anyway).
func TestLocalityFailoverWithOutlierDetection(t *testing.T) {
	const rule = `
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: default}
spec:
  host: reviews
  trafficPolicy: {outlierDetection: {consecutive5xxErrors: 5}}
`
	got := localityAssignment(t, rule)
	for loc, want := range map[string]uint32{"region1/zone-a": 0, "region1/zone-b": 1, "region2/zone-c": 2} {
		if p := got[loc].GetPriority(); p != want {
			t.Errorf("%s: priority %d, want %d", loc, p, want)
		}
	}
	for loc, grp := range localityAssignment(t, "") {
		if grp.GetPriority() != 0 {
			t.Errorf("without outlier detection %s has priority %d", loc, grp.GetPriority())
		}
	}
}

// distribute sets the localities' weights from the proxy's locality; localities it leaves out get nothing.
func TestLocalityDistribute(t *testing.T) {
	got := localityAssignment(t, `
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: default}
spec:
  host: reviews
  trafficPolicy:
    loadBalancer:
      localityLbSetting:
        distribute: [{from: "region1/zone-a/*", to: {"region1/zone-a/*": 80, "region2/*": 20}}]
`)
	if w := got["region1/zone-a"].GetLoadBalancingWeight().GetValue(); w != 80 {
		t.Errorf("own zone weight %d, want 80", w)
	}
	if w := got["region2/zone-c"].GetLoadBalancingWeight().GetValue(); w != 20 {
		t.Errorf("region2 weight %d, want 20", w)
	}
	if n := len(got["region1/zone-b"].GetLbEndpoints()); n != 0 {
		t.Errorf("a locality distribute leaves out keeps %d endpoints", n)
	}
}

// The mesh config's localityLbSetting applies where no DestinationRule sets one: its distribution without
// any rule, its failover (with a rule's outlier detection), and enabled: false turns the default
// priorities off. One set of generators serves each mesh config in turn, as a mesh config change does.
func TestLocalityMeshSetting(t *testing.T) {
	const outlier = `
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: default}
spec:
  host: reviews
  trafficPolicy: {outlierDetection: {consecutive5xxErrors: 5}}
`
	withMesh := func(yaml string) *mesh.Config {
		m := mesh.Default()
		if err := mesh.Parse([]byte(yaml), m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	plain, withRule := storeFromYAML(t, []byte(localityMesh)), storeFromYAML(t, []byte(localityMesh+outlier))
	g := New(Options{})
	priorities := func(m *mesh.Config) map[string]uint32 {
		out := map[string]uint32{}
		for loc, grp := range localityAssignmentOf(t, g, model.Build(withRule, m)) {
			out[loc] = grp.GetPriority()
		}
		return out
	}
	if got := priorities(mesh.Default()); got["region1/zone-b"] != 1 || got["region2/zone-c"] != 2 {
		t.Errorf("default mesh: priorities %v, want by locality", got)
	}
	if got := priorities(withMesh("localityLbSetting: {enabled: false}\n")); got["region1/zone-b"] != 0 || got["region2/zone-c"] != 0 {
		t.Errorf("locality load balancing off: priorities %v, want all 0", got)
	}
	// A second distribution after the first: the assignment cached for the first must not be served.
	for _, weights := range [][3]uint32{{60, 30, 10}, {50, 25, 25}} {
		dist := withMesh(fmt.Sprintf(`localityLbSetting: {distribute: [{from: "region1/zone-a/*",
  to: {"region1/zone-a/*": %d, "region1/zone-b/*": %d, "region2/*": %d}}]}`, weights[0], weights[1], weights[2]))
		got := localityAssignmentOf(t, g, model.Build(plain, dist))
		for i, loc := range []string{"region1/zone-a", "region1/zone-b", "region2/zone-c"} {
			if w := got[loc].GetLoadBalancingWeight().GetValue(); w != weights[i] {
				t.Errorf("mesh distribute %v: %s weight %d, want %d", weights, loc, w, weights[i])
			}
		}
	}
	for loc, grp := range localityAssignmentOf(t, g, model.Build(plain, withMesh("localityLbSetting: {enabled: false}\n"))) {
		if grp.GetLoadBalancingWeight() != nil && grp.GetLoadBalancingWeight().GetValue() != 1 {
			t.Errorf("after the distribution is gone: %s weight %v", loc, grp.GetLoadBalancingWeight())
		}
	}
}

// failoverPriority gives priorities by the labels an endpoint shares with the proxy, here its node: two
// proxies in the same locality on different nodes get different assignments from one set of generators.
func TestLocalityFailoverPriority(t *testing.T) {
	push := pushFromYAML(t, []byte(localityMesh+`
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: default}
spec:
  host: reviews
  trafficPolicy:
    outlierDetection: {consecutive5xxErrors: 5}
    loadBalancer: {localityLbSetting: {failoverPriority: [kubernetes.io/hostname]}}
`))
	g := New(Options{})
	for node, first := range map[string]string{"node-b": "region1/zone-b", "node-c": "region2/zone-c"} {
		proxy := sidecarIn("default", "10.1.0.1", nil)
		proxy.Locality, proxy.NodeName = &core.Locality{Region: "region1", Zone: "zone-a"}, node
		res, err := g.ByTypeURL()[EndpointType].Generate(proxy, push, named(EndpointType, reviewsCluster), nil)
		if err != nil || len(res) != 1 {
			t.Fatalf("%d assignments, %v", len(res), err)
		}
		cla := newCLA()
		if err := res[0].Any.UnmarshalTo(cla); err != nil {
			t.Fatal(err)
		}
		for _, grp := range cla.Endpoints {
			loc := grp.Locality.GetRegion() + "/" + grp.Locality.GetZone()
			if want := map[bool]uint32{true: 0, false: 1}[loc == first]; grp.Priority != want {
				t.Errorf("proxy on %s: %s has priority %d, want %d", node, loc, grp.Priority, want)
			}
		}
	}
}
