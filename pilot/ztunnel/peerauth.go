package ztunnel

// PeerAuthentication for ztunnel, as istiod does it in ambient mode
// (istio/istio pilot/pkg/serviceregistry/kube/controller/ambient/authorization.go: staticStrictPolicyName,
// convertedSelectorPeerAuthentications, convertPeerAuthentication; policies.go: DefaultPolicy,
// PeerAuthDerivedPolicies; pilot/pkg/model/authentication.go: GetAmbientPolicyConfigName).
//
// ztunnel knows nothing of PeerAuthentication: istiod turns it into DENY Authorizations that a workload lists
// in authorization_policies.
//
//   - "istio_converted_static_strict" in the root namespace: DENY when the peer has no identity (NotPrincipals
//     presence). Scope WORKLOAD_SELECTOR, as in istiod, not GLOBAL: it applies to exactly the workloads that
//     list it, which is how a narrower PERMISSIVE or DISABLE overrides a wider STRICT (those workloads do not
//     list it). A GLOBAL policy would apply to every workload and could not be overridden.
//   - "converted_peer_authentication_<name>" in the PeerAuthentication's namespace (scope WORKLOAD_SELECTOR,
//     DENY) for a workload-level PeerAuthentication whose port-level modes differ from the workload's
//     effective mode:
//     effective STRICT with PERMISSIVE/DISABLE ports: one rule, AND of "no identity" and "port is not P" for
//     each such port; the workload lists it instead of the static policy;
//     effective PERMISSIVE/DISABLE with STRICT ports: one rule per STRICT port, "no identity and port is P".
//   - A workload lists the static policy when its effective mode (workload over namespace over mesh, UNSET
//     inheriting, default PERMISSIVE) is STRICT and no port is an exception; the converted policy when a port
//     is; else neither. The names follow the authorization policy names, sorted, as in istiod.
//
// Choices where Sextant differs from, or cannot read, istiod:
//   - The effective modes come from the model (PushContext.PeerAuthentication: EffectiveMTLS.Mode, PortModes,
//     Sources), which has no accessor listing the PeerAuthentications of a namespace. The workload-level
//     policy is EffectiveMTLS.Sources[0] when it sets port modes (the model fills PortModes only from it).
//   - Content depends only on the effective workload-wide mode and the exception ports. istiod's rule order
//     depends on whether STRICT was set on the workload policy or inherited, and it repeats the "no identity"
//     clause when both are; Sextant always emits "no identity" first, then one clause per port in ascending
//     order (istiod's order for a workload policy that sets STRICT itself). The rules are AND-ed: the same
//     decisions.
//   - DISABLE is PERMISSIVE everywhere (ztunnel always accepts mTLS). istiod, for a workload policy with UNSET
//     mode under an inherited STRICT, exempts only PERMISSIVE ports from the static policy, not DISABLE ones,
//     and some of its parent checks (operator precedence in convertPeerAuthentication, an UNSET namespace
//     policy under a STRICT mesh policy) reference a converted policy it never emits, leaving the workload
//     open. Sextant uses the effective modes, so every workload's listed policies exist and enforce its mode.
//   - istiod sends the static policy whenever any PeerAuthentication exists; Sextant when one applies to a
//     workload it sends, and a converted policy only when a workload lists it (istiod emits it for every
//     workload-level policy with port modes). Unreferenced policies would be inert anyway.
//   - Workload-level (selector) policies in the root namespace are ignored by istiod for workloads elsewhere,
//     as here; for workloads in the root namespace the model treats them as workload-level.

import (
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/types/known/emptypb"

	authz "github.com/sextantmesh/sextant/api/security"
	"github.com/sextantmesh/sextant/pilot/model"
)

const (
	// StaticStrictPolicyName is the Authorization, in the root namespace, that enforces STRICT mTLS on the
	// workloads listing it. '_' cannot appear in Kubernetes names, so it never collides with a user's policy.
	StaticStrictPolicyName = "istio_converted_static_strict"
	// ConvertedPeerAuthenticationPrefix prefixes the name of an Authorization converted from a workload-level
	// PeerAuthentication with port-level modes.
	ConvertedPeerAuthenticationPrefix = "converted_peer_authentication_"
)

// peerAuthPolicy is a converted workload-level PeerAuthentication, identified by everything its content
// depends on. It is comparable and keys the marshaled-resource cache.
type peerAuthPolicy struct {
	namespace, name string // the PeerAuthentication
	strict          bool   // the workload-wide effective mode is STRICT
	ports           string // exception ports, ascending, comma-separated: non-STRICT ones if strict, STRICT ones if not
}

// staticStrictKey keys the cached static STRICT policy by root namespace.
type staticStrictKey struct{ root string }

// mtlsView is what PeerAuthentication makes of one workload for ztunnel.
type mtlsView struct {
	covered   bool            // some PeerAuthentication applies to the workload
	static    bool            // it lists the static STRICT policy
	converted *peerAuthPolicy // the converted policy it lists, if any
}

