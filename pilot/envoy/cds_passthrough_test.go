package envoy

import (
	"slices"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/proto"

	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
)

// A headless Service whose pods all have sidecars, a ServiceEntry of resolution NONE over WorkloadEntries
// (outside the mesh), a Service with a VIP, and a gateway passing mesh mTLS through (AUTO_PASSTHROUGH).
const passthroughYAML = `
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: shop}
spec:
  clusterIP: None
  ports: [{name: tcp-db, port: 5432}]
---
apiVersion: v1
kind: Pod
metadata: {name: db-0, namespace: shop, labels: {app: db, security.istio.io/tlsMode: istio}}
spec: {serviceAccountName: db}
status: {podIP: 10.1.5.1, phase: Running, conditions: [{type: Ready, status: "True"}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: db-1, namespace: shop, labels: {kubernetes.io/service-name: db}}
addressType: IPv4
ports: [{name: tcp-db, port: 5432}]
endpoints:
- addresses: [10.1.5.1]
  targetRef: {kind: Pod, name: db-0, namespace: shop}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  clusterIP: 10.0.7.7
  ports: [{name: http, port: 80}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: api, namespace: shop}
spec:
  hosts: [api.example.com]
  resolution: NONE
  ports: [{name: tls, number: 443, protocol: TLS}]
  workloadSelector: {labels: {app: api}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: api-1, namespace: shop}
spec: {address: 192.0.2.10, labels: {app: api}}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: cross-network, namespace: istio-system}
spec:
  selector: {istio: eastwestgateway}
  servers:
  - port: {number: 15443, name: tls, protocol: TLS}
    hosts: ["*.local"]
    tls: {mode: AUTO_PASSTHROUGH}
`

// db-0 loses its sidecar: the headless Service has an endpoint that does not take mesh mTLS.
const dbWithoutSidecar = `apiVersion: v1
kind: Pod
metadata: {name: db-0, namespace: shop, labels: {app: db}}
spec: {serviceAccountName: db}
status: {podIP: 10.1.5.1, phase: Running, conditions: [{type: Ready, status: "True"}]}
`

