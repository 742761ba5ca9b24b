package ztunnel

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/types/known/emptypb"
	istiosec "istio.io/api/security/v1beta1"

	authz "github.com/sextantmesh/sextant/api/security"
	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/model"
)

// DryRunAnnotation on an AuthorizationPolicy asks ztunnel to log decisions without enforcing them.
const DryRunAnnotation = "istio.io/dry-run"

type policyKey struct {
	c    *config.Config
	root string
}

type convertedPolicy struct {
	res   *model.Resource // nil when the policy is not for ztunnel
	notes []string
}

// ConvertPolicy converts an AuthorizationPolicy to what ztunnel enforces, as istiod does. It returns nil
// for policies ztunnel does not enforce (AUDIT, CUSTOM, those bound to a waypoint by targetRef). Notes say
// what could not be expressed at L4: a DENY rule loses its HTTP-only conditions (it denies more); an
// ALLOW rule with HTTP-only conditions is left out (it allows nothing).
func ConvertPolicy(c *config.Config, rootNamespace string) (*authz.Authorization, []string) {
	ap := c.Spec.(*istiosec.AuthorizationPolicy)
	if hasTargetRef(ap) {
		return nil, []string{"bound to a waypoint or gateway by targetRef: enforced there, not sent to ztunnel"}
	}
	out := &authz.Authorization{Name: c.Name, Namespace: c.Namespace, Scope: authz.Scope_WORKLOAD_SELECTOR,
		DryRun: strings.EqualFold(c.Annotations[DryRunAnnotation], "true")}
	if ap.GetSelector() == nil {
		out.Scope = authz.Scope_NAMESPACE
		if c.Namespace == rootNamespace {
			out.Scope = authz.Scope_GLOBAL
		}
	}
	switch ap.GetAction() {
	case istiosec.AuthorizationPolicy_ALLOW:
		out.Action = authz.Action_ALLOW
	case istiosec.AuthorizationPolicy_DENY:
		out.Action = authz.Action_DENY
	default:
		return nil, []string{fmt.Sprintf("action %s is not supported by ztunnel: skipped", ap.GetAction())}
	}
	var notes []string
	for i, rule := range ap.GetRules() {
		r, l7, bad := convertRule(rule, c.Namespace)
		for _, b := range bad {
			notes = append(notes, fmt.Sprintf("rules[%d]: %s", i, b))
		}
		if len(l7) > 0 {
			slices.Sort(l7)
			l7 = slices.Compact(l7)
			if out.Action == authz.Action_ALLOW {
				notes = append(notes, fmt.Sprintf("rules[%d]: ztunnel cannot match %s: the rule is left out, so it "+
					"allows nothing (use a waypoint to enforce HTTP rules)", i, strings.Join(l7, ", ")))
				continue
			}
			notes = append(notes, fmt.Sprintf("rules[%d]: ztunnel cannot match %s: enforced without those "+
				"conditions, so it denies more than requested (use a waypoint to enforce HTTP rules)", i, strings.Join(l7, ", ")))
		}
		out.Rules = append(out.Rules, r)
	}
	return out, notes
}

func hasTargetRef(ap *istiosec.AuthorizationPolicy) bool {
	return ap.GetTargetRef() != nil || len(ap.GetTargetRefs()) > 0
}

