package envoy

import (
	"slices"
	"testing"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/envoy/authpolicy"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
)

// A DENY-everything policy bound by targetRefs to the Gateway API Gateway shop-gw: it must reach that
// gateway's pods (their gateway-name label) and no ordinary sidecar of the namespace.
const targetRefDenyAll = `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: gw-deny-all, namespace: shop}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: shop-gw}]
  action: DENY
  rules: [{}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: waypoint-deny-all, namespace: shop}
spec:
  targetRefs: [{kind: Service, name: frontend}]
  action: DENY
  rules: [{}]
`

func TestTargetRefPolicyReachesOnlyItsGateway(t *testing.T) {
	push := ldsPush(t, nil, targetRefDenyAll)
	// The frontend had no policy: its inbound listener still has no RBAC filter.
	in := ldsFind(t, ldsGenerate(t, New(Options{}), ldsFrontend, push, wildcard(ListenerType)), VirtualInboundListener)
	for _, name := range []string{"inbound_passthrough_plaintext", "inbound_0.0.0.0_8080_tls"} {
		fc := ldsChain(t, in, name)
		if slices.Contains(filterNames(fc), tcpRBACFilter) {
			t.Errorf("frontend chain %s: filters %v: a targetRef policy reached a sidecar", name, filterNames(fc))
		}
		if name != "inbound_passthrough_plaintext" {
			h := ldsHCMOf(t, fc)
			for _, f := range h.HttpFilters {
				if f.Name == httpRBACFilter {
					t.Errorf("frontend chain %s: an HTTP RBAC filter from a targetRef policy", name)
				}
			}
		}
	}
	// reviews keeps exactly its own two selector policies (DENY then ALLOW), nothing from the targetRef ones.
	if got := push.AuthorizationPolicies("shop", ldsReviews.Labels); len(got.Deny) != 1 || got.Deny[0].Name != "reviews-deny" {
		t.Errorf("reviews DENY policies %v", got.Deny)
	}
	// The gateway's pods get the Gateway-bound policy, and its RBAC denies on their listener.
	gwPod := ldsSidecar("shop-gw-1", "10.1.0.9", map[string]string{config.GatewayNameLabel: "shop-gw"})
	got := push.AuthorizationPolicies("shop", gwPod.Labels)
	if len(got.Deny) != 1 || got.Deny[0].Name != "gw-deny-all" {
		t.Fatalf("gateway pod DENY policies %v, want gw-deny-all alone", got.Deny)
	}
	filters, _ := authpolicy.TCPFilters(got, authpolicy.Env{TrustDomain: "cluster.local"})
	if len(filters) != 1 || filters[0].Name != tcpRBACFilter {
		t.Errorf("gateway pod TCP RBAC %v", filters)
	}
	// Another Gateway's pods do not.
	if got := push.AuthorizationPolicies("shop", map[string]string{config.GatewayNameLabel: "other-gw"}); !got.Empty() {
		t.Errorf("pods of another Gateway get %+v", got)
	}
}

// A Sidecar without egress sees every service, as without a Sidecar (istiod's */* default).
func TestSidecarWithoutEgressSeesEveryService(t *testing.T) {
	const sidecar = `
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: shop}
spec:
  outboundTrafficPolicy: {mode: ALLOW_ANY}
`
	without := ldsPush(t, nil)
	with := ldsPush(t, nil, sidecar)
	if with.Sidecar("shop", ldsFrontend.Labels) == nil {
		t.Fatal("the Sidecar does not apply to the frontend")
	}
	want := listenerNames(ldsGenerate(t, New(Options{}), ldsFrontend, without, wildcard(ListenerType)))
	got := listenerNames(ldsGenerate(t, New(Options{}), ldsFrontend, with, wildcard(ListenerType)))
	if !slices.Equal(got, want) {
		t.Errorf("listeners under a Sidecar without egress:\n got %v\nwant %v", got, want)
	}
	if !slices.Equal(want, ldsSidecarOutboundNames) {
		t.Errorf("listeners without a Sidecar %v", want)
	}
}

