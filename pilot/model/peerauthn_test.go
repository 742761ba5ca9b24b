package model_test

import (
	"testing"

	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
)

func (m *meshFixture) peerAuthn(ns, name string, sel map[string]string, mode security.PeerAuthentication_MutualTLS_Mode,
	ports map[uint32]security.PeerAuthentication_MutualTLS_Mode) {
	pa := &security.PeerAuthentication{Mtls: &security.PeerAuthentication_MutualTLS{Mode: mode}}
	if sel != nil {
		pa.Selector = &typev1beta1.WorkloadSelector{MatchLabels: sel}
	}
	for p, pm := range ports {
		if pa.PortLevelMtls == nil {
			pa.PortLevelMtls = map[uint32]*security.PeerAuthentication_MutualTLS{}
		}
		pa.PortLevelMtls[p] = &security.PeerAuthentication_MutualTLS{Mode: pm}
	}
	m.put(config.PeerAuthentication, ns, name, nil, pa)
}

// What a client reads of a server's PeerAuthentication, as istiod composes it: the mode a workload port
// accepts (workload, port-level, namespace, mesh; UNSET inherits; the oldest policy of a level wins), and the
// namespace-wide mode auto mTLS infers for a namespace's services. A selector in the root namespace selects
// nothing.
func TestServerMTLSMode(t *testing.T) {
	const (
		unset      = security.PeerAuthentication_MutualTLS_UNSET
		disable    = security.PeerAuthentication_MutualTLS_DISABLE
		strict     = security.PeerAuthentication_MutualTLS_STRICT
		permissive = security.PeerAuthentication_MutualTLS_PERMISSIVE
	)
	m := newMesh(t)
	m.peerAuthn("istio-system", "mesh", nil, disable, nil)
	m.peerAuthn("istio-system", "root-selector", map[string]string{"app": "web"}, strict, nil)
	m.peerAuthn("prod", "ns", nil, strict, nil)
	m.peerAuthn("prod", "ns-newer", nil, disable, nil) // a second namespace-wide policy: ignored
	m.peerAuthn("prod", "db", map[string]string{"app": "db"}, unset,
		map[uint32]security.PeerAuthentication_MutualTLS_Mode{5432: disable, 9000: unset})
	m.peerAuthn("prod", "cache", map[string]string{"app": "cache"}, permissive, nil)
	m.peerAuthn("inherit", "ns", nil, unset, nil)
	ps := model.Build(m.store, mesh.Default())
	for _, tc := range []struct {
		ns     string
		labels map[string]string
		port   uint32
		want   model.MTLSMode
	}{
		{"prod", map[string]string{"app": "web"}, 80, model.MTLSStrict},
		{"prod", map[string]string{"app": "db"}, 5432, model.MTLSDisable},
		{"prod", map[string]string{"app": "db"}, 9000, model.MTLSStrict}, // port UNSET: the workload's, inherited
		{"prod", map[string]string{"app": "db"}, 80, model.MTLSStrict},
		{"prod", map[string]string{"app": "cache"}, 80, model.MTLSPermissive},
		{"inherit", nil, 80, model.MTLSDisable},
		{"none", nil, 80, model.MTLSDisable},
		{"istio-system", map[string]string{"app": "web"}, 80, model.MTLSDisable},
	} {
		if got := ps.ServerMTLSMode(tc.ns, tc.labels, tc.port); got != tc.want {
			t.Errorf("ServerMTLSMode(%s, %v, %d) = %s, want %s", tc.ns, tc.labels, tc.port, got, tc.want)
		}
	}
	for ns, want := range map[string]model.MTLSMode{"prod": model.MTLSStrict, "inherit": model.MTLSDisable, "none": model.MTLSDisable,
		"istio-system": model.MTLSDisable} {
		if got := ps.NamespaceMTLSMode(ns); got != want {
			t.Errorf("NamespaceMTLSMode(%s) = %s, want %s", ns, got, want)
		}
	}
	if got := ps.PeerAuthentication("istio-system", map[string]string{"app": "web"}).Mode; got != model.MTLSDisable {
		t.Errorf("a selector in the root namespace selected a workload: %s", got)
	}
	if got := model.Build(newMesh(t).store, mesh.Default()).ServerMTLSMode("x", nil, 80); got != model.MTLSPermissive {
		t.Errorf("without any policy: %s, want PERMISSIVE", got)
	}
}

// A policy change keeps the identity of every other namespace's policies, and NamespaceMTLSChanges names only
// the namespaces whose namespace-wide mode changed; a mesh-wide change concerns all.
func TestPeerAuthenticationChangeKeepsOtherNamespaces(t *testing.T) {
	m := newMesh(t)
	m.peerAuthn("a", "ns", nil, security.PeerAuthentication_MutualTLS_STRICT, nil)
	m.peerAuthn("b", "ns", nil, security.PeerAuthentication_MutualTLS_STRICT, nil)
	ps := model.Build(m.store, mesh.Default())
	update := func(ns, name string, sel map[string]string, mode security.PeerAuthentication_MutualTLS_Mode) *model.PushContext {
		m.peerAuthn(ns, name, sel, mode, nil)
		next, res := model.Update(ps, m.store, []model.Change{{Key: config.Key{Kind: config.PeerAuthentication, Namespace: ns, Name: name}}})
		if !res.Full {
			t.Fatal("a PeerAuthentication change is not a full push")
		}
		return next
	}
	next := update("a", "web", map[string]string{"app": "web"}, security.PeerAuthentication_MutualTLS_DISABLE)
	if next.PeerAuthenticationsOf("b") != ps.PeerAuthenticationsOf("b") {
		t.Error("namespace b's policies lost their identity on a change in a")
	}
	if next.PeerAuthenticationsOf("a") == ps.PeerAuthenticationsOf("a") {
		t.Error("namespace a's identity did not change")
	}
	if nss, all := next.NamespaceMTLSChanges(ps.PeerAuthenticationsID()); all || len(nss) != 0 {
		t.Errorf("a workload policy changed namespace modes: %v, all %v", nss, all)
	}
	ps = next
	next = update("a", "ns", nil, security.PeerAuthentication_MutualTLS_DISABLE)
	if nss, all := next.NamespaceMTLSChanges(ps.PeerAuthenticationsID()); all || len(nss) != 1 || !nss["a"] {
		t.Errorf("namespace a's DISABLE: changes %v, all %v; want a", nss, all)
	}
	ps = next
	next = update("istio-system", "mesh", nil, security.PeerAuthentication_MutualTLS_DISABLE)
	if _, all := next.NamespaceMTLSChanges(ps.PeerAuthenticationsID()); !all {
		t.Error("a mesh-wide policy does not concern every namespace")
	}
	if next.PeerAuthenticationsOf("b") == ps.PeerAuthenticationsOf("b") {
		t.Error("the root namespace's policies are part of every namespace's identity")
	}
}
