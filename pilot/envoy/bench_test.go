package envoy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/store"
)

// benchMesh is N services (one HTTP port, 10 endpoints each) over 10 namespaces, every tenth with a
// DestinationRule with two subsets and a VirtualService splitting between them.
func benchMesh(b *testing.B, services int) *model.PushContext {
	return pushFromYAML(b, []byte(benchMeshYAML(services, benchOnePort)))
}

// Port lists of the benchmark meshes: one HTTP port, or the load harness's three (HTTP, gRPC, TCP).
const (
	benchOnePort    = "[{name: http, port: 8080}]"
	benchThreePorts = "[{name: http, port: 80}, {name: grpc, port: 8080}, {name: tcp, port: 9090}]"
)

func benchMeshYAML(services int, ports string) string {
	var sb strings.Builder
	for i := range services {
		ns := fmt.Sprintf("ns-%d", i%10)
		fmt.Fprintf(&sb, "---\napiVersion: v1\nkind: Service\nmetadata: {name: svc-%d, namespace: %s}\nspec:\n  clusterIP: 10.%d.%d.%d\n"+
			"  selector: {app: svc-%d}\n  ports: %s\n",
			i, ns, 100+i/65536, i/256%256, i%256, i, ports)
		fmt.Fprintf(&sb, "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n"+
			"metadata: {name: svc-%d-x, namespace: %s, labels: {kubernetes.io/service-name: svc-%d}}\naddressType: IPv4\n"+
			"ports: %s\nendpoints:\n", i, ns, i, ports)
		for e := range 10 {
			n := i*10 + e
			fmt.Fprintf(&sb, "- addresses: [10.%d.%d.%d]\n", n/65536%256, n/256%256, n%256)
		}
		if i%10 == 0 {
			fmt.Fprintf(&sb, "---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: svc-%d, namespace: %s}\nspec:\n"+
				"  host: svc-%d\n  subsets: [{name: a, labels: {v: a}}, {name: b, labels: {v: b}}]\n", i, ns, i)
			fmt.Fprintf(&sb, "---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: svc-%d, namespace: %s}\nspec:\n"+
				"  hosts: [svc-%d]\n  http:\n  - route:\n    - destination: {host: svc-%d, subset: a}\n      weight: 90\n"+
				"    - destination: {host: svc-%d, subset: b}\n      weight: 10\n", i, ns, i, i, i)
		}
	}
	return sb.String()
}

