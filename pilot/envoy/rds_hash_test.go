package envoy

import (
	"slices"
	"testing"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/sextantmesh/sextant/pilot/model"
)

const hashMesh = `
apiVersion: v1
kind: Service
metadata: {name: api, namespace: ns}
spec:
  clusterIP: 10.1.0.2
  ports: [{name: http, port: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: plain, namespace: ns}
spec:
  clusterIP: 10.1.0.3
  ports: [{name: http, port: 8080}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: api, namespace: ns}
spec:
  host: api
  trafficPolicy:
    loadBalancer: {consistentHash: {httpHeaderName: x-user}}
    portLevelSettings:
    - port: {number: 8080}
      loadBalancer: {consistentHash: {httpQueryParameterName: q}}
  subsets:
  - {name: v1, labels: {version: v1}}
  - name: v2
    labels: {version: v2}
    trafficPolicy: {loadBalancer: {consistentHash: {httpCookie: {name: c, ttl: 10s}}}}
  - name: v3
    labels: {version: v3}
    trafficPolicy: {loadBalancer: {simple: ROUND_ROBIN}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: plain, namespace: ns}
spec:
  host: plain
  trafficPolicy:
    loadBalancer: {consistentHash: {httpHeaderName: x-plain}}
    portLevelSettings:
    - port: {number: 8080}
      loadBalancer: {simple: LEAST_REQUEST}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: api, namespace: ns}
spec:
  hosts: [api]
  http:
  - name: disagree
    match: [{headers: {split: {exact: a}}}]
    route:
    - {destination: {host: api, subset: v1}, weight: 50}
    - {destination: {host: api, subset: v2}, weight: 50}
  - name: round-robin-subset
    match: [{headers: {split: {exact: b}}}]
    route:
    - {destination: {host: api, subset: v1}, weight: 50}
    - {destination: {host: api, subset: v3}, weight: 50}
  - name: zero-weight
    match: [{headers: {split: {exact: c}}}]
    route:
    - {destination: {host: api, subset: v2}, weight: 100}
    - {destination: {host: api, subset: v1}, weight: 0}
  - name: explicit-port
    match: [{headers: {split: {exact: d}}}]
    route:
    - destination: {host: api, subset: v1, port: {number: 8080}}
  - name: implicit-port
    route:
    - destination: {host: api, subset: v1}
`

func hashTexts(a *route.RouteAction) []string {
	var out []string
	for _, h := range a.GetHashPolicy() {
		switch p := h.PolicySpecifier.(type) {
		case *route.RouteAction_HashPolicy_Header_:
			out = append(out, "header:"+p.Header.HeaderName)
		case *route.RouteAction_HashPolicy_Cookie_:
			out = append(out, "cookie:"+p.Cookie.Name)
		case *route.RouteAction_HashPolicy_QueryParameter_:
			out = append(out, "query:"+p.QueryParameter.Name)
		default:
			out = append(out, "other")
		}
	}
	return out
}

// Each destination of a route adds its own hash policy, as istiod's: a weighted split whose destinations
// hash differently (or some not at all) still hashes for those that do. A subset's own load balancer without
// consistentHash inherits the rule's; port-level settings count for a destination that names its port; a
// service's default route keeps the rule's hash when its port's settings set a simple load balancer.
func TestRouteHashPolicyPerDestination(t *testing.T) {
	push := pushFromYAML(t, []byte(hashMesh))
	proxy := &model.Proxy{Type: model.Sidecar, Namespace: "ns"}
	for _, vhds := range []bool{false, true} {
		var vhosts []*route.VirtualHost
		if vhds {
			for _, vh := range generateVirtualHosts(t, newByPort(), envoyProxy("ns", nil, true, 1, 38), push) {
				vh.Name = vh.Name[len("8080/"):]
				vhosts = append(vhosts, vh)
			}
		} else {
			vhosts = generateRoutes(t, newByPort(), proxy, push, named(RouteType, "8080"))[0].VirtualHosts
		}
		byName := map[string]*route.VirtualHost{}
		for _, vh := range vhosts {
			byName[vh.Name] = vh
		}
		api, plain := byName["api.ns.svc.cluster.local:8080"], byName["plain.ns.svc.cluster.local:8080"]
		if api == nil || plain == nil {
			t.Fatalf("vhds %v: virtual hosts %v", vhds, vhosts)
		}
		want := map[string][]string{
			"disagree":           {"header:x-user", "cookie:c"},
			"round-robin-subset": {"header:x-user", "header:x-user"},
			"zero-weight":        {"cookie:c"},
			"explicit-port":      {"query:q"},
			"implicit-port":      {"header:x-user"},
		}
		for _, r := range api.Routes {
			if got := hashTexts(r.GetRoute()); !slices.Equal(got, want[r.Name]) {
				t.Errorf("vhds %v: route %s: hash policies %v, want %v", vhds, r.Name, got, want[r.Name])
			}
			// A retry may leave the hashed host only when the route splits.
			single := r.Name == "explicit-port" || r.Name == "implicit-port"
			if got := len(r.GetRoute().GetRetryPolicy().GetRetryHostPredicate()) > 0; got == single {
				t.Errorf("vhds %v: route %s: previous-hosts predicate %v", vhds, r.Name, got)
			}
		}
		if got := hashTexts(plain.Routes[0].GetRoute()); !slices.Equal(got, []string{"header:x-plain"}) {
			t.Errorf("vhds %v: default route of plain: hash policies %v, want the rule's header", vhds, got)
		}
	}
}

