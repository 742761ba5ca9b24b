package conformance

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbachttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	originalsrc "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_src/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// listenerSnapshots normalises two outputs for the defaults case's first proxy, asking the listeners of both
// the same probes, as the suite does.
func listenerSnapshots(t *testing.T, c *Case, a, b *Output) (Snapshot, Snapshot) {
	t.Helper()
	probes := ProbesOf(a.Listeners, b.Listeners)
	sa, err := a.Normalise(c.Proxies[0], probes)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := b.Normalise(c.Proxies[0], probes)
	if err != nil {
		t.Fatal(err)
	}
	return sa, sb
}

func cloneOutput(o *Output) *Output {
	c := *o
	c.Listeners = nil
	for _, l := range o.Listeners {
		c.Listeners = append(c.Listeners, proto.Clone(l).(*listener.Listener))
	}
	return &c
}

// Renaming every listener, chain and filter and reordering the chains changes no connection's fate, so
// it is no difference.
func TestListenerNamesAndOrderAreNoDifference(t *testing.T) {
	c, out := sextantDefaults(t)
	renamed := cloneOutput(out)
	for i, l := range renamed.Listeners {
		l.Name = "listener-" + string(rune('a'+i))
		slices.Reverse(l.FilterChains)
		for j, fc := range l.FilterChains {
			fc.Name = "chain-" + string(rune('a'+j))
			for _, f := range fc.Filters {
				if !telemetryFilters[f.Name] {
					f.Name = "renamed"
				}
			}
		}
	}
	a, b := listenerSnapshots(t, c, out, renamed)
	if d := Compare(c.Name, "p", a, b); len(d) != 0 {
		t.Fatalf("renaming listeners and chains gave differences: %v", d)
	}
}

// Dropping the plaintext chain of an inbound port (PERMISSIVE becomes STRICT) must show on that port, for
// plaintext traffic: a connection that reached the application is now closed.
func TestListenerInboundModeChangeIsNamed(t *testing.T) {
	c, out := sextantDefaults(t)
	strict := cloneOutput(out)
	var port uint32
	for _, l := range strict.Listeners {
		if _, p := listenerAddress(l.GetAddress()); p != DefaultCapturePorts.Inbound {
			continue
		}
		var kept []*listener.FilterChain
		for _, fc := range l.FilterChains {
			m := fc.GetFilterChainMatch()
			if m.GetDestinationPort() != nil && m.GetTransportProtocol() == "raw_buffer" && port == 0 {
				port = m.GetDestinationPort().GetValue()
				continue
			}
			kept = append(kept, fc)
		}
		l.FilterChains = kept
	}
	if port == 0 {
		t.Fatal("no plaintext inbound chain in Sextant's defaults output")
	}
	a, b := listenerSnapshots(t, c, out, strict)
	want := Key{Kind: KindListener, Inbound: true, Port: port}
	var named bool
	for _, d := range Compare(c.Name, "p", a, b) {
		if d.Key == want && d.Field == "http" && strings.HasSuffix(d.Sextant, "closed") && !strings.HasSuffix(d.Istiod, "closed") {
			named = true
		}
		if d.Key.Port != port {
			t.Errorf("difference on another port: %s", d)
		}
	}
	if !named {
		t.Fatalf("dropping the plaintext chain of inbound port %d named no closed plaintext connection on %s", port, want)
	}
}

