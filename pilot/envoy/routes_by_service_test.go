package envoy

import (
	"slices"
	"testing"

	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/sextantmesh/sextant/pilot/model"
)

// byServiceMesh adds to testdata/lds/mesh.yaml an HTTP ServiceEntry with an address, whose host a client may
// reach on an address of its own resolving: it stays in the port's shared table.
const byServiceMesh = `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: catalog, namespace: shop}
spec:
  hosts: [catalog.example.com]
  addresses: [240.0.0.9]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{number: 9080, name: http, protocol: HTTP}]
`

const ledgerService = `
apiVersion: v1
kind: Service
metadata: {name: ledger, namespace: shop}
spec:
  clusterIP: 10.0.0.50
  selector: {app: ledger}
  ports: [{name: http, port: 9080}]
`

// By service, a Kubernetes Service's HTTP port is its ClusterIP's listener, whose HTTP chain takes the
// service's own route configuration, answering any Host with the service's routes; the port's shared
// table keeps the ServiceEntry and the catch-all only.
func TestRoutesByServiceLayout(t *testing.T) {
	push := ldsPush(t, nil, byServiceMesh)
	g := New(Options{})
	ls := ldsGenerate(t, g, ldsFrontend, push, wildcard(ListenerType))
	l := ldsFind(t, ls, "10.0.0.11_9080")
	var routes []string
	for _, fc := range l.FilterChains {
		for _, f := range fc.Filters {
			m := &hcm.HttpConnectionManager{}
			if f.GetTypedConfig().MessageIs(m) {
				if err := f.GetTypedConfig().UnmarshalTo(m); err != nil {
					t.Fatal(err)
				}
				routes = append(routes, m.GetRds().GetRouteConfigName())
			}
		}
	}
	if !slices.Equal(routes, []string{"reviews.shop.svc.cluster.local:9080"}) {
		t.Errorf("10.0.0.11_9080 routes through %v, want the service's own configuration", routes)
	}
	if l.DefaultFilterChain == nil {
		t.Error("10.0.0.11_9080 has no default chain for what is not plaintext HTTP")
	}

	rcs := generateRoutes(t, g, ldsFrontend, push, named(RouteType, "9080", "reviews.shop.svc.cluster.local:9080"))
	if len(rcs) != 2 {
		t.Fatalf("route configurations %v", routeNames(rcs))
	}
	var shared []string
	for _, vh := range rcs[0].VirtualHosts {
		shared = append(shared, vh.Name)
	}
	if !slices.Equal(shared, []string{"catalog.example.com:9080", "allow_any"}) {
		t.Errorf("shared table 9080 holds %v, want the ServiceEntry's host and the catch-all", shared)
	}
	own := rcs[1].VirtualHosts
	if len(own) != 1 || !slices.Equal(own[0].Domains, []string{"*"}) ||
		own[0].Routes[0].GetRoute().GetCluster() != "outbound|9080||reviews.shop.svc.cluster.local" {
		t.Errorf("reviews' own configuration: %v", own)
	}
}

