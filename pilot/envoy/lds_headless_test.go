package envoy

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/store"
)

// outboundCluster follows a sidecar's outbound connection c as Envoy does: virtualOutbound hands it to the
// listener of its exact address and port (additional addresses count), else 0.0.0.0:PORT, else keeps it;
// the chain is then picked (envoyChain). It returns the tcp_proxy cluster, "http" for a connection manager,
// "closed" when no chain takes it.
func outboundCluster(t *testing.T, ls []*listener.Listener, c connection) string {
	t.Helper()
	var exact, wildcard, capture *listener.Listener
	for _, l := range ls {
		if l.Name == VirtualOutboundListener {
			capture = l
			continue
		}
		for _, a := range listenerAddresses(l) {
			switch a {
			case fmt.Sprintf("%s:%d", c.ip, c.port):
				exact = l
			case fmt.Sprintf("0.0.0.0:%d", c.port):
				wildcard = l
			}
		}
	}
	l := cmpOr(exact, wildcard, capture)
	fc := envoyChain(l, c)
	if fc == nil {
		return "closed"
	}
	if filterNames(fc)[len(fc.Filters)-1] == ldsHCMFilter {
		return "http"
	}
	return ldsTCPProxyOf(t, fc).GetCluster()
}

func cmpOr(ls ...*listener.Listener) *listener.Listener {
	for _, l := range ls {
		if l != nil {
			return l
		}
	}
	return nil
}

const headlessDB = `
apiVersion: v1
kind: Service
metadata: {name: db, namespace: shop}
spec:
  clusterIP: None
  ports: [{name: tcp-db, port: 5433}, {name: legacy, port: 5434}, {name: http-admin, port: 8081}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: db-1, namespace: shop, labels: {kubernetes.io/service-name: db}}
addressType: IPv4
ports: [{name: tcp-db, port: 5433}, {name: legacy, port: 5434}, {name: http-admin, port: 8081}]
endpoints:
- addresses: [10.1.5.1]
- addresses: [10.1.5.2]
  conditions: {ready: false}
`

// A headless Service's TCP and sniffed ports are reached through a listener per endpoint address, as
// istiod's: the endpoints' addresses go to the service's cluster, any other address on the port is not the
// service's and goes where the outbound traffic policy says (passthrough, or refused under REGISTRY_ONLY).
// Before, 0.0.0.0_PORT took every address on the port into the service's cluster and policies.
func TestHeadlessListensOnEndpointAddresses(t *testing.T) {
	registryOnly := mesh.Default()
	registryOnly.OutboundTrafficPolicy.Mode = mesh.RegistryOnly
	for _, tc := range []struct {
		name  string
		mesh  *mesh.Config
		other string
	}{{"ALLOW_ANY", nil, PassthroughCluster}, {"REGISTRY_ONLY", registryOnly, BlackHoleCluster}} {
		t.Run(tc.name, func(t *testing.T) {
			ls := ldsGenerate(t, New(Options{}), ldsFrontend, ldsPush(t, tc.mesh, headlessDB), wildcard(ListenerType))
			for _, ip := range []string{"10.1.5.1", "10.1.5.2"} { // an endpoint not ready is an endpoint still
				if got := outboundCluster(t, ls, connection{ip: ip, port: 5433}); got != "outbound|5433||db.shop.svc.cluster.local" {
					t.Errorf("%s:5433 goes to %s, want db's cluster", ip, got)
				}
				if got := outboundCluster(t, ls, connection{ip: ip, port: 5434}); got != "outbound|5434||db.shop.svc.cluster.local" {
					t.Errorf("%s:5434 (sniffed, not HTTP) goes to %s, want db's cluster", ip, got)
				}
				if got := outboundCluster(t, ls, connection{ip: ip, port: 5434, http: "http/1.1"}); got != "http" {
					t.Errorf("%s:5434 (sniffed HTTP) goes to %s, want the connection manager", ip, got)
				}
			}
			for _, port := range []uint32{5433, 5434} {
				if got := outboundCluster(t, ls, connection{ip: "10.1.5.9", port: port}); got != tc.other {
					t.Errorf("another address on port %d goes to %s, want %s", port, got, tc.other)
				}
			}
			// The HTTP port stays on 0.0.0.0: its routes tell the services apart (RDS).
			if got := outboundCluster(t, ls, connection{ip: "10.1.5.9", port: 8081, http: "http/1.1"}); got != "http" {
				t.Errorf("HTTP port 8081 goes to %s, want its routes", got)
			}
			if names := listenerNames(ls); slices.Contains(names, "0.0.0.0_5433") || slices.Contains(names, "0.0.0.0_5434") {
				t.Errorf("a wildcard listener on a headless TCP port: %v", names)
			}
		})
	}
}