// A chain's prefix ranges are asked at both ends: two sides whose chains start at one address but differ
// in prefix length send the range's last address differently, and that is a difference.
func TestProbesAskPrefixRangesAtBothEnds(t *testing.T) {
	side := func(bits uint32) []*listener.Listener {
		return []*listener.Listener{{
			Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{Address: "0.0.0.0",
				PortSpecifier: &core.SocketAddress_PortValue{PortValue: 6379}}}},
			BindToPort: wrapperspb.Bool(false),
			FilterChains: []*listener.FilterChain{{Name: "subnets", FilterChainMatch: &listener.FilterChainMatch{
				PrefixRanges: []*core.CidrRange{{AddressPrefix: "172.16.0.0", PrefixLen: wrapperspb.UInt32(bits)}}}}},
			DefaultFilterChain: &listener.FilterChain{Name: "rest"},
		}}
	}
	istiod, sextant := side(12), side(16)
	probes := ProbesOf(istiod, sextant)
	for _, want := range []string{"172.16.0.0", "172.16.255.255", "172.31.255.255"} {
		if !slices.Contains(probes.Outbound[6379], want) {
			t.Errorf("probes on 6379 %v, want %s among them", probes.Outbound[6379], want)
		}
	}
	if a, b := selectChain(istiod[0], trafficClass{name: "tcp"}, "172.31.255.255", 6379),
		selectChain(sextant[0], trafficClass{name: "tcp"}, "172.31.255.255", 6379); a.GetName() == b.GetName() {
		t.Errorf("the /12's last address reaches %s on both sides", a.GetName())
	}
}

// Envoy does not fall back to the chains without a port when a port has chains of its own but none
// matches: the connection gets the default chain, here none.
func TestSelectChainFollowsEnvoysPortRule(t *testing.T) {
	tcp := func(cluster string) []*listener.Filter {
		a, err := anypb.New(&tcpproxy.TcpProxy{StatPrefix: "s", ClusterSpecifier: &tcpproxy.TcpProxy_Cluster{Cluster: cluster}})
		if err != nil {
			t.Fatal(err)
		}
		return []*listener.Filter{{Name: "tcp", ConfigType: &listener.Filter_TypedConfig{TypedConfig: a}}}
	}
	l := &listener.Listener{FilterChains: []*listener.FilterChain{
		{FilterChainMatch: &listener.FilterChainMatch{DestinationPort: wrapperspb.UInt32(8080), TransportProtocol: "tls"},
			Filters: tcp("outbound|8080||a.ns.svc.cluster.local")},
		{FilterChainMatch: &listener.FilterChainMatch{TransportProtocol: "raw_buffer"}, Filters: tcp("PassthroughCluster")},
	}}
	if fc := selectChain(l, trafficClass{name: "tcp"}, "10.0.0.1", 8080); fc != nil {
		t.Errorf("plaintext to port 8080 got chain %v, want none (no fallback to the port-less chains)", fc)
	}
	if fc := selectChain(l, trafficClass{name: "tcp"}, "10.0.0.1", 9090); fc == nil ||
		tcpDestinationOf(t, fc) != "passthrough (original destination)" {
		t.Errorf("plaintext to port 9090 got %v, want the port-less plaintext chain", fc)
	}
	if fc := selectChain(l, tlsClass("a"), "10.0.0.1", 8080); fc == nil || tcpDestinationOf(t, fc) != "a.ns.svc.cluster.local:8080" {
		t.Errorf("TLS to port 8080 got %v, want its chain", fc)
	}
}

func tcpDestinationOf(t *testing.T, fc *listener.FilterChain) string {
	t.Helper()
	var tp tcpproxy.TcpProxy
	if err := fc.GetFilters()[0].GetTypedConfig().UnmarshalTo(&tp); err != nil {
		t.Fatal(err)
	}
	return tcpDestinations(&tp)
}

func principalName(exact string) *rbacpb.Principal {
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_Authenticated_{Authenticated: &rbacpb.Principal_Authenticated{
		PrincipalName: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: exact}}}}}
}

func pathPrefix(p string) *rbacpb.Permission {
	return &rbacpb.Permission{Rule: &rbacpb.Permission_UrlPath{UrlPath: &matcher.PathMatcher{Rule: &matcher.PathMatcher_Path{
		Path: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Prefix{Prefix: p}}}}}}
}

func methodIs(m string) *rbacpb.Permission {
	return &rbacpb.Permission{Rule: &rbacpb.Permission_Header{Header: &route.HeaderMatcher{Name: ":method",
		HeaderMatchSpecifier: &route.HeaderMatcher_StringMatch{StringMatch: &matcher.StringMatcher{
			MatchPattern: &matcher.StringMatcher_Exact{Exact: m}}}}}}
}

