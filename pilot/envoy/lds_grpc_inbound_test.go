package envoy

import (
	"slices"
	"strings"
	"testing"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	rbachttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/sextantmesh/sextant/pilot/model"
)

// A gRPC server's RBAC filters are named apart: gRPC NACKs two filters of one name.
const (
	grpcRBACAllowFilter = httpRBACFilter
	grpcRBACDenyFilter  = httpRBACFilter + ".DENY"
)

// ldsGRPCServer is reviews-1 (10.1.0.5) as an xDS-enabled gRPC server.
var ldsGRPCServer = &model.Proxy{Type: model.GRPC, NodeID: "sidecar~10.1.0.5~reviews-1.shop~shop.svc.cluster.local",
	ID: "reviews-1.shop", Namespace: "shop", IPAddresses: []string{"10.1.0.5"}}

func grpcServerHCM(t *testing.T, l *listener.Listener) *hcm.HttpConnectionManager {
	t.Helper()
	if len(l.FilterChains) != 1 || len(l.FilterChains[0].Filters) != 1 {
		t.Fatalf("%s: want one chain with one filter, got %v", l.Name, l.FilterChains)
	}
	return ldsDecodeHCM(t, l.FilterChains[0].Filters[0].GetTypedConfig())
}

func grpcRBACFilters(t *testing.T, h *hcm.HttpConnectionManager) map[string]*rbacpb.RBAC {
	t.Helper()
	out := map[string]*rbacpb.RBAC{}
	for _, f := range h.HttpFilters {
		if !strings.HasPrefix(f.Name, httpRBACFilter) {
			continue
		}
		r := &rbachttp.RBAC{}
		if err := f.GetTypedConfig().UnmarshalTo(r); err != nil {
			t.Fatal(err)
		}
		out[f.Name] = r.Rules
	}
	return out
}

// A gRPC server asks for its listeners by address: it gets one on each workload port, with the port's
// mTLS mode and the workload's RBAC, and none on a port that is not the workload's.
func TestListenerGRPCServer(t *testing.T) {
	push := ldsPush(t, nil)
	g := New(Options{})
	strict := GRPCServerListenerPrefix + "10.1.0.5:17070" // reviews' grpc-port: STRICT
	permissive := GRPCServerListenerPrefix + "0.0.0.0:9080"
	got := ldsGenerate(t, g, ldsGRPCServer, push, named(ListenerType, strict, permissive,
		GRPCServerListenerPrefix+"10.1.0.5:5555", GRPCServerListenerPrefix+"garbage", "reviews:9080"))
	if names := listenerNames(got); !slices.Equal(names, []string{"reviews:9080", permissive, strict}) {
		t.Fatalf("listeners %v", names)
	}

	s := ldsFind(t, got, strict)
	if a := s.GetAddress().GetSocketAddress(); a.GetAddress() != "10.1.0.5" || a.GetPortValue() != 17070 {
		t.Errorf("%s: address %v", strict, a)
	}
	if s.ListenerFilters != nil || s.UseOriginalDst != nil {
		t.Errorf("%s: listener filters or use_original_dst (gRPC NACKs both)", strict)
	}
	ts := s.FilterChains[0].GetTransportSocket()
	if ts.GetName() != ldsTLSSocketName {
		t.Fatalf("STRICT port without TLS: %v", ts)
	}
	tc := &tlsv3.DownstreamTlsContext{}
	if err := ts.GetTypedConfig().UnmarshalTo(tc); err != nil {
		t.Fatal(err)
	}
	cc := tc.GetCommonTlsContext()
	if !tc.GetRequireClientCertificate().GetValue() || cc.GetTlsCertificateProviderInstance().GetInstanceName() != "default" ||
		cc.GetValidationContext().GetCaCertificateProviderInstance().GetCertificateName() != "ROOTCA" {
		t.Errorf("mTLS context %v", tc)
	}
	h := grpcServerHCM(t, s)
	vh := h.GetRouteConfig().GetVirtualHosts()
	if len(vh) != 1 || len(vh[0].Routes) != 1 || vh[0].Routes[0].GetNonForwardingAction() == nil {
		t.Errorf("inline route %v, want one non-forwarding route", h.GetRouteConfig())
	}
	var names []string
	for _, f := range h.HttpFilters {
		names = append(names, f.Name)
	}
	if want := []string{grpcRBACDenyFilter, grpcRBACAllowFilter, ldsRouterFilterName}; !slices.Equal(names, want) {
		t.Errorf("http filters %v, want %v (unique names: gRPC NACKs duplicates)", names, want)
	}
	rules := grpcRBACFilters(t, h)
	if rules[grpcRBACDenyFilter].GetAction() != rbacpb.RBAC_DENY || len(rules[grpcRBACDenyFilter].GetPolicies()) != 1 ||
		rules[grpcRBACAllowFilter].GetAction() != rbacpb.RBAC_ALLOW || len(rules[grpcRBACAllowFilter].GetPolicies()) != 3 {
		t.Errorf("rbac %v", rules)
	}

	// 9080 is PERMISSIVE: gRPC has one chain per port, so plaintext.
	if ts := ldsFind(t, got, permissive).FilterChains[0].GetTransportSocket(); ts != nil {
		t.Errorf("PERMISSIVE port got TLS %v", ts)
	}
	// With the auto mTLS label its clients send mTLS: the server takes mTLS.
	labelled := *ldsGRPCServer
	labelled.Labels = map[string]string{"app": "reviews", grpcTLSModeLabel: "istio"}
	l := ldsFind(t, ldsGenerate(t, g, &labelled, push, named(ListenerType, permissive)), permissive)
	if l.FilterChains[0].GetTransportSocket() == nil {
		t.Error("PERMISSIVE port with security.istio.io/tlsMode=istio: no TLS")
	}

	// A client (no workload) gets no server listener.
	if got := ldsGenerate(t, g, ldsGRPCClient, push, named(ListenerType, strict)); len(got) != 0 {
		t.Errorf("client got %v", listenerNames(got))
	}
}
