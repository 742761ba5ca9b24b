package envoy

import (
	"errors"
	"strings"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	"github.com/sextantmesh/sextant/pilot/config"
)

// Resolution DNS_ROUND_ROBIN is a LOGICAL_DNS cluster (one resolved address at a time) with its one endpoint,
// as istiod; DNS stays STRICT_DNS. Before, DNS_ROUND_ROBIN was STRICT_DNS. Several endpoints are refused at
// validation, as Istio's does (Envoy would reject the cluster).
func TestServiceEntryDNSRoundRobinIsLogicalDNS(t *testing.T) {
	push := pushFromYAML(t, []byte(`
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: rr, namespace: default}
spec:
  hosts: [rr.example.com]
  location: MESH_EXTERNAL
  resolution: DNS_ROUND_ROBIN
  ports: [{number: 80, name: http, protocol: HTTP}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: rr-endpoint, namespace: default}
spec:
  hosts: [rr-endpoint.example.com]
  location: MESH_EXTERNAL
  resolution: DNS_ROUND_ROBIN
  ports: [{number: 80, name: http, protocol: HTTP}]
  endpoints: [{address: backend.example.com}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: dns, namespace: default}
spec:
  hosts: [dns.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{number: 80, name: http, protocol: HTTP}]
`))
	cs := generate(t, New(Options{}), ClusterType, sidecarIn("default", "10.1.9.9", nil), push, wildcard(ClusterType), newCluster)
	for name, want := range map[string]struct {
		typ     cluster.Cluster_DiscoveryType
		address string
	}{
		"outbound|80||rr.example.com":          {cluster.Cluster_LOGICAL_DNS, "rr.example.com"},
		"outbound|80||rr-endpoint.example.com": {cluster.Cluster_LOGICAL_DNS, "backend.example.com"},
		"outbound|80||dns.example.com":         {cluster.Cluster_STRICT_DNS, "dns.example.com"},
	} {
		c := clusterByName(t, cs, name)
		if c.GetType() != want.typ {
			t.Errorf("%s: type %v, want %v", name, c.GetType(), want.typ)
		}
		eps := c.GetLoadAssignment().GetEndpoints()
		if len(eps) != 1 || len(eps[0].LbEndpoints) != 1 ||
			eps[0].LbEndpoints[0].GetEndpoint().GetAddress().GetSocketAddress().GetAddress() != want.address {
			t.Errorf("%s: endpoints %v, want the one address %s", name, eps, want.address)
		}
	}

	_, err := config.Parse([]byte(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: rr, namespace: default}
spec:
  hosts: [rr.example.com]
  resolution: DNS_ROUND_ROBIN
  ports: [{number: 80, name: http, protocol: HTTP}]
  endpoints: [{address: a.example.com}, {address: b.example.com}]
`), "se.yaml", 0, "default")
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Field != "spec.endpoints" {
		t.Errorf("DNS_ROUND_ROBIN with two endpoints: %v, want an error naming spec.endpoints", err)
	}
}

// A DNS_ROUND_ROBIN ServiceEntry whose workloadSelector picks two WorkloadEntries resolves the first by
// name, as istiod (not the first by address), and the other one is reported as a warning naming the
// ServiceEntry and its workloadSelector.
func TestServiceEntryDNSRoundRobinSelectorKeepsFirstWorkloadByName(t *testing.T) {
	push := pushFromYAML(t, []byte(`
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: legacy-rr, namespace: default}
spec:
  hosts: [legacy-rr.vm.internal]
  location: MESH_INTERNAL
  resolution: DNS_ROUND_ROBIN
  ports: [{number: 8080, name: http, protocol: HTTP}]
  workloadSelector: {labels: {app: legacy-rr}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: legacy-rr-2, namespace: default}
spec: {address: vm2.legacy.internal, labels: {app: legacy-rr}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: legacy-rr-1, namespace: default}
spec: {address: vm9.legacy.internal, labels: {app: legacy-rr}}
`))
	cs := generate(t, New(Options{}), ClusterType, sidecarIn("default", "10.1.9.9", nil), push, wildcard(ClusterType), newCluster)
	c := clusterByName(t, cs, "outbound|8080||legacy-rr.vm.internal")
	eps := c.GetLoadAssignment().GetEndpoints()
	if len(eps) != 1 || len(eps[0].LbEndpoints) != 1 ||
		eps[0].LbEndpoints[0].GetEndpoint().GetAddress().GetSocketAddress().GetAddress() != "vm9.legacy.internal" {
		t.Errorf("endpoints %v, want only legacy-rr-1's vm9.legacy.internal", eps)
	}
	problems := push.DNSRoundRobinProblems()
	if len(problems) != 1 {
		t.Fatalf("problems %v, want one warning", problems)
	}
	p := problems[0]
	if !p.Warning || p.Kind != "ServiceEntry" || p.Namespace != "default" || p.Name != "legacy-rr" || p.Field != "spec.workloadSelector" ||
		!strings.Contains(p.Message, "default/legacy-rr-1") {
		t.Errorf("warning %+v", p)
	}
}
