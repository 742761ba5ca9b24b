package envoy

import (
	"slices"
	"testing"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"

	"github.com/sextantmesh/sextant/pilot/model"
)

// l4Mesh: a database with two replicas' services, a TLS service, address-less ServiceEntries, and a
// Gateway with a TCP server. Each test adds its VirtualServices.
const l4Mesh = `
apiVersion: v1
kind: Service
metadata: {name: db, namespace: shop}
spec:
  clusterIP: 10.0.5.10
  ports: [{name: tcp-db, port: 5432}]
---
apiVersion: v1
kind: Service
metadata: {name: db-replica, namespace: shop}
spec:
  clusterIP: 10.0.5.11
  ports: [{name: tcp-db, port: 5432}]
---
apiVersion: v1
kind: Service
metadata: {name: db-canary, namespace: shop}
spec:
  clusterIP: 10.0.5.12
  ports: [{name: tcp-db, port: 5432}]
---
apiVersion: v1
kind: Service
metadata: {name: payments, namespace: shop}
spec:
  clusterIP: 10.0.5.20
  ports: [{name: tls, port: 443}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: cache, namespace: shop}
spec:
  hosts: [cache.example.com]
  location: MESH_EXTERNAL
  resolution: NONE
  ports: [{number: 6379, name: tcp-redis, protocol: TCP}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: api, namespace: shop}
spec:
  hosts: [api.example.com]
  location: MESH_EXTERNAL
  resolution: NONE
  ports: [{number: 8443, name: tls, protocol: TLS}]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: edge, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 31400, name: tcp, protocol: TCP}
    hosts: ["*"]
`

func l4Push(t *testing.T, extra string) *model.PushContext {
	t.Helper()
	return pushFromYAML(t, []byte(l4Mesh+"---\n"+extra))
}

// l4Dest is where listener l sends connection c: the tcp_proxy cluster of the chain Envoy picks, "closed"
// when none takes it.
func l4Dest(t *testing.T, l *listener.Listener, c connection) string {
	t.Helper()
	fc := envoyChain(l, c)
	if fc == nil {
		return "closed"
	}
	return ldsTCPProxyOf(t, fc).GetCluster()
}

func l4Listener(t *testing.T, g *Generators, proxy *model.Proxy, push *model.PushContext,
	name string) (*listener.Listener, *model.Resource) {
	t.Helper()
	l := ldsFind(t, ldsGenerate(t, g, proxy, push, wildcard(ListenerType)), name)
	res, err := g.ByTypeURL()[ListenerType].Generate(proxy, push, wildcard(ListenerType), nil)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(res, func(r *model.Resource) bool { return r.Name == name })
	return l, res[i]
}

