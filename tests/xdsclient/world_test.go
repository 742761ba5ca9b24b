package xdsclient

import (
	"fmt"
	"strings"
)

// The mesh the tests write: two namespaces (alpha with sidecars, beta in ambient mode), a "home" service
// in each where the sidecars run, and services whose ports, pods, DestinationRules and VirtualServices the
// tests change.

var namespaces = []string{"alpha", "beta"}

func nsIndex(ns string) int {
	for i, n := range namespaces {
		if n == ns {
			return i
		}
	}
	panic(ns)
}

const baseYAML = `apiVersion: v1
kind: Namespace
metadata:
  name: istio-system
---
apiVersion: v1
kind: Namespace
metadata:
  name: alpha
  labels:
    istio-injection: enabled
---
apiVersion: v1
kind: Namespace
metadata:
  name: beta
  labels:
    istio.io/dataplane-mode: ambient
---
apiVersion: v1
kind: Node
metadata:
  name: node-a
  labels:
    topology.kubernetes.io/region: r1
    topology.kubernetes.io/zone: r1-a
`

// port is a service port.
type port struct {
	name   string
	number int
}

// service is a Kubernetes Service with its pods and EndpointSlice.
type service struct {
	ns, name string
	index    int // its place among the services of its namespace: it picks the addresses
	ports    []port
	pods     int // pods 0..pods-1, versions v1 and v2 alternating
}

func (s service) vip() string { return fmt.Sprintf("10.96.%d.%d", nsIndex(s.ns), 10+s.index) }

func (s service) podIP(i int) string { return fmt.Sprintf("10.1.%d.%d", nsIndex(s.ns), 10*s.index+i+1) }

func (s service) host() string { return s.name + "." + s.ns + ".svc.cluster.local" }

func (s service) file() string { return "svc-" + s.ns + "-" + s.name + ".yaml" }

func (s service) yaml() string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: v1
kind: Service
metadata:
  name: %s
  namespace: %s
spec:
  clusterIP: %s
  selector:
    app: %s
  ports:
`, s.name, s.ns, s.vip(), s.name)
	for _, p := range s.ports {
		fmt.Fprintf(&b, "  - name: %s\n    port: %d\n    targetPort: %d\n", p.name, p.number, p.number+1000)
	}
	for i := range s.pods {
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Pod
metadata:
  name: %[1]s-%[2]d
  namespace: %[3]s
  labels:
    app: %[1]s
    version: v%[4]d
spec:
  nodeName: node-a
  serviceAccountName: %[1]s
  containers:
  - name: app
    image: example/%[1]s
status:
  phase: Running
  podIP: %[5]s
  conditions:
  - type: Ready
    status: "True"
`, s.name, i, s.ns, i%2+1, s.podIP(i))
	}
	if s.pods > 0 {
		fmt.Fprintf(&b, `---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: %s-slice
  namespace: %s
  labels:
    kubernetes.io/service-name: %s
addressType: IPv4
ports:
`, s.name, s.ns, s.name)
		for _, p := range s.ports {
			fmt.Fprintf(&b, "- name: %s\n  port: %d\n", p.name, p.number+1000)
		}
		b.WriteString("endpoints:\n")
		for i := range s.pods {
			fmt.Fprintf(&b, `- addresses: ["%s"]
  conditions:
    ready: true
  nodeName: node-a
  targetRef:
    kind: Pod
    namespace: %s
    name: %s-%d
`, s.podIP(i), s.ns, s.name, i)
		}
	}
	return b.String()
}

// homeService is where the sidecars of a namespace run (pod home-0, which never changes).
func homeService(ns string) service {
	return service{ns: ns, name: "home", index: 20, ports: []port{{"http", 8000}}, pods: 1}
}

// destinationRule is a DestinationRule for a service: policy picks a load balancer, subsets adds v1 and v2.
type destinationRule struct {
	policy  string // "", ROUND_ROBIN, LEAST_REQUEST, RANDOM
	maxConn int    // connectionPool.tcp.maxConnections, 0: none
	subsets bool
}

func drFile(s service) string { return "dr-" + s.ns + "-" + s.name + ".yaml" }

func (d destinationRule) yaml(s service) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: %s
  namespace: %s
spec:
  host: %s
`, s.name, s.ns, s.host())
	if d.policy != "" || d.maxConn > 0 {
		b.WriteString("  trafficPolicy:\n")
		if d.policy != "" {
			fmt.Fprintf(&b, "    loadBalancer:\n      simple: %s\n", d.policy)
		}
		if d.maxConn > 0 {
			fmt.Fprintf(&b, "    connectionPool:\n      tcp:\n        maxConnections: %d\n", d.maxConn)
		}
	}
	if d.subsets {
		b.WriteString("  subsets:\n  - name: v1\n    labels:\n      version: v1\n  - name: v2\n    labels:\n      version: v2\n")
	}
	return b.String()
}

// virtualService routes a service: by weight between its subsets, or with a timeout.
type virtualService struct {
	weightV1 int // 0: no split
	timeout  int // seconds, 0: none
}

func vsFile(s service) string { return "vs-" + s.ns + "-" + s.name + ".yaml" }

func (v virtualService) yaml(s service) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: %s
  namespace: %s
spec:
  hosts:
  - %s
  http:
  - route:
`, s.name, s.ns, s.host())
	if v.weightV1 > 0 {
		fmt.Fprintf(&b, "    - destination:\n        host: %s\n        subset: v1\n      weight: %d\n", s.host(), v.weightV1)
		fmt.Fprintf(&b, "    - destination:\n        host: %s\n        subset: v2\n      weight: %d\n", s.host(), 100-v.weightV1)
	} else {
		fmt.Fprintf(&b, "    - destination:\n        host: %s\n", s.host())
	}
	if v.timeout > 0 {
		fmt.Fprintf(&b, "    timeout: %ds\n", v.timeout)
	}
	return b.String()
}

// baseFiles is the config every test starts from.
func baseFiles() map[string]string {
	files := map[string]string{"00-base.yaml": baseYAML}
	for _, ns := range namespaces {
		h := homeService(ns)
		files[h.file()] = h.yaml()
	}
	return files
}

// sidecarNode is the node id of the sidecar of home-0 in ns.
func sidecarNode(ns string) string {
	h := homeService(ns)
	return fmt.Sprintf("sidecar~%s~home-0.%s~%s.svc.cluster.local", h.podIP(0), ns, ns)
}