func BenchmarkGenerate(b *testing.B) {
	for _, services := range []int{1000, 10000} {
		push := benchMesh(b, services)
		proxy := sidecarIn("ns-1", "10.200.0.1", map[string]string{"app": "client"})
		// The names a sidecar asks for after CDS and LDS.
		var edsNames []string
		for _, s := range push.AllServices() {
			edsNames = append(edsNames, OutboundClusterName(8080, "", s.Hostname))
		}
		cases := []struct {
			name    string
			typeURL string
			w       *model.WatchedResource
		}{
			{"cds", ClusterType, wildcard(ClusterType)},
			{"eds", EndpointType, named(EndpointType, edsNames...)},
			{"lds", ListenerType, wildcard(ListenerType)},
			{"rds", RouteType, named(RouteType, "8080")},
		}
		for _, c := range cases {
			// cold: nothing cached, what the first proxy of a namespace pays.
			b.Run(fmt.Sprintf("%s/services=%d/cold", c.name, services), func(b *testing.B) {
				b.ReportAllocs()
				var n int
				for b.Loop() {
					res, err := New(Options{}).ByTypeURL()[c.typeURL].Generate(proxy, push, c.w, nil)
					if err != nil {
						b.Fatal(err)
					}
					n = len(res)
				}
				b.ReportMetric(float64(n), "resources")
			})
			// shared: another proxy seeing the same config, served from the cache.
			b.Run(fmt.Sprintf("%s/services=%d/shared", c.name, services), func(b *testing.B) {
				g := New(Options{}).ByTypeURL()[c.typeURL]
				if _, err := g.Generate(proxy, push, c.w, nil); err != nil {
					b.Fatal(err)
				}
				other := sidecarIn("ns-1", "10.200.0.2", map[string]string{"app": "client"})
				b.ReportAllocs()
				for b.Loop() {
					if _, err := g.Generate(other, push, c.w, nil); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkServiceAdd is the shared work of one service add at 300 services (the load harness's three ports)
// in 10 namespaces: the snapshot
// update, then CDS, LDS and VHDS for one Envoy sidecar per namespace (the rest of a namespace's sidecars
// share that output; what each costs on its own is the transport's diff, not here).
func BenchmarkServiceAdd(b *testing.B) {
	st := storeFromYAML(b, []byte(benchMeshYAML(300, benchThreePorts)))
	push := model.Build(st, mesh.Default())
	g := New(Options{})
	gens := g.ByTypeURL()
	var proxies []*model.Proxy
	for ns := range 10 {
		proxies = append(proxies, envoyProxy(fmt.Sprintf("ns-%d", ns), map[string]string{"app": "client"}, true, 1, 38))
	}
	generate := func() {
		for _, p := range proxies {
			for _, t := range []string{ClusterType, ListenerType, VirtualHostType} {
				if _, err := gens[t].Generate(p, push, wildcard(t), nil); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	generate()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		c, err := config.Parse([]byte(fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata: {name: added-%d, namespace: ns-3}\n"+
			"spec:\n  clusterIP: 10.250.%d.%d\n  ports: %s\n", i, i/256%256, i%256, benchThreePorts)), "added.yaml", 0, "default")
		if err != nil {
			b.Fatal(err)
		}
		st.Upsert(store.LayerFile, c)
		push, _ = model.Update(push, st, []model.Change{{Key: c.Key, New: c}})
		generate()
	}
}

// BenchmarkEndpointPush is one endpoint change reaching 300 sidecars (10 namespaces, 900 EDS clusters
// watched each): the transport asks each whether the push concerns it, then generates its delta.
func BenchmarkEndpointPush(b *testing.B) {
	st := storeFromYAML(b, []byte(benchMeshYAML(300, benchThreePorts)))
	push := model.Build(st, mesh.Default())
	g := New(Options{})
	var proxies []*model.Proxy
	var watches []*model.WatchedResource
	for i := range 300 {
		p := envoyProxy(fmt.Sprintf("ns-%d", i%10), map[string]string{"app": "client"}, true, 1, 38)
		res, err := g.ByTypeURL()[ClusterType].Generate(p, push, wildcard(ClusterType), nil)
		if err != nil {
			b.Fatal(err)
		}
		var names []string
		for _, r := range res {
			if strings.HasPrefix(r.Name, "outbound|") {
				names = append(names, r.Name)
			}
		}
		w := named(EndpointType, names...)
		proxies, watches = append(proxies, p), append(watches, w)
	}
	next, res := addEndpointToSvc3(b, st, push)
	req := &model.PushRequest{ServicesUpdated: res.ServicesUpdated, Push: next}
	eds := g.ByTypeURL()[EndpointType].(model.DeltaGenerator)
	filter := g.ByTypeURL()[EndpointType].(model.PushFilter)
	b.ReportAllocs()
	for b.Loop() {
		for i, p := range proxies {
			if !filter.NeedsPush(p, watches[i], req) {
				b.Fatal("a sidecar watching the changed service is not pushed to")
			}
			if out, _, _, err := eds.GenerateDeltas(p, next, watches[i], req); err != nil || len(out) != 3 {
				b.Fatalf("%d assignments, err %v", len(out), err)
			}
		}
	}
}

// BenchmarkLDSSourceLabels is LDS for another sidecar of a namespace (served from the cache) at 1000
// services with three ports, when one VirtualService's tcp route matches on sourceLabels: a proxy whose
// labels satisfy no such match shares the listeners of every other such proxy, and one whose labels do
// shares those of the proxies satisfying the same matches.
func BenchmarkLDSSourceLabels(b *testing.B) {
	push := pushFromYAML(b, []byte(benchMeshYAML(1000, benchThreePorts)+`---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: svc-1-tcp, namespace: ns-1}
spec:
  hosts: [svc-1]
  tcp:
  - match: [{sourceLabels: {app: batch}, port: 9090}]
    route: [{destination: {host: svc-2.ns-2.svc.cluster.local}}]
`))
	for _, c := range []struct {
		name   string
		labels map[string]string
	}{
		{"no-match", map[string]string{"app": "client"}},
		{"match", map[string]string{"app": "batch"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			g := New(Options{}).ByTypeURL()[ListenerType]
			w := wildcard(ListenerType)
			if _, err := g.Generate(sidecarIn("ns-1", "10.200.0.1", c.labels), push, w, nil); err != nil {
				b.Fatal(err)
			}
			other := sidecarIn("ns-1", "10.200.0.2", map[string]string{"app": c.labels["app"], "pod-template-hash": "x"})
			b.ReportAllocs()
			for b.Loop() {
				if _, err := g.Generate(other, push, w, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkVirtualServiceChangeUnderSidecars is the CDS work of one VirtualService change at 1000 services
// (three ports) when every one of the 10 namespaces has a Sidecar importing its own namespace: one Envoy
// sidecar per namespace regenerates its clusters. A Sidecar's scope follows the VirtualServices (the
// destinations they add), so each such scope is rebuilt; the clusters themselves are kept.
func BenchmarkVirtualServiceChangeUnderSidecars(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(benchMeshYAML(1000, benchThreePorts))
	for ns := range 10 {
		fmt.Fprintf(&sb, "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: default, namespace: ns-%d}\nspec:\n"+
			"  egress: [{hosts: [\"./*\"]}]\n", ns)
	}
	st := storeFromYAML(b, []byte(sb.String()))
	push := model.Build(st, mesh.Default())
	cds := New(Options{}).ByTypeURL()[ClusterType]
	var proxies []*model.Proxy
	for ns := range 10 {
		proxies = append(proxies, envoyProxy(fmt.Sprintf("ns-%d", ns), map[string]string{"app": "client"}, true, 1, 38))
	}
	generate := func() {
		for _, p := range proxies {
			if _, err := cds.Generate(p, push, wildcard(ClusterType), nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	generate()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		c, err := config.Parse([]byte(fmt.Sprintf(
			"apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: svc-0, namespace: ns-0}\n"+
				"spec:\n  hosts: [svc-0]\n  http:\n  - route:\n    - destination: {host: svc-0, subset: a}\n      weight: %d\n"+
				"    - destination: {host: svc-0, subset: b}\n      weight: %d\n",
			i%100, 100-i%100)), "vs.yaml", 0, "default")
		if err != nil {
			b.Fatal(err)
		}
		st.Upsert(store.LayerFile, c)
		push, _ = model.Update(push, st, []model.Change{{Key: c.Key, New: c}})
		generate()
	}
}
