package envoy

import (
	"slices"
	"strings"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"

	"github.com/sextantmesh/sextant/pilot/model"
)

// An east-west gateway: AUTO_PASSTHROUGH for every *.local host on 15443, for echo alone on 15444; mysql's
// rule sets TCP timeouts, a source-IP hash and ISTIO_MUTUAL; echo has subsets v1 and v2 with one pod each.
// A DENY-all policy selects the gateway.
const autoPassthroughYAML = `
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: cross-network, namespace: istio-system}
spec:
  selector: {istio: eastwestgateway}
  servers:
  - port: {number: 15443, name: tls, protocol: TLS}
    hosts: ["*.local"]
    tls: {mode: AUTO_PASSTHROUGH}
  - port: {number: 15444, name: tls-echo, protocol: TLS}
    hosts: ["shop/echo.shop.svc.cluster.local"]
    tls: {mode: AUTO_PASSTHROUGH}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: mysql, namespace: shop}
spec:
  host: mysql
  trafficPolicy:
    loadBalancer: {consistentHash: {useSourceIp: true}}
    connectionPool: {tcp: {idleTimeout: 600s, maxConnectionDuration: 3600s}}
    tls: {mode: ISTIO_MUTUAL}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: ew-deny, namespace: istio-system}
spec:
  selector: {matchLabels: {istio: eastwestgateway}}
  action: DENY
  rules: [{}]
---
apiVersion: v1
kind: Pod
metadata: {name: echo-1, namespace: shop, labels: {app: echo, version: v1, security.istio.io/tlsMode: istio}}
spec: {serviceAccountName: echo}
status: {podIP: 10.1.0.31, phase: Running, conditions: [{type: Ready, status: "True"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: echo-2, namespace: shop, labels: {app: echo, version: v2, security.istio.io/tlsMode: istio}}
spec: {serviceAccountName: echo}
status: {podIP: 10.1.0.32, phase: Running, conditions: [{type: Ready, status: "True"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: echo-3, namespace: shop, labels: {app: echo, version: v1}}
spec: {serviceAccountName: echo}
status: {podIP: 10.1.0.33, phase: Running, conditions: [{type: Ready, status: "True"}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: echo-1, namespace: shop, labels: {kubernetes.io/service-name: echo}}
addressType: IPv4
ports: [{name: tcp-echo, port: 9001}]
endpoints:
- addresses: [10.1.0.31]
  conditions: {ready: true}
  targetRef: {kind: Pod, name: echo-1, namespace: shop}
- addresses: [10.1.0.32]
  conditions: {ready: true}
  targetRef: {kind: Pod, name: echo-2, namespace: shop}
- addresses: [10.1.0.33]
  conditions: {ready: true}
  targetRef: {kind: Pod, name: echo-3, namespace: shop}
`

func eastWestGateway(ns string) *model.Proxy {
	return &model.Proxy{Type: model.Router, NodeID: "router~10.1.2.1~ew-1." + ns + "~" + ns + ".svc.cluster.local",
		ID: "ew-1." + ns, Namespace: ns, IPAddresses: []string{"10.1.2.1"}, Labels: map[string]string{"istio": "eastwestgateway"}}
}

func chainNames(l *listener.Listener) []string {
	var out []string
	for _, fc := range l.FilterChains {
		out = append(out, fc.Name)
	}
	slices.Sort(out)
	return out
}