const selectedHashMesh = `
apiVersion: v1
kind: Service
metadata: {name: api, namespace: ns}
spec:
  clusterIP: 10.1.0.2
  ports: [{name: http, port: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: plain, namespace: ns}
spec:
  clusterIP: 10.1.0.3
  ports: [{name: http, port: 8080}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: api, namespace: ns}
spec:
  hosts: [api]
  http:
  - name: to-v1
    route:
    - destination: {host: api, subset: v1}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: api, namespace: ns}
spec:
  host: api
  trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x-every}}}
  subsets: [{name: v1, labels: {version: v1}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: plain, namespace: ns}
spec:
  host: plain
  trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x-every}}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: api-client, namespace: ns}
spec:
  host: api
  workloadSelector: {matchLabels: {app: client}}
  trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x-client}}}
  subsets: [{name: v1, labels: {version: v1}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: plain-client, namespace: ns}
spec:
  host: plain
  workloadSelector: {matchLabels: {app: client}}
  trafficPolicy: {loadBalancer: {consistentHash: {httpCookie: {name: client, ttl: 10s}}}}
`

// A route's hash policy comes from the DestinationRule the proxy applies to the destination, as istiod's
// route builder takes it from the proxy's sidecar scope: a rule whose workloadSelector selects the proxy
// comes before the namespace's rule without selector, for a VirtualService destination and a service's
// default route alike; other proxies of the namespace keep the rule without. One generator serves the
// selected and unselected proxies in turn, so no cache hands one's routes to the other.
func TestRouteHashPolicyFromSelectedDestinationRule(t *testing.T) {
	push := pushFromYAML(t, []byte(selectedHashMesh))
	for _, vhds := range []bool{false, true} {
		g := newByPort()
		for _, labels := range []map[string]string{{"app": "client"}, {"app": "other"}, {"app": "client", "version": "v2"}, nil} {
			byName := map[string]*route.VirtualHost{}
			if vhds {
				for _, vh := range generateVirtualHosts(t, g, envoyProxy("ns", labels, true, 1, 38), push) {
					byName[vh.Name[len("8080/"):]] = vh
				}
			} else {
				p := &model.Proxy{Type: model.Sidecar, Namespace: "ns", Labels: labels}
				for _, vh := range generateRoutes(t, g, p, push, named(RouteType, "8080"))[0].VirtualHosts {
					byName[vh.Name] = vh
				}
			}
			api, plain := byName["api.ns.svc.cluster.local:8080"], byName["plain.ns.svc.cluster.local:8080"]
			if api == nil || plain == nil {
				t.Fatalf("vhds %v, labels %v: virtual hosts %v", vhds, labels, byName)
			}
			wantAPI, wantPlain := []string{"header:x-every"}, []string{"header:x-every"}
			if labels["app"] == "client" {
				wantAPI, wantPlain = []string{"header:x-client"}, []string{"cookie:client"}
			}
			if got := hashTexts(api.Routes[0].GetRoute()); !slices.Equal(got, wantAPI) {
				t.Errorf("vhds %v, labels %v: VirtualService route to api: hash policies %v, want %v", vhds, labels, got, wantAPI)
			}
			if got := hashTexts(plain.Routes[0].GetRoute()); !slices.Equal(got, wantPlain) {
				t.Errorf("vhds %v, labels %v: default route of plain: hash policies %v, want %v", vhds, labels, got, wantPlain)
			}
		}
	}
}
