package envoy

import (
	"slices"
	"strings"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
)

// passthroughMesh: mesh-internal ServiceEntries with resolution NONE (original destination) over
// WorkloadEntries and pods, one STATIC ServiceEntry a DestinationRule load-balances by PASSTHROUGH, and a
// NONE one outside the mesh.
const passthroughMesh = `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: vm, namespace: default}
spec:
  hosts: [vm.mesh.internal]
  location: MESH_INTERNAL
  resolution: NONE
  ports: [{number: 5000, name: tcp-db, protocol: TCP}, {number: 8080, name: http, protocol: HTTP}]
  workloadSelector: {labels: {app: vm}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-1, namespace: default}
spec: {address: 10.2.0.1, labels: {app: vm}, serviceAccount: vm}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-2, namespace: default}
spec: {address: 10.2.0.2, labels: {app: vm, security.istio.io/tlsMode: istio}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: pods, namespace: default}
spec:
  hosts: [pods.mesh.internal]
  location: MESH_INTERNAL
  resolution: NONE
  ports: [{number: 5001, name: tcp-db, protocol: TCP}]
  workloadSelector: {labels: {app: db}}
---
apiVersion: v1
kind: Pod
metadata: {name: db-0, namespace: default, labels: {app: db, security.istio.io/tlsMode: istio}}
spec: {serviceAccountName: db, containers: [{name: app, image: x}]}
status: {phase: Running, podIP: 10.1.0.7, conditions: [{type: Ready, status: "True"}]}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ext, namespace: default}
spec:
  hosts: [ext.example.internal]
  resolution: NONE
  ports: [{number: 5002, name: tcp-db, protocol: TCP}]
  workloadSelector: {labels: {app: vm}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: pt, namespace: default}
spec:
  hosts: [pt.mesh.internal]
  addresses: [240.0.0.9]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 5003, name: tcp-db, protocol: TCP}]
  workloadSelector: {labels: {app: vm}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: pt, namespace: default}
spec:
  host: pt.mesh.internal
  trafficPolicy: {loadBalancer: {simple: PASSTHROUGH}}
  subsets:
  - {name: plain, labels: {app: vm}}
  - {name: pt, labels: {app: vm}, trafficPolicy: {loadBalancer: {simple: PASSTHROUGH}}}
`

const (
	vmTCPCluster   = "outbound|5000||vm.mesh.internal"
	vmHTTPCluster  = "outbound|8080||vm.mesh.internal"
	podsCluster    = "outbound|5001||pods.mesh.internal"
	extCluster     = "outbound|5002||ext.example.internal"
	ptCluster      = "outbound|5003||pt.mesh.internal"
	ptPlainCluster = "outbound|5003|plain|pt.mesh.internal"
	ptPTCluster    = "outbound|5003|pt|pt.mesh.internal"
)

// clusterMeshTLS returns the mesh mTLS context of an original-destination cluster's own transport socket, nil
// when it sends plaintext; such a cluster must not carry transport socket matches (Envoy knows no metadata
// of its endpoints).
func clusterMeshTLS(t *testing.T, c *cluster.Cluster) *tlsv3.UpstreamTlsContext {
	t.Helper()
	if c.GetType() != cluster.Cluster_ORIGINAL_DST {
		t.Fatalf("%s: type %v, want ORIGINAL_DST", c.Name, c.GetType())
	}
	if len(c.TransportSocketMatches) > 0 {
		t.Fatalf("%s: transport socket matches on an original-destination cluster", c.Name)
	}
	if c.TransportSocket == nil {
		return nil
	}
	ctx := &tlsv3.UpstreamTlsContext{}
	if err := c.TransportSocket.GetTypedConfig().UnmarshalTo(ctx); err != nil {
		t.Fatal(err)
	}
	return ctx
}

