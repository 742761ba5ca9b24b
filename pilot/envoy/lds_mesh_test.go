package envoy

import (
	"slices"
	"testing"
	"time"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	meshconfig "istio.io/api/mesh/v1alpha1"

	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
)

func meshOf(t *testing.T, yaml string) *mesh.Config {
	t.Helper()
	m := mesh.Default()
	if err := mesh.Parse([]byte(yaml), m); err != nil {
		t.Fatal(err)
	}
	return m
}

// The mesh config's meshMTLS sets the versions and ciphers of the inbound mesh mTLS, as istiod's; one set
// of generators serves each mesh config in turn.
func TestInboundMeshMTLSParams(t *testing.T) {
	g := New(Options{})
	params := func(m *mesh.Config) *tlsv3.TlsParameters {
		in := ldsFind(t, ldsGenerate(t, g, ldsFrontend, ldsPush(t, m), wildcard(ListenerType)), VirtualInboundListener)
		ctx := &tlsv3.DownstreamTlsContext{}
		if err := ldsChain(t, in, "inbound_0.0.0.0_8080_tls").GetTransportSocket().GetTypedConfig().UnmarshalTo(ctx); err != nil {
			t.Fatal(err)
		}
		return ctx.GetCommonTlsContext().GetTlsParams()
	}
	p := params(mesh.Default())
	if p.GetTlsMinimumProtocolVersion() != tlsv3.TlsParameters_TLSv1_2 || !slices.Equal(p.GetCipherSuites(), ldsMeshCiphers) {
		t.Errorf("default mesh: %v, want TLS 1.2 and istiod's ciphers", p)
	}
	p = params(meshOf(t, "meshMTLS: {minProtocolVersion: TLSV1_3, cipherSuites: [ECDHE-RSA-AES256-GCM-SHA384]}\n"))
	if p.GetTlsMinimumProtocolVersion() != tlsv3.TlsParameters_TLSv1_3 || p.GetTlsMaximumProtocolVersion() != tlsv3.TlsParameters_TLSv1_3 ||
		!slices.Equal(p.GetCipherSuites(), []string{"ECDHE-RSA-AES256-GCM-SHA384"}) {
		t.Errorf("meshMTLS TLS 1.3: %v", p)
	}
}

// The mesh config's protocolDetectionTimeout bounds the inspectors' wait on the inbound capture listener and
// on outbound listeners that sniff HTTP, then the connection goes on; elsewhere nothing waits to time out.
func TestProtocolDetectionTimeout(t *testing.T) {
	g := New(Options{})
	for _, tc := range []struct {
		mesh *mesh.Config
		want time.Duration
	}{{mesh.Default(), 0}, {meshOf(t, "protocolDetectionTimeout: 2s\n"), 2 * time.Second}, {mesh.Default(), 0}} {
		ls := ldsGenerate(t, g, ldsFrontend, ldsPush(t, tc.mesh), wildcard(ListenerType))
		for _, l := range ls {
			sniffs := slices.ContainsFunc(l.ListenerFilters, func(f *listener.ListenerFilter) bool {
				return f.Name == ldsHTTPInspectorFilter
			})
			want := time.Duration(0)
			if sniffs || l.Name == VirtualInboundListener {
				want = tc.want
			}
			goesOn := l.GetContinueOnListenerFiltersTimeout() || l.Name == VirtualOutboundListener
			if got := l.GetListenerFiltersTimeout().AsDuration(); got != want || !goesOn {
				t.Errorf("mesh timeout %v: %s waits %v (continue %t), want %v", tc.want, l.Name, got, goesOn, want)
			}
		}
	}
}

