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
	security "istio.io/api/security/v1beta1"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/model"
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

// What a gRPC server cannot honour denies: CUSTOM policies deny what they match, a DENY rule on a header
// gRPC refuses denies everything, an ALLOW rule on one allows nothing; AUDIT is reported and left out.
func TestGRPCRBACFailsClosed(t *testing.T) {
	push := ldsPush(t, nil, `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: ext, namespace: shop}
spec:
  selector: {matchLabels: {app: mysql}}
  action: CUSTOM
  provider: {name: nowhere}
  rules: [{to: [{operation: {paths: [/secret]}}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: audit, namespace: shop}
spec:
  selector: {matchLabels: {app: mysql}}
  action: AUDIT
  rules: [{}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-timeout, namespace: shop}
spec:
  selector: {matchLabels: {app: mysql}}
  action: DENY
  rules: [{when: [{key: "request.headers[grpc-timeout]", values: ["1S"]}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow-scheme, namespace: shop}
spec:
  selector: {matchLabels: {app: mysql}}
  action: ALLOW
  rules: [{when: [{key: "request.headers[:scheme]", values: ["https"]}]}]
`)
	policies := push.AuthorizationPolicies("shop", map[string]string{"app": "mysql"})
	env := newAuthzEnv(push, policies)
	env.jwt = &jwtAuthn{rules: []jwtRule{{rule: &security.JWTRule{Issuer: "https://issuer.example",
		FromHeaders: []*security.JWTHeader{{Name: "X-Token"}}}, source: config.Key{Namespace: "shop", Name: "jwt"}}}}
	filters, notes := buildGRPCRBAC(policies, env)
	var names []string
	rules := map[string]*rbacpb.RBAC{}
	for _, f := range filters {
		names = append(names, f.Name)
		r := &rbachttp.RBAC{}
		if err := f.GetTypedConfig().UnmarshalTo(r); err != nil {
			t.Fatal(err)
		}
		if err := r.ValidateAll(); err != nil {
			t.Error(err)
		}
		rules[f.Name] = r.Rules
	}
	if want := []string{grpcRBACJWTFilter, grpcRBACCustomFilter, grpcRBACDenyFilter, grpcRBACAllowFilter}; !slices.Equal(names, want) {
		t.Fatalf("filters %v, want %v", names, want)
	}
	jwt := rules[grpcRBACJWTFilter].Policies["ns[shop]-requestauthentication[jwt]-rule[0]"]
	if h := jwt.GetPrincipals()[0].GetOrIds().GetIds()[0].GetHeader(); h.GetName() != "x-token" || !h.GetPresentMatch() {
		t.Errorf("JWT: %v, want requests with header x-token denied", jwt)
	}
	if r := rules[grpcRBACCustomFilter]; r.Action != rbacpb.RBAC_DENY || len(r.Policies) != 1 {
		t.Errorf("CUSTOM as DENY: %v", r)
	}
	deny := rules[grpcRBACDenyFilter].Policies["ns[shop]-policy[deny-timeout]-rule[0]"]
	if deny == nil || deny.Principals[0].GetAny() != true || deny.Permissions[0].GetAny() != true {
		t.Errorf("DENY on grpc-timeout: %v, want deny everything", deny)
	}
	if p := rules[grpcRBACAllowFilter].Policies; p["ns[shop]-policy[allow-scheme]-rule[0]"] != nil || len(p) != 1 {
		t.Errorf("ALLOW policies %v, want mysql's alone (the :scheme rule dropped)", p)
	}
	for _, want := range []string{"RequestAuthentication shop/jwt rule 0", "CUSTOM policies [shop/ext]",
		"AUDIT policies [shop/audit] not applied", `grpc-timeout`, `":scheme"`} {
		if !slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, want) }) {
			t.Errorf("no note saying %q in %q", want, notes)
		}
	}
	for _, f := range filters {
		r := &rbachttp.RBAC{}
		_ = f.GetTypedConfig().UnmarshalTo(r)
		for _, p := range r.GetRules().GetPolicies() {
			for _, pr := range p.Principals {
				if h := grpcRefusedPrincipalHeader(pr); h != "" {
					t.Errorf("%s still matches header %s", f.Name, h)
				}
			}
		}
	}
}