// REGISTRY_ONLY: what no listener takes goes to BlackHoleCluster, HTTP to a Host no service answers gets 502.
func TestRegistryOnly(t *testing.T) {
	sidecar := func(policy string) string {
		return `
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: shop}
spec:
  egress: [{hosts: ["./*"]}]
  outboundTrafficPolicy: ` + policy + "\n"
	}
	registryOnly := mesh.Default()
	registryOnly.OutboundTrafficPolicy.Mode = mesh.RegistryOnly
	egressGW := "{mode: ALLOW_ANY, egressProxy: {host: egress.istio-system.svc.cluster.local, port: {number: 443}}}"
	cases := []struct {
		name    string
		mesh    *mesh.Config
		extra   []string
		blocked bool
	}{
		{"mesh default", nil, nil, false},
		{"mesh REGISTRY_ONLY", registryOnly, nil, true},
		{"Sidecar REGISTRY_ONLY", nil, []string{sidecar("{mode: REGISTRY_ONLY}")}, true},
		{"Sidecar ALLOW_ANY over mesh REGISTRY_ONLY", registryOnly, []string{sidecar("{mode: ALLOW_ANY}")}, false},
		// An egress proxy is not implemented: refused rather than let out around it.
		{"Sidecar egressProxy", nil, []string{sidecar(egressGW)}, true},
	}
	// One generator for all: the cached capture listener must follow the policy. By port, every table has
	// services, so the VHDS Envoy's are in the VHDS shape with the catch-all inline.
	g := newByPort()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			push := ldsPush(t, tc.mesh, tc.extra...)
			wantCluster, wantVH := PassthroughCluster, AllowAnyVirtualHost
			if tc.blocked {
				wantCluster, wantVH = BlackHoleCluster, BlockAllVirtualHost
			}
			out := ldsFind(t, ldsGenerate(t, g, ldsFrontend, push, wildcard(ListenerType)), VirtualOutboundListener)
			if len(out.FilterChains) != 2 { // the capture port's own blackhole chain, then the catch-all
				t.Fatalf("virtualOutbound chains %d", len(out.FilterChains))
			}
			if tp := ldsTCPProxyOf(t, out.FilterChains[1]); tp.GetCluster() != wantCluster || tp.StatPrefix != wantCluster {
				t.Errorf("catch-all chain to %q (stat prefix %q), want %s", tp.GetCluster(), tp.StatPrefix, wantCluster)
			}
			// Inline route tables, and those of an Envoy that gets its virtual hosts over VHDS (the catch-all stays inline).
			for _, proxy := range []*model.Proxy{ldsFrontend, envoyProxy("shop", ldsFrontend.Labels, true, 1, 38)} {
				rcs := generateRoutes(t, g, proxy, push, named(RouteType, "80", "9080"))
				if len(rcs) != 2 {
					t.Fatalf("route configurations %v", routeNames(rcs))
				}
				for _, rc := range rcs {
					if (proxy != ldsFrontend) != (rc.Vhds != nil) {
						t.Errorf("route configuration %s: vhds %v for proxy %s", rc.Name, rc.Vhds, proxy.ID)
					}
					last := rc.VirtualHosts[len(rc.VirtualHosts)-1]
					if last.Name != wantVH || !slices.Equal(last.Domains, []string{"*"}) || len(last.Routes) != 1 {
						t.Fatalf("route configuration %s: last virtual host %s %v, want %s on *", rc.Name, last.Name, last.Domains, wantVH)
					}
					r := last.Routes[0]
					if tc.blocked {
						if r.GetDirectResponse().GetStatus() != 502 || r.GetRoute() != nil || r.Name != BlockAllVirtualHost {
							t.Errorf("route configuration %s: block_all route %v, want a 502 direct response", rc.Name, r)
						}
					} else if r.GetRoute().GetCluster() != PassthroughCluster {
						t.Errorf("route configuration %s: allow_any route %v", rc.Name, r)
					}
					if _, ok := r.Action.(*route.Route_DirectResponse); ok != tc.blocked {
						t.Errorf("route configuration %s: direct response %v, want %v", rc.Name, ok, tc.blocked)
					}
				}
			}
		})
	}
}
