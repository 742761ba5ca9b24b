package envoy

import (
	"slices"
	"strings"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	originalsrc "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_src/v3"

	"github.com/sextantmesh/sextant/pilot/model"
)

// withMode is proxy with another interception mode (and privilege), as its node metadata would say.
func withMode(proxy *model.Proxy, mode model.InterceptionMode, unprivileged bool) *model.Proxy {
	p := *proxy
	p.InterceptionMode, p.Unprivileged = mode, unprivileged
	return &p
}

// A sidecar without capture (INTERCEPTION_MODE NONE) gets istiod's proxyNoneMode layout: no capture
// listeners, every outbound listener bound to 127.0.0.1 on its port (nothing would hand it connections
// otherwise), and no inbound listener or cluster for its services' ports (one would take the workload's own
// port). A REDIRECT sidecar of the same namespace, generated in between, keeps its own layout.
func TestCaptureNoneSidecar(t *testing.T) {
	push := ldsPush(t, nil)
	g := New(Options{})
	none := withMode(ldsReviews, model.InterceptNone, false)
	for range 2 { // alternating with a REDIRECT proxy of the namespace: neither takes the other's cached lists
		ls := ldsGenerate(t, g, none, push, wildcard(ListenerType))
		for _, l := range ls {
			if l.Name == VirtualOutboundListener || l.Name == VirtualInboundListener {
				t.Errorf("capture listener %s on a proxy without capture", l.Name)
			}
			if l.GetBindToPort() != nil && !l.GetBindToPort().GetValue() {
				t.Errorf("listener %s is virtual (bind_to_port false): nothing hands it connections", l.Name)
			}
			if l.GetUseOriginalDst().GetValue() {
				t.Errorf("listener %s hands connections on", l.Name)
			}
		}
		for _, name := range []string{"127.0.0.1_80", "127.0.0.1_9080", "127.0.0.1_3306", "127.0.0.1_9001"} {
			l := ldsFindOrNil(ls, name)
			if l == nil {
				t.Fatalf("no bound listener %s; listeners %v", name, listenerNames(ls))
			}
			if a := l.GetAddress().GetSocketAddress(); a.GetAddress() != "127.0.0.1" {
				t.Errorf("%s bound to %s", name, a.GetAddress())
			}
		}
		if l := ldsFindOrNil(ls, "10.0.0.20_3306"); l != nil {
			t.Errorf("VIP listener %s for a proxy without capture", l.Name)
		}
		for _, c := range generate(t, g, ClusterType, none, push, wildcard(ClusterType), func() *cluster.Cluster { return &cluster.Cluster{} }) {
			if strings.HasPrefix(c.Name, "inbound|") {
				t.Errorf("inbound cluster %s without a Sidecar ingress listener", c.Name)
			}
		}

		redirect := ldsGenerate(t, g, ldsReviews, push, wildcard(ListenerType))
		if ldsFindOrNil(redirect, VirtualOutboundListener) == nil || ldsFindOrNil(redirect, VirtualInboundListener) == nil ||
			ldsFindOrNil(redirect, "10.0.0.20_3306") == nil || ldsFindOrNil(redirect, "127.0.0.1_3306") != nil {
			t.Errorf("REDIRECT proxy of the namespace: listeners %v", listenerNames(redirect))
		}
		var inbound bool
		for _, c := range generate(t, g, ClusterType, ldsReviews, push, wildcard(ClusterType),
			func() *cluster.Cluster { return &cluster.Cluster{} }) {
			inbound = inbound || c.Name == "inbound|9080||"
		}
		if !inbound {
			t.Error("REDIRECT proxy lost its inbound cluster")
		}
	}
}

