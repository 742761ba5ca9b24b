package xdsclient

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
)

// headlessDB is a headless Service in alpha whose EndpointSlice lists addrs (no pods: file endpoints are
// served as written), and a namespace gamma whose Sidecar sees its own namespace only.
func headlessDB(addrs ...string) string {
	var eps []string
	for _, a := range addrs {
		eps = append(eps, fmt.Sprintf("{addresses: [%s]}", a))
	}
	return `apiVersion: v1
kind: Service
metadata: {name: db, namespace: alpha}
spec:
  clusterIP: None
  ports: [{name: tcp-db, port: 5433}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: db-1, namespace: alpha, labels: {kubernetes.io/service-name: db}}
addressType: IPv4
ports: [{name: tcp-db, port: 5433}]
endpoints: [` + strings.Join(eps, ", ") + `]
---
apiVersion: v1
kind: Namespace
metadata: {name: gamma}
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: gamma}
spec:
  egress: [{hosts: [./*]}]
`
}

// A headless Service's sidecars listen on each endpoint address, so an endpoint change (an endpoint-only
// push, no full push) must reach their listeners: the Envoy that sees the service gets the new endpoint's
// listener and loses the removed one's; one whose Sidecar hides the service is sent nothing.
func TestHeadlessEndpointChangeReachesListeners(t *testing.T) {
	files := baseFiles()
	files["svc-alpha-db.yaml"] = headlessDB("10.1.7.1")
	s := startServer(t, files)
	sees := NewEnvoy(EnvoyOptions{Addr: s.addr(), NodeID: sidecarNode("alpha"), Delta: true, BuildVersion: [3]uint32{1, 36, 0},
		InitialFetchTimeout: testFetchTimeout})
	hidden := NewEnvoy(EnvoyOptions{Addr: s.addr(), NodeID: "sidecar~10.1.9.9~client-0.gamma~gamma.svc.cluster.local", Delta: false,
		BuildVersion: [3]uint32{1, 36, 0}, InitialFetchTimeout: testFetchTimeout})
	for _, e := range []*Envoy{sees, hidden} {
		if err := e.Connect(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Close)
	}
	envoys := []*Envoy{sees, hidden}
	if !settled(s, envoys, nil, 10*time.Second) {
		t.Fatalf("clients did not settle: warming %v %v", sees.Warming(), hidden.Warming())
	}
	has := func(e *Envoy, name string) bool { _, ok := e.Held(ListenerType)[name]; return ok }
	if !has(sees, "10.1.7.1_5433") || has(hidden, "10.1.7.1_5433") {
		t.Fatalf("before: alpha holds %v, gamma %v", keys(sees.Held(ListenerType)), keys(hidden.Held(ListenerType)))
	}
	hiddenResponses, _, _ := hidden.Stats()
	full := s.Server.Pipeline.Stats().FullPushes
	s.put(t, "svc-alpha-db.yaml", headlessDB("10.1.7.2"))
	if !waitFor(10*time.Second, func() bool { return has(sees, "10.1.7.2_5433") && !has(sees, "10.1.7.1_5433") }) {
		t.Fatalf("the endpoint change did not reach alpha's listeners: %v", keys(sees.Held(ListenerType)))
	}
	settled(s, envoys, nil, 5*time.Second)
	if got := s.Server.Pipeline.Stats().FullPushes; got != full {
		t.Errorf("%d full pushes for an endpoint change", got-full)
	}
	if n, _, _ := hidden.Stats(); n != hiddenResponses {
		t.Errorf("gamma, which does not see db, was sent %d responses", n-hiddenResponses)
	}
	report(t, sees.NodeID(), checkEnvoy(s, sees))
	report(t, hidden.NodeID(), checkEnvoy(s, hidden))
}

// A gateway cannot send to its own original destination, so its cluster of a headless Service is an EDS
// cluster (as istiod's): the gateway Envoy subscribes to its endpoints, its cluster warms only once they
// arrive, and an endpoint change (an endpoint-only push, no full push) reaches it as a new assignment.
func TestGatewayHeadlessEndpointsOverEDS(t *testing.T) {
	files := baseFiles()
	files["svc-alpha-db.yaml"] = headlessDB("10.1.7.1")
	s := startServer(t, files)
	gw := NewEnvoy(EnvoyOptions{Addr: s.addr(), NodeID: "router~10.1.9.20~gw-0.alpha~alpha.svc.cluster.local", Delta: true,
		BuildVersion: [3]uint32{1, 36, 0}, InitialFetchTimeout: testFetchTimeout})
	if err := gw.Connect(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	envoys := []*Envoy{gw}
	if !settled(s, envoys, nil, 10*time.Second) {
		t.Fatalf("the gateway did not settle: warming %v", gw.Warming())
	}
	const name = "outbound|5433||db.alpha.svc.cluster.local"
	addresses := func() []string {
		r, ok := gw.Held(EndpointType)[name]
		if !ok {
			return nil
		}
		cla := &endpointpb.ClusterLoadAssignment{}
		if err := r.Any.UnmarshalTo(cla); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, grp := range cla.Endpoints {
			for _, ep := range grp.LbEndpoints {
				out = append(out, ep.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
			}
		}
		return out
	}
	if got := addresses(); !slices.Equal(got, []string{"10.1.7.1"}) {
		t.Fatalf("before: the gateway holds endpoints %v of %s, want 10.1.7.1 (clusters %v)", got, name, keys(gw.Held(ClusterType)))
	}
	full := s.Server.Pipeline.Stats().FullPushes
	s.put(t, "svc-alpha-db.yaml", headlessDB("10.1.7.2"))
	if !waitFor(10*time.Second, func() bool { return slices.Equal(addresses(), []string{"10.1.7.2"}) }) {
		t.Fatalf("the endpoint change did not reach the gateway: it holds %v", addresses())
	}
	settled(s, envoys, nil, 5*time.Second)
	if got := s.Server.Pipeline.Stats().FullPushes; got != full {
		t.Errorf("%d full pushes for an endpoint change", got-full)
	}
	report(t, gw.NodeID(), checkEnvoy(s, gw))
}
