package envoy

import (
	"slices"
	"testing"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
)

// web serves port 80, api 8080; the VirtualService for api also names two hosts no service has.
const vsHostsMesh = `
apiVersion: v1
kind: Service
metadata: {name: web, namespace: ns}
spec:
  clusterIP: 10.1.0.1
  ports: [{name: http, port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: ns}
spec:
  clusterIP: 10.1.0.2
  ports: [{name: http, port: 8080}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: api, namespace: ns}
spec:
  hosts: [api, api.example.com, "*.api.example.org"]
  http:
  - match: [{port: 9999}]
    route: [{destination: {host: web}}]
  - route:
    - destination: {host: api, subset: v1}
      weight: 90
    - destination: {host: api, subset: v2, port: {number: 8080}}
      weight: 10
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: only-elsewhere, namespace: ns}
spec:
  hosts: [partner.example.com]
  http:
  - route: [{destination: {host: partner.example.com}}]
`

// routeClusters lists a virtual host's route destinations, weighted ones as NAME=WEIGHT.
func routeClusters(vh *route.VirtualHost) []string {
	var out []string
	for _, r := range vh.Routes {
		a := r.GetRoute()
		if c := a.GetCluster(); c != "" {
			out = append(out, c)
		}
		for _, w := range a.GetWeightedClusters().GetClusters() {
			out = append(out, w.Name)
		}
	}
	return out
}

// As istiod, route configuration 80 gives each host of every VirtualService that no service serves on 80
// a virtual host of its own with the VirtualService's routes for port 80; a destination without a port takes
// the configuration's port. On another port only the VirtualServices routing a service with that port give
// their other hosts one. VHDS gives the same virtual hosts.
func TestVirtualServiceHostsOutsideRegistry(t *testing.T) {
	push := pushFromYAML(t, []byte(vsHostsMesh))
	proxy := &model.Proxy{Type: model.Sidecar, Namespace: "ns"}
	rcs := generateRoutes(t, newByPort(), proxy, push, named(RouteType, "80", "8080"))
	if len(rcs) != 2 {
		t.Fatalf("got %v", routeNames(rcs))
	}
	byName := map[string]*route.RouteConfiguration{}
	for _, rc := range rcs {
		byName[rc.Name] = rc
	}
	var names []string
	for _, vh := range byName["80"].VirtualHosts {
		names = append(names, vh.Name)
	}
	want := []string{"*.api.example.org:80", "api.example.com:80", "api.ns.svc.cluster.local:80", "partner.example.com:80",
		"web.ns.svc.cluster.local:80", AllowAnyVirtualHost}
	if !slices.Equal(names, want) {
		t.Errorf("route configuration 80: virtual hosts %v, want %v", names, want)
	}
	api := virtualHost(t, byName["80"], "api.ns.svc.cluster.local:80")
	if !slices.Equal(api.Domains, []string{"api.ns.svc.cluster.local", "api.ns.svc.cluster.local:80"}) {
		t.Errorf("domains %v", api.Domains)
	}
	if got := routeClusters(api); !slices.Equal(got,
		[]string{"outbound|80|v1|api.ns.svc.cluster.local", "outbound|8080|v2|api.ns.svc.cluster.local"}) {
		t.Errorf("api on 80 routes to %v, want port 80 where the destination names none", got)
	}
	if got := routeClusters(virtualHost(t, byName["80"], "partner.example.com:80")); !slices.Equal(got,
		[]string{"outbound|80||partner.example.com"}) {
		t.Errorf("partner.example.com on 80 routes to %v", got)
	}

	names = nil
	for _, vh := range byName["8080"].VirtualHosts {
		names = append(names, vh.Name)
	}
	// On 8080 the api VirtualService routes the api service: its other hosts join; partner's routes only a
	// host outside the registry, so it stays out.
	want = []string{"*.api.example.org:8080", "api.example.com:8080", "api.ns.svc.cluster.local:8080", AllowAnyVirtualHost}
	if !slices.Equal(names, want) {
		t.Errorf("route configuration 8080: virtual hosts %v, want %v", names, want)
	}
	if got := routeClusters(virtualHost(t, byName["8080"], "api.example.com:8080")); got[0] != "outbound|8080|v1|api.ns.svc.cluster.local" {
		t.Errorf("api.example.com on 8080 routes to %v", got)
	}
	checkVHDSMatchesInline(t, push, "ns", nil)
}

