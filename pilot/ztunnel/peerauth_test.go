package ztunnel_test

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	istiosec "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"

	authz "github.com/sextantmesh/sextant/api/security"
	"github.com/sextantmesh/sextant/api/workload"
	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/ztunnel"
)

const staticStrict = "istio-system/istio_converted_static_strict"

type mtls = istiosec.PeerAuthentication_MutualTLS_Mode

const (
	unset      = istiosec.PeerAuthentication_MutualTLS_UNSET
	strict     = istiosec.PeerAuthentication_MutualTLS_STRICT
	permissive = istiosec.PeerAuthentication_MutualTLS_PERMISSIVE
	disable    = istiosec.PeerAuthentication_MutualTLS_DISABLE
)

// peerAuth adds a PeerAuthentication; a nil selector makes it namespace-wide (mesh-wide in istio-system).
func (f *fixture) peerAuth(ns, name string, selector map[string]string, mode mtls, portModes map[uint32]mtls) {
	pa := &istiosec.PeerAuthentication{Mtls: &istiosec.PeerAuthentication_MutualTLS{Mode: mode}}
	if selector != nil {
		pa.Selector = &typev1beta1.WorkloadSelector{MatchLabels: selector}
	}
	for p, m := range portModes {
		if pa.PortLevelMtls == nil {
			pa.PortLevelMtls = map[uint32]*istiosec.PeerAuthentication_MutualTLS{}
		}
		pa.PortLevelMtls[p] = &istiosec.PeerAuthentication_MutualTLS{Mode: m}
	}
	f.put(config.PeerAuthentication, ns, name, nil, nil, pa)
}

func decodeAuthz(t *testing.T, res model.Resources) map[string]*authz.Authorization {
	t.Helper()
	out := map[string]*authz.Authorization{}
	for _, r := range res {
		var a authz.Authorization
		if err := proto.Unmarshal(r.Any.Value, &a); err != nil || r.Any.TypeUrl != ztunnel.AuthorizationType {
			t.Fatalf("%s: %v %s", r.Name, err, r.Any.TypeUrl)
		}
		if r.Version == "" {
			t.Errorf("%s: no version", r.Name)
		}
		out[r.Name] = &a
	}
	return out
}

