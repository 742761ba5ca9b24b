package main

import (
	"fmt"
	"slices"
	"strings"
)

// meshShape is what the generated mesh holds.
type meshShape struct {
	Services       int  `json:"services"`
	PodsPerService int  `json:"podsPerService"`
	Namespaces     int  `json:"namespaces"`
	Ambient        bool `json:"ambient"`      // namespaces labelled istio.io/dataplane-mode=ambient
	Policies       bool `json:"policies"`     // an AuthorizationPolicy per namespace
	RoutingEvery   int  `json:"routingEvery"` // a VirtualService for every K-th service; 0: none
}

// Each service has these ports; pods listen on the target ports.
var servicePorts = []struct {
	name, appProtocol string
	port, target      int
}{
	{"http", "http", 80, 8000},
	{"grpc", "grpc", 8080, 8080},
	{"tcp", "tcp", 9090, 9090},
}

type service struct {
	idx       int
	ns, name  string
	clusterIP string
	pods      []*pod
}

func (s *service) host() string { return s.name + "." + s.ns + ".svc.cluster.local" }
func (s *service) file() string { return fmt.Sprintf("svc-%s-%s.yaml", s.ns, s.name) }

type pod struct {
	name, ip, node string
}

// mesh is the generated config and where it goes (files or a kube-apiserver). Only the harness's goroutine
// changes it.
type mesh struct {
	out   applier
	shape meshShape
	svcs  []*service
	ipSeq uint32
	podID int
	svcID int
}

func newMesh(out applier, shape meshShape) *mesh {
	m := &mesh{out: out, shape: shape, ipSeq: 1}
	for i := 0; i < shape.Services; i++ {
		m.newService(false)
	}
	return m
}

func (m *mesh) ns(i int) string { return fmt.Sprintf("ns-%d", i) }

func (m *mesh) nextIP() string {
	m.ipSeq++
	n := m.ipSeq
	return fmt.Sprintf("10.%d.%d.%d", 16+(n>>16)&0xff, (n>>8)&0xff, n&0xff)
}

// newService adds a service with PodsPerService pods; write=true writes its file.
func (m *mesh) newService(write bool) *service {
	i := m.svcID
	m.svcID++
	s := &service{idx: i, ns: m.ns(i % m.shape.Namespaces), name: fmt.Sprintf("svc-%d", i),
		clusterIP: fmt.Sprintf("172.%d.%d.%d", 20+(i>>16)&0x0f, (i>>8)&0xff, i&0xff)}
	for range m.shape.PodsPerService {
		s.pods = append(s.pods, m.newPod(s))
	}
	m.svcs = append(m.svcs, s)
	if write {
		must(m.writeService(s, nil))
	}
	return s
}

// addService adds a service to the model; writeService makes it real.
func (m *mesh) addService() *service { return m.newService(false) }

// removeService deletes a service (its file or objects) and forgets it.
func (m *mesh) removeService(s *service) error {
	m.svcs = slices.DeleteFunc(m.svcs, func(x *service) bool { return x == s })
	return m.out.remove(s.file())
}

func (m *mesh) newPod(s *service) *pod {
	m.podID++
	return &pod{name: fmt.Sprintf("%s-%d", s.name, m.podID), ip: m.nextIP(), node: fmt.Sprintf("node-%d", m.podID%4)}
}

// writeAll writes the whole mesh.
func (m *mesh) writeAll() error {
	var b strings.Builder
	for i := 0; i < m.shape.Namespaces; i++ {
		fmt.Fprintf(&b, "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n", m.ns(i))
		if m.shape.Ambient {
			b.WriteString("  labels:\n    istio.io/dataplane-mode: ambient\n")
		}
		b.WriteString("---\n")
	}
	for i := range 4 {
		fmt.Fprintf(&b, "apiVersion: v1\nkind: Node\nmetadata:\n  name: node-%d\n  labels:\n"+
			"    topology.kubernetes.io/region: region-a\n    topology.kubernetes.io/zone: zone-%d\n---\n", i, i%2)
	}
	units := []unit{{"00-cluster.yaml", b.String()}}
	for _, s := range m.svcs {
		units = append(units, unit{s.file(), serviceYAML(s)})
	}
	if m.shape.Policies {
		for i := 0; i < m.shape.Namespaces; i++ {
			units = append(units, unit{fmt.Sprintf("authz-%s.yaml", m.ns(i)), authorizationPolicy(m.ns(i), "allow-mesh", "base")})
		}
	}
	if k := m.shape.RoutingEvery; k > 0 {
		for i := 0; i < len(m.svcs); i += k {
			units = append(units, unit{fmt.Sprintf("vs-%s.yaml", m.svcs[i].name), virtualService(m.svcs[i], "vs-"+m.svcs[i].name, "base")})
		}
	}
	return m.out.load(units)
}

