package envoy

import (
	"slices"
	"testing"

	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
)

// l4MergeVirtualServices: several VirtualServices for each of db, cache, api and payments, created in
// the order they are listed (a wildcard host among them), as users split routes by team.
const l4MergeVirtualServices = `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: db-a, namespace: shop, creationTimestamp: "2024-01-01T00:00:00Z"}
spec:
  hosts: [db]
  tcp:
  - match: [{sourceLabels: {app: batch}}]
    route: [{destination: {host: db-canary}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: db-b, namespace: shop, creationTimestamp: "2024-01-02T00:00:00Z"}
spec:
  hosts: [db.shop.svc.cluster.local]
  tcp:
  - route: [{destination: {host: db-replica}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: db-c, namespace: shop, creationTimestamp: "2024-01-03T00:00:00Z"}
spec:
  hosts: [db]
  tcp:
  - route: [{destination: {host: db}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: example, namespace: shop, creationTimestamp: "2024-01-01T00:00:00Z"}
spec:
  hosts: ["*.example.com"]
  tcp:
  - match: [{destinationSubnets: [203.0.113.0/24]}]
    route: [{destination: {host: db-replica, port: {number: 5432}}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: cache, namespace: shop, creationTimestamp: "2024-01-02T00:00:00Z"}
spec:
  hosts: [cache.example.com]
  tcp:
  - match: [{destinationSubnets: [172.16.0.0/12]}]
    route: [{destination: {host: db-canary, port: {number: 5432}}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: api-a, namespace: shop, creationTimestamp: "2024-01-01T00:00:00Z"}
spec:
  hosts: [api.example.com]
  tls:
  - match: [{sniHosts: [api.example.com]}]
    route: [{destination: {host: api.example.com}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: api-b, namespace: shop, creationTimestamp: "2024-01-02T00:00:00Z"}
spec:
  hosts: [api.example.com]
  tls:
  - match: [{sniHosts: [api.example.com], destinationSubnets: [198.51.100.0/24]}]
    route: [{destination: {host: db-canary, port: {number: 5432}}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: api-c, namespace: shop, creationTimestamp: "2024-01-03T00:00:00Z"}
spec:
  hosts: [api.example.com, alt.example.com]
  tls:
  - match: [{sniHosts: [api.example.com]}]
    route: [{destination: {host: db, port: {number: 5432}}}]
  - match: [{sniHosts: [alt.example.com]}]
    route: [{destination: {host: db-replica, port: {number: 5432}}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: payments-a, namespace: shop, creationTimestamp: "2024-01-01T00:00:00Z"}
spec:
  hosts: [payments.shop.svc.cluster.local]
  tls:
  - match: [{sniHosts: [payments.shop.svc.cluster.local], sourceLabels: {app: batch}}]
    route: [{destination: {host: db-canary, port: {number: 5432}}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: payments-b, namespace: shop, creationTimestamp: "2024-01-02T00:00:00Z"}
spec:
  hosts: [payments.shop.svc.cluster.local, legacy.example.com]
  tls:
  - match: [{sniHosts: [legacy.example.com]}]
    route: [{destination: {host: db-replica, port: {number: 5432}}}]
`