func fullAuthz(t *testing.T, g *ztunnel.Generators, ps *model.PushContext) map[string]*authz.Authorization {
	t.Helper()
	res, err := g.Authorization().Generate(ztunnelProxy(), ps, &model.WatchedResource{TypeURL: ztunnel.AuthorizationType, Wildcard: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return decodeAuthz(t, res)
}

func fullAddresses(t *testing.T, g *ztunnel.Generators, ps *model.PushContext) map[string]*workload.Address {
	t.Helper()
	res, err := g.Address().Generate(ztunnelProxy(), ps, wildcard, nil)
	if err != nil {
		t.Fatal(err)
	}
	return decodeAddresses(t, res)
}

func noIdentity() []*authz.StringMatch {
	return []*authz.StringMatch{{MatchType: &authz.StringMatch_Presence{Presence: &emptypb.Empty{}}}}
}

func wantStaticStrict() *authz.Authorization {
	return &authz.Authorization{Name: "istio_converted_static_strict", Namespace: "istio-system",
		Scope: authz.Scope_WORKLOAD_SELECTOR, Action: authz.Action_DENY,
		Rules: []*authz.Rule{{Clauses: []*authz.Clause{{Matches: []*authz.Match{{NotPrincipals: noIdentity()}}}}}}}
}

// checkPolicy compares one decoded policy field by field with the expected message.
func checkPolicy(t *testing.T, got map[string]*authz.Authorization, name string, want *authz.Authorization) {
	t.Helper()
	g, ok := got[name]
	switch {
	case want == nil && ok:
		t.Errorf("%s: unexpected policy %v", name, g)
	case want != nil && !ok:
		t.Errorf("%s: missing", name)
	case want != nil && !proto.Equal(g, want):
		t.Errorf("%s:\n got %v\nwant %v", name, g, want)
	}
}

// checkListed compares the authorization_policies of each workload.
func checkListed(t *testing.T, addrs map[string]*workload.Address, want map[string][]string) {
	t.Helper()
	for uid, w := range want {
		got := addrs[uid].GetWorkload().GetAuthorizationPolicies()
		if !equalStrings(got, w) {
			t.Errorf("%s: authorization_policies %q, want %q", uid, got, w)
		}
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

var ratingsListed = []string{"amb/allow-l7", "amb/allow-ratings"}

func TestPeerAuthMeshStrict(t *testing.T) {
	f := scenario(t)
	f.peerAuth("istio-system", "default", nil, strict, nil)
	ps := f.build()
	g := ztunnel.New()

	pols := fullAuthz(t, g, ps)
	checkPolicy(t, pols, staticStrict, wantStaticStrict())
	// The policies of the scenario are all still there.
	for _, n := range []string{"istio-system/global-deny", "amb/allow-ratings", "amb/allow-l7", "amb/ns-deny"} {
		if pols[n] == nil {
			t.Errorf("%s missing", n)
		}
	}
	if len(pols) != 5 {
		t.Errorf("%d policies, want 5", len(pols))
	}

	// Every workload lists the static policy after its selector policies; everything else is unchanged.
	want := expectedAddresses()
	for _, a := range want {
		if w := a.GetWorkload(); w != nil {
			w.AuthorizationPolicies = append(w.AuthorizationPolicies, staticStrict)
		}
	}
	checkAddresses(t, fullAddresses(t, g, ps), want)
}

func TestPeerAuthNamespacePermissiveOverridesMesh(t *testing.T) {
	f := scenario(t)
	f.peerAuth("istio-system", "default", nil, strict, nil)
	f.peerAuth("plain", "relaxed", nil, permissive, nil)
	ps := f.build()
	g := ztunnel.New()

	checkPolicy(t, fullAuthz(t, g, ps), staticStrict, wantStaticStrict())
	checkListed(t, fullAddresses(t, g, ps), map[string][]string{
		ratingsA: append(ratingsListed, staticStrict),
		legacy:   append(ratingsListed, staticStrict),
		client:   {staticStrict},
		vm1:      {staticStrict},
		web0:     nil,
		web1:     nil,
	})

	// A workload-level STRICT in the permissive namespace overrides it again, for the workloads it selects.
	f.peerAuth("plain", "web-strict", map[string]string{"app": "web"}, strict, nil)
	ps = f.build()
	checkListed(t, fullAddresses(t, g, ps), map[string][]string{web0: {staticStrict}, web1: nil})

	// DISABLE on the namespace is PERMISSIVE for ztunnel.
	f = scenario(t)
	f.peerAuth("istio-system", "default", nil, strict, nil)
	f.peerAuth("plain", "off", nil, disable, nil)
	checkListed(t, fullAddresses(t, g, f.build()), map[string][]string{web0: nil, web1: nil, client: {staticStrict}})

	// UNSET on the namespace inherits the mesh's STRICT.
	f = scenario(t)
	f.peerAuth("istio-system", "default", nil, strict, nil)
	f.peerAuth("plain", "inherit", nil, unset, nil)
	checkListed(t, fullAddresses(t, g, f.build()), map[string][]string{web0: {staticStrict}, web1: {staticStrict}})
}

func TestPeerAuthWorkloadStrictWithPortDisable(t *testing.T) {
	f := scenario(t)
	f.peerAuth("plain", "web-strict", map[string]string{"app": "web"}, strict, map[uint32]mtls{8080: disable, 9090: strict})
	ps := f.build()
	g := ztunnel.New()

	const converted = "plain/converted_peer_authentication_web-strict"
	pols := fullAuthz(t, g, ps)
	// Deny a peer without identity unless it connects to port 8080.
	checkPolicy(t, pols, converted, &authz.Authorization{Name: "converted_peer_authentication_web-strict", Namespace: "plain",
		Scope: authz.Scope_WORKLOAD_SELECTOR, Action: authz.Action_DENY,
		Rules: []*authz.Rule{{Clauses: []*authz.Clause{
			{Matches: []*authz.Match{{NotPrincipals: noIdentity()}}},
			{Matches: []*authz.Match{{NotDestinationPorts: []uint32{8080}}}},
		}}}})
	// A PeerAuthentication exists, so the static policy is sent (as istiod does), listed by no workload here.
	checkPolicy(t, pols, staticStrict, wantStaticStrict())
	checkListed(t, fullAddresses(t, g, ps), map[string][]string{
		web0:     {converted}, // instead of the static policy: the converted one includes STRICT
		web1:     nil,
		ratingsA: ratingsListed,
		client:   nil,
	})

	// Under a STRICT mesh, the same: the converted policy replaces the static one for web-0.
	f.peerAuth("istio-system", "default", nil, strict, nil)
	ps = f.build()
	checkListed(t, fullAddresses(t, g, ps), map[string][]string{web0: {converted}, web1: {staticStrict}})
	checkPolicy(t, fullAuthz(t, g, ps), converted, pols[converted])

	// All ports STRICT: just the static policy, no converted one.
	f = scenario(t)
	f.peerAuth("plain", "web-strict", map[string]string{"app": "web"}, strict, map[uint32]mtls{9090: strict})
	ps = f.build()
	checkPolicy(t, fullAuthz(t, g, ps), converted, nil)
	checkListed(t, fullAddresses(t, g, ps), map[string][]string{web0: {staticStrict}})
}

func TestPeerAuthPortLevel(t *testing.T) {
	const converted = "plain/converted_peer_authentication_web"
	for _, tc := range []struct {
		name        string
		mesh, ns    mtls
		wl          mtls
		ports       map[uint32]mtls
		listed      []string
		wantPolicy  *authz.Authorization
		staticFound bool
	}{
		{
			// UNSET workload mode inherits the mesh's STRICT; PERMISSIVE ports are exempted.
			name: "inherited strict, permissive ports", mesh: strict, wl: unset,
			ports:  map[uint32]mtls{9000: permissive, 8080: disable, 7070: strict},
			listed: []string{converted},
			wantPolicy: &authz.Authorization{Rules: []*authz.Rule{{Clauses: []*authz.Clause{
				{Matches: []*authz.Match{{NotPrincipals: noIdentity()}}},
				{Matches: []*authz.Match{{NotDestinationPorts: []uint32{8080}}}},
				{Matches: []*authz.Match{{NotDestinationPorts: []uint32{9000}}}},
			}}}},
		},
		{
			// PERMISSIVE workload over a STRICT namespace, with STRICT ports: one rule per STRICT port.
			name: "permissive with strict ports", ns: strict, wl: permissive,
			ports:  map[uint32]mtls{9090: strict, 8080: strict, 7070: permissive},
			listed: []string{converted},
			wantPolicy: &authz.Authorization{Rules: []*authz.Rule{
				{Clauses: []*authz.Clause{{Matches: []*authz.Match{{NotPrincipals: noIdentity(), DestinationPorts: []uint32{8080}}}}}},
				{Clauses: []*authz.Clause{{Matches: []*authz.Match{{NotPrincipals: noIdentity(), DestinationPorts: []uint32{9090}}}}}},
			}},
		},
		{
			// UNSET workload mode under a permissive default, one STRICT port.
			name: "inherited permissive, strict port", wl: unset, ports: map[uint32]mtls{9090: strict},
			listed: []string{converted},
			wantPolicy: &authz.Authorization{Rules: []*authz.Rule{
				{Clauses: []*authz.Clause{{Matches: []*authz.Match{{NotPrincipals: noIdentity(), DestinationPorts: []uint32{9090}}}}}},
			}},
		},
		{
			// Permissive everywhere: no exception to make.
			name: "permissive, permissive ports", wl: permissive, ports: map[uint32]mtls{9090: disable},
		},
		{
			// UNSET ports inherit the workload mode.
			name: "strict, unset port", mesh: strict, wl: strict, ports: map[uint32]mtls{9090: unset},
			listed: []string{staticStrict},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := scenario(t)
			if tc.mesh != unset {
				f.peerAuth("istio-system", "mesh", nil, tc.mesh, nil)
			}
			if tc.ns != unset {
				f.peerAuth("plain", "ns", nil, tc.ns, nil)
			}
			f.peerAuth("plain", "web", map[string]string{"app": "web"}, tc.wl, tc.ports)
			ps := f.build()
			g := ztunnel.New()
			var want *authz.Authorization
			if tc.wantPolicy != nil {
				want = proto.Clone(tc.wantPolicy).(*authz.Authorization)
				want.Name, want.Namespace = "converted_peer_authentication_web", "plain"
				want.Scope, want.Action = authz.Scope_WORKLOAD_SELECTOR, authz.Action_DENY
			}
			pols := fullAuthz(t, g, ps)
			checkPolicy(t, pols, converted, want)
			checkPolicy(t, pols, staticStrict, wantStaticStrict())
			checkListed(t, fullAddresses(t, g, ps), map[string][]string{web0: tc.listed})
		})
	}
}

// Changing a PeerAuthentication pushes both types in full; a new workload's delta carries the policies it
// lists.
func TestPeerAuthPushes(t *testing.T) {
	f := scenario(t)
	ps := f.build()
	g := ztunnel.New()
	if pols := fullAuthz(t, g, ps); pols[staticStrict] != nil {
		t.Fatal("static policy sent without any PeerAuthentication")
	}

	f.peerAuth("istio-system", "default", nil, strict, nil)
	next, req := f.update(ps)
	w := &model.WatchedResource{TypeURL: ztunnel.AuthorizationType, Wildcard: true}
	if !req.Full || !g.Authorization().NeedsPush(ztunnelProxy(), w, req) || !g.Address().NeedsPush(ztunnelProxy(), wildcard, req) {
		t.Fatalf("PeerAuthentication change: full=%v, not pushed to both types", req.Full)
	}
	res, removed, incremental, err := g.Authorization().GenerateDeltas(ztunnelProxy(), next, w, req)
	if err != nil || incremental || len(removed) != 0 {
		t.Fatalf("full push: incremental=%v removed=%v err=%v", incremental, removed, err)
	}
	checkPolicy(t, decodeAuthz(t, res), staticStrict, wantStaticStrict())
	addrs, _, _, _ := g.Address().GenerateDeltas(ztunnelProxy(), next, wildcard, req)
	checkListed(t, decodeAddresses(t, addrs), map[string][]string{client: {staticStrict}})

	// A workload-level policy for a new pod: the incremental push carries its converted policy.
	f.peerAuth("plain", "api", map[string]string{"app": "api"}, strict, map[uint32]mtls{8443: permissive})
	next2, _ := f.update(next)
	f.pod(podSpec{ns: "plain", name: "api-0", ip: "10.3.0.9", sa: "api", ready: true, labels: map[string]string{"app": "api"}})
	next3, req3 := f.update(next2)
	if req3.Full {
		t.Fatal("a pod change should be incremental")
	}
	res, _, incremental, err = g.Authorization().GenerateDeltas(ztunnelProxy(), next3, w, req3)
	if err != nil || !incremental {
		t.Fatalf("incremental=%v err=%v", incremental, err)
	}
	got := decodeAuthz(t, res)
	checkPolicy(t, got, "plain/converted_peer_authentication_api", &authz.Authorization{
		Name: "converted_peer_authentication_api", Namespace: "plain", Scope: authz.Scope_WORKLOAD_SELECTOR, Action: authz.Action_DENY,
		Rules: []*authz.Rule{{Clauses: []*authz.Clause{
			{Matches: []*authz.Match{{NotPrincipals: noIdentity()}}},
			{Matches: []*authz.Match{{NotDestinationPorts: []uint32{8443}}}},
		}}}})
	checkPolicy(t, got, staticStrict, wantStaticStrict())
	addrs, _, _, _ = g.Address().GenerateDeltas(ztunnelProxy(), next3, wildcard, req3)
	checkListed(t, decodeAddresses(t, addrs), map[string][]string{"Kubernetes//Pod/plain/api-0": {"plain/converted_peer_authentication_api"}})

	// Removing the PeerAuthentications removes the policies from the full state and from the workloads.
	f.del(config.PeerAuthentication, "istio-system", "default")
	f.del(config.PeerAuthentication, "plain", "api")
	next4, req4 := f.update(next3)
	if !g.Authorization().NeedsPush(ztunnelProxy(), w, req4) {
		t.Fatal("PeerAuthentication deletion not pushed")
	}
	pols := fullAuthz(t, g, next4)
	checkPolicy(t, pols, staticStrict, nil)
	checkPolicy(t, pols, "plain/converted_peer_authentication_api", nil)
	checkListed(t, fullAddresses(t, g, next4), map[string][]string{client: nil, "Kubernetes//Pod/plain/api-0": nil})
}