// A gateway cannot send a connection to its own original destination: its clusters of a headless Service
// and of a ServiceEntry of resolution NONE (and their SNI-DNAT twins) are EDS clusters with the default
// load balancer, as istiod's convertResolution, and EDS serves them the endpoints; a sidecar keeps
// ORIGINAL_DST. Before, the gateway got ORIGINAL_DST too.
func TestGatewayPassthroughClustersUseEDS(t *testing.T) {
	push := pushFromYAML(t, []byte(passthroughYAML))
	g := New(Options{})
	gw := eastWestGateway("istio-system")
	cs := generate(t, g, ClusterType, gw, push, wildcard(ClusterType), newCluster)
	for _, name := range []string{"outbound|5432||db.shop.svc.cluster.local", "outbound_.5432_._.db.shop.svc.cluster.local",
		"outbound|443||api.example.com"} {
		c := clusterByName(t, cs, name)
		if c.GetType() != cluster.Cluster_EDS || c.GetEdsClusterConfig().GetServiceName() != name || c.LbPolicy != cluster.Cluster_LEAST_REQUEST {
			t.Errorf("gateway %s: type %v, EDS name %q, lb %v; want EDS under its own name, LEAST_REQUEST", name, c.GetType(),
				c.GetEdsClusterConfig().GetServiceName(), c.LbPolicy)
		}
	}
	// Auto mTLS to the pods that have sidecars, none through the SNI-DNAT twin or outside the mesh.
	if c := clusterByName(t, cs, "outbound|5432||db.shop.svc.cluster.local"); len(c.TransportSocketMatches) != 2 ||
		c.TransportSocketMatches[0].Name != "tlsMode-istio" {
		t.Errorf("gateway db cluster: transport socket matches %v, want auto mTLS", c.TransportSocketMatches)
	}
	for _, name := range []string{"outbound_.5432_._.db.shop.svc.cluster.local", "outbound|443||api.example.com"} {
		if c := clusterByName(t, cs, name); c.TransportSocket != nil || len(c.TransportSocketMatches) > 0 {
			t.Errorf("gateway %s: upstream TLS, want none", name)
		}
	}
	w := named(EndpointType, "outbound|5432||db.shop.svc.cluster.local", "outbound_.5432_._.db.shop.svc.cluster.local",
		"outbound|443||api.example.com")
	res, err := g.ByTypeURL()[EndpointType].Generate(gw, push, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, r := range res {
		cla := newCLA()
		if err := r.Any.UnmarshalTo(cla); err != nil {
			t.Fatal(err)
		}
		if err := cla.ValidateAll(); err != nil {
			t.Errorf("%s: %v", r.Name, err)
		}
		for _, grp := range cla.Endpoints {
			for _, ep := range grp.LbEndpoints {
				got[cla.ClusterName] = append(got[cla.ClusterName], ep.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
			}
		}
	}
	for name, want := range map[string]string{
		"outbound|5432||db.shop.svc.cluster.local":    "10.1.5.1",
		"outbound_.5432_._.db.shop.svc.cluster.local": "10.1.5.1",
		"outbound|443||api.example.com":               "192.0.2.10",
	} {
		if !slices.Equal(got[name], []string{want}) {
			t.Errorf("gateway EDS %s: %v, want %s", name, got[name], want)
		}
	}

	sidecar := sidecarIn("shop", "10.1.0.5", map[string]string{"app": "client"})
	for _, c := range generate(t, g, ClusterType, sidecar, push, wildcard(ClusterType), newCluster) {
		if (c.Name == "outbound|5432||db.shop.svc.cluster.local" || c.Name == "outbound|443||api.example.com") &&
			(c.GetType() != cluster.Cluster_ORIGINAL_DST || c.LbPolicy != cluster.Cluster_CLUSTER_PROVIDED) {
			t.Errorf("sidecar %s: type %v lb %v, want ORIGINAL_DST", c.Name, c.GetType(), c.LbPolicy)
		}
	}
}

// Gateways' Passthrough clusters have their own cache slots: a sidecar's clusters are the same whether or
// not a gateway was served first, and the clusters that do not differ stay shared with the gateway.
func TestGatewayPassthroughClustersKeepSidecarsShared(t *testing.T) {
	push := pushFromYAML(t, []byte(passthroughYAML))
	sidecar := sidecarIn("shop", "10.1.0.5", map[string]string{"app": "client"})
	alone := generateByName(t, New(Options{}), ClusterType, sidecar, push)
	g := New(Options{})
	gateway := generateByName(t, g, ClusterType, eastWestGateway("istio-system"), push)
	after := generateByName(t, g, ClusterType, sidecar, push)
	if len(after) != len(alone) {
		t.Fatalf("sidecar has %d clusters after a gateway was served, %d alone", len(after), len(alone))
	}
	for name, r := range alone {
		if !proto.Equal(after[name].Any, r.Any) {
			t.Errorf("sidecar cluster %s changed after a gateway was served", name)
		}
	}
	if web := "outbound|80||web.shop.svc.cluster.local"; gateway[web] != after[web] {
		t.Errorf("%s is not shared between the gateway and the sidecar", web)
	}
	if db := "outbound|5432||db.shop.svc.cluster.local"; gateway[db] == after[db] {
		t.Errorf("%s is shared between the gateway and the sidecar", db)
	}
}

// At a gateway a mesh Passthrough service's EDS cluster does auto mTLS per endpoint while every endpoint
// has a sidecar, and none once one has none (as istiod infers it), its SNI-DNAT twin never; the cluster
// lists that follow the change equal fresh builds. Before, the gateway's cluster was ORIGINAL_DST.
func TestGatewayPassthroughAutoMTLSFollowsEndpoints(t *testing.T) {
	st := storeFromYAML(t, []byte(passthroughYAML))
	push := model.Build(st, mesh.Default())
	g := New(Options{})
	gw := eastWestGateway("istio-system")
	const db, sni = "outbound|5432||db.shop.svc.cluster.local", "outbound_.5432_._.db.shop.svc.cluster.local"
	cs := generate(t, g, ClusterType, gw, push, wildcard(ClusterType), newCluster)
	if c := clusterByName(t, cs, db); c.GetType() != cluster.Cluster_EDS || len(c.TransportSocketMatches) != 2 || c.TransportSocket != nil {
		t.Errorf("gateway %s: type %v, %d matches; want EDS with auto mTLS per endpoint", db, c.GetType(), len(c.TransportSocketMatches))
	}
	push, _ = applyDocsResult(t, st, push, dbWithoutSidecar)
	cs = generate(t, g, ClusterType, gw, push, wildcard(ClusterType), newCluster)
	for _, name := range []string{db, sni} {
		if c := clusterByName(t, cs, name); c.GetType() != cluster.Cluster_EDS || c.TransportSocket != nil || len(c.TransportSocketMatches) > 0 {
			t.Errorf("gateway %s after db-0 lost its sidecar: type %v, upstream TLS; want EDS, plaintext", name, c.GetType())
		}
	}
	checkSameAsFreshBuild(t, g, ClusterType, gw, push, 1)
}