// As istiod's auto mTLS for original-destination clusters (resolution NONE, or a DestinationRule's
// PASSTHROUGH): mesh mTLS to every address when each endpoint of the port has a sidecar, plaintext as soon
// as one has none, none at all outside the mesh or under a namespace DISABLE; a subset whose own policy
// does not say PASSTHROUGH is not checked (istiod infers from the subset's policy). An endpoint change that
// flips it is a full push, and the same generators then serve what fresh ones do. Before, every
// original-destination cluster sent plaintext.
func TestOriginalDestinationAutoMTLS(t *testing.T) {
	st := storeFromYAML(t, []byte(passthroughMesh))
	push := model.Build(st, mesh.Default())
	g := New(Options{})
	client := sidecarIn("default", "10.1.9.9", map[string]string{"app": "sleep"})
	check := func(step string, want map[string]bool) {
		t.Helper()
		cs := generate(t, g, ClusterType, client, push, wildcard(ClusterType), newCluster)
		for name, mtls := range want {
			ctx := clusterMeshTLS(t, clusterByName(t, cs, name))
			if (ctx != nil) != mtls {
				t.Errorf("%s: %s mesh mTLS %v, want %v", step, name, ctx != nil, mtls)
			}
		}
		checkSameAsFreshBuild(t, g, ClusterType, client, push, 0)
	}
	check("all endpoints with sidecars", map[string]bool{vmTCPCluster: true, vmHTTPCluster: true, podsCluster: true,
		extCluster: false, ptCluster: true, ptPlainCluster: true, ptPTCluster: true})

	cs := generate(t, g, ClusterType, client, push, wildcard(ClusterType), newCluster)
	ctx := clusterMeshTLS(t, clusterByName(t, cs, vmTCPCluster))
	if ctx.Sni != "outbound_.5000_._.vm.mesh.internal" {
		t.Errorf("SNI %q", ctx.Sni)
	}
	if got := acceptedSANs(ctx); len(got) != 1 || !strings.Contains(got[0], `"spiffe://cluster.local/ns/default/sa/vm"`) {
		t.Errorf("SANs %v, want vm's identity only", got)
	}
	if alpn := ctx.GetCommonTlsContext().GetAlpnProtocols(); !slices.Contains(alpn, "istio") {
		t.Errorf("ALPN %v", alpn)
	}

	// A WorkloadEntry without a sidecar joins: plaintext, except the subset istiod does not check.
	var res model.UpdateResult
	push, res = applyDocsResult(t, st, push, `apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-3, namespace: default}
spec: {address: 10.2.0.3, labels: {app: vm}}
`)
	if !res.Full {
		t.Error("an endpoint change that turns mTLS off an original-destination cluster is not a full push")
	}
	check("an endpoint without a sidecar", map[string]bool{vmTCPCluster: false, vmHTTPCluster: false, podsCluster: true,
		extCluster: false, ptCluster: false, ptPlainCluster: true, ptPTCluster: false})

	// It gets a sidecar (tlsMode istio): mesh mTLS again.
	push, res = applyDocsResult(t, st, push, `apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-3, namespace: default}
spec: {address: 10.2.0.3, labels: {app: vm, security.istio.io/tlsMode: istio}}
`)
	if !res.Full {
		t.Error("an endpoint change that turns mTLS on is not a full push")
	}
	check("every endpoint with a sidecar again", map[string]bool{vmTCPCluster: true, podsCluster: true, ptCluster: true})

	// An endpoint change that leaves every endpoint with a sidecar is an endpoint update only.
	_, res = applyDocsResult(t, st, push, `apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-3, namespace: default}
spec: {address: 10.2.0.3, weight: 5, labels: {app: vm, security.istio.io/tlsMode: istio}}
`)
	if res.Full {
		t.Error("a weight change is a full push")
	}

	// The server namespace disables mTLS: plaintext everywhere.
	push = applyDocs(t, st, push, `apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: default}
spec: {mtls: {mode: DISABLE}}
`)
	check("namespace DISABLE", map[string]bool{vmTCPCluster: false, podsCluster: false, ptCluster: false, ptPlainCluster: false})

	push = deleteConfig(st, push, config.Key{Kind: config.PeerAuthentication, Namespace: "default", Name: "default"})
	check("policy deleted", map[string]bool{vmTCPCluster: true, podsCluster: true})
}

// A resolution NONE ServiceEntry's targetPort sends its original-destination connections to that port, as
// istiod's (PassthroughTargetPorts), in its subsets too; a headless Service's clusters keep the port dialled.
// Before, the targetPort was ignored.
func TestOriginalDestinationTargetPort(t *testing.T) {
	push := pushFromYAML(t, []byte(`
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: db, namespace: default}
spec:
  hosts: [db.mesh.internal]
  addresses: [240.0.0.5]
  location: MESH_INTERNAL
  resolution: NONE
  ports: [{number: 5000, name: tcp-db, protocol: TCP, targetPort: 6000}, {number: 5001, name: tcp-other, protocol: TCP}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: db, namespace: default}
spec:
  host: db.mesh.internal
  subsets: [{name: v1, labels: {version: v1}}]
---
apiVersion: v1
kind: Service
metadata: {name: headless, namespace: default}
spec:
  clusterIP: None
  selector: {app: headless}
  ports: [{name: tcp-db, port: 5432, targetPort: 6432}]
`))
	cs := generate(t, New(Options{}), ClusterType, sidecarIn("default", "10.1.9.9", nil), push, wildcard(ClusterType), newCluster)
	for name, want := range map[string]uint32{
		"outbound|5000||db.mesh.internal":                   6000,
		"outbound|5000|v1|db.mesh.internal":                 6000,
		"outbound|5001||db.mesh.internal":                   0,
		"outbound|5432||headless.default.svc.cluster.local": 0,
	} {
		c := clusterByName(t, cs, name)
		if c.GetType() != cluster.Cluster_ORIGINAL_DST {
			t.Fatalf("%s: type %v", name, c.GetType())
		}
		if got := c.GetOriginalDstLbConfig().GetUpstreamPortOverride().GetValue(); got != want {
			t.Errorf("%s: port override %d, want %d", name, got, want)
		}
	}
}
