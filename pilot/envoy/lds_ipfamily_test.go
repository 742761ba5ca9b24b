package envoy

import (
	"slices"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/sextantmesh/sextant/pilot/model"
)

// ipFamilyMesh has a dual-stack Service (IPv6 first), an IPv4-only one, a ServiceEntry without an address,
// and an IPv6-only pod of web; a Sidecar gives web's pods an egress listener with captureMode NONE.
const ipFamilyMesh = `
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  ipFamilies: [IPv6, IPv4]
  clusterIP: fd00:96::20
  clusterIPs: [fd00:96::20, 10.96.0.20]
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}, {name: tcp-db, port: 9000, targetPort: 9000}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-x, namespace: default, labels: {kubernetes.io/service-name: web}}
addressType: IPv6
ports: [{name: http, port: 8080, protocol: TCP}, {name: tcp-db, port: 9000, protocol: TCP}]
endpoints:
- addresses: ["fd00::21"]
  targetRef: {kind: Pod, namespace: default, name: web-0}
---
apiVersion: v1
kind: Pod
metadata: {name: web-0, namespace: default, labels: {app: web, security.istio.io/tlsMode: istio}}
spec: {serviceAccountName: web, containers: [{name: app, image: x}]}
status: {phase: Running, podIP: "fd00::21", podIPs: [{ip: "fd00::21"}], conditions: [{type: Ready, status: "True"}]}
---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: default}
spec:
  clusterIP: 10.96.0.30
  ports: [{name: tcp, port: 5432}, {name: http-admin, port: 8081}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ext, namespace: default}
spec:
  hosts: [ext.example.com]
  location: MESH_EXTERNAL
  resolution: NONE
  ports: [{number: 6000, name: tcp, protocol: TCP}]
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: web, namespace: default}
spec:
  workloadSelector: {labels: {app: web}}
  egress:
  - port: {number: 9000, protocol: TCP, name: tcp}
    captureMode: NONE
    hosts: ["./web.default.svc.cluster.local"]
  - hosts: ["*/*"]
`

// TestListenerAddressesFollowIPFamily: a proxy's own addresses (unspecified, loopback, the source of its
// connections to its workload) and the VIP of a dual-stack Service follow the proxy's IP family, as
// istiod's (conformance cases ipv6-only, ipv6-inbound-localhost).
func TestListenerAddressesFollowIPFamily(t *testing.T) {
	push := pushFromYAML(t, []byte(ipFamilyMesh))
	g := newByPort()
	dual := sidecarIn("default", "10.1.0.41", map[string]string{"app": "client"})
	dual.IPAddresses = append(dual.IPAddresses, "fd00::41")
	for _, tc := range []struct {
		name  string
		proxy *model.Proxy
		// want: listener name → its addresses.
		want map[string][]string
		// inboundSource: InboundPassthroughCluster's source addresses.
		inboundSource []string
		// webDomain, webNotDomain: of web's virtual host on route configuration 80.
		webDomain, webNotDomain string
		dbVIPDomain             bool
	}{
		{
			name:  "ipv6",
			proxy: sidecarIn("default", "fd00::31", map[string]string{"app": "client"}),
			want: map[string][]string{
				VirtualOutboundListener: {"[::]:15001"},
				VirtualInboundListener:  {"[::]:15006"},
				"::_80":                 {"[::]:80"},
				"::_6000":               {"[::]:6000"},
				"fd00:96::20_9000":      {"[fd00:96::20]:9000"},
				"10.96.0.30_5432":       {"10.96.0.30:5432"}, // no IPv6 VIP: istiod's default address
			},
			inboundSource: []string{"::6"},
			webDomain:     "[fd00:96::20]", webNotDomain: "10.96.0.20",
		},
		{
			name:  "dual stack",
			proxy: dual,
			want: map[string][]string{
				VirtualOutboundListener: {"0.0.0.0:15001"},
				VirtualInboundListener:  {"0.0.0.0:15006"},
				"0.0.0.0_80":            {"0.0.0.0:80", "[::]:80"},
				"0.0.0.0_6000":          {"0.0.0.0:6000", "[::]:6000"},
				"fd00:96::20_9000":      {"[fd00:96::20]:9000"}, // the first ClusterIP's family only
				"10.96.0.30_5432":       {"10.96.0.30:5432"},
			},
			inboundSource: []string{"127.0.0.6", "::6"},
			webDomain:     "[fd00:96::20]", webNotDomain: "10.96.0.20", dbVIPDomain: true,
		},
		{
			name:  "ipv4",
			proxy: sidecarIn("default", "10.1.0.1", map[string]string{"app": "client"}),
			want: map[string][]string{
				VirtualOutboundListener: {"0.0.0.0:15001"},
				VirtualInboundListener:  {"0.0.0.0:15006"},
				"0.0.0.0_80":            {"0.0.0.0:80"},
				"0.0.0.0_6000":          {"0.0.0.0:6000"},
				"10.96.0.20_9000":       {"10.96.0.20:9000"},
				"10.96.0.30_5432":       {"10.96.0.30:5432"},
			},
			inboundSource: []string{"127.0.0.6"},
			webDomain:     "10.96.0.20", webNotDomain: "[fd00:96::20]", dbVIPDomain: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls := ldsGenerate(t, g, tc.proxy, push, wildcard(ListenerType))
			for name, want := range tc.want {
				if got := listenerAddresses(ldsFind(t, ls, name)); !slices.Equal(got, want) {
					t.Errorf("listener %s on %v, want %v", name, got, want)
				}
			}
			cs := generate(t, g, ClusterType, tc.proxy, push, wildcard(ClusterType), newCluster)
			bind := clusterByName(t, cs, InboundPassthroughCluster).GetUpstreamBindConfig()
			got := []string{bind.GetSourceAddress().GetAddress()}
			for _, e := range bind.GetExtraSourceAddresses() {
				got = append(got, e.GetAddress().GetAddress())
			}
			if !slices.Equal(got, tc.inboundSource) {
				t.Errorf("%s binds to %v, want %v", InboundPassthroughCluster, got, tc.inboundSource)
			}
			rcs := generateRoutes(t, g, tc.proxy, push, wildcard(RouteType))
			web := vhostNamed(t, rcs, "80", "web.default.svc.cluster.local:80")
			if !slices.Contains(web.Domains, tc.webDomain) || slices.Contains(web.Domains, tc.webNotDomain) {
				t.Errorf("web's domains %v: want %s, not %s", web.Domains, tc.webDomain, tc.webNotDomain)
			}
			db := vhostNamed(t, rcs, "8081", "db.default.svc.cluster.local:8081")
			if got := slices.Contains(db.Domains, "10.96.0.30"); got != tc.dbVIPDomain {
				t.Errorf("db's domains %v: its IPv4 VIP there %v, want %v", db.Domains, got, tc.dbVIPDomain)
			}
		})
	}
}

