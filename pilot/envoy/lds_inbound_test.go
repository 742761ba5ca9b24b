package envoy

import (
	"slices"
	"testing"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/sextantmesh/sextant/pilot/model"
)

// inboundConn is a connection to the workload as virtualInbound receives it.
type inboundConn struct {
	port uint32
	tls  bool
	// alpn is the ClientHello's ALPN over TLS; in plaintext, what the http_inspector would find ("http/1.1",
	// "h2c", "http/1.0"), nothing for other bytes.
	alpn []string
}

// Connections as clients send them.
var (
	// A peer sidecar over mesh mTLS: HTTP it detected, and TCP (Sextant's clients offer istio and
	// istio-peer-exchange for HTTP too).
	meshHTTP = []string{"istio-http/1.1", "istio", "http/1.1"}
	meshTCP  = []string{"istio-peer-exchange", "istio"}
	// A client's own TLS, e.g. an HTTPS client without a sidecar.
	appTLS = []string{"h2", "http/1.1"}
)

// listenerFilterRuns reports whether a listener filter runs for a connection to port (its filter_disabled
// predicate does not match).
func listenerFilterRuns(f *listener.ListenerFilter, port uint32) bool {
	var matches func(p *listener.ListenerFilterChainMatchPredicate) bool
	matches = func(p *listener.ListenerFilterChainMatchPredicate) bool {
		switch r := p.GetRule().(type) {
		case *listener.ListenerFilterChainMatchPredicate_AnyMatch:
			return r.AnyMatch
		case *listener.ListenerFilterChainMatchPredicate_DestinationPortRange:
			return int32(port) >= r.DestinationPortRange.GetStart() && int32(port) < r.DestinationPortRange.GetEnd()
		case *listener.ListenerFilterChainMatchPredicate_NotMatch:
			return !matches(r.NotMatch)
		case *listener.ListenerFilterChainMatchPredicate_OrMatch:
			return slices.ContainsFunc(r.OrMatch.GetRules(), matches)
		case *listener.ListenerFilterChainMatchPredicate_AndMatch:
			for _, q := range r.AndMatch.GetRules() {
				if !matches(q) {
					return false
				}
			}
			return true
		}
		return false
	}
	return f.GetFilterDisabled() == nil || !matches(f.GetFilterDisabled())
}

// inboundPick is the chain Envoy picks for c (nil: none, the connection is closed): the listener filters
// that run on the port detect the transport (raw_buffer when the tls_inspector does not run) and the
// application protocols, then the most specific destination port, transport protocol and application
// protocol match decide, without falling back to less specific chains once one step matched
// (filter_chain_manager_impl.cc).
func inboundPick(t *testing.T, l *listener.Listener, c inboundConn) *listener.FilterChain {
	t.Helper()
	runs := func(name string) bool {
		i := slices.IndexFunc(l.ListenerFilters, func(f *listener.ListenerFilter) bool { return f.Name == name })
		return i >= 0 && listenerFilterRuns(l.ListenerFilters[i], c.port)
	}
	transport, alpn := "raw_buffer", []string(nil)
	switch {
	case c.tls && runs(ldsTLSInspectorFilter):
		transport, alpn = "tls", c.alpn
	case !c.tls && runs(ldsHTTPInspectorFilter):
		alpn = c.alpn
	}
	narrow := func(cs []*listener.FilterChain, exact, wildcard func(*listener.FilterChainMatch) bool) []*listener.FilterChain {
		var e, w []*listener.FilterChain
		for _, fc := range cs {
			switch m := fc.GetFilterChainMatch(); {
			case exact(m):
				e = append(e, fc)
			case wildcard(m):
				w = append(w, fc)
			}
		}
		if len(e) > 0 {
			return e
		}
		return w
	}
	cs := narrow(l.FilterChains,
		func(m *listener.FilterChainMatch) bool { return m.GetDestinationPort().GetValue() == c.port },
		func(m *listener.FilterChainMatch) bool { return m.GetDestinationPort() == nil })
	cs = narrow(cs,
		func(m *listener.FilterChainMatch) bool { return m.GetTransportProtocol() == transport },
		func(m *listener.FilterChainMatch) bool { return m.GetTransportProtocol() == "" })
	var picked []*listener.FilterChain
	for _, p := range alpn {
		for _, fc := range cs {
			if slices.Contains(fc.GetFilterChainMatch().GetApplicationProtocols(), p) {
				picked = append(picked, fc)
			}
		}
		if len(picked) > 0 {
			break
		}
	}
	if len(picked) == 0 {
		for _, fc := range cs {
			if len(fc.GetFilterChainMatch().GetApplicationProtocols()) == 0 {
				picked = append(picked, fc)
			}
		}
	}
	switch len(picked) {
	case 0:
		return nil
	case 1:
		return picked[0]
	}
	t.Fatalf("%+v: chains %v all match (Envoy refuses such a listener)", c, picked)
	return nil
}