// A VirtualService's tcp matches on sourceLabels and destinationSubnets apply on a headless service's
// listeners per endpoint address as on a VIP's, as istiod's: each endpoint's listener is planned like a VIP
// listener of that address, for the labels of the proxy.
func TestHeadlessEndpointListenersL4Matches(t *testing.T) {
	push := ldsPush(t, nil, headlessDB, `
apiVersion: v1
kind: Service
metadata: {name: db-replica, namespace: shop}
spec:
  clusterIP: 10.0.9.9
  ports: [{name: tcp-db, port: 5433}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: db, namespace: shop}
spec:
  hosts: [db]
  tcp:
  - match: [{sourceLabels: {app: batch}, port: 5433}]
    route: [{destination: {host: db-replica}}]
  - match: [{destinationSubnets: [10.1.5.2/32], port: 5433}]
    route: [{destination: {host: db-replica}}]
  - route: [{destination: {host: db}}]
`)
	g := New(Options{})
	batch := ldsSidecar("batch-1", "10.1.0.20", map[string]string{"app": "batch"})
	const replica, db = "outbound|5433||db-replica.shop.svc.cluster.local", "outbound|5433||db.shop.svc.cluster.local"
	for _, tc := range []struct {
		proxy *model.Proxy
		ip    string
		want  string
	}{
		{ldsFrontend, "10.1.5.1", db},
		{ldsFrontend, "10.1.5.2", replica}, // the subnet holds the endpoint's address
		{ldsFrontend, "10.1.5.9", PassthroughCluster},
		{batch, "10.1.5.1", replica},
		{batch, "10.1.5.2", replica},
		{batch, "10.1.5.9", PassthroughCluster},
		{ldsFrontend, "10.1.5.1", db}, // built for the frontend's labels still, after batch's
	} {
		ls := ldsGenerate(t, g, tc.proxy, push, wildcard(ListenerType))
		if got := outboundCluster(t, ls, connection{ip: tc.ip, port: 5433}); got != tc.want {
			t.Errorf("%s: %s:5433 goes to %s, want %s", tc.proxy.Name, tc.ip, got, tc.want)
		}
	}
}

// A sidecar that is itself an endpoint of a headless service has no outbound listener for its own address,
// as istiod's; its replicas' listeners are shared.
func TestHeadlessNoListenerForOwnAddress(t *testing.T) {
	push := ldsPush(t, nil, headlessDB)
	g := New(Options{})
	self := ldsSidecar("db-1", "10.1.5.1", map[string]string{"app": "db"})
	names := listenerNames(ldsGenerate(t, g, self, push, wildcard(ListenerType)))
	if slices.Contains(names, "10.1.5.1_5433") || slices.Contains(names, "10.1.5.1_5434") {
		t.Errorf("db-1 has a listener on its own address: %v", names)
	}
	if !slices.Contains(names, "10.1.5.2_5433") || !slices.Contains(names, "10.1.5.2_5434") {
		t.Errorf("db-1 lacks the other endpoint's listeners: %v", names)
	}
	if names := listenerNames(ldsGenerate(t, g, ldsFrontend, push, wildcard(ListenerType))); !slices.Contains(names, "10.1.5.1_5433") {
		t.Errorf("frontend lacks 10.1.5.1_5433 after db-1 was served: %v", names)
	}
}

// A ServiceEntry with resolution NONE and no addresses is reached per endpoint address when its workload
// selector selects workloads (those whose address is an IP address), not at all when it selects none, and
// on 0.0.0.0_PORT without a selector (its addresses are unknown), as istiod.
func TestServiceEntryNoneListeners(t *testing.T) {
	push := ldsPush(t, nil, `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: listed, namespace: shop}
spec:
  hosts: [listed.example.com]
  resolution: NONE
  ports: [{number: 6001, name: tcp, protocol: TCP}]
  workloadSelector: {labels: {app: listed}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: listed-vm-1, namespace: shop}
spec: {address: 192.0.2.10, labels: {app: listed}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: listed-vm-2, namespace: shop}
spec: {address: legacy.example.com, labels: {app: listed}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: selected, namespace: shop}
spec:
  hosts: [selected.example.com]
  resolution: NONE
  ports: [{number: 6002, name: tcp, protocol: TCP}]
  workloadSelector: {labels: {app: nothing}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: unknown, namespace: shop}
spec:
  hosts: [unknown.example.com]
  resolution: NONE
  ports: [{number: 6003, name: tcp, protocol: TCP}]
`)
	ls := ldsGenerate(t, New(Options{}), ldsFrontend, push, wildcard(ListenerType))
	for _, tc := range []struct {
		c    connection
		want string
	}{
		{connection{ip: "192.0.2.10", port: 6001}, "outbound|6001||listed.example.com"},
		{connection{ip: "192.0.2.11", port: 6001}, PassthroughCluster},
		{connection{ip: "192.0.2.11", port: 6002}, PassthroughCluster},
		{connection{ip: "192.0.2.11", port: 6003}, "outbound|6003||unknown.example.com"},
	} {
		if got := outboundCluster(t, ls, tc.c); got != tc.want {
			t.Errorf("%s:%d goes to %s, want %s", tc.c.ip, tc.c.port, got, tc.want)
		}
	}
	for _, n := range listenerNames(ls) {
		if strings.HasPrefix(n, "legacy.example.com") {
			t.Errorf("listener %s on a hostname", n)
		}
	}
}