// An AUTO_PASSTHROUGH server gets a chain per mesh service port and subset its hosts cover, matching Istio's
// mTLS server name and ALPN and forwarding the bytes to the SNI-DNAT cluster of that name, with no RBAC (as
// istiod's: the destination's sidecar enforces). Before, such a server got no chain and no listener.
func TestGatewayAutoPassthroughChains(t *testing.T) {
	push := ldsPush(t, nil, autoPassthroughYAML)
	ls := ldsGenerate(t, New(Options{}), eastWestGateway("istio-system"), push, wildcard(ListenerType))
	l := ldsFind(t, ls, "0.0.0.0_15443")
	names := chainNames(l)
	for _, want := range []string{
		"outbound_.9001_._.echo.shop.svc.cluster.local", "outbound_.9001_.v1_.echo.shop.svc.cluster.local",
		"outbound_.9001_.v2_.echo.shop.svc.cluster.local", "outbound_.3306_._.mysql.shop.svc.cluster.local",
		"outbound_.9080_._.reviews.shop.svc.cluster.local", "outbound_.7070_._.reviews.shop.svc.cluster.local",
	} {
		if !slices.Contains(names, want) {
			t.Errorf("15443: no chain %s in %v", want, names)
		}
	}
	for _, n := range names {
		if n == "outbound_.443_._.payments.example.com" {
			t.Errorf("15443: chain %s for a MESH_EXTERNAL ServiceEntry", n)
		}
	}
	if len(l.ListenerFilters) != 1 || l.ListenerFilters[0].Name != ldsTLSInspectorFilter {
		t.Errorf("listener filters %v, want the tls_inspector alone", l.ListenerFilters)
	}
	fc := ldsChain(t, l, "outbound_.9001_.v1_.echo.shop.svc.cluster.local")
	m := fc.GetFilterChainMatch()
	if !slices.Equal(m.GetServerNames(), []string{fc.Name}) || !slices.Equal(m.GetApplicationProtocols(), istioMTLSALPNs) {
		t.Errorf("match %v, want the cluster's name and Istio's mTLS ALPNs", m)
	}
	if fc.TransportSocket != nil {
		t.Errorf("transport socket %v: the TLS must pass through", fc.TransportSocket)
	}
	if len(fc.Filters) != 1 || fc.Filters[0].Name != ldsTCPProxyFilterName {
		t.Fatalf("filters %v, want tcp_proxy alone (no RBAC)", fc.Filters)
	}
	tp := &tcpproxy.TcpProxy{}
	if err := fc.Filters[0].GetTypedConfig().UnmarshalTo(tp); err != nil {
		t.Fatal(err)
	}
	if tp.GetCluster() != fc.Name || tp.StatPrefix != fc.Name || tp.IdleTimeout != nil || tp.HashPolicy != nil {
		t.Errorf("echo v1 tcp_proxy %v, want cluster and stat prefix %s and nothing else", tp, fc.Name)
	}
	// mysql's rule: its TCP timeouts and source-IP hash reach the tcp_proxy.
	fc = ldsChain(t, l, "outbound_.3306_._.mysql.shop.svc.cluster.local")
	if err := fc.Filters[0].GetTypedConfig().UnmarshalTo(tp); err != nil {
		t.Fatal(err)
	}
	if tp.GetIdleTimeout().AsDuration().Seconds() != 600 || tp.GetMaxDownstreamConnectionDuration().AsDuration().Seconds() != 3600 ||
		len(tp.GetHashPolicy()) != 1 || tp.GetHashPolicy()[0].GetSourceIp() == nil {
		t.Errorf("mysql tcp_proxy %v, want idle 600s, lifetime 3600s, source-IP hash", tp)
	}
	// 15444 covers echo alone.
	if got := chainNames(ldsFind(t, ls, "0.0.0.0_15444")); !slices.Equal(got, []string{"outbound_.9001_._.echo.shop.svc.cluster.local",
		"outbound_.9001_.v1_.echo.shop.svc.cluster.local", "outbound_.9001_.v2_.echo.shop.svc.cluster.local"}) {
		t.Errorf("15444 chains %v, want echo's", got)
	}
}

// The chains follow the services the gateway sees: a second gateway proxy of the same Gateway in a namespace
// whose Sidecar lets it see echo alone gets echo's chains only, even after the first one's listener was built
// (the cache key holds the scope).
func TestGatewayAutoPassthroughFollowsScope(t *testing.T) {
	push := ldsPush(t, nil, autoPassthroughYAML, `
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: edge}
spec:
  egress: [{hosts: [shop/echo.shop.svc.cluster.local]}]
`)
	g := New(Options{})
	all := chainNames(ldsFind(t, ldsGenerate(t, g, eastWestGateway("istio-system"), push, wildcard(ListenerType)), "0.0.0.0_15443"))
	edge := chainNames(ldsFind(t, ldsGenerate(t, g, eastWestGateway("edge"), push, wildcard(ListenerType)), "0.0.0.0_15443"))
	if len(all) <= 3 {
		t.Fatalf("istio-system: chains %v, want every service's", all)
	}
	if !slices.Equal(edge, []string{"outbound_.9001_._.echo.shop.svc.cluster.local", "outbound_.9001_.v1_.echo.shop.svc.cluster.local",
		"outbound_.9001_.v2_.echo.shop.svc.cluster.local"}) {
		t.Errorf("edge: chains %v, want echo's alone", edge)
	}
}