// inboundOutcome says what happens to c: "closed", or "mtls"/"plaintext" (whether mesh mTLS is terminated),
// then "http" or "tcp", then the cluster it goes to.
func inboundOutcome(t *testing.T, l *listener.Listener, c inboundConn) string {
	t.Helper()
	fc := inboundPick(t, l, c)
	if fc == nil {
		return "closed"
	}
	out := "plaintext"
	if fc.TransportSocket != nil {
		ctx := &tlsv3.DownstreamTlsContext{}
		if err := fc.TransportSocket.GetTypedConfig().UnmarshalTo(ctx); err != nil {
			t.Fatal(err)
		}
		if !ctx.GetRequireClientCertificate().GetValue() {
			t.Fatalf("chain %s: TLS without a client certificate", fc.Name)
		}
		out = "mtls"
	}
	if fc.Filters[len(fc.Filters)-1].Name == ldsHCMFilter {
		return out + " http " + ldsHCMOf(t, fc).GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetCluster()
	}
	return out + " tcp " + ldsTCPProxyOf(t, fc).GetCluster()
}

// checkInbound asserts each connection's outcome on the proxy's virtualInbound.
func checkInbound(t *testing.T, l *listener.Listener, want map[string]struct {
	c    inboundConn
	want string
}) {
	t.Helper()
	for name, w := range want {
		if got := inboundOutcome(t, l, w.c); got != w.want {
			t.Errorf("%s (%+v): %s, want %s", name, w.c, got, w.want)
		}
	}
}

type inboundCase = struct {
	c    inboundConn
	want string
}

// Under PERMISSIVE only TLS offering Istio's ALPN is mesh mTLS, as in istiod. The application's own TLS
// (an HTTPS client without a sidecar) reaches the application untouched on a TCP or sniffed port, and no
// chain takes it on an HTTP port; under STRICT any TLS is mesh mTLS and plaintext is refused.
func TestListenerInboundApplicationTLS(t *testing.T) {
	push := ldsPush(t, nil, sniffLegacy)
	g := New(Options{})
	legacy := ldsFind(t, ldsGenerate(t, g, ldsLegacy, push, wildcard(ListenerType)), VirtualInboundListener)
	checkInbound(t, legacy, map[string]inboundCase{
		"tcp app tls":      {inboundConn{9000, true, appTLS}, "plaintext tcp inbound|9000||"},
		"tcp app tls bare": {inboundConn{9000, true, nil}, "plaintext tcp inbound|9000||"},
		"tcp mesh":         {inboundConn{9000, true, meshTCP}, "mtls tcp inbound|9000||"},
		"tcp mesh http":    {inboundConn{9000, true, meshHTTP}, "mtls tcp inbound|9000||"},
		"tcp plaintext":    {inboundConn{9000, false, []string{"http/1.1"}}, "plaintext tcp inbound|9000||"},
		"sniffed app tls":  {inboundConn{8000, true, appTLS}, "plaintext tcp inbound|8000||"},
		"sniffed mesh":     {inboundConn{8000, true, meshTCP}, "mtls tcp inbound|8000||"},
		"sniffed mesh http": {inboundConn{8000, true, meshHTTP},
			"mtls http inbound|8000||"},
	})
	frontend := ldsFind(t, ldsGenerate(t, g, ldsFrontend, push, wildcard(ListenerType)), VirtualInboundListener)
	checkInbound(t, frontend, map[string]inboundCase{
		"http app tls":      {inboundConn{8080, true, appTLS}, "closed"},
		"http app tls bare": {inboundConn{8080, true, nil}, "closed"},
		"http mesh":         {inboundConn{8080, true, meshHTTP}, "mtls http inbound|8080||"},
		"http mesh tcp alpn": {inboundConn{8080, true, meshTCP},
			"mtls http inbound|8080||"},
		"http mesh h2":   {inboundConn{8080, true, []string{"istio-h2", "h2"}}, "mtls http inbound|8080||"},
		"http plaintext": {inboundConn{8080, false, []string{"http/1.1"}}, "plaintext http inbound|8080||"},
	})
	// reviews: STRICT but 9080 PERMISSIVE; 17070 (gRPC) STRICT.
	reviews := ldsFind(t, ldsGenerate(t, g, ldsReviews, push, wildcard(ListenerType)), VirtualInboundListener)
	checkInbound(t, reviews, map[string]inboundCase{
		"strict app tls":   {inboundConn{17070, true, appTLS}, "mtls http inbound|17070||"},
		"strict mesh":      {inboundConn{17070, true, []string{"istio-h2", "istio", "h2"}}, "mtls http inbound|17070||"},
		"strict plaintext": {inboundConn{17070, false, []string{"h2c"}}, "closed"},
		"permissive app":   {inboundConn{9080, true, appTLS}, "closed"},
	})
}