// withHTTPRBAC puts rules before the router of every inbound HTTP chain of o.
func withHTTPRBAC(t *testing.T, o *Output, rules *rbacpb.RBAC) *Output {
	t.Helper()
	out := cloneOutput(o)
	cfg, err := anypb.New(&rbachttp.RBAC{Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range out.Listeners {
		if _, p := listenerAddress(l.GetAddress()); p != DefaultCapturePorts.Inbound {
			continue
		}
		for _, fc := range l.FilterChains {
			for _, f := range fc.Filters {
				var m hcm.HttpConnectionManager
				if f.GetTypedConfig().UnmarshalTo(&m) != nil {
					continue
				}
				m.HttpFilters = append([]*hcm.HttpFilter{{Name: "envoy.filters.http.rbac",
					ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: cfg}}}, m.HttpFilters...)
				a, err := anypb.New(&m)
				if err != nil {
					t.Fatal(err)
				}
				f.ConfigType = &listener.Filter_TypedConfig{TypedConfig: a}
			}
		}
	}
	return out
}

// One AuthorizationPolicy spelled two ways (policy names, principal order, a principal list or one or_ids,
// nested and_rules) allows the same requests and must compare equal; a changed principal must not.
func TestRBACComparesPoliciesNotSpelling(t *testing.T) {
	c, out := sextantDefaults(t)
	sleep, other := "spiffe://cluster.local/ns/default/sa/sleep", "spiffe://cluster.local/ns/default/sa/other"
	istiodStyle := &rbacpb.RBAC{Action: rbacpb.RBAC_ALLOW, Policies: map[string]*rbacpb.Policy{
		"ns[default]-policy[reviews]-rule[0]": {
			Principals: []*rbacpb.Principal{{Identifier: &rbacpb.Principal_AndIds{AndIds: &rbacpb.Principal_Set{Ids: []*rbacpb.Principal{
				{Identifier: &rbacpb.Principal_OrIds{
					OrIds: &rbacpb.Principal_Set{Ids: []*rbacpb.Principal{principalName(sleep), principalName(other)}}}},
			}}}}},
			Permissions: []*rbacpb.Permission{{Rule: &rbacpb.Permission_AndRules{AndRules: &rbacpb.Permission_Set{Rules: []*rbacpb.Permission{
				{Rule: &rbacpb.Permission_OrRules{OrRules: &rbacpb.Permission_Set{Rules: []*rbacpb.Permission{methodIs("GET")}}}},
				{Rule: &rbacpb.Permission_AndRules{AndRules: &rbacpb.Permission_Set{Rules: []*rbacpb.Permission{
					pathPrefix("/api"), {Rule: &rbacpb.Permission_Any{Any: true}}, {Rule: &rbacpb.Permission_DestinationPort{DestinationPort: 9080}},
				}}}},
			}}}}},
		},
	}}
	sextantStyle := func(second string) *rbacpb.RBAC {
		return &rbacpb.RBAC{Action: rbacpb.RBAC_ALLOW, Policies: map[string]*rbacpb.Policy{
			"default/reviews#0": {
				Principals: []*rbacpb.Principal{principalName(second), principalName(sleep)},
				Permissions: []*rbacpb.Permission{{Rule: &rbacpb.Permission_AndRules{AndRules: &rbacpb.Permission_Set{Rules: []*rbacpb.Permission{
					{Rule: &rbacpb.Permission_DestinationPort{DestinationPort: 9080}}, pathPrefix("/api"), methodIs("GET"),
				}}}}},
			},
		}}
	}
	a, b := listenerSnapshots(t, c, withHTTPRBAC(t, out, istiodStyle), withHTTPRBAC(t, out, sextantStyle(other)))
	if d := Compare(c.Name, "p", a, b); len(d) != 0 {
		t.Fatalf("the same policy spelled differently gave differences: %v", d)
	}
	a, b = listenerSnapshots(t, c, withHTTPRBAC(t, out, istiodStyle),
		withHTTPRBAC(t, out, sextantStyle("spiffe://cluster.local/ns/default/sa/admin")))
	diffs := Compare(c.Name, "p", a, b)
	var lost, gained bool
	for _, d := range diffs {
		if d.Key.Kind != KindListener || !strings.HasPrefix(d.Field, "http.rbac.ALLOW{") {
			t.Errorf("difference outside the RBAC policies: %s", d)
		}
		lost = lost || strings.Contains(d.Field, "sa/other") && d.Istiod == "yes" && d.Sextant == unset
		gained = gained || strings.Contains(d.Field, "sa/admin") && d.Istiod == unset && d.Sextant == "yes"
	}
	if !lost || !gained {
		t.Fatalf("changing one principal gave %v, want the old policy on istiod's side only and the new on Sextant's", diffs)
	}
}

// A DENY policy is not an ALLOW policy with the same matchers.
func TestRBACActionIsCompared(t *testing.T) {
	rules := func(action rbacpb.RBAC_Action) *rbacpb.RBAC {
		return &rbacpb.RBAC{Action: action, Policies: map[string]*rbacpb.Policy{"p": {
			Principals: []*rbacpb.Principal{{Identifier: &rbacpb.Principal_Any{Any: true}}}, Permissions: []*rbacpb.Permission{pathPrefix("/admin")},
		}}}
	}
	a, b := Fields{}, Fields{}
	rbacFields(a, "", rules(rbacpb.RBAC_DENY), nil, "", map[string]int{})
	rbacFields(b, "", rules(rbacpb.RBAC_ALLOW), nil, "", map[string]int{})
	key := Key{Kind: KindListener, Inbound: true, Port: 8080}
	d := Compare("c", "p", Snapshot{key: a}, Snapshot{key: b})
	if len(d) != 4 { // rbac.DENY and its policy on one side, rbac.ALLOW and its policy on the other
		t.Fatalf("DENY against ALLOW gave %v", d)
	}
}

// With use_original_dst on the inbound capture listener, Envoy hands an inbound connection to a listener
// of its original destination: a port some service also serves outbound then skips the inbound chains
// (their mTLS and RBAC).
func TestInboundHandOffFollowsUseOriginalDst(t *testing.T) {
	c, out := sextantDefaults(t)
	probes := ProbesOf(out.Listeners)
	if len(probes.Inbound) == 0 {
		t.Fatal("no inbound port in Sextant's defaults output")
	}
	port := probes.Inbound[0]
	tp, err := anypb.New(&tcpproxy.TcpProxy{StatPrefix: "s", ClusterSpecifier: &tcpproxy.TcpProxy_Cluster{Cluster: "PassthroughCluster"}})
	if err != nil {
		t.Fatal(err)
	}
	// An outbound listener on 0.0.0.0 of the port the workload serves.
	outboundOnPort := &listener.Listener{Name: "0.0.0.0_x", Address: &core.Address{Address: &core.Address_SocketAddress{
		SocketAddress: &core.SocketAddress{Address: "0.0.0.0", PortSpecifier: &core.SocketAddress_PortValue{PortValue: port}}}},
		BindToPort: wrapperspb.Bool(false), FilterChains: []*listener.FilterChain{{Filters: []*listener.Filter{{Name: "tcp",
			ConfigType: &listener.Filter_TypedConfig{TypedConfig: tp}}}}}}
	without := cloneOutput(out)
	without.Listeners = append(without.Listeners, outboundOnPort)
	handsOff := cloneOutput(without)
	for _, l := range handsOff.Listeners {
		if _, p := listenerAddress(l.GetAddress()); p == DefaultCapturePorts.Inbound {
			l.UseOriginalDst = wrapperspb.Bool(true)
		}
	}
	a, b := listenerSnapshots(t, c, without, handsOff)
	key := Key{Kind: KindListener, Inbound: true, Port: port}
	if got := b[key]["mtls-http"]; got != "plaintext → tcp passthrough (original destination)" {
		t.Errorf("inbound %d with use_original_dst: mtls-http %q, want the outbound listener's passthrough", port, got)
	}
	if a[key]["mtls-http"] == b[key]["mtls-http"] {
		t.Errorf("inbound %d: use_original_dst changed nothing (%s)", port, a[key]["mtls-http"])
	}
}

// A sidecar's listener of its own (captureMode NONE) takes what the application sends to its address; the
// same listener left virtual (bind_to_port false) takes nothing sent there directly: a difference on the
// bound address, where neither side's virtual listeners count.
func TestBoundSidecarListenerIsCompared(t *testing.T) {
	c, out := sextantDefaults(t)
	tp, err := anypb.New(&tcpproxy.TcpProxy{StatPrefix: "s", ClusterSpecifier: &tcpproxy.TcpProxy_Cluster{Cluster: "PassthroughCluster"}})
	if err != nil {
		t.Fatal(err)
	}
	own := func(bindToPort *wrapperspb.BoolValue) *Output {
		o := cloneOutput(out)
		o.Listeners = append(o.Listeners, &listener.Listener{Name: "127.0.0.1_9999", Address: &core.Address{Address: &core.Address_SocketAddress{
			SocketAddress: &core.SocketAddress{Address: "127.0.0.1", PortSpecifier: &core.SocketAddress_PortValue{PortValue: 9999}}}},
			BindToPort: bindToPort, FilterChains: []*listener.FilterChain{{Filters: []*listener.Filter{{Name: "tcp",
				ConfigType: &listener.Filter_TypedConfig{TypedConfig: tp}}}}}})
		return o
	}
	real, virtual := own(nil), own(wrapperspb.Bool(false))
	if p := ProbesOf(real.Listeners); !slices.Equal(p.Bound[9999], []string{"127.0.0.1"}) {
		t.Fatalf("bound probes %v, want 127.0.0.1 on 9999", p.Bound)
	}
	a, b := listenerSnapshots(t, c, real, virtual)
	key := Key{Kind: KindListener, Host: "bound 127.0.0.1", Port: 9999}
	if got := a[key]["tcp"]; got != "plaintext → tcp passthrough (original destination)" {
		t.Errorf("bound listener: tcp %q", got)
	}
	if got := b[key]["listener"]; got != "none" {
		t.Errorf("virtual listener on the bound address: %v, want no listener", b[key])
	}
	var named bool
	for _, d := range Compare(c.Name, "p", a, b) {
		named = named || d.Key == key
	}
	if !named {
		t.Error("real against virtual listener: no difference on the bound address")
	}
}

// TPROXY capture shows on the capture listeners: transparent on both, original_src on the inbound one. A
// side without them differs on the key that probes the capture listener itself and on every inbound port.
func TestTransparentCaptureIsCompared(t *testing.T) {
	c, out := sextantDefaults(t)
	src, err := anypb.New(&originalsrc.OriginalSrc{Mark: 1337})
	if err != nil {
		t.Fatal(err)
	}
	tproxy := cloneOutput(out)
	for _, l := range tproxy.Listeners {
		switch _, p := listenerAddress(l.GetAddress()); p {
		case DefaultCapturePorts.Outbound:
			l.Transparent = wrapperspb.Bool(true)
		case DefaultCapturePorts.Inbound:
			l.Transparent = wrapperspb.Bool(true)
			l.ListenerFilters = append(l.ListenerFilters, &listener.ListenerFilter{Name: "original_src",
				ConfigType: &listener.ListenerFilter_TypedConfig{TypedConfig: src}})
		}
	}
	a, b := listenerSnapshots(t, c, out, tproxy)
	found := map[string]bool{}
	for _, d := range Compare(c.Name, "p", a, b) {
		switch {
		case d.Key == Key{Kind: KindListener, Host: "other-ip"} && d.Field == "listener.transparent" && d.Sextant == "true":
			found["outbound transparent"] = true
		case d.Key == Key{Kind: KindListener, Inbound: true} && d.Field == "listener.transparent" && d.Sextant == "true":
			found["inbound transparent"] = true
		case d.Key == Key{Kind: KindListener, Inbound: true} && d.Field == "listener.original_src" && d.Sextant == "mark 1337":
			found["inbound original_src"] = true
		}
	}
	if len(found) != 3 {
		t.Fatalf("TPROXY settings named: %v, want outbound and inbound transparent and inbound original_src", found)
	}
}

// A bound inbound listener (a Sidecar ingress listener on a proxy without capture) is asked what a sidecar
// peer and a plaintext client send, as the inbound capture listener is.
func TestBoundInboundListenerTakesInboundClasses(t *testing.T) {
	c, out := sextantDefaults(t)
	tp, err := anypb.New(&tcpproxy.TcpProxy{StatPrefix: "s", ClusterSpecifier: &tcpproxy.TcpProxy_Cluster{Cluster: "inbound|9999||"}})
	if err != nil {
		t.Fatal(err)
	}
	o := cloneOutput(out)
	o.Listeners = append(o.Listeners, &listener.Listener{Name: "10.1.0.1_9999", TrafficDirection: core.TrafficDirection_INBOUND,
		Address: &core.Address{Address: &core.Address_SocketAddress{
			SocketAddress: &core.SocketAddress{Address: "10.1.0.1", PortSpecifier: &core.SocketAddress_PortValue{PortValue: 9999}}}},
		FilterChains: []*listener.FilterChain{
			{Filters: []*listener.Filter{{Name: "tcp", ConfigType: &listener.Filter_TypedConfig{TypedConfig: tp}}}}}})
	a, _ := listenerSnapshots(t, c, o, o)
	f := a[Key{Kind: KindListener, Host: "bound 10.1.0.1", Port: 9999}]
	for _, class := range inboundClasses {
		if f[class.name] == "" {
			t.Errorf("bound inbound listener: class %s not asked (%v)", class.name, f)
		}
	}
}

// An IPv6-only proxy's listeners on 0.0.0.0 instead of [::] take none of its application's connections:
// the probes ask IPv6 destinations of such a proxy, so the capture listener's address and every port whose
// listener has no VIP of its own are differences.
func TestIPv6ProxyWildcardIsCompared(t *testing.T) {
	c, err := LoadCase(filepath.Join("cases", "ipv6-only"))
	if err != nil {
		t.Fatal(err)
	}
	outs, err := RenderSextant(c, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var p Proxy
	for _, q := range c.Proxies {
		if q.Name == "client-v6" {
			p = q
		}
	}
	out := outs[p.Name]
	v4 := cloneOutput(out)
	for _, l := range v4.Listeners {
		if sa := l.GetAddress().GetSocketAddress(); sa.GetAddress() == "::" {
			sa.Address = "0.0.0.0"
		}
	}
	probes := ProbesOf(out.Listeners, v4.Listeners)
	a, err := out.Normalise(p, probes)
	if err != nil {
		t.Fatal(err)
	}
	b, err := v4.Normalise(p, probes)
	if err != nil {
		t.Fatal(err)
	}
	var bind, http bool
	for _, d := range Compare(c.Name, p.Name, a, b) {
		switch {
		case d.Key == Key{Kind: KindListener, Host: "other-ip"} && d.Field == "bind" && d.Istiod == "::" && d.Sextant == "0.0.0.0":
			bind = true
		case d.Key == Key{Kind: KindListener, Host: "other-ip", Port: 80} && d.Field == "http" && strings.Contains(d.Istiod, "http routes"):
			http = true
		}
	}
	if !bind || !http {
		t.Fatalf("listeners moved from [::] to 0.0.0.0: capture listener's bind named %v, port 80's HTTP named %v", bind, http)
	}
}
