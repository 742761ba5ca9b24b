package envoy

import (
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	rbachttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	rbacnet "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/tests/rbactest"
)

// Policies on the ingress gateway of testdata/lds/mesh.yaml (istio-system, istio: ingressgateway): an edge
// allow-list by downstream address, a DENY by the connection's peer address, and a policy for another
// gateway that must not reach this one.
const gatewayPolicies = `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: edge-allow, namespace: istio-system}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  action: ALLOW
  rules: [{from: [{source: {remoteIpBlocks: [203.0.113.0/24, 198.51.100.7]}}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: lb-deny, namespace: istio-system}
spec:
  selector: {matchLabels: {istio: ingressgateway}}
  action: DENY
  rules: [{from: [{source: {ipBlocks: [10.9.0.0/16]}}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: egress-deny-all, namespace: istio-system}
spec:
  selector: {matchLabels: {istio: egressgateway}}
  action: DENY
  rules: [{}]
`

func gwCIDR(addr string, bits uint32) *core.CidrRange {
	return &core.CidrRange{AddressPrefix: addr, PrefixLen: wrapperspb.UInt32(bits)}
}

// gwWantRules are the rule sets the gateway's filters must hold, DENY then ALLOW, each principal exactly
// the policy's blocks: remoteIpBlocks as remote_ip (the downstream address the gateway's connection
// manager derives), ipBlocks as direct_remote_ip (the connection's peer).
func gwWantRules() []*rbacpb.RBAC {
	or := func(ids ...*rbacpb.Principal) *rbacpb.Principal {
		anyOf := &rbacpb.Principal{Identifier: &rbacpb.Principal_OrIds{OrIds: &rbacpb.Principal_Set{Ids: ids}}}
		return &rbacpb.Principal{Identifier: &rbacpb.Principal_AndIds{AndIds: &rbacpb.Principal_Set{Ids: []*rbacpb.Principal{anyOf}}}}
	}
	anyPerm := []*rbacpb.Permission{{Rule: &rbacpb.Permission_AndRules{AndRules: &rbacpb.Permission_Set{
		Rules: []*rbacpb.Permission{{Rule: &rbacpb.Permission_Any{Any: true}}}}}}}
	return []*rbacpb.RBAC{
		{Action: rbacpb.RBAC_DENY, Policies: map[string]*rbacpb.Policy{"ns[istio-system]-policy[lb-deny]-rule[0]": {
			Permissions: anyPerm,
			Principals: []*rbacpb.Principal{or(&rbacpb.Principal{
				Identifier: &rbacpb.Principal_DirectRemoteIp{DirectRemoteIp: gwCIDR("10.9.0.0", 16)}})},
		}}},
		{Action: rbacpb.RBAC_ALLOW, Policies: map[string]*rbacpb.Policy{"ns[istio-system]-policy[edge-allow]-rule[0]": {
			Permissions: anyPerm,
			Principals: []*rbacpb.Principal{or(
				&rbacpb.Principal{Identifier: &rbacpb.Principal_RemoteIp{RemoteIp: gwCIDR("203.0.113.0", 24)}},
				&rbacpb.Principal{Identifier: &rbacpb.Principal_RemoteIp{RemoteIp: gwCIDR("198.51.100.7", 32)}},
			)},
		}}},
	}
}

// gwHTTPRules decodes the RBAC filters of a gateway chain's connection manager, checking they come before
// the rest of the HTTP filters.
func gwHTTPRules(t *testing.T, fc *listener.FilterChain) []*rbacpb.RBAC {
	t.Helper()
	var out []*rbacpb.RBAC
	for i, f := range ldsHCMOf(t, fc).HttpFilters {
		if f.Name != httpRBACFilter {
			continue
		}
		if i != len(out) {
			t.Errorf("chain %s: RBAC filter at %d, after another filter", fc.Name, i)
		}
		r := &rbachttp.RBAC{}
		if err := f.GetTypedConfig().UnmarshalTo(r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r.Rules)
	}
	return out
}

// gwTCPRules decodes the network RBAC filters of a chain, checking they come before tcp_proxy.
func gwTCPRules(t *testing.T, fc *listener.FilterChain) []*rbacpb.RBAC {
	t.Helper()
	var out []*rbacpb.RBAC
	for i, f := range fc.Filters {
		if f.Name != tcpRBACFilter {
			continue
		}
		if i != len(out) {
			t.Errorf("chain %s: network RBAC filter at %d, after another filter", fc.Name, i)
		}
		r := &rbacnet.RBAC{}
		if err := f.GetTypedConfig().UnmarshalTo(r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r.Rules)
	}
	if names := filterNames(fc); names[len(names)-1] != ldsTCPProxyFilterName {
		t.Errorf("chain %s filters %v, want tcp_proxy last", fc.Name, names)
	}
	return out
}

