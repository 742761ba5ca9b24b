package envoy

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/store"
)

// envoyProxy is a sidecar as an Envoy of the given version connects on a delta (or SotW) stream.
func envoyProxy(ns string, labels map[string]string, delta bool, major, minor uint32) *model.Proxy {
	return &model.Proxy{Type: model.Sidecar, Namespace: ns, Labels: labels, Delta: delta,
		Node: &core.Node{UserAgentName: "envoy"}, BuildVersion: [3]uint32{major, minor, 0}}
}

// generateVirtualHosts runs VHDS and decodes the result, checking ValidateAll and that each resource is
// named as the virtual host it holds, ROUTE_CONFIG/NAME.
func generateVirtualHosts(t *testing.T, g *Generators, proxy *model.Proxy, push *model.PushContext) []*route.VirtualHost {
	t.Helper()
	res, err := g.ByTypeURL()[VirtualHostType].Generate(proxy, push, wildcard(VirtualHostType), nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []*route.VirtualHost
	for _, r := range res {
		vh := &route.VirtualHost{}
		if err := r.Any.UnmarshalTo(vh); err != nil {
			t.Fatal(err)
		}
		if err := vh.ValidateAll(); err != nil {
			t.Errorf("virtual host %s: ValidateAll: %v", vh.Name, err)
		}
		if vh.Name != r.Name || RouteConfigOfVirtualHost(r.Name) == "" {
			t.Errorf("resource %q holds virtual host %q; want both ROUTE_CONFIG/NAME", r.Name, vh.Name)
		}
		out = append(out, vh)
	}
	return out
}

// A VHDS sidecar gets route configurations holding only the catch-all, and virtual hosts that rebuild exactly
// the table a sidecar without VHDS gets: sourceLabels, VirtualServices, and VIPs shared between services. By
// port, where every service is in a table; by service, the golden holds what is left to VHDS.
func TestVHDSMatchesInlineRoutes(t *testing.T) {
	push := rdsPush(t)
	for _, labels := range []map[string]string{{"app": "productpage"}, {"app": "reviews"}} {
		checkVHDSMatchesInline(t, push, "bookinfo", labels)
	}
	checkVHDSMatchesInline(t, push, "other", nil)
	shared := pushFromYAML(t, []byte(sharedVIPMesh+`---
apiVersion: v1
kind: Service
metadata: {name: c, namespace: ns}
spec:
  clusterIP: 10.1.0.1
  ports: [{name: http, port: 80}]
`))
	checkVHDSMatchesInline(t, shared, "ns", nil)
	checkVHDSMatchesInline(t, shared, "other", nil)
	golden(t, "rds", "vhds-productpage", generateVirtualHosts(t, New(Options{}),
		envoyProxy("bookinfo", map[string]string{"app": "productpage"}, true, 1, 38), push))
}

func checkVHDSMatchesInline(t *testing.T, push *model.PushContext, ns string, labels map[string]string) {
	t.Helper()
	g := newByPort()
	vhdsProxy := envoyProxy(ns, labels, true, 1, 38)
	inline := generateRoutes(t, g, envoyProxy(ns, labels, false, 1, 38), push, wildcard(RouteType))
	withVHDS := generateRoutes(t, g, vhdsProxy, push, wildcard(RouteType))
	if len(inline) == 0 || len(inline) != len(withVHDS) {
		t.Fatalf("route configurations: %d inline, %d with VHDS", len(inline), len(withVHDS))
	}
	byRC := map[string][]*route.VirtualHost{}
	for _, vh := range generateVirtualHosts(t, g, vhdsProxy, push) {
		rc := RouteConfigOfVirtualHost(vh.Name)
		byRC[rc] = append(byRC[rc], vh)
	}
	for i, rc := range withVHDS {
		if rc.Vhds.GetConfigSource().GetAds() == nil || len(rc.VirtualHosts) != 1 || rc.VirtualHosts[0].Name != AllowAnyVirtualHost {
			t.Errorf("%s: want an ADS vhds source and only %s inline, got vhds %v and %d virtual hosts",
				rc.Name, AllowAnyVirtualHost, rc.Vhds, len(rc.VirtualHosts))
		}
		var want []*route.VirtualHost
		for _, vh := range inline[i].VirtualHosts {
			if vh.Name == AllowAnyVirtualHost {
				continue
			}
			vh = proto.Clone(vh).(*route.VirtualHost)
			vh.Name = rc.Name + "/" + vh.Name
			want = append(want, vh)
		}
		got := byRC[rc.Name]
		if len(got) != len(want) {
			t.Fatalf("%s %v %s: %d virtual hosts over VHDS, %d inline", ns, labels, rc.Name, len(got), len(want))
		}
		for j := range want {
			if !proto.Equal(got[j], want[j]) {
				t.Errorf("%s %v %s: virtual host %d differs:\nVHDS   %v\ninline %v", ns, labels, rc.Name, j, got[j], want[j])
			}
		}
	}
}

// Adding a service to a snapshot builds its virtual hosts only: every other one is the same resource as
// before, so the transport sends each sidecar the new ones alone.
func TestVHDSServiceAddBuildsOnlyItsVirtualHosts(t *testing.T) {
	data, err := os.ReadFile("testdata/rds/mesh.yaml")
	if err != nil {
		t.Fatal(err)
	}
	st := storeFromYAML(t, data)
	before := model.Build(st, mesh.Default())
	after := applyDocs(t, st, before, `
apiVersion: v1
kind: Service
metadata: {name: ledger, namespace: bookinfo}
spec:
  clusterIP: 10.0.9.9
  ports: [{name: http, port: 9080}, {name: http-web, port: 80}]
`)

	g := newByPort()
	proxy := envoyProxy("bookinfo", map[string]string{"app": "ratings"}, true, 1, 38)
	old, cur := generateByName(t, g, VirtualHostType, proxy, before), generateByName(t, g, VirtualHostType, proxy, after)
	var changed, rebuilt []string
	for name, r := range cur {
		if old[name] == nil || old[name].Version != r.Version {
			changed = append(changed, name)
		}
		if old[name] != nil && old[name] != r {
			rebuilt = append(rebuilt, name)
		}
	}
	slices.Sort(changed)
	want := []string{"80/ledger.bookinfo.svc.cluster.local:80", "9080/ledger.bookinfo.svc.cluster.local:9080"}
	if !slices.Equal(changed, want) || len(cur) != len(old)+2 {
		t.Errorf("changed %v (of %d, before %d); want only %v", changed, len(cur), len(old), want)
	}
	// The others are not even rebuilt, with or without a VirtualService, except routes that depend on the
	// proxy's labels (details routes by sourceLabels, on its port and on 80, where its host has no service).
	slices.Sort(rebuilt)
	if !slices.Equal(rebuilt, []string{"80/details.bookinfo.svc.cluster.local:80", "9080/details.bookinfo.svc.cluster.local:9080"}) {
		t.Errorf("rebuilt %v; want only the sourceLabels-dependent details", rebuilt)
	}
}

// VHDS only for Envoy sidecars that can take it: delta stream, Envoy ≥ the configured minimum, not disabled.
func TestVHDSOnlyWhereSupported(t *testing.T) {
	push := rdsPush(t)
	cases := []struct {
		name  string
		opts  Options
		proxy *model.Proxy
		want  bool
	}{
		{"delta envoy 1.38", Options{}, envoyProxy("bookinfo", nil, true, 1, 38), true},
		{"delta envoy 2.0", Options{}, envoyProxy("bookinfo", nil, true, 2, 0), true},
		{"delta envoy 1.37", Options{}, envoyProxy("bookinfo", nil, true, 1, 37), false},
		{"sotw envoy 1.38", Options{}, envoyProxy("bookinfo", nil, false, 1, 38), false},
		{"disabled", Options{VHDSMinEnvoy: "off"}, envoyProxy("bookinfo", nil, true, 1, 38), false},
		{"lowered minimum", Options{VHDSMinEnvoy: "1.30"}, envoyProxy("bookinfo", nil, true, 1, 37), true},
		{"no user agent", Options{}, &model.Proxy{Type: model.Sidecar, Namespace: "bookinfo", Delta: true, BuildVersion: [3]uint32{1, 38, 0}},
			false},
		{"proxyless gRPC", Options{}, &model.Proxy{Type: model.GRPC, Namespace: "bookinfo", Delta: true}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.OutboundHTTPRoutes = RoutesByPort // every service in the port's table, so it has hosts to send
			g := New(tc.opts)
			vhosts := generateVirtualHosts(t, g, tc.proxy, push)
			rcs := generateRoutes(t, g, tc.proxy, push, named(RouteType, "9080"))
			if tc.proxy.Type == model.GRPC {
				rcs = nil
			}
			for _, rc := range rcs {
				if got := rc.Vhds != nil; got != tc.want {
					t.Errorf("%s: vhds set %v, want %v", rc.Name, got, tc.want)
				}
			}
			if got := len(vhosts) > 0; got != tc.want {
				t.Errorf("%d virtual hosts over VHDS, want some: %v", len(vhosts), tc.want)
			}
		})
	}
	for _, bad := range []string{"1", "x.y", "1.38.0", "on"} {
		if _, _, err := ParseVHDSMinEnvoy(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("ParseVHDSMinEnvoy(%q): %v", bad, err)
		}
	}
}