// peerAuthView resolves w's effective mutual TLS into the policies ztunnel must apply to it.
func peerAuthView(ps *model.PushContext, w *model.Workload) mtlsView {
	eff := ps.PeerAuthentication(w.Namespace, w.Labels)
	v := mtlsView{covered: len(eff.Sources) > 0}
	strict := eff.Mode == model.MTLSStrict
	var exceptions []uint32
	for port, m := range eff.PortModes {
		if (m == model.MTLSStrict) != strict {
			exceptions = append(exceptions, port)
		}
	}
	if len(exceptions) == 0 || len(eff.Sources) == 0 {
		v.static = strict
		return v
	}
	slices.Sort(exceptions)
	var ports strings.Builder
	for i, p := range exceptions {
		if i > 0 {
			ports.WriteByte(',')
		}
		ports.WriteString(strconv.FormatUint(uint64(p), 10))
	}
	src := eff.Sources[0] // port modes come only from the workload-level policy, listed first
	v.converted = &peerAuthPolicy{namespace: src.Namespace, name: src.Name, strict: strict, ports: ports.String()}
	return v
}

// refs returns the "namespace/name" of the policies the workload lists.
func (v mtlsView) refs(root string) []string {
	switch {
	case v.converted != nil:
		return []string{v.converted.resourceName()}
	case v.static:
		return []string{root + "/" + StaticStrictPolicyName}
	}
	return nil
}

func (p *peerAuthPolicy) resourceName() string {
	return p.namespace + "/" + ConvertedPeerAuthenticationPrefix + p.name
}

func (p *peerAuthPolicy) portList() []uint32 {
	var out []uint32
	for s := range strings.SplitSeq(p.ports, ",") {
		n, _ := strconv.ParseUint(s, 10, 32)
		out = append(out, uint32(n))
	}
	return out
}

func noPeerIdentity() []*authz.StringMatch {
	return []*authz.StringMatch{{MatchType: &authz.StringMatch_Presence{Presence: &emptypb.Empty{}}}}
}

// StaticStrictPolicy returns the policy that denies connections without a peer identity (plaintext) to the
// workloads that list it.
func StaticStrictPolicy(rootNamespace string) *authz.Authorization {
	return &authz.Authorization{Name: StaticStrictPolicyName, Namespace: rootNamespace, Scope: authz.Scope_WORKLOAD_SELECTOR,
		Action: authz.Action_DENY,
		Rules:  []*authz.Rule{{Clauses: []*authz.Clause{{Matches: []*authz.Match{{NotPrincipals: noPeerIdentity()}}}}}}}
}

// message builds the converted policy.
func (p *peerAuthPolicy) message() *authz.Authorization {
	out := &authz.Authorization{Name: ConvertedPeerAuthenticationPrefix + p.name, Namespace: p.namespace,
		Scope: authz.Scope_WORKLOAD_SELECTOR, Action: authz.Action_DENY}
	ports := p.portList()
	if p.strict {
		// Deny a plaintext peer unless the port is one of the exceptions.
		r := &authz.Rule{Clauses: []*authz.Clause{{Matches: []*authz.Match{{NotPrincipals: noPeerIdentity()}}}}}
		for _, port := range ports {
			r.Clauses = append(r.Clauses, &authz.Clause{Matches: []*authz.Match{{NotDestinationPorts: []uint32{port}}}})
		}
		out.Rules = []*authz.Rule{r}
		return out
	}
	// Deny a plaintext peer on each STRICT port.
	for _, port := range ports {
		out.Rules = append(out.Rules, &authz.Rule{Clauses: []*authz.Clause{{Matches: []*authz.Match{
			{NotPrincipals: noPeerIdentity(), DestinationPorts: []uint32{port}}}}}})
	}
	return out
}

// peerAuthResource returns p's marshaled policy, shared by every snapshot in which its content is the same.
func (g *Generators) peerAuthResource(p peerAuthPolicy) *model.Resource {
	if r, ok := g.resources.Get(p); ok {
		return r
	}
	r := marshal(p.resourceName(), AuthorizationType, p.message())
	g.resources.Add(p, r)
	return r
}

func (g *Generators) staticStrictResource(root string) *model.Resource {
	key := staticStrictKey{root: root}
	if r, ok := g.resources.Get(key); ok {
		return r
	}
	r := marshal(root+"/"+StaticStrictPolicyName, AuthorizationType, StaticStrictPolicy(root))
	g.resources.Add(key, r)
	return r
}

// peerAuthCollector gathers the policies PeerAuthentication adds for a set of workloads.
type peerAuthCollector struct {
	covered   bool
	converted map[peerAuthPolicy]struct{}
}

func (c *peerAuthCollector) add(v mtlsView) {
	c.covered = c.covered || v.covered
	if v.converted != nil {
		if c.converted == nil {
			c.converted = map[peerAuthPolicy]struct{}{}
		}
		c.converted[*v.converted] = struct{}{}
	}
}

// resources returns the static policy (when any workload is covered by a PeerAuthentication) and each
// converted policy a workload lists.
func (c *peerAuthCollector) resources(g *Generators, root string) model.Resources {
	var out model.Resources
	if c.covered {
		out = append(out, g.staticStrictResource(root))
	}
	for p := range c.converted {
		out = append(out, g.peerAuthResource(p))
	}
	return out
}

// peerAuthPolicies returns the policies PeerAuthentication adds for the workloads ztunnel is sent.
func (st *pushState) peerAuthPolicies() model.Resources {
	var c peerAuthCollector
	st.ps.AllWorkloads(func(w *model.Workload) bool {
		if st.included(w) {
			c.add(peerAuthView(st.ps, w))
		}
		return true
	})
	return c.resources(st.g, meshOf(st.ps).RootNamespace)
}