// A sidecar's TCP and TLS chains for a host take the tcp and tls routes of every VirtualService naming it,
// one VirtualService after the other (oldest first, a wildcard host in its place), as istiod's: the first
// route taking every address ends the walk over all of them; a later VirtualService's server name on the
// same addresses is left to the earlier one, and an earlier match's destinationSubnets stay in force for
// the later VirtualServices' matches. Before, only the first VirtualService for the host counted.
func TestOutboundL4RoutesOfEveryVirtualService(t *testing.T) {
	push := l4Push(t, l4MergeVirtualServices)
	const primary, replica = "outbound|5432||db.shop.svc.cluster.local", "outbound|5432||db-replica.shop.svc.cluster.local"
	const canary, cache, api = "outbound|5432||db-canary.shop.svc.cluster.local", "outbound|6379||cache.example.com",
		"outbound|8443||api.example.com"
	web := ldsSidecar("web-1", "10.1.0.23", map[string]string{"app": "web"})
	batch := ldsSidecar("batch-1", "10.1.0.20", map[string]string{"app": "batch"})
	for _, tc := range []struct {
		proxy    *model.Proxy
		listener string
		c        connection
		want     string
	}{
		{web, "10.0.5.10_5432", connection{ip: "10.0.5.10", port: 5432}, replica}, // db-a's match is batch's: db-b's route
		{batch, "10.0.5.10_5432", connection{ip: "10.0.5.10", port: 5432}, canary},
		{web, "0.0.0.0_6379", connection{ip: "203.0.113.9", port: 6379}, replica}, // the wildcard host's, older
		{web, "0.0.0.0_6379", connection{ip: "172.16.1.1", port: 6379}, canary},
		{web, "0.0.0.0_6379", connection{ip: "10.9.9.9", port: 6379}, cache},
		{web, "0.0.0.0_8443", connection{ip: "10.9.9.9", port: 8443, tls: true, sni: "api.example.com"}, api},
		{web, "0.0.0.0_8443", connection{ip: "198.51.100.7", port: 8443, tls: true, sni: "api.example.com"}, canary},
		// api-c's matches inherit api-b's subnets: alt.example.com only within them.
		{web, "0.0.0.0_8443", connection{ip: "198.51.100.7", port: 8443, tls: true, sni: "alt.example.com"}, replica},
		{web, "0.0.0.0_8443", connection{ip: "10.9.9.9", port: 8443, tls: true, sni: "alt.example.com"}, PassthroughCluster},
		// payments-b routes, so payments has no chain of its own; payments-a's is batch's.
		{web, "10.0.5.20_443", connection{ip: "10.0.5.20", port: 443, tls: true, sni: "legacy.example.com"}, replica},
		{web, "10.0.5.20_443", connection{ip: "10.0.5.20", port: 443, tls: true, sni: "payments.shop.svc.cluster.local"}, PassthroughCluster},
		{batch, "10.0.5.20_443", connection{ip: "10.0.5.20", port: 443, tls: true, sni: "payments.shop.svc.cluster.local"}, canary},
		{batch, "10.0.5.20_443", connection{ip: "10.0.5.20", port: 443, tls: true, sni: "legacy.example.com"}, replica},
	} {
		ls := ldsGenerate(t, New(Options{}), tc.proxy, push, wildcard(ListenerType))
		if got := l4Dest(t, ldsFind(t, ls, tc.listener), tc.c); got != tc.want {
			t.Errorf("%s: %s %+v to %s, want %s", tc.proxy.Name, tc.listener, tc.c, got, tc.want)
		}
	}
}

// The listeners follow a change to any of the VirtualServices for a host, not only the first one's: an
// edit of the second moves the connections it routes, on the generator that built them before.
func TestOutboundL4RoutesFollowEveryVirtualService(t *testing.T) {
	st := storeFromYAML(t, []byte(l4Mesh+"---\n"+l4MergeVirtualServices))
	push := model.Build(st, mesh.Default())
	g := New(Options{})
	web := ldsSidecar("web-1", "10.1.0.23", map[string]string{"app": "web"})
	db := connection{ip: "10.0.5.10", port: 5432}
	if got := l4Dest(t, ldsFind(t, ldsGenerate(t, g, web, push, wildcard(ListenerType)), "10.0.5.10_5432"), db); got !=
		"outbound|5432||db-replica.shop.svc.cluster.local" {
		t.Fatalf("db to %s, want db-replica", got)
	}
	push = applyDocs(t, st, push, `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: db-b, namespace: shop, creationTimestamp: "2024-01-02T00:00:00Z"}
spec:
  hosts: [db.shop.svc.cluster.local]
  tcp:
  - match: [{destinationSubnets: [10.0.5.0/24]}]
    route: [{destination: {host: db-canary}}]
`)
	// db-b's route now names subnets (holding the VIP); db-c's takes what they do not.
	if got := l4Dest(t, ldsFind(t, ldsGenerate(t, g, web, push, wildcard(ListenerType)), "10.0.5.10_5432"), db); got !=
		"outbound|5432||db-canary.shop.svc.cluster.local" {
		t.Errorf("after db-b's edit: db to %s, want db-canary", got)
	}
	checkSameAsFreshBuild(t, g, ListenerType, web, push, 1)
}