// convertRule maps one rule: its "to" entries form one clause (OR-ed), its "from" entries another, and
// each "when" condition one more; clauses are AND-ed. l7 names the fields ztunnel cannot match; bad
// describes values that could not be parsed (left out).
func convertRule(rule *istiosec.Rule, ns string) (r *authz.Rule, l7, bad []string) {
	r = &authz.Rule{}
	conv := &converter{}
	if len(rule.GetTo()) > 0 {
		cl := &authz.Clause{}
		for _, to := range rule.GetTo() {
			op := to.GetOperation()
			l7 = appendIf(l7, len(op.GetHosts()) > 0, "hosts")
			l7 = appendIf(l7, len(op.GetNotHosts()) > 0, "notHosts")
			l7 = appendIf(l7, len(op.GetMethods()) > 0, "methods")
			l7 = appendIf(l7, len(op.GetNotMethods()) > 0, "notMethods")
			l7 = appendIf(l7, len(op.GetPaths()) > 0, "paths")
			l7 = appendIf(l7, len(op.GetNotPaths()) > 0, "notPaths")
			cl.Matches = append(cl.Matches, &authz.Match{
				DestinationPorts:    conv.ports(op.GetPorts()),
				NotDestinationPorts: conv.ports(op.GetNotPorts()),
			})
		}
		r.Clauses = append(r.Clauses, cl)
	}
	if len(rule.GetFrom()) > 0 {
		cl := &authz.Clause{}
		for _, from := range rule.GetFrom() {
			src := from.GetSource()
			l7 = appendIf(l7, len(src.GetRequestPrincipals()) > 0, "requestPrincipals")
			l7 = appendIf(l7, len(src.GetNotRequestPrincipals()) > 0, "notRequestPrincipals")
			l7 = appendIf(l7, len(src.GetRemoteIpBlocks()) > 0, "remoteIpBlocks")
			l7 = appendIf(l7, len(src.GetNotRemoteIpBlocks()) > 0, "notRemoteIpBlocks")
			// ztunnel has no trust domain match; istiod drops it silently, which widens an ALLOW.
			l7 = appendIf(l7, len(src.GetTrustDomains()) > 0, "trustDomains")
			l7 = appendIf(l7, len(src.GetNotTrustDomains()) > 0, "notTrustDomains")
			cl.Matches = append(cl.Matches, &authz.Match{
				Namespaces:         stringMatches(src.GetNamespaces(), false),
				NotNamespaces:      stringMatches(src.GetNotNamespaces(), false),
				ServiceAccounts:    serviceAccounts(src.GetServiceAccounts(), ns),
				NotServiceAccounts: serviceAccounts(src.GetNotServiceAccounts(), ns),
				Principals:         stringMatches(src.GetPrincipals(), true),
				NotPrincipals:      stringMatches(src.GetNotPrincipals(), true),
				SourceIps:          conv.cidrs(src.GetIpBlocks()),
				NotSourceIps:       conv.cidrs(src.GetNotIpBlocks()),
			})
		}
		r.Clauses = append(r.Clauses, cl)
	}
	for _, when := range rule.GetWhen() {
		m := &authz.Match{}
		vals, not := when.GetValues(), when.GetNotValues()
		switch when.GetKey() {
		case "source.ip":
			m.SourceIps, m.NotSourceIps = conv.cidrs(vals), conv.cidrs(not)
		case "source.namespace":
			m.Namespaces, m.NotNamespaces = stringMatches(vals, false), stringMatches(not, false)
		case "source.principal":
			m.Principals, m.NotPrincipals = stringMatches(vals, true), stringMatches(not, true)
		case "destination.ip":
			m.DestinationIps, m.NotDestinationIps = conv.cidrs(vals), conv.cidrs(not)
		case "destination.port":
			m.DestinationPorts, m.NotDestinationPorts = conv.ports(vals), conv.ports(not)
		default:
			l7 = append(l7, "when "+when.GetKey())
		}
		r.Clauses = append(r.Clauses, &authz.Clause{Matches: []*authz.Match{m}})
	}
	return r, l7, conv.bad
}

func appendIf(list []string, cond bool, v string) []string {
	if cond {
		return append(list, v)
	}
	return list
}

type converter struct{ bad []string }

func (c *converter) ports(vals []string) []uint32 {
	var out []uint32
	for _, v := range vals {
		p, err := strconv.ParseUint(v, 10, 16)
		if err != nil {
			c.bad = append(c.bad, fmt.Sprintf("port %q is not a number from 0 to 65535: ignored", v))
			continue
		}
		out = append(out, uint32(p))
	}
	return out
}

func (c *converter) cidrs(vals []string) []*authz.Address {
	var out []*authz.Address
	for _, v := range vals {
		var pfx netip.Prefix
		var err error
		if strings.Contains(v, "/") {
			pfx, err = netip.ParsePrefix(v)
		} else {
			var ip netip.Addr
			if ip, err = netip.ParseAddr(v); err == nil {
				pfx = netip.PrefixFrom(ip, ip.BitLen())
			}
		}
		if err != nil {
			c.bad = append(c.bad, fmt.Sprintf("IP block %q is not an address or CIDR: ignored", v))
			continue
		}
		out = append(out, &authz.Address{Address: pfx.Addr().AsSlice(), Length: uint32(pfx.Bits())})
	}
	return out
}