// The capture listeners listen on the mesh config's proxyListenPort and proxyInboundListenPort, as istiod's,
// each dropping connections addressed to its own port; one set of generators follows each mesh config in turn.
func TestCapturePortsFromMesh(t *testing.T) {
	g := New(Options{})
	moved := meshOf(t, "proxyListenPort: 15101\nproxyInboundListenPort: 15106\n")
	for _, tc := range []struct {
		mesh    *mesh.Config
		out, in uint32
	}{{mesh.Default(), 15001, 15006}, {moved, 15101, 15106}, {mesh.Default(), 15001, 15006}} {
		ls := ldsGenerate(t, g, ldsFrontend, ldsPush(t, tc.mesh), wildcard(ListenerType))
		for _, want := range []struct {
			name string
			port uint32
		}{{VirtualOutboundListener, tc.out}, {VirtualInboundListener, tc.in}} {
			l := ldsFind(t, ls, want.name)
			if p := l.GetAddress().GetSocketAddress().GetPortValue(); p != want.port {
				t.Errorf("%s on port %d, want %d", want.name, p, want.port)
			}
			hole := ldsChain(t, l, want.name+"-blackhole")
			if p := hole.GetFilterChainMatch().GetDestinationPort().GetValue(); p != want.port ||
				ldsTCPProxyOf(t, hole).GetCluster() != BlackHoleCluster {
				t.Errorf("%s-blackhole matches port %d, want %d to BlackHoleCluster", want.name, p, want.port)
			}
		}
	}
}

// A sidecar's inbound connection managers follow its proxyHeaders as istiod's: the proxy's own ProxyConfig
// (PROXY_CONFIG) when it sends one, else the mesh's defaultConfig; a cached listener follows each in turn.
func TestInboundProxyHeaders(t *testing.T) {
	g := New(Options{})
	m := meshOf(t, "defaultConfig:\n  proxyHeaders:\n    server: {value: edge}\n    requestId: {disabled: true}\n"+
		"    envoyDebugHeaders: {disabled: true}\n    xForwardedPort: {enabled: true}\n    forwardedClientCert: SANITIZE\n")
	own := *ldsFrontend
	own.ProxyConfig = &meshconfig.ProxyConfig{ProxyHeaders: &meshconfig.ProxyConfig_ProxyHeaders{
		Server: &meshconfig.ProxyConfig_ProxyHeaders_Server{Disabled: wrapperspb.Bool(true)}}}
	for _, tc := range []struct {
		name   string
		proxy  *model.Proxy
		mesh   *mesh.Config
		server string
		pass   bool
		noID   bool
		fcc    hcm.HttpConnectionManager_ForwardClientCertDetails
	}{
		{"defaults", ldsFrontend, mesh.Default(), ldsServerName, false, false, hcm.HttpConnectionManager_APPEND_FORWARD},
		{"mesh", ldsFrontend, m, "edge", false, true, hcm.HttpConnectionManager_SANITIZE},
		{"proxy's own over the mesh's", &own, m, "", true, false, hcm.HttpConnectionManager_APPEND_FORWARD},
	} {
		in := ldsFind(t, ldsGenerate(t, g, tc.proxy, ldsPush(t, tc.mesh), wildcard(ListenerType)), VirtualInboundListener)
		hc := ldsHCMOf(t, ldsChain(t, in, "inbound_0.0.0.0_8080_plaintext"))
		router := &routerv3.Router{}
		if err := hc.HttpFilters[len(hc.HttpFilters)-1].GetTypedConfig().UnmarshalTo(router); err != nil {
			t.Fatal(err)
		}
		if hc.ServerName != tc.server || (hc.ServerHeaderTransformation == hcm.HttpConnectionManager_PASS_THROUGH) != tc.pass ||
			(hc.GenerateRequestId != nil && !hc.GenerateRequestId.Value) != tc.noID || hc.ForwardClientCertDetails != tc.fcc ||
			router.SuppressEnvoyHeaders != tc.noID || hc.AppendXForwardedPort != tc.noID {
			t.Errorf("%s: server %q %s, request id %v, xfcc %s, suppress %v, x-forwarded-port %v", tc.name, hc.ServerName,
				hc.ServerHeaderTransformation, hc.GenerateRequestId, hc.ForwardClientCertDetails, router.SuppressEnvoyHeaders,
				hc.AppendXForwardedPort)
		}
	}
}