// A Sidecar's egress hosts import VirtualServices by namespace, as istiod's egress listener: a
// VirtualService of a namespace it does not import (exported everywhere, older) neither routes the
// listeners' TCP nor a service's HTTP routes; those of its own namespace do. Before, it did both.
func TestSidecarImportsTheVirtualServicesItRoutesBy(t *testing.T) {
	push := l4Push(t, `
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  clusterIP: 10.0.5.30
  ports: [{name: http, port: 8080}]
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: shop}
spec:
  egress: [{hosts: ["./*"]}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: db-elsewhere, namespace: team-b, creationTimestamp: "2024-01-01T00:00:00Z"}
spec:
  hosts: [db.shop.svc.cluster.local, web.shop.svc.cluster.local]
  tcp:
  - route: [{destination: {host: db-replica.shop.svc.cluster.local}}]
  http:
  - route: [{destination: {host: db-replica.shop.svc.cluster.local, port: {number: 5432}}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: db, namespace: shop, creationTimestamp: "2024-01-02T00:00:00Z"}
spec:
  hosts: [db]
  tcp:
  - route: [{destination: {host: db-canary}}]
`)
	g := newByPort()
	web := ldsSidecar("web-1", "10.1.0.23", map[string]string{"app": "web"})
	l := ldsFind(t, ldsGenerate(t, g, web, push, wildcard(ListenerType)), "10.0.5.10_5432")
	if got := l4Dest(t, l, connection{ip: "10.0.5.10", port: 5432}); got != "outbound|5432||db-canary.shop.svc.cluster.local" {
		t.Errorf("db to %s, want db-canary (team-b's VirtualService is not imported)", got)
	}
	rcs := generateRoutes(t, g, web, push, named(RouteType, "8080"))
	if got := routeClusters(vhostNamed(t, rcs, "8080", "web.shop.svc.cluster.local:8080")); !slices.Equal(got,
		[]string{"outbound|8080||web.shop.svc.cluster.local"}) {
		t.Errorf("web's routes to %v, want its own cluster (team-b's VirtualService is not imported)", got)
	}
}

// Each egress listener routes by the VirtualServices its own hosts import, as istiod's egress listener:
// the listener on 8080 imports team-b's, the catch-all (db's 5432, and route configuration 80) does not.
// Before, every listener took the VirtualServices of all the Sidecar's hosts together.
func TestEgressListenersImportTheirOwnVirtualServices(t *testing.T) {
	push := l4Push(t, `
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  clusterIP: 10.0.5.30
  ports: [{name: http, port: 8080}, {name: http-alt, port: 80}]
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: shop}
spec:
  egress:
  - port: {number: 8080, protocol: HTTP, name: http}
    hosts: ["./*", "team-b/*"]
  - hosts: ["./*"]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: team-b-routes, namespace: team-b}
spec:
  hosts: [db.shop.svc.cluster.local, web.shop.svc.cluster.local]
  tcp:
  - route: [{destination: {host: db-replica.shop.svc.cluster.local}}]
  http:
  - route: [{destination: {host: db-canary.shop.svc.cluster.local, port: {number: 5432}}}]
`)
	g := newByPort()
	web := ldsSidecar("web-1", "10.1.0.23", map[string]string{"app": "web"})
	l := ldsFind(t, ldsGenerate(t, g, web, push, wildcard(ListenerType)), "10.0.5.10_5432")
	if got := l4Dest(t, l, connection{ip: "10.0.5.10", port: 5432}); got != "outbound|5432||db.shop.svc.cluster.local" {
		t.Errorf("db to %s, want db itself (the catch-all does not import team-b's VirtualService)", got)
	}
	rcs := generateRoutes(t, g, web, push, named(RouteType, "8080", "80"))
	if got := routeClusters(vhostNamed(t, rcs, "8080", "web.shop.svc.cluster.local:8080")); !slices.Equal(got,
		[]string{"outbound|5432||db-canary.shop.svc.cluster.local"}) {
		t.Errorf("web:8080 routes to %v, want db-canary (the listener on 8080 imports team-b's VirtualService)", got)
	}
	if got := routeClusters(vhostNamed(t, rcs, "80", "web.shop.svc.cluster.local:80")); !slices.Equal(got,
		[]string{"outbound|80||web.shop.svc.cluster.local"}) {
		t.Errorf("web:80 routes to %v, want its own cluster (the catch-all does not import team-b's VirtualService)", got)
	}
}