// A gateway with an AUTO_PASSTHROUGH server gets the SNI-DNAT clusters: one per mesh service port and subset,
// EDS under their own name, without upstream TLS even where the rule asks for ISTIO_MUTUAL (the client's mTLS
// passes through). Gateways without such a server, and sidecars, get none.
func TestGatewayAutoPassthroughClusters(t *testing.T) {
	push := ldsPush(t, nil, autoPassthroughYAML)
	g := New(Options{})
	cs := generate(t, g, ClusterType, eastWestGateway("istio-system"), push, wildcard(ClusterType), newCluster)
	for _, name := range []string{"outbound_.9001_.v2_.echo.shop.svc.cluster.local", "outbound_.3306_._.mysql.shop.svc.cluster.local"} {
		c := clusterByName(t, cs, name)
		if c.GetType() != cluster.Cluster_EDS || c.GetEdsClusterConfig().GetServiceName() != name {
			t.Errorf("%s: type %v service %q, want EDS under its own name", name, c.GetType(), c.GetEdsClusterConfig().GetServiceName())
		}
		if c.TransportSocket != nil || len(c.TransportSocketMatches) > 0 {
			t.Errorf("%s: upstream TLS %v %v, want none", name, c.TransportSocket, c.TransportSocketMatches)
		}
	}
	if c := clusterByName(t, cs, "outbound|3306||mysql.shop.svc.cluster.local"); c.TransportSocket == nil &&
		len(c.TransportSocketMatches) == 0 {
		t.Errorf("the standard mysql cluster lost its ISTIO_MUTUAL")
	}
	for _, c := range cs {
		if c.Name == "outbound_.443_._.payments.example.com" {
			t.Errorf("SNI-DNAT cluster %s for a MESH_EXTERNAL ServiceEntry", c.Name)
		}
	}
	for _, p := range []*model.Proxy{ldsGateway, sidecarIn("shop", "10.1.0.5", map[string]string{"app": "reviews", "version": "v1"})} {
		for _, c := range generate(t, g, ClusterType, p, push, wildcard(ClusterType), newCluster) {
			if _, ok := ParseSNIDNATClusterName(c.Name); ok {
				t.Errorf("%s: SNI-DNAT cluster %s without an AUTO_PASSTHROUGH server", p.ID, c.Name)
			}
		}
	}
}