// stringMatches applies Istio's conventions: "*" is presence, "*x" a suffix, "x*" a prefix, else exact.
// Principals are matched as Istio writes them (TRUST_DOMAIN/ns/NS/sa/SA); a "spiffe://" prefix is removed.
func stringMatches(vals []string, principal bool) []*authz.StringMatch {
	var out []*authz.StringMatch
	for _, v := range vals {
		if principal {
			v = strings.TrimPrefix(v, "spiffe://")
		}
		var m authz.StringMatch
		switch {
		case v == "*":
			m.MatchType = &authz.StringMatch_Presence{Presence: &emptypb.Empty{}}
		case strings.HasPrefix(v, "*"):
			m.MatchType = &authz.StringMatch_Suffix{Suffix: v[1:]}
		case strings.HasSuffix(v, "*"):
			m.MatchType = &authz.StringMatch_Prefix{Prefix: v[:len(v)-1]}
		default:
			m.MatchType = &authz.StringMatch_Exact{Exact: v}
		}
		out = append(out, &m)
	}
	return out
}

// serviceAccounts reads "NAMESPACE/NAME" or "NAME" (in the policy's namespace).
func serviceAccounts(vals []string, ns string) []*authz.ServiceAccountMatch {
	var out []*authz.ServiceAccountMatch
	for _, v := range vals {
		if n, sa, ok := strings.Cut(v, "/"); ok {
			out = append(out, &authz.ServiceAccountMatch{Namespace: n, ServiceAccount: sa})
		} else {
			out = append(out, &authz.ServiceAccountMatch{Namespace: ns, ServiceAccount: v})
		}
	}
	return out
}

// convert returns c's converted, marshaled policy, cached while c and the root namespace are unchanged.
func (g *Generators) convert(c *config.Config, root string) *convertedPolicy {
	key := policyKey{c: c, root: root}
	if cp, ok := g.policies.Get(key); ok {
		return cp
	}
	msg, notes := ConvertPolicy(c, root)
	cp := &convertedPolicy{notes: notes}
	if msg != nil {
		cp.res = marshal(c.Namespace+"/"+c.Name, AuthorizationType, msg)
	}
	g.policies.Add(key, cp)
	return cp
}

// policyNamespaces lists the namespaces whose policies can matter: the root namespace and every namespace
// holding a workload or service. (The snapshot has no list of all policies; a policy in a namespace with no
// workload applies to nothing, and is sent with the first workload that appears there.)
func (st *pushState) policyNamespaces() []string {
	seen := map[string]struct{}{meshOf(st.ps).RootNamespace: {}}
	st.ps.AllWorkloads(func(w *model.Workload) bool {
		seen[w.Namespace] = struct{}{}
		return true
	})
	for _, s := range st.ps.AllServices() {
		seen[s.Namespace] = struct{}{}
	}
	return sortedNames(seen)
}

func (st *pushState) buildAuthz() {
	root := meshOf(st.ps).RootNamespace
	st.notes = map[string][]string{}
	for _, ns := range st.policyNamespaces() {
		for _, c := range st.ps.AuthorizationPoliciesInNamespace(ns) {
			cp := st.g.convert(c, root)
			if len(cp.notes) > 0 {
				st.notes[c.Namespace+"/"+c.Name] = cp.notes
			}
			if cp.res != nil {
				st.authz = append(st.authz, cp.res)
			}
		}
	}
	st.authz = append(st.authz, st.peerAuthPolicies()...)
	slices.SortFunc(st.authz, func(a, b *model.Resource) int { return strings.Compare(a.Name, b.Name) })
}

// namespacePolicies returns the converted policies of the namespaces of the workloads req updated, and
// those PeerAuthentication adds for these workloads (the static STRICT policy, converted workload policies).
func (st *pushState) namespacePolicies(req *model.PushRequest) model.Resources {
	root := meshOf(st.ps).RootNamespace
	nss := map[string]struct{}{}
	var pa peerAuthCollector
	for uid := range req.WorkloadsUpdated {
		if w := st.ps.Workload(uid); w != nil {
			nss[w.Namespace] = struct{}{}
			if st.included(w) {
				pa.add(peerAuthView(st.ps, w))
			}
		}
	}
	var out model.Resources
	for _, ns := range sortedNames(nss) {
		for _, c := range st.ps.AuthorizationPoliciesInNamespace(ns) {
			if cp := st.g.convert(c, root); cp.res != nil {
				out = append(out, cp.res)
			}
		}
	}
	derived := pa.resources(st.g, root)
	slices.SortFunc(derived, func(a, b *model.Resource) int { return strings.Compare(a.Name, b.Name) })
	return append(out, derived...)
}