// Adding a Kubernetes Service with an HTTP port others use changes no route configuration a sidecar has: it
// adds the service's own, so delta xDS sends that one (and the service's listener) only.
func TestRoutesByServiceServiceAddSendsItsOwn(t *testing.T) {
	g := New(Options{})
	gen := g.ByTypeURL()[RouteType]
	versions := func(push *model.PushContext) map[string]string {
		w := named(RouteType, "9080", "80", "7070", "reviews.shop.svc.cluster.local:9080", "ledger.shop.svc.cluster.local:9080")
		res, err := gen.Generate(ldsFrontend, push, w, nil)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, r := range res {
			out[r.Name] = r.Version
		}
		return out
	}
	before := versions(ldsPush(t, nil, byServiceMesh))
	after := versions(ldsPush(t, nil, byServiceMesh, ledgerService))
	var changed []string
	for name, v := range after {
		if before[name] != v {
			changed = append(changed, name)
		}
	}
	if !slices.Equal(changed, []string{"ledger.shop.svc.cluster.local:9080"}) {
		t.Errorf("changed route configurations %v, want the new service's own only", changed)
	}
	if before["9080"] == "" || before["reviews.shop.svc.cluster.local:9080"] == "" {
		t.Errorf("route configurations before %v", before)
	}

	// By port (istiod's layout), the same add changes the port's shared table.
	g = newByPort()
	gen = g.ByTypeURL()[RouteType]
	before, after = versions(ldsPush(t, nil, byServiceMesh)), versions(ldsPush(t, nil, byServiceMesh, ledgerService))
	if before["9080"] == after["9080"] || after["ledger.shop.svc.cluster.local:9080"] != "" {
		t.Errorf("by port: 9080 %q → %q, ledger's own %q", before["9080"], after["9080"], after["ledger.shop.svc.cluster.local:9080"])
	}
}

func TestParseOutboundHTTPRoutes(t *testing.T) {
	for in, want := range map[string]bool{"": false, "service": false, "port": true} {
		if got, err := ParseOutboundHTTPRoutes(in); err != nil || got != want {
			t.Errorf("%q: %v, %v", in, got, err)
		}
	}
	if _, err := ParseOutboundHTTPRoutes("vip"); err == nil {
		t.Error("vip accepted")
	}
}

// newByPort returns generators laying out routes as istiod (every service in its port's table): the tests of
// what a virtual host holds read it there, where istiod's domains are too.
func newByPort() *Generators { return New(Options{OutboundHTTPRoutes: RoutesByPort}) }

// Under a Sidecar, the catch-all egress listener's services go by service; a port an egress listener of its
// own takes keeps istiod's layout, its addresses being that listener's to decide.
func TestRoutesByServiceUnderSidecarEgress(t *testing.T) {
	const sidecar = `
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: shop}
spec:
  egress:
  - port: {number: 9080, protocol: HTTP, name: http}
    hosts: ["./*"]
  - hosts: ["./*"]
`
	ls := listenerNames(ldsGenerate(t, New(Options{}), ldsFrontend, ldsPush(t, nil, sidecar), wildcard(ListenerType)))
	if !slices.Contains(ls, "10.0.0.10_80") || !slices.Contains(ls, "10.0.0.11_7070") {
		t.Errorf("the catch-all's HTTP ports are not by service: %v", ls)
	}
	if slices.Contains(ls, "10.0.0.11_9080") || !slices.Contains(ls, "0.0.0.0_9080") {
		t.Errorf("port 9080, the egress listener's own, went by service: %v", ls)
	}
}

// A port's table with no virtual host to send over VHDS (by service, its Services have tables of their own)
// is served inline to an Envoy that takes VHDS: in the VHDS shape Envoy would wait for virtual hosts that
// never come. One with a host keeps the VHDS shape.
func TestRoutesByServiceEmptyPortTableIsInline(t *testing.T) {
	push := ldsPush(t, nil, byServiceMesh)
	proxy := envoyProxy("shop", ldsFrontend.Labels, true, 1, 38)
	proxy.IPAddresses = ldsFrontend.IPAddresses
	rcs := generateRoutes(t, New(Options{}), proxy, push, named(RouteType, "80", "9080"))
	if len(rcs) != 2 || rcs[0].Name != "80" || rcs[1].Name != "9080" {
		t.Fatalf("route configurations %v", routeNames(rcs))
	}
	if rcs[0].GetVhds() != nil || len(rcs[0].VirtualHosts) != 1 || rcs[0].VirtualHosts[0].Name != "allow_any" {
		t.Errorf("80, only Services' port: %v", rcs[0])
	}
	if rcs[1].GetVhds() == nil {
		t.Errorf("9080, with the ServiceEntry's host, is not in the VHDS shape: %v", rcs[1])
	}
}