// A VirtualService's routes for one port only do not make it a virtual host on 80.
func TestVirtualServiceHostWithoutRoutesOnPort(t *testing.T) {
	push := pushFromYAML(t, []byte(vsHostsMesh+`---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: port-only, namespace: ns}
spec:
  hosts: [port-only.example.com]
  http:
  - match: [{port: 8080}]
    route: [{destination: {host: web}}]
`))
	rcs := generateRoutes(t, New(Options{}), &model.Proxy{Type: model.Sidecar, Namespace: "ns"}, push, named(RouteType, "80"))
	for _, vh := range rcs[0].VirtualHosts {
		if vh.Name == "port-only.example.com:80" {
			t.Errorf("port-only.example.com has no route on 80, yet a virtual host: %v", vh)
		}
	}
}

// A Sidecar whose egress hosts do not import a VirtualService keeps its hosts out.
func TestVirtualServiceHostsFollowSidecarEgress(t *testing.T) {
	push := pushFromYAML(t, []byte(vsHostsMesh+`---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: ns}
spec:
  egress:
  - hosts: ["./web.ns.svc.cluster.local", "./partner.example.com"]
`))
	rcs := generateRoutes(t, newByPort(), &model.Proxy{Type: model.Sidecar, Namespace: "ns"}, push, named(RouteType, "80"))
	var names []string
	for _, vh := range rcs[0].VirtualHosts {
		names = append(names, vh.Name)
	}
	if want := []string{"partner.example.com:80", "web.ns.svc.cluster.local:80", AllowAnyVirtualHost}; !slices.Equal(names, want) {
		t.Errorf("virtual hosts %v, want %v", names, want)
	}
}

// A service appearing for a VirtualService host takes its virtual host over (with the service's names), and
// going away gives it back, over VHDS as inline, with the generator's caches carried across snapshots.
func TestVirtualServiceHostBecomesService(t *testing.T) {
	st := storeFromYAML(t, []byte(vsHostsMesh))
	before := model.Build(st, mesh.Default())
	after := applyDocs(t, st, before, `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: api-example, namespace: ns}
spec:
  hosts: [api.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{name: http, number: 80, protocol: HTTP}]
`)
	g := New(Options{})
	vhdsProxy := envoyProxy("ns", nil, true, 1, 38)
	find := func(push *model.PushContext) *route.VirtualHost {
		for _, vh := range generateVirtualHosts(t, g, vhdsProxy, push) {
			if vh.Name == "80/api.example.com:80" {
				return vh
			}
		}
		t.Fatal("no virtual host 80/api.example.com:80")
		return nil
	}
	if vh := find(before); len(vh.Domains) != 2 {
		t.Errorf("before: domains %v, want the VirtualService host's two", vh.Domains)
	}
	vh := find(after)
	if !slices.Contains(vh.Domains, "api.example.com.") {
		t.Errorf("after: domains %v, want the service's", vh.Domains)
	}
	if got := routeClusters(vh); got[0] != "outbound|80|v1|api.ns.svc.cluster.local" {
		t.Errorf("after: routes %v, want the VirtualService's", got)
	}
	checkVHDSMatchesInline(t, after, "ns", nil)
	again := deleteConfig(st, after, config.Key{Kind: config.ServiceEntry, Namespace: "ns", Name: "api-example"})
	if vh := find(again); len(vh.Domains) != 2 {
		t.Errorf("service gone: domains %v, want the VirtualService host's two", vh.Domains)
	}
}