// A VirtualService's virtual host is built again when a destination it resolved changes: here the
// destination service appears, and with it the consistent hash of its DestinationRule. Its cluster keeps the
// route configuration's port, as istiod's (a sidecar resolves services on that port only).
func TestVHDSRoutedVirtualHostFollowsDestinations(t *testing.T) {
	st := store.New()
	add := func(y string) config.Key {
		t.Helper()
		c, err := config.Parse([]byte(y), "mesh.yaml", 0, "default")
		if err != nil {
			t.Fatal(err)
		}
		st.Upsert(store.LayerFile, c)
		return c.Key
	}
	add("apiVersion: v1\nkind: Service\nmetadata: {name: front, namespace: ns}\nspec:\n  clusterIP: 10.1.0.1\n" +
		"  ports: [{name: http, port: 80}]\n")
	add("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: front, namespace: ns}\nspec:\n  hosts: [front]\n" +
		"  http:\n  - route: [{destination: {host: back}}]\n")
	add("apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: back, namespace: ns}\nspec:\n  host: back\n" +
		"  trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x-user}}}\n")
	before := model.Build(st, mesh.Default())
	key := add("apiVersion: v1\nkind: Service\nmetadata: {name: back, namespace: ns}\nspec:\n  clusterIP: 10.1.0.2\n" +
		"  ports: [{name: http, port: 7000}]\n")
	after, _ := model.Update(before, st, []model.Change{{Key: key, New: st.Get(key)}})

	g := newByPort()
	proxy := envoyProxy("ns", nil, true, 1, 38)
	action := func(push *model.PushContext) *route.RouteAction {
		for _, vh := range generateVirtualHosts(t, g, proxy, push) {
			if vh.Name == "80/front.ns.svc.cluster.local:80" {
				return vh.Routes[0].GetRoute()
			}
		}
		t.Fatal("no virtual host for front")
		return nil
	}
	if a := action(before); a.GetCluster() != "outbound|80||back.ns.svc.cluster.local" || len(a.HashPolicy) != 0 {
		t.Errorf("before: %s, hash %v", a.GetCluster(), a.HashPolicy)
	}
	a := action(after)
	if a.GetCluster() != "outbound|80||back.ns.svc.cluster.local" {
		t.Errorf("after back appeared: %s, want the route configuration's port 80", a.GetCluster())
	}
	if len(a.HashPolicy) != 1 || a.HashPolicy[0].GetHeader().GetHeaderName() != "x-user" {
		t.Errorf("after back appeared: hash %v, want its DestinationRule's header x-user", a.HashPolicy)
	}
}