// An endpoint change of a headless service that changes its addresses is pushed to the listeners of the
// sidecars that see the service, and only to them; a change of health only, or of another service's
// endpoints, pushes no listeners. The listeners then follow the new addresses, derived from the last build.
func TestHeadlessAddressChangePushesListeners(t *testing.T) {
	docs, err := config.SplitDocuments([]byte(headlessDB + `
---
apiVersion: v1
kind: Namespace
metadata: {name: other}
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: other}
spec:
  egress: [{hosts: [./*]}]
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: shop}
spec:
  clusterIP: 10.0.0.90
  ports: [{name: tcp, port: 7100}]
`))
	if err != nil {
		t.Fatal(err)
	}
	st := store.New()
	for i, d := range docs {
		if config.IsEmptyDocument(d) {
			continue
		}
		c, err := config.Parse(d, "mesh.yaml", i, "default")
		if err != nil {
			t.Fatal(err)
		}
		st.Upsert(store.LayerFile, c)
	}
	push := model.Build(st, mesh.Default())
	g := New(Options{})
	gen := g.ByTypeURL()[ListenerType]
	filter, ok := gen.(model.PushFilter)
	if !ok {
		t.Fatal("LDS has no push filter: it is pushed on full pushes only")
	}
	frontend, outsider, gateway := ldsFrontend, ldsSidecar("client-1", "10.1.9.1", nil), ldsGateway
	outsider.Namespace = "other"
	for _, p := range []*model.Proxy{frontend, outsider} {
		ldsGenerate(t, g, p, push, wildcard(ListenerType))
	}
	step := func(what, slice string, wantPush bool) {
		t.Helper()
		next, res := applyDocsResult(t, st, push, slice)
		req := &model.PushRequest{ServicesUpdated: res.ServicesUpdated, AddressesUpdated: res.AddressesUpdated, Push: next}
		if res.Full || len(res.ServicesUpdated) == 0 {
			t.Fatalf("%s: full %v, services %v: want an endpoint push", what, res.Full, res.ServicesUpdated)
		}
		w := wildcard(ListenerType)
		if got := filter.NeedsPush(frontend, w, req); got != wantPush {
			t.Errorf("%s: LDS pushed to frontend (sees db) %v, want %v", what, got, wantPush)
		}
		if filter.NeedsPush(outsider, w, req) {
			t.Errorf("%s: LDS pushed to a sidecar whose scope lacks db", what)
		}
		if filter.NeedsPush(gateway, w, req) {
			t.Errorf("%s: LDS pushed to a gateway", what)
		}
		// Distribution tracking asks about requests kept without their snapshot: a sidecar may be concerned.
		kept := *req
		kept.Push = nil
		if got := filter.NeedsPush(frontend, w, &kept); got != wantPush {
			t.Errorf("%s: a request kept without its snapshot concerns frontend's LDS %v, want %v", what, got, wantPush)
		}
		push = next
		checkSameAsFreshBuild(t, g, ListenerType, frontend, push, 0)
		checkSameAsFreshBuild(t, g, ListenerType, outsider, push, 0)
	}
	slice := func(eps string) string {
		return "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n" +
			"metadata: {name: db-1, namespace: shop, labels: {kubernetes.io/service-name: db}}\n" +
			"addressType: IPv4\nports: [{name: tcp-db, port: 5433}, {name: legacy, port: 5434}, {name: http-admin, port: 8081}]\n" +
			"endpoints: " + eps + "\n"
	}
	step("an endpoint added", slice("[{addresses: [10.1.5.1]}, {addresses: [10.1.5.2], conditions: {ready: false}}, {addresses: [10.1.5.3]}]"),
		true)
	if names := listenerNames(ldsGenerate(t, g, frontend, push, wildcard(ListenerType))); !slices.Contains(names, "10.1.5.3_5433") {
		t.Errorf("no listener for the new endpoint: %v", names)
	}
	if l, _ := g.listenerLists.Latest(listID{kind: "lds", namespace: "shop", variant: string(model.Sidecar)}); l == nil {
		t.Error("no listener list kept")
	} else if l.derived.Full != "" {
		t.Errorf("the listeners were built anew rather than derived from the previous build: %s", l.derived.Full)
	}
	step("an endpoint now ready", slice("[{addresses: [10.1.5.1]}, {addresses: [10.1.5.2]}, {addresses: [10.1.5.3]}]"), false)
	step("another service's endpoint", "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n"+
		"metadata: {name: api-1, namespace: shop, labels: {kubernetes.io/service-name: api}}\n"+
		"addressType: IPv4\nports: [{name: tcp, port: 7100}]\nendpoints: [{addresses: [10.1.6.1]}]\n", false)
	step("an endpoint removed", slice("[{addresses: [10.1.5.3]}]"), true)
	if names := listenerNames(ldsGenerate(t, g, frontend, push, wildcard(ListenerType))); slices.Contains(names, "10.1.5.1_5433") {
		t.Errorf("the removed endpoint's listener stays: %v", names)
	}
}