// EDS serves an SNI-DNAT cluster the endpoints of the cluster it stands for (a subset's by its labels) that
// require mesh mTLS, as istiod's EndpointsWithMTLSFilter (echo-3 has no sidecar), on a full push and on an
// endpoint-only one.
func TestGatewayAutoPassthroughEndpoints(t *testing.T) {
	push := ldsPush(t, nil, autoPassthroughYAML)
	gw := eastWestGateway("istio-system")
	w := named(EndpointType, "outbound_.9001_.v1_.echo.shop.svc.cluster.local", "outbound_.9001_._.echo.shop.svc.cluster.local",
		"outbound|9001|v1|echo.shop.svc.cluster.local")
	g := New(Options{})
	res, err := g.ByTypeURL()[EndpointType].Generate(gw, push, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, r := range res {
		cla := newCLA()
		if err := r.Any.UnmarshalTo(cla); err != nil {
			t.Fatal(err)
		}
		if err := cla.ValidateAll(); err != nil || cla.ClusterName != r.Name {
			t.Errorf("%s: %v, named %q", r.Name, err, cla.ClusterName)
		}
		for _, grp := range cla.Endpoints {
			for _, ep := range grp.LbEndpoints {
				got[cla.ClusterName] = append(got[cla.ClusterName], ep.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
			}
		}
		slices.Sort(got[cla.ClusterName])
	}
	if v1 := got["outbound_.9001_.v1_.echo.shop.svc.cluster.local"]; !slices.Equal(v1, []string{"10.1.0.31"}) ||
		!slices.Equal(got["outbound|9001|v1|echo.shop.svc.cluster.local"], []string{"10.1.0.31", "10.1.0.33"}) {
		t.Errorf("v1 endpoints %v, want 10.1.0.31 (the sidecar pod of outbound|9001|v1|echo's 10.1.0.31, 10.1.0.33)", got)
	}
	if all := got["outbound_.9001_._.echo.shop.svc.cluster.local"]; !slices.Equal(all, []string{"10.1.0.31", "10.1.0.32"}) {
		t.Errorf("echo endpoints %v, want both pods", all)
	}
	req := &model.PushRequest{Push: push, ServicesUpdated: map[string]struct{}{"shop/echo.shop.svc.cluster.local": {}}}
	res, _, _, err = g.ByTypeURL()[EndpointType].(model.DeltaGenerator).GenerateDeltas(gw, push, w, req)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range res {
		names = append(names, r.Name)
	}
	if !slices.Contains(names, "outbound_.9001_.v1_.echo.shop.svc.cluster.local") ||
		!slices.Contains(names, "outbound_.9001_._.echo.shop.svc.cluster.local") {
		t.Errorf("endpoint push for echo sends %v, want its SNI-DNAT clusters too", names)
	}
}

// A policy selecting a gateway with AUTO_PASSTHROUGH servers is not applied there (as in istiod); the
// operator is told so, naming the policy and the Gateway, and a policy selecting other workloads is not named.
func TestAutoPassthroughPolicyIsReported(t *testing.T) {
	push := pushFromYAML(t, []byte(autoPassthroughYAML+`---
apiVersion: v1
kind: Pod
metadata: {name: ew-1, namespace: istio-system, labels: {istio: eastwestgateway}}
spec: {serviceAccountName: ew}
status: {podIP: 10.1.2.1, phase: Running, conditions: [{type: Ready, status: "True"}]}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: echo-only, namespace: shop}
spec:
  selector: {matchLabels: {app: echo}}
  action: DENY
  rules: [{}]
`))
	var named []string
	for _, p := range push.AuthorizationProblems() {
		if p.Warning && strings.Contains(p.Message, "AUTO_PASSTHROUGH servers of Gateway istio-system/cross-network") {
			named = append(named, p.Namespace+"/"+p.Name+" "+p.Field)
		}
	}
	if want := []string{"istio-system/ew-deny spec"}; !slices.Equal(named, want) {
		t.Fatalf("policies reported for the AUTO_PASSTHROUGH gateway: %v, want %v", named, want)
	}
}

// As istiod's gateway merge, a server with TLS settings naming a host (as written) that an earlier one on
// the same port and bind named is left out whole: the second AUTO_PASSTHROUGH server on 15443 names echo
// again, so mysql, which only it names, gets no chain there (nor does its HTTPS twin's route configuration
// exist); one on another bind address, or naming other hosts on the port, stays.
func TestGatewayServerRepeatingATLSHostIsSkipped(t *testing.T) {
	push := ldsPush(t, nil, autoPassthroughYAML, `
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: repeats, namespace: istio-system}
spec:
  selector: {istio: eastwestgateway}
  servers:
  - port: {number: 15443, name: tls-again, protocol: TLS}
    hosts: ["*.local", "shop/mysql.shop.svc.cluster.local"]
    tls: {mode: AUTO_PASSTHROUGH}
  - port: {number: 15444, name: tls-mysql, protocol: TLS}
    hosts: ["shop/mysql.shop.svc.cluster.local"]
    tls: {mode: AUTO_PASSTHROUGH}
  - port: {number: 15444, name: tls-echo-bound, protocol: TLS}
    bind: 10.1.2.1
    hosts: ["shop/echo.shop.svc.cluster.local"]
    tls: {mode: AUTO_PASSTHROUGH}
  - port: {number: 8443, name: https-a, protocol: HTTPS}
    hosts: ["a.example.com"]
    tls: {mode: SIMPLE, credentialName: a-cert}
  - port: {number: 8443, name: https-ab, protocol: HTTPS}
    hosts: ["a.example.com", "b.example.com"]
    tls: {mode: SIMPLE, credentialName: ab-cert}
`)
	ls := ldsGenerate(t, New(Options{}), eastWestGateway("istio-system"), push, wildcard(ListenerType))
	// The first server on 15443 (*.local) already covers mysql: the repeat adds nothing, and changes nothing.
	if got := chainNames(ldsFind(t, ls, "0.0.0.0_15443")); !slices.Contains(got, "outbound_.3306_._.mysql.shop.svc.cluster.local") {
		t.Errorf("15443 chains %v: the first server's mysql chain is gone", got)
	}
	got := chainNames(ldsFind(t, ls, "0.0.0.0_15444"))
	want := []string{"outbound_.3306_._.mysql.shop.svc.cluster.local", "outbound_.9001_._.echo.shop.svc.cluster.local",
		"outbound_.9001_.v1_.echo.shop.svc.cluster.local", "outbound_.9001_.v2_.echo.shop.svc.cluster.local"}
	if !slices.Equal(got, want) {
		t.Errorf("15444 chains %v, want %v (mysql's server names a host no earlier server did)", got, want)
	}
	if got := chainNames(ldsFind(t, ls, "10.1.2.1_15444")); len(got) != 3 {
		t.Errorf("10.1.2.1:15444 chains %v, want echo's three: another bind address repeats nothing", got)
	}
	https := ldsFind(t, ls, "0.0.0.0_8443")
	if len(https.FilterChains) != 1 || !slices.Equal(https.FilterChains[0].GetFilterChainMatch().GetServerNames(), []string{"a.example.com"}) {
		t.Errorf("8443 chains %v, want a.example.com's alone: the server repeating it is left out, b.example.com with it", chainNames(https))
	}
	names := gatewayRouteNames(push.Gateways(eastWestGateway("istio-system").Labels), nil)
	if slices.ContainsFunc(names, func(n string) bool { return strings.Contains(n, "https-ab") }) {
		t.Errorf("route configurations %v: the left-out server's must not exist", names)
	}
}