// A tcp or tls match on sourceLabels applies to the proxies whose labels hold them, as istiod evaluates it
// per proxy; before, such a match never applied. Proxies whose labels satisfy the same matches share one
// built listener; the others keep sharing theirs.
func TestOutboundL4SourceLabels(t *testing.T) {
	push := l4Push(t, `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: db, namespace: shop}
spec:
  hosts: [db]
  tcp:
  - match: [{sourceLabels: {app: batch}}]
    route: [{destination: {host: db-replica}}]
  - route: [{destination: {host: db}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: payments, namespace: shop}
spec:
  hosts: [payments.shop.svc.cluster.local]
  tls:
  - match: [{sniHosts: [payments.shop.svc.cluster.local], sourceLabels: {app: batch, tier: night}}]
    route: [{destination: {host: db-canary, port: {number: 5432}}}]
  - match: [{sniHosts: [payments.shop.svc.cluster.local]}]
    route: [{destination: {host: payments}}]
`)
	g := New(Options{})
	batch := ldsSidecar("batch-1", "10.1.0.20", map[string]string{"app": "batch", "version": "v1"})
	batch2 := ldsSidecar("batch-2", "10.1.0.21", map[string]string{"app": "batch", "version": "v2"})
	night := ldsSidecar("batch-3", "10.1.0.22", map[string]string{"app": "batch", "tier": "night"})
	web := ldsSidecar("web-1", "10.1.0.23", map[string]string{"app": "web"})
	api := ldsSidecar("api-1", "10.1.0.24", map[string]string{"app": "api", "tier": "night"})
	db := connection{ip: "10.0.5.10", port: 5432}
	pay := connection{ip: "10.0.5.20", port: 443, tls: true, sni: "payments.shop.svc.cluster.local"}
	const replica, primary = "outbound|5432||db-replica.shop.svc.cluster.local", "outbound|5432||db.shop.svc.cluster.local"
	const canary, payments = "outbound|5432||db-canary.shop.svc.cluster.local", "outbound|443||payments.shop.svc.cluster.local"
	shared := map[string]*model.Resource{}
	for _, tc := range []struct {
		proxy       *model.Proxy
		db, pay     string
		sharesWith  string // the proxy whose listeners it gets, built once
		differsFrom string
	}{
		{batch, replica, payments, "", ""},
		{batch2, replica, payments, "batch-1", ""},
		{night, replica, canary, "", "batch-1"},
		{web, primary, payments, "", "batch-1"},
		{api, primary, payments, "web-1", "batch-3"},
	} {
		dbl, dbr := l4Listener(t, g, tc.proxy, push, "10.0.5.10_5432")
		if got := l4Dest(t, dbl, db); got != tc.db {
			t.Errorf("%s: db goes to %s, want %s", tc.proxy.Name, got, tc.db)
		}
		payl, _ := l4Listener(t, g, tc.proxy, push, "10.0.5.20_443")
		if got := l4Dest(t, payl, pay); got != tc.pay {
			t.Errorf("%s: payments goes to %s, want %s", tc.proxy.Name, got, tc.pay)
		}
		shared[tc.proxy.Name] = dbr
		if tc.sharesWith != "" && shared[tc.sharesWith] != dbr {
			t.Errorf("%s: listener built again, want %s's", tc.proxy.Name, tc.sharesWith)
		}
		if tc.differsFrom != "" && shared[tc.differsFrom] == dbr {
			t.Errorf("%s: got %s's listener", tc.proxy.Name, tc.differsFrom)
		}
	}
}

// destinationSubnets become prefix ranges on the outbound listener, as istiod's: a connection to an address
// they hold takes their route (on a VIP listener, where they hold the VIP), every other one the route
// without; before, such a match never applied.
func TestOutboundL4DestinationSubnets(t *testing.T) {
	push := l4Push(t, `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: db, namespace: shop}
spec:
  hosts: [db]
  tcp:
  - match: [{destinationSubnets: [10.0.5.0/24]}]
    route: [{destination: {host: db-replica}}]
  - route: [{destination: {host: db}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: db-canary, namespace: shop}
spec:
  hosts: [db-canary]
  tcp:
  - match: [{destinationSubnets: [192.168.0.0/16]}]
    route: [{destination: {host: db-replica}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: cache, namespace: shop}
spec:
  hosts: [cache.example.com]
  tcp:
  - match: [{destinationSubnets: [172.16.0.0/12, 10.9.0.1]}]
    route: [{destination: {host: db-replica, port: {number: 5432}}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: api, namespace: shop}
spec:
  hosts: [api.example.com]
  tls:
  - match: [{sniHosts: [api.example.com]}]
    route: [{destination: {host: api.example.com}}]
  - match: [{sniHosts: [api.example.com], destinationSubnets: [198.51.100.0/24]}]
    route: [{destination: {host: db-canary, port: {number: 5432}}}]
`)
	g := New(Options{})
	proxy := ldsSidecar("web-1", "10.1.0.23", map[string]string{"app": "web"})
	ls := ldsGenerate(t, g, proxy, push, wildcard(ListenerType))
	const replica, canary = "outbound|5432||db-replica.shop.svc.cluster.local", "outbound|5432||db-canary.shop.svc.cluster.local"
	for _, tc := range []struct {
		listener string
		c        connection
		want     string
	}{
		{"10.0.5.10_5432", connection{ip: "10.0.5.10", port: 5432}, replica},
		{"10.0.5.12_5432", connection{ip: "10.0.5.12", port: 5432}, canary}, // the subnets do not hold the VIP
		{"0.0.0.0_6379", connection{ip: "172.20.1.1", port: 6379}, replica},
		{"0.0.0.0_6379", connection{ip: "10.9.0.1", port: 6379}, replica},
		{"0.0.0.0_6379", connection{ip: "203.0.113.1", port: 6379}, "outbound|6379||cache.example.com"},
		{"0.0.0.0_8443", connection{ip: "198.51.100.7", port: 8443, tls: true, sni: "api.example.com"}, canary},
		{"0.0.0.0_8443", connection{ip: "203.0.113.1", port: 8443, tls: true, sni: "api.example.com"}, "outbound|8443||api.example.com"},
		{"0.0.0.0_8443", connection{ip: "198.51.100.7", port: 8443, tls: true, sni: "other.example.com"}, PassthroughCluster},
	} {
		if got := l4Dest(t, ldsFind(t, ls, tc.listener), tc.c); got != tc.want {
			t.Errorf("%s %+v: to %s, want %s", tc.listener, tc.c, got, tc.want)
		}
	}
}