// HTTP to a port no service declares is sniffed and served through a connection manager, so the HTTP
// authorization rules apply to it, as istiod's catch-all chains do; other bytes pass as TCP with the L4
// rules; the workload-wide mTLS mode governs.
func TestListenerInboundOtherPortSniffed(t *testing.T) {
	push := ldsPush(t, nil, sniffLegacy)
	g := New(Options{})
	legacy := ldsFind(t, ldsGenerate(t, g, ldsLegacy, push, wildcard(ListenerType)), VirtualInboundListener)
	const other = 12345
	pass := InboundPassthroughCluster
	checkInbound(t, legacy, map[string]inboundCase{
		"http/1.1":  {inboundConn{other, false, []string{"http/1.1"}}, "plaintext http " + pass},
		"h2c":       {inboundConn{other, false, []string{"h2c"}}, "plaintext http " + pass},
		"http/1.0":  {inboundConn{other, false, []string{"http/1.0"}}, "plaintext tcp " + pass},
		"bytes":     {inboundConn{other, false, nil}, "plaintext tcp " + pass},
		"mesh http": {inboundConn{other, true, meshHTTP}, "mtls http " + pass},
		"mesh tcp":  {inboundConn{other, true, meshTCP}, "mtls tcp " + pass},
		"app tls":   {inboundConn{other, true, appTLS}, "plaintext tcp " + pass},
		"tcp port":  {inboundConn{9000, false, []string{"http/1.1"}}, "plaintext tcp inbound|9000||"},
		"http1.0 tcp": {inboundConn{9000, false, []string{"http/1.0"}},
			"plaintext tcp inbound|9000||"},
	})
	// Both HTTP chains carry the workload's HTTP rules (GET /health only), the TCP ones its L4 rules.
	for _, c := range []inboundConn{{other, false, []string{"http/1.1"}}, {other, true, meshHTTP}} {
		fc := inboundPick(t, legacy, c)
		h := ldsHCMOf(t, fc)
		if h.HttpFilters[0].Name != httpRBACFilter {
			t.Errorf("chain %s: http filters start with %s, want the RBAC filter", fc.Name, h.HttpFilters[0].Name)
		}
		if got := h.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetRetryPolicy().GetRetryOn(); got != "reset-before-request" {
			t.Errorf("chain %s: retry on %q, want istiod's inbound default", fc.Name, got)
		}
	}
	for _, c := range []inboundConn{{other, false, nil}, {other, true, meshTCP}, {other, true, appTLS}} {
		if fc := inboundPick(t, legacy, c); !slices.Equal(filterNames(fc), []string{tcpRBACFilter, ldsTCPProxyFilterName}) {
			t.Errorf("chain %s: filters %v, want L4 RBAC and tcp_proxy", fc.Name, filterNames(fc))
		}
	}
	// The http_inspector waits for the client's bytes on every port but the declared TCP one.
	for _, f := range legacy.ListenerFilters {
		if f.Name == ldsHTTPInspectorFilter && (!listenerFilterRuns(f, other) || !listenerFilterRuns(f, 8000) || listenerFilterRuns(f, 9000)) {
			t.Errorf("http_inspector disabled %v, want on every port but 9000", f.FilterDisabled)
		}
	}
	// A STRICT workload refuses plaintext on any port.
	reviews := ldsFind(t, ldsGenerate(t, g, ldsReviews, push, wildcard(ListenerType)), VirtualInboundListener)
	checkInbound(t, reviews, map[string]inboundCase{
		"strict http":      {inboundConn{other, false, []string{"http/1.1"}}, "closed"},
		"strict bytes":     {inboundConn{other, false, nil}, "closed"},
		"strict mesh http": {inboundConn{other, true, meshHTTP}, "mtls http " + pass},
		"strict mesh tcp":  {inboundConn{other, true, meshTCP}, "mtls tcp " + pass},
		"strict app tls":   {inboundConn{other, true, appTLS}, "mtls tcp " + pass},
	})
	// DISABLE (mysql): plaintext on any port, TLS passed as it came.
	mysql := ldsFind(t, ldsGenerate(t, g, ldsMySQL, push, wildcard(ListenerType)), VirtualInboundListener)
	checkInbound(t, mysql, map[string]inboundCase{
		"disable http":    {inboundConn{other, false, []string{"http/1.1"}}, "plaintext http " + pass},
		"disable tls":     {inboundConn{other, true, appTLS}, "plaintext tcp " + pass},
		"disable mesh":    {inboundConn{other, true, meshHTTP}, "plaintext tcp " + pass},
		"disable port":    {inboundConn{3306, true, meshTCP}, "plaintext tcp inbound|3306||"},
		"disable port pl": {inboundConn{3306, false, nil}, "plaintext tcp inbound|3306||"},
	})
}