// Without capture a Sidecar's ingress listener of the default capture mode binds its port, on the
// proxy's address (or the listener's bind), with the chains virtualInbound would have had; one that asks
// for IPTABLES stays a chain of a capture listener that does not exist, as istiod's.
func TestCaptureNoneSidecarIngress(t *testing.T) {
	push := ldsPush(t, nil, `apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: reviews, namespace: shop}
spec:
  workloadSelector: {labels: {app: reviews}}
  ingress:
  - port: {number: 9080, protocol: HTTP, name: http}
    defaultEndpoint: 127.0.0.1:8080
  - port: {number: 9190, protocol: TCP, name: tcp}
    defaultEndpoint: 127.0.0.1:9191
    bind: 0.0.0.0
  - port: {number: 7000, protocol: TCP, name: captured}
    defaultEndpoint: 127.0.0.1:7001
    captureMode: IPTABLES
`)
	g := New(Options{})
	none := withMode(ldsReviews, model.InterceptNone, false)
	ls := ldsGenerate(t, g, none, push, wildcard(ListenerType))
	http := ldsFindOrNil(ls, "10.1.0.5_9080")
	tcp := ldsFindOrNil(ls, "0.0.0.0_9190")
	if http == nil || tcp == nil {
		t.Fatalf("bound inbound listeners missing: %v", listenerNames(ls))
	}
	for _, l := range []*listener.Listener{http, tcp} {
		if l.GetBindToPort() != nil || l.GetTrafficDirection().String() != "INBOUND" {
			t.Errorf("%s: bind_to_port %v, direction %s", l.Name, l.GetBindToPort(), l.GetTrafficDirection())
		}
		if slices.Contains(listenerFilterNames(l), ldsOriginalDstFilter) {
			t.Errorf("%s restores an original destination nothing redirected", l.Name)
		}
	}
	// The mesh's PERMISSIVE mode: mTLS and plaintext chains, the HTTP ones to the port's inbound cluster.
	if len(http.FilterChains) < 2 {
		t.Fatalf("10.1.0.5_9080: %d chains", len(http.FilterChains))
	}
	for _, fc := range http.FilterChains {
		if fc.GetFilterChainMatch().GetDestinationPort().GetValue() != 9080 {
			t.Errorf("chain %s matches port %v", fc.Name, fc.GetFilterChainMatch().GetDestinationPort())
		}
		if h := ldsHCMOf(t, fc); h.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetCluster() != "inbound|9080||" {
			t.Errorf("chain %s routes elsewhere", fc.Name)
		}
	}
	if tp := ldsTCPProxyOf(t, tcp.FilterChains[len(tcp.FilterChains)-1]); tp.GetCluster() != "inbound|9190||" {
		t.Errorf("0.0.0.0_9190 proxies to %q", tp.GetCluster())
	}
	for _, l := range ls {
		if strings.HasSuffix(l.Name, "_7000") {
			t.Errorf("listener %s for an ingress listener under IPTABLES capture", l.Name)
		}
	}
	var clusters []string
	for _, c := range generate(t, g, ClusterType, none, push, wildcard(ClusterType), func() *cluster.Cluster { return &cluster.Cluster{} }) {
		clusters = append(clusters, c.Name)
	}
	for _, name := range []string{"inbound|9080||", "inbound|9190||", "inbound|7000||"} {
		if !slices.Contains(clusters, name) {
			t.Errorf("no cluster %s: %v", name, clusters)
		}
	}
}

// TPROXY capture keeps the client's address: istiod makes both capture listeners transparent and restores
// the source upstream with original_src (mark 1337) on virtualInbound. REDIRECT proxies, generated in
// between, keep theirs plain.
func TestCaptureTPROXY(t *testing.T) {
	push := ldsPush(t, nil)
	g := New(Options{})
	tproxy := withMode(ldsReviews, model.InterceptTPROXY, false)
	for range 2 {
		ls := ldsGenerate(t, g, tproxy, push, wildcard(ListenerType))
		out, in := ldsFind(t, ls, VirtualOutboundListener), ldsFind(t, ls, VirtualInboundListener)
		if !out.GetTransparent().GetValue() || !in.GetTransparent().GetValue() {
			t.Errorf("transparent: virtualOutbound %v, virtualInbound %v", out.GetTransparent(), in.GetTransparent())
		}
		var src *originalsrc.OriginalSrc
		for _, f := range in.ListenerFilters {
			if f.Name == ldsOriginalSrcFilter {
				src = &originalsrc.OriginalSrc{}
				if err := f.GetTypedConfig().UnmarshalTo(src); err != nil {
					t.Fatal(err)
				}
			}
		}
		if src.GetMark() != 1337 || listenerFilterNames(in)[0] != ldsOriginalDstFilter {
			t.Errorf("virtualInbound listener filters %v, original_src %v", listenerFilterNames(in), src)
		}
		for _, l := range ls {
			if l.Name != VirtualOutboundListener && l.Name != VirtualInboundListener && l.GetTransparent() != nil {
				t.Errorf("%s is transparent", l.Name)
			}
		}
		redirect := ldsGenerate(t, g, ldsReviews, push, wildcard(ListenerType))
		out, in = ldsFind(t, redirect, VirtualOutboundListener), ldsFind(t, redirect, VirtualInboundListener)
		if out.GetTransparent() != nil || in.GetTransparent() != nil || slices.Contains(listenerFilterNames(in), ldsOriginalSrcFilter) {
			t.Errorf("REDIRECT proxy got TPROXY settings: %v %v %v", out.GetTransparent(), in.GetTransparent(), listenerFilterNames(in))
		}
	}
}