// On a gateway, istiod decides a tcp or tls match by its port and gateways alone: sourceLabels,
// sourceNamespace and destinationSubnets do not restrict it. Before, such a match never applied there.
func TestGatewayL4MatchIgnoresSourceAndSubnets(t *testing.T) {
	for _, match := range []string{
		"{sourceLabels: {app: nobody}, port: 31400}",
		"{sourceNamespace: elsewhere}",
		"{destinationSubnets: [192.0.2.0/24], gateways: [istio-system/edge]}",
	} {
		t.Run(match, func(t *testing.T) {
			push := l4Push(t, `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: db-edge, namespace: shop}
spec:
  hosts: ["*"]
  gateways: [istio-system/edge]
  tcp:
  - match: [`+match+`]
    route: [{destination: {host: db-replica}}]
  - route: [{destination: {host: db}}]
`)
			l := ldsFind(t, ldsGenerate(t, New(Options{}), ldsGateway, push, wildcard(ListenerType)), "0.0.0.0_31400")
			if got := l4Dest(t, l, connection{ip: "10.1.1.1", port: 31400}); got != "outbound|5432||db-replica.shop.svc.cluster.local" {
				t.Errorf("to %s, want db-replica", got)
			}
		})
	}
}

// A TLS port takes tls routes only, as istiod's: a VirtualService's tcp route does not move it. Its
// sniHosts are matched as written, as istiod's (a short name stays short).
func TestOutboundTLSPortRoutes(t *testing.T) {
	push := l4Push(t, `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: payments, namespace: shop}
spec:
  hosts: [payments]
  tcp:
  - route: [{destination: {host: db}}]
  tls:
  - match: [{sniHosts: [payments], port: 8443}]
    route: [{destination: {host: db-canary, port: {number: 5432}}}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: api, namespace: shop}
spec:
  hosts: [api.example.com]
  tls:
  - match: [{sniHosts: [api.example.com]}]
    route: [{destination: {host: db-canary, port: {number: 5432}}}]
`)
	ls := ldsGenerate(t, New(Options{}), ldsSidecar("web-1", "10.1.0.23", map[string]string{"app": "web"}), push, wildcard(ListenerType))
	l := ldsFind(t, ls, "10.0.5.20_443")
	if got := l4Dest(t, l, connection{ip: "10.0.5.20", port: 443, tls: true, sni: "payments"}); got !=
		"outbound|443||payments.shop.svc.cluster.local" {
		t.Errorf("payments:443 to %s, want the service itself (the tls match is for port 8443, the tcp route not for TLS)", got)
	}
	for _, fc := range l.FilterChains {
		if names := fc.GetFilterChainMatch().GetServerNames(); len(names) > 0 {
			t.Errorf("chain %s matches server names %v, want none", fc.Name, names)
		}
	}
	push = l4Push(t, `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: payments, namespace: shop}
spec:
  hosts: [payments]
  tls:
  - match: [{sniHosts: [payments]}]
    route: [{destination: {host: db-canary, port: {number: 5432}}}]
`)
	ls = ldsGenerate(t, New(Options{}), ldsSidecar("web-1", "10.1.0.23", map[string]string{"app": "web"}), push, wildcard(ListenerType))
	l = ldsFind(t, ls, "10.0.5.20_443")
	if got := l4Dest(t, l, connection{ip: "10.0.5.20", port: 443, tls: true, sni: "payments"}); got !=
		"outbound|5432||db-canary.shop.svc.cluster.local" {
		t.Errorf("SNI payments to %s, want db-canary", got)
	}
	if got := l4Dest(t, l, connection{ip: "10.0.5.20", port: 443, tls: true, sni: "payments.shop.svc.cluster.local"}); got ==
		"outbound|5432||db-canary.shop.svc.cluster.local" {
		t.Errorf("SNI payments.shop.svc.cluster.local to %s, want not the route of sniHosts [payments]", got)
	}
}