// TestInboundAddressesFollowIPFamily: an IPv6-only sidecar binds its connections to its own workload to
// ::6, reaches it on ::1 under the mesh's LOCALHOST inbound policy, and its egress listener with
// captureMode NONE listens on ::1.
func TestInboundAddressesFollowIPFamily(t *testing.T) {
	push := pushFromYAML(t, []byte(ipFamilyMesh))
	g := New(Options{})
	web := sidecarIn("default", "fd00::21", map[string]string{"app": "web", "security.istio.io/tlsMode": "istio"})
	cs := generate(t, g, ClusterType, web, push, wildcard(ClusterType), newCluster)
	in := clusterByName(t, cs, InboundClusterName(8080))
	if got := in.GetUpstreamBindConfig().GetSourceAddress().GetAddress(); got != "::6" || in.GetType() != cluster.Cluster_ORIGINAL_DST {
		t.Errorf("%s: %v binding to %q, want ORIGINAL_DST from ::6", in.Name, in.GetType(), got)
	}
	ls := ldsGenerate(t, g, web, push, wildcard(ListenerType))
	if got := listenerAddresses(ldsFind(t, ls, "::1_9000")); !slices.Equal(got, []string{"[::1]:9000"}) {
		t.Errorf("egress listener with captureMode NONE on %v, want [::1]:9000", got)
	}

	push.Mesh.InboundTrafficPolicy.Mode = "LOCALHOST"
	cs = generate(t, New(Options{}), ClusterType, web, push, wildcard(ClusterType), newCluster)
	in = clusterByName(t, cs, InboundClusterName(8080))
	ep := in.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	if ep.GetAddress() != "::1" || ep.GetPortValue() != 8080 || in.GetUpstreamBindConfig() != nil {
		t.Errorf("%s under LOCALHOST: to %s:%d binding %v, want ::1:8080 unbound", in.Name, ep.GetAddress(), ep.GetPortValue(),
			in.GetUpstreamBindConfig())
	}
}

// vhostNamed returns virtual host name of route configuration rc.
func vhostNamed(t *testing.T, rcs []*route.RouteConfiguration, rc, name string) *route.VirtualHost {
	t.Helper()
	for _, c := range rcs {
		if c.Name != rc {
			continue
		}
		for _, vh := range c.VirtualHosts {
			if vh.Name == name {
				return vh
			}
		}
	}
	t.Fatalf("no virtual host %s in route configuration %s", name, rc)
	return nil
}