// An unprivileged proxy (UNPRIVILEGED_POD) cannot bind ports below 1024: istiod leaves out its bound
// listeners on them (a sidecar without capture, a gateway), and so does Sextant. Virtual listeners, which
// bind nothing, stay; a privileged proxy of the namespace keeps its own.
func TestUnprivilegedProxyBindsNoLowPort(t *testing.T) {
	push := ldsPush(t, nil)
	g := New(Options{})
	for range 2 {
		ls := ldsGenerate(t, g, withMode(ldsReviews, model.InterceptNone, true), push, wildcard(ListenerType))
		if l := ldsFindOrNil(ls, "127.0.0.1_80"); l != nil {
			t.Errorf("unprivileged proxy binds %s", l.Name)
		}
		if ldsFindOrNil(ls, "127.0.0.1_9080") == nil {
			t.Errorf("unprivileged proxy lost 127.0.0.1_9080: %v", listenerNames(ls))
		}
		if ldsFindOrNil(ldsGenerate(t, g, withMode(ldsReviews, model.InterceptNone, false), push, wildcard(ListenerType)),
			"127.0.0.1_80") == nil {
			t.Error("a privileged proxy without capture lost 127.0.0.1_80")
		}
		if ldsFindOrNil(ldsGenerate(t, g, withMode(ldsReviews, model.InterceptRedirect, true), push, wildcard(ListenerType)),
			"0.0.0.0_80") == nil {
			t.Error("an unprivileged REDIRECT proxy lost its virtual listener 0.0.0.0_80")
		}
	}
	gw := ldsGenerate(t, g, withMode(ldsGateway, model.InterceptRedirect, true), push, wildcard(ListenerType))
	if len(gw) != 0 {
		t.Errorf("unprivileged gateway binds %v (ports 80 and 443)", listenerNames(gw))
	}
	if got := ldsGenerate(t, g, ldsGateway, push, wildcard(ListenerType)); len(got) != 2 {
		t.Errorf("privileged gateway: %v", listenerNames(got))
	}
}

// Under iptables capture an ingress listener with captureMode NONE binds a listener of its own on its port
// (on its bind, else the pod's address), as istiod's inboundCustomListener, and virtualInbound has no chain
// for the port; the other ingress ports stay virtualInbound's.
func TestSidecarIngressCaptureNoneBinds(t *testing.T) {
	push := ldsPush(t, nil, `apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: reviews, namespace: shop}
spec:
  workloadSelector: {labels: {app: reviews}}
  ingress:
  - port: {number: 9080, protocol: HTTP, name: http}
    defaultEndpoint: 127.0.0.1:8080
    captureMode: NONE
  - port: {number: 9190, protocol: TCP, name: tcp}
    defaultEndpoint: 127.0.0.1:9191
`)
	ls := ldsGenerate(t, New(Options{}), ldsReviews, push, wildcard(ListenerType))
	bound := ldsFindOrNil(ls, "10.1.0.5_9080")
	if bound == nil || bound.GetBindToPort() != nil {
		t.Fatalf("no listener bound to 10.1.0.5:9080: %v", listenerNames(ls))
	}
	for _, fc := range ldsFind(t, ls, VirtualInboundListener).FilterChains {
		switch fc.GetFilterChainMatch().GetDestinationPort().GetValue() {
		case 9080:
			t.Errorf("virtualInbound chain %s on the bound port", fc.Name)
		case 9190:
			return
		}
	}
	t.Error("virtualInbound has no chain for the captured ingress port 9190")
}