// Domains are claimed case-insensitively, however they are spelled.
func TestDomainSetIgnoresCase(t *testing.T) {
	s := newDomainSet(4)
	if got := s.add([]string{"Shop.Example.com", "a"}); !slices.Equal(got, []string{"Shop.Example.com", "a"}) {
		t.Fatalf("first claim: %v", got)
	}
	if got := s.add([]string{"shop.example.COM", "b"}); !slices.Equal(got, []string{"b"}) {
		t.Errorf("second claim: %v, want only b", got)
	}
	in := []string{"x", "y"}
	if out := lowerAll(in); &out[0] != &in[0] {
		t.Errorf("lower-case domains copied")
	}
}

// A sidecar's full states come sorted by name, so the transport can keep what the proxy has as the list
// itself rather than a map.
func TestSidecarFullStatesSortedByName(t *testing.T) {
	push := rdsPush(t)
	g := New(Options{})
	proxy := envoyProxy("bookinfo", map[string]string{"app": "reviews"}, true, 1, 38)
	for _, typ := range []string{ClusterType, ListenerType, VirtualHostType} {
		res, err := g.ByTypeURL()[typ].Generate(proxy, push, wildcard(typ), nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(res) < 3 || !slices.IsSortedFunc(res, func(a, b *model.Resource) int { return strings.Compare(a.Name, b.Name) }) {
			t.Errorf("%s: %d resources, not sorted by name", typ, len(res))
		}
	}
}

// Virtual host lists derived from the previous snapshot's (deriveVirtualHosts) equal what a fresh build
// gives, through random service adds, changes and deletes: VIPs shared with existing services (whose claim
// order only a full build settles), VirtualServices routing to services that come and go, ports that are
// not HTTP.
func TestVHDSDerivedListsEqualFullBuilds(t *testing.T) {
	st, push, g, proxies := derivationFixture(t)
	rng := rand.New(rand.NewPCG(5, 6))
	live, reasons := map[string]bool{}, map[string]int{}
	for step := range 150 {
		name := fmt.Sprintf("extra-%d", rng.IntN(12))
		ns := fmt.Sprintf("ns-%d", 3+rng.IntN(2))
		if rng.IntN(8) == 0 {
			// A VirtualService for a host that may have no service yet: its own virtual host until the
			// service comes, which then takes the host's domains.
			push = applyDocs(t, st, push, fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: VirtualService\n"+
				"metadata: {name: host-%s, namespace: %s}\nspec:\n  hosts: [%s.%s.svc.cluster.local]\n  http:\n"+
				"  - route:\n    - destination: {host: svc-7.ns-7.svc.cluster.local}\n", name, ns, name, ns))
		} else if live[ns+"/"+name] && rng.IntN(3) == 0 {
			push = deleteConfig(st, push, config.Key{Kind: config.Service, Namespace: ns, Name: name})
			delete(live, ns+"/"+name)
		} else {
			vip := fmt.Sprintf("10.250.0.%d", rng.IntN(8))
			if rng.IntN(6) == 0 {
				vip = "10.100.0.7" // svc-7's VIP
			}
			ports := []string{benchThreePorts, "[{name: http, port: 80}]", "[{name: tcp, port: 80}]", "[{name: http, port: 9080}]"}[rng.IntN(4)]
			docs := []string{fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata: {name: %s, namespace: %s}\nspec:\n  clusterIP: %s\n  ports: %s\n",
				name, ns, vip, ports)}
			if rng.IntN(5) == 0 { // one routed by a VirtualService to another service
				docs = append(docs, fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: %s, namespace: %s}\n"+
					"spec:\n  hosts: [%s]\n  http:\n  - route:\n    - destination: {host: %s}\n",
					name, ns, name, []string{"svc-7.ns-7.svc.cluster.local",
						fmt.Sprintf("extra-%d.ns-%d.svc.cluster.local", rng.IntN(12), 3+rng.IntN(2))}[rng.IntN(2)]))
			}
			push = applyDocs(t, st, push, docs...)
			live[ns+"/"+name] = true
		}
		for _, p := range proxies {
			checkSameAsFreshBuild(t, g, VirtualHostType, p, push, step)
			for why, n := range vhostListReasons(g, p, push) {
				reasons[why] += n
			}
		}
	}
	if reasons[""] < 100 || len(reasons) < 4 {
		t.Errorf("lists derived %d times; full builds by reason %v: the walk does not exercise derivation", reasons[""], reasons)
	}
}

// vhostListReasons counts the proxy's current VHDS lists by why they were built in full ("": derived).
func vhostListReasons(g *Generators, p *model.Proxy, push *model.PushContext) map[string]int {
	scope := g.scopeFor(p, push)
	out := map[string]int{}
	for _, port := range scope.routePortsByName {
		id := listID{kind: "vhds", name: strconv.FormatUint(uint64(port), 10), namespace: scope.Namespace, sidecar: scope.Sidecar,
			captureNone: scope.captureNone, variant: ipModeOf(p.IPAddresses).variant()}
		if l, ok := g.vhostLists.Latest(id); ok {
			out[l.list.Full]++
		}
	}
	return out
}