// A port-level mTLS mode governs its port, declared or not: STRICT on a port no service declares refuses
// plaintext there, as istiod's per-port passthrough chains; DISABLE on a declared port passes TLS to the
// application (the tls_inspector does not run there).
func TestListenerInboundPortLevelModes(t *testing.T) {
	push := ldsPush(t, nil, sniffLegacy, `
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: legacy, namespace: shop}
spec:
  selector: {matchLabels: {app: legacy}}
  mtls: {mode: PERMISSIVE}
  portLevelMtls:
    7777: {mode: STRICT}
    9000: {mode: DISABLE}
`)
	legacy := ldsFind(t, ldsGenerate(t, New(Options{}), ldsLegacy, push, wildcard(ListenerType)), VirtualInboundListener)
	pass := InboundPassthroughCluster
	checkInbound(t, legacy, map[string]inboundCase{
		"strict port plaintext": {inboundConn{7777, false, []string{"http/1.1"}}, "closed"},
		"strict port bytes":     {inboundConn{7777, false, nil}, "closed"},
		"strict port mesh":      {inboundConn{7777, true, meshHTTP}, "mtls http " + pass},
		"strict port app tls":   {inboundConn{7777, true, appTLS}, "mtls tcp " + pass},
		"other port":            {inboundConn{7778, false, []string{"http/1.1"}}, "plaintext http " + pass},
		"disable port tls":      {inboundConn{9000, true, appTLS}, "plaintext tcp inbound|9000||"},
		"disable port mesh":     {inboundConn{9000, true, meshTCP}, "plaintext tcp inbound|9000||"},
		"disable port bytes":    {inboundConn{9000, false, nil}, "plaintext tcp inbound|9000||"},
	})
}

// Inbound mesh mTLS negotiates istiod's server ALPN: HTTP chains offer h2 and http/1.1 only (a client
// offering h2 with Istio's protocols gets h2), TCP chains istio-peer-exchange first.
func TestListenerInboundServerALPN(t *testing.T) {
	push := ldsPush(t, nil, sniffLegacy)
	for _, proxy := range []*model.Proxy{ldsLegacy, ldsReviews, ldsFrontend} {
		in := ldsFind(t, ldsGenerate(t, New(Options{}), proxy, push, wildcard(ListenerType)), VirtualInboundListener)
		for _, fc := range in.FilterChains {
			if fc.TransportSocket == nil {
				continue
			}
			ctx := &tlsv3.DownstreamTlsContext{}
			if err := fc.TransportSocket.GetTypedConfig().UnmarshalTo(ctx); err != nil {
				t.Fatal(err)
			}
			want := []string{"istio-peer-exchange", "h2", "http/1.1"}
			if fc.Filters[len(fc.Filters)-1].Name == ldsHCMFilter {
				want = []string{"h2", "http/1.1"}
			}
			if got := ctx.GetCommonTlsContext().GetAlpnProtocols(); !slices.Equal(got, want) {
				t.Errorf("%s chain %s: server ALPN %v, want %v", proxy.Name, fc.Name, got, want)
			}
		}
	}
}