// writeService writes a service with its pods and EndpointSlice; begin as in applier.apply.
func (m *mesh) writeService(s *service, begin func()) error {
	return m.out.apply(s.file(), serviceYAML(s), begin)
}

// serviceYAML is a Service, its Pods (running and ready) and its EndpointSlice.
func serviceYAML(s *service) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Service\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n  clusterIP: %s\n"+
		"  selector:\n    app: %s\n  ports:\n", s.name, s.ns, s.clusterIP, s.name)
	for _, p := range servicePorts {
		fmt.Fprintf(&b, "  - name: %s\n    port: %d\n    targetPort: %d\n    appProtocol: %s\n", p.name, p.port, p.target, p.appProtocol)
	}
	for _, p := range s.pods {
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\n  namespace: %s\n  labels:\n    app: %s\n"+
			"    version: v1\n    security.istio.io/tlsMode: istio\nspec:\n  nodeName: %s\n  serviceAccountName: %s\n"+
			"  containers:\n  - name: app\n    image: app\nstatus:\n  phase: Running\n  podIP: %s\n  podIPs:\n  - ip: %s\n"+
			"  conditions:\n  - type: Ready\n    status: \"True\"\n", p.name, s.ns, s.name, p.node, s.name, p.ip, p.ip)
	}
	fmt.Fprintf(&b, "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: %s-slice\n  namespace: %s\n"+
		"  labels:\n    kubernetes.io/service-name: %s\naddressType: IPv4\nports:\n", s.name, s.ns, s.name)
	for _, p := range servicePorts {
		fmt.Fprintf(&b, "- name: %s\n  port: %d\n  protocol: TCP\n", p.name, p.target)
	}
	b.WriteString("endpoints:\n")
	for _, p := range s.pods {
		fmt.Fprintf(&b, "- addresses: [\"%s\"]\n  conditions:\n    ready: true\n  nodeName: %s\n  targetRef:\n    kind: Pod\n"+
			"    namespace: %s\n    name: %s\n", p.ip, p.node, s.ns, p.name)
	}
	return b.String()
}

// authorizationPolicy allows one principal to reach every workload in ns; marker makes each version unique.
func authorizationPolicy(ns, name, marker string) string {
	return fmt.Sprintf(`apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: %s
  namespace: %s
spec:
  action: ALLOW
  rules:
  - from:
    - source:
        principals: ["cluster.local/ns/%s/sa/load-%s"]
`, name, ns, ns, marker)
}

// virtualService routes requests with the header x-load: MARKER to the service, so the marker shows in RDS.
func virtualService(s *service, name, marker string) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: %[1]s
  namespace: %[2]s
spec:
  hosts:
  - %[3]s
  http:
  - match:
    - headers:
        x-load:
          exact: load-%[4]s
    route:
    - destination:
        host: %[3]s
        port:
          number: 80
    timeout: 3s
  - route:
    - destination:
        host: %[3]s
        port:
          number: 80
`, name, s.ns, s.host(), marker)
}

// destinationRule limits the connections to the service's hosts: a change of maxConnections changes its
// clusters (their circuit breakers) and nothing about their endpoints.
func destinationRule(s *service, name string, maxConnections int) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: %s
  namespace: %s
spec:
  host: %s
  trafficPolicy:
    connectionPool:
      tcp:
        maxConnections: %d
`, name, s.ns, s.host(), maxConnections)
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}