func equalRules(t *testing.T, where string, got, want []*rbacpb.RBAC) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d rule sets, want %d: %v", where, len(got), len(want), got)
		return
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("%s: rule set %d\n got %v\nwant %v", where, i, got[i], want[i])
		}
	}
}

func TestGatewayListenersCarryAuthorization(t *testing.T) {
	push := ldsPush(t, nil, gatewayPolicies)
	ls := ldsGenerate(t, New(Options{}), ldsGateway, push, wildcard(ListenerType))
	want := gwWantRules()
	http := ldsFind(t, ls, "0.0.0.0_80")
	equalRules(t, "0.0.0.0_80", gwHTTPRules(t, http.FilterChains[0]), want)
	https := ldsFind(t, ls, "0.0.0.0_443")
	for _, name := range []string{"0.0.0.0_443/shop.example.com", "0.0.0.0_443/partners.example.com"} {
		equalRules(t, name, gwHTTPRules(t, ldsChain(t, https, name)), want)
	}
	// TLS passthrough is TCP to the gateway: the network filter, with the same (L4-checkable) principals.
	pass := "0.0.0.0_443/app.secure.example.com"
	equalRules(t, pass, gwTCPRules(t, ldsChain(t, https, pass)), want)

	// Without policies the chains keep no RBAC filter.
	bare := ldsGenerate(t, New(Options{}), ldsGateway, ldsPush(t, nil), wildcard(ListenerType))
	if got := gwHTTPRules(t, ldsFind(t, bare, "0.0.0.0_80").FilterChains[0]); len(got) != 0 {
		t.Errorf("no policy, yet RBAC %v", got)
	}
}

// Two proxies of the same Gateway with different labels get the policies of their own labels: the cached
// listener of one must not be served to the other.
func TestGatewayAuthorizationFollowsProxyLabels(t *testing.T) {
	// Same Gateway for both proxies; a DENY-all policy only the canary's labels select.
	push := ldsPush(t, nil, gatewayPolicies, `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: canary-deny, namespace: istio-system}
spec:
  selector: {matchLabels: {role: canary}}
  action: DENY
  rules: [{}]
`)
	g := New(Options{})
	canary := *ldsGateway
	canary.ID, canary.NodeID = "gw-2.istio-system", "router~10.1.1.2~gw-2.istio-system~istio-system.svc.cluster.local"
	canary.Labels = map[string]string{"istio": "ingressgateway", "role": "canary"}
	for _, p := range []*model.Proxy{ldsGateway, &canary, ldsGateway} {
		got := gwHTTPRules(t, ldsFind(t, ldsGenerate(t, g, p, push, wildcard(ListenerType)), "0.0.0.0_80").FilterChains[0])
		if p == ldsGateway {
			equalRules(t, "ingress", got, gwWantRules())
		} else if len(got) != 2 || got[0].Policies["ns[istio-system]-policy[canary-deny]-rule[0]"] == nil {
			t.Errorf("canary RBAC %v", got)
		}
	}
}

// A policy with targetRefs to a Gateway API Gateway reaches the listeners of that Gateway's pods.
func TestGatewayTargetRefPolicyOnListeners(t *testing.T) {
	push := ldsPush(t, nil, `
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: shop-gw-servers, namespace: shop}
spec:
  selector: {`+config.GatewayNameLabel+`: shop-gw}
  servers:
  - port: {number: 8080, name: http, protocol: HTTP}
    hosts: ["*"]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: gw-deny-admin, namespace: shop}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: shop-gw}]
  action: DENY
  rules: [{to: [{operation: {paths: [/admin]}}]}]
`)
	pod := &model.Proxy{Type: model.Router, NodeID: "router~10.1.0.9~shop-gw-1.shop~shop.svc.cluster.local", ID: "shop-gw-1.shop",
		Namespace: "shop", IPAddresses: []string{"10.1.0.9"}, Labels: map[string]string{config.GatewayNameLabel: "shop-gw"}}
	ls := ldsGenerate(t, New(Options{}), pod, push, wildcard(ListenerType))
	rules := gwHTTPRules(t, ldsFind(t, ls, "0.0.0.0_8080").FilterChains[0])
	if len(rules) != 1 || rules[0].Action != rbacpb.RBAC_DENY || rules[0].Policies["ns[shop]-policy[gw-deny-admin]-rule[0]"] == nil {
		t.Fatalf("rules %v", rules)
	}
	if !rbactest.Allowed(t, rules, rbactest.Request{Path: "/"}) || rbactest.Allowed(t, rules, rbactest.Request{Path: "/admin"}) {
		t.Error("the DENY rule does not deny exactly /admin")
	}
}
