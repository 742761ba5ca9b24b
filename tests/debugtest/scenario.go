package debugtest

import (
	"testing"

	"github.com/sextantmesh/sextant/pilot/debug"
	"github.com/sextantmesh/sextant/pilot/envoy"
)

// Scenario is a small mesh: two namespaces, a service with one endpoint in each, a VirtualService, an
// AuthorizationPolicy, and one broken document.
func Scenario() map[string]string {
	return map[string]string{
		"00-namespaces.yaml": `apiVersion: v1
kind: Namespace
metadata:
  name: bookinfo
---
apiVersion: v1
kind: Namespace
metadata:
  name: shop
`,
		"10-services.yaml": `apiVersion: v1
kind: Service
metadata:
  name: reviews
  namespace: bookinfo
spec:
  clusterIP: 10.96.0.20
  selector:
    app: reviews
  ports:
  - name: http
    port: 9080
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: reviews-abc
  namespace: bookinfo
  labels:
    kubernetes.io/service-name: reviews
addressType: IPv4
ports:
- name: http
  port: 9080
  protocol: TCP
endpoints:
- addresses: ["10.1.0.20"]
  conditions:
    ready: true
---
apiVersion: v1
kind: Service
metadata:
  name: cart
  namespace: shop
spec:
  clusterIP: 10.96.0.30
  selector:
    app: cart
  ports:
  - name: http
    port: 8080
`,
		"20-routing.yaml": RoutingV1,
		"30-security.yaml": `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: allow-shop
  namespace: bookinfo
spec:
  action: ALLOW
  rules:
  - from:
    - source:
        namespaces: ["shop"]
`,
		"40-broken.yaml": Broken,
	}
}

// RoutingV1 and RoutingV2 are two generations of the reviews VirtualService, visible in bookinfo only.
const (
	RoutingV1 = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: reviews
  namespace: bookinfo
spec:
  exportTo: ["."]
  hosts:
  - reviews
  http:
  - route:
    - destination:
        host: reviews
`
	RoutingV2 = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: reviews
  namespace: bookinfo
spec:
  exportTo: ["."]
  hosts:
  - reviews
  http:
  - timeout: 3s
    route:
    - destination:
        host: reviews
`
)

// Broken is a file whose second document is rejected at spec.ports.
const Broken = `apiVersion: v1
kind: Service
metadata:
  name: fine
  namespace: shop
spec:
  ports:
  - name: http
    port: 80
---
apiVersion: v1
kind: Service
metadata:
  name: broken
  namespace: shop
spec:
  ports: 7
`

// The two proxies StartScenario connects.
const (
	ReviewsProxy = "reviews-v1.bookinfo" // ACKs everything
	CartProxy    = "cart-v1.shop"        // NACKs listeners
)

// StartScenario runs Scenario with ReviewsProxy synced on CDS and LDS and CartProxy synced on CDS and in
// error on LDS.
func StartScenario(t testing.TB) (*Env, *Proxy, *Proxy) {
	env := Start(t, Scenario())
	a := env.Connect(t, SidecarNode("reviews-v1", "bookinfo"))
	a.Subscribe(envoy.ClusterType)
	a.Subscribe(envoy.ListenerType)
	b := env.Connect(t, SidecarNode("cart-v1", "shop"))
	b.NACK(envoy.ListenerType, "listener 0: bad filter chain")
	b.Subscribe(envoy.ClusterType)
	b.Subscribe(envoy.ListenerType)
	env.WaitStatus(t, ReviewsProxy, "cds", debug.Synced)
	env.WaitStatus(t, ReviewsProxy, "lds", debug.Synced)
	env.WaitStatus(t, CartProxy, "cds", debug.Synced)
	env.WaitStatus(t, CartProxy, "lds", debug.Error)
	return env, a, b
}
