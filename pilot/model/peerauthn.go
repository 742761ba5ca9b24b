package model

import (
	"slices"

	security "istio.io/api/security/v1beta1"

	"github.com/sextantmesh/sextant/pilot/config"
)

// peerAuthnIndex holds the PeerAuthentications by namespace, as istiod composes them (ComposePeerAuthentication,
// GetNamespaceMutualTLSMode). A namespace's entry is replaced only when its own policies change, so its pointer
// identifies what decides the mutual TLS of that namespace's workloads: generators key caches on it, and a change
// to one policy rebuilds only the output of its namespace (all of it only for the root namespace).
type peerAuthnIndex struct {
	root        string
	byNamespace map[string]*namespacePeerAuthn
}

// namespacePeerAuthn is one namespace's PeerAuthentications. It is immutable.
type namespacePeerAuthn struct {
	all []*config.Config // oldest first
	// wide is the oldest policy without selector: namespace-wide, or mesh-wide in the root namespace. Later
	// ones are ignored, as istiod does.
	wide *config.Config
	// selective are the policies with a selector, oldest first; none in the root namespace, where istiod
	// ignores them.
	selective []*config.Config
}

func buildPeerAuthentications(reader ConfigReader, root string, prev *peerAuthnIndex) *peerAuthnIndex {
	all := reader.List(config.PeerAuthentication)
	slices.SortFunc(all, compareConfigs)
	lists := map[string][]*config.Config{}
	for _, c := range all {
		lists[c.Namespace] = append(lists[c.Namespace], c)
	}
	idx := &peerAuthnIndex{root: root, byNamespace: make(map[string]*namespacePeerAuthn, len(lists))}
	for ns, list := range lists {
		if prev != nil && prev.root == root {
			if old := prev.byNamespace[ns]; old != nil && slices.Equal(old.all, list) {
				idx.byNamespace[ns] = old // unchanged: keep its identity
				continue
			}
		}
		e := &namespacePeerAuthn{all: list}
		for _, c := range list {
			pa := c.Spec.(*security.PeerAuthentication)
			if len(pa.GetSelector().GetMatchLabels()) == 0 {
				if e.wide == nil {
					e.wide = c
				}
			} else if ns != root {
				e.selective = append(e.selective, c)
			}
		}
		idx.byNamespace[ns] = e
	}
	return idx
}

// namespaceMode is istiod's GetNamespaceMutualTLSMode: the namespace-wide policy's mode, UNSET inheriting the
// mesh-wide one; the mesh-wide mode (UNSET: PERMISSIVE) without a namespace policy; "" when neither exists.
func (idx *peerAuthnIndex) namespaceMode(ns string) MTLSMode {
	if e := idx.byNamespace[ns]; e != nil && e.wide != nil && ns != idx.root {
		if m, ok := peerAuthMode(e.wide.Spec.(*security.PeerAuthentication)); ok {
			return m
		}
		if mesh := idx.meshMode(); mesh != "" {
			return mesh
		}
		return MTLSPermissive
	}
	return idx.meshMode()
}

// meshMode is the mode of the mesh-wide policy (UNSET: PERMISSIVE), "" without one.
func (idx *peerAuthnIndex) meshMode() MTLSMode {
	e := idx.byNamespace[idx.root]
	if e == nil || e.wide == nil {
		return ""
	}
	if m, ok := peerAuthMode(e.wide.Spec.(*security.PeerAuthentication)); ok {
		return m
	}
	return MTLSPermissive
}

// workloadPolicy is the oldest policy of ns whose selector selects labels, nil without one.
func (idx *peerAuthnIndex) workloadPolicy(ns string, labels map[string]string) *config.Config {
	e := idx.byNamespace[ns]
	if e == nil || ns == idx.root {
		return nil
	}
	for _, c := range e.selective {
		if labelsMatch(c.Spec.(*security.PeerAuthentication).GetSelector().GetMatchLabels(), labels) {
			return c
		}
	}
	return nil
}

// ServerMTLSMode is the mutual TLS a workload of ns with labels accepts on its port (the workload's, not the
// service's): the workload policy's port-level mode, its mode, the namespace's, the mesh's, else PERMISSIVE,
// UNSET inheriting at each level (istiod's ComposePeerAuthentication and GetMutualTLSModeForPort). Clients
// read it to send plaintext where a server disables mTLS.
func (ps *PushContext) ServerMTLSMode(ns string, labels map[string]string, port uint32) MTLSMode {
	idx := ps.peerAuthn
	mode := idx.namespaceMode(ns)
	if mode == "" {
		mode = MTLSPermissive
	}
	w := idx.workloadPolicy(ns, labels)
	if w == nil {
		return mode
	}
	pa := w.Spec.(*security.PeerAuthentication)
	if m, ok := peerAuthMode(pa); ok {
		mode = m
	}
	if pm, ok := pa.PortLevelMtls[port]; ok {
		if m, ok := mtlsMode(pm.GetMode()); ok {
			return m
		}
	}
	return mode
}

// NamespaceMTLSMode is the mode istiod's auto mTLS infers for the services of ns (BestEffortInferServiceMTLSMode):
// the namespace-wide policy, else the mesh-wide one, else PERMISSIVE. Workload and port-level policies are not
// seen here; clients honour them per endpoint (ServerMTLSMode).
func (ps *PushContext) NamespaceMTLSMode(ns string) MTLSMode {
	if m := ps.peerAuthn.namespaceMode(ns); m != "" {
		return m
	}
	return MTLSPermissive
}

// PeerAuthenticationsKey identifies the policies that decide one namespace's mutual TLS; comparable, meant
// for equality in cache keys.
type PeerAuthenticationsKey struct{ namespace, root *namespacePeerAuthn }

// PeerAuthenticationsOf identifies what decides the mutual TLS of the workloads of ns: its own policies and the
// root namespace's. It changes only when one of those does. A struct rather than an interface, so the
// per-service cache lookups that use it allocate nothing.
func (ps *PushContext) PeerAuthenticationsOf(ns string) PeerAuthenticationsKey {
	return PeerAuthenticationsKey{ps.peerAuthn.byNamespace[ns], ps.peerAuthn.byNamespace[ps.peerAuthn.root]}
}

// PeerAuthenticationsID identifies the PeerAuthentication index.
func (ps *PushContext) PeerAuthenticationsID() any { return ps.peerAuthn }

// NamespaceMTLSChanges tells which namespaces' NamespaceMTLSMode may differ between the snapshot whose
// PeerAuthenticationsID was since and this one: the namespaces listed, or all of them (the mesh-wide policy
// changed, or since is no such identity). Its cost follows the namespaces that have policies, not the mesh.
func (ps *PushContext) NamespaceMTLSChanges(since any) (namespaces map[string]bool, all bool) {
	prev, ok := since.(*peerAuthnIndex)
	cur := ps.peerAuthn
	if !ok || prev == nil || prev.root != cur.root || prev.meshMode() != cur.meshMode() {
		return nil, true
	}
	namespaces = map[string]bool{}
	check := func(ns string) {
		if prev.byNamespace[ns] != cur.byNamespace[ns] && prev.namespaceMode(ns) != cur.namespaceMode(ns) {
			namespaces[ns] = true
		}
	}
	for ns := range prev.byNamespace {
		check(ns)
	}
	for ns := range cur.byNamespace {
		if _, seen := prev.byNamespace[ns]; !seen {
			check(ns)
		}
	}
	return namespaces, false
}
