package model

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
)

// compareConfigs orders configs oldest first, then by namespace and name: Istio's conflict rule.
func compareConfigs(a, b *config.Config) int {
	if c := a.CreationTimestamp.Compare(b.CreationTimestamp); c != 0 {
		return c
	}
	return config.CompareKeys(a.Key, b.Key)
}

// HostMatches reports whether pattern (exact, "*.suffix" or "*") matches host.
func HostMatches(pattern, host string) bool {
	if pattern == host || pattern == "*" {
		return true
	}
	if strings.HasPrefix(pattern, "*.") {
		return strings.HasSuffix(host, pattern[1:])
	}
	return false
}

// moreSpecific reports whether host pattern a is more specific than b (exact beats wildcard, longer beats shorter).
func moreSpecific(a, b string) bool {
	aw, bw := strings.HasPrefix(a, "*"), strings.HasPrefix(b, "*")
	if aw != bw {
		return !aw
	}
	return len(a) > len(b)
}

// DestinationRule is the effective DestinationRule for one host in one namespace: rules for the same host in
// the same namespace are merged, the oldest winning on conflicts.
type DestinationRule struct {
	Host      string
	Namespace string
	Spec      *networking.DestinationRule
	ExportTo  []string
	Sources   []config.Key
	// Selector is the workloadSelector's labels (nil: the rule applies to every workload). Such a rule
	// applies only to the selected workloads of its own namespace, ahead of the rule without selector.
	Selector map[string]string
	// origins are the objects of Sources, as written: warnings name their fields.
	origins []*config.Config
}

type destinationRuleIndex struct {
	// byNamespace: namespace → rules ordered most specific host first; for one host, rules with a
	// workloadSelector (oldest first) before the one without.
	byNamespace map[string][]*DestinationRule
	// selective: namespaces that hold a rule with a workloadSelector.
	selective map[string]bool
	// exact: namespace → exact host → the offset of its first rule in byNamespace. An exact host is more
	// specific than any wildcard, so a lookup starts there; generators look a rule up per cluster.
	exact map[string]map[string]int
	// wildcards: namespace → the offset of its first wildcard rule in byNamespace (they sort last).
	wildcards map[string]int
	// localityAware: some rule sets outlier detection or locality load balancing, which make endpoint
	// assignments depend on the proxy's locality; without, EDS need not look rules up for them.
	localityAware bool
}

func buildDestinationRules(reader ConfigReader, m *mesh.Config) *destinationRuleIndex {
	all := reader.List(config.DestinationRule)
	slices.SortFunc(all, compareConfigs)
	idx := &destinationRuleIndex{byNamespace: map[string][]*DestinationRule{}, selective: map[string]bool{}}
	type nsHost struct{ ns, host, selector string }
	merged := map[nsHost]*DestinationRule{}
	for _, c := range all {
		spec := c.Spec.(*networking.DestinationRule)
		host := ResolveHost(spec.Host, c.Namespace, m.DomainSuffix)
		// Rules merge only with rules of the same selector, as istiod's.
		k := nsHost{c.Namespace, host, ""}
		exportTo := normalizeExportTo(spec.ExportTo, c.Namespace, destinationRuleDefaultExportTo(m))
		var selector map[string]string
		if ws := spec.GetWorkloadSelector(); ws != nil {
			selector = ws.GetMatchLabels()
			if selector == nil {
				selector = map[string]string{} // an empty selector selects every workload of the namespace
			}
			k.selector = "\x00" + LabelsKey(selector)
			exportTo = []string{c.Namespace} // never exported: it names workloads of its own namespace
			idx.selective[c.Namespace] = true
		}
		idx.localityAware = idx.localityAware || localityAware(spec)
		dr := merged[k]
		if dr == nil {
			dr = &DestinationRule{Host: host, Namespace: c.Namespace, Spec: spec, ExportTo: exportTo,
				Sources: []config.Key{c.Key}, Selector: selector,
				origins: []*config.Config{c}}
			merged[k] = dr
			idx.byNamespace[c.Namespace] = append(idx.byNamespace[c.Namespace], dr)
			continue
		}
		// Merge: add subsets the older rule lacks; keep the older traffic policy.
		ms := proto.Clone(dr.Spec).(*networking.DestinationRule)
		for _, ss := range spec.Subsets {
			if !slices.ContainsFunc(ms.Subsets, func(o *networking.Subset) bool { return o.Name == ss.Name }) {
				ms.Subsets = append(ms.Subsets, ss)
			}
		}
		if ms.TrafficPolicy == nil {
			ms.TrafficPolicy = spec.TrafficPolicy
		}
		dr.Spec = ms
		dr.Sources = append(dr.Sources, c.Key)
		dr.origins = append(dr.origins, c)
	}
	idx.exact, idx.wildcards = map[string]map[string]int{}, map[string]int{}
	for ns, rules := range idx.byNamespace {
		slices.SortStableFunc(rules, func(a, b *DestinationRule) int {
			if moreSpecific(a.Host, b.Host) {
				return -1
			}
			if moreSpecific(b.Host, a.Host) {
				return 1
			}
			if c := strings.Compare(a.Host, b.Host); c != 0 {
				return c
			}
			if (a.Selector != nil) != (b.Selector != nil) {
				if a.Selector != nil {
					return -1
				}
				return 1
			}
			return 0
		})
		exact := map[string]int{}
		idx.wildcards[ns] = len(rules)
		for i, r := range rules {
			if strings.HasPrefix(r.Host, "*") {
				idx.wildcards[ns] = i
				break
			}
			if _, ok := exact[r.Host]; !ok {
				exact[r.Host] = i
			}
		}
		idx.exact[ns] = exact
	}
	return idx
}

// lookup returns the rule of namespace ns that a proxy of proxyNS with labels applies to host: among the
// visible rules of the most specific matching host, the first whose selector selects the proxy, else the
// one without selector. found reports whether ns has a visible rule for host at all: istiod stops there
// even when no rule of that host selects the proxy.
func (idx *destinationRuleIndex) lookup(ns, proxyNS, host string, labels map[string]string) (dr *DestinationRule, found, byLabels bool) {
	rules := idx.byNamespace[ns]
	if len(rules) == 0 {
		return nil, false, false // most namespaces have no rule: spare the hostname's hashing
	}
	if i, ok := idx.exact[ns][host]; ok {
		if dr, found, byLabels := pickRule(rules[i:], proxyNS, labels); found {
			return dr, true, byLabels
		}
	}
	for i, r := range rules[idx.wildcards[ns]:] {
		if !HostMatches(r.Host, host) || !visible(r.ExportTo, proxyNS) {
			continue
		}
		return pickRule(rules[idx.wildcards[ns]+i:], proxyNS, labels)
	}
	return nil, false, false
}

// pickRule chooses among the rules of one host (rules[0]'s, the rules that follow it with the same host)
// the one a proxy of proxyNS with labels applies; found is false when none of them is visible to it.
// byLabels reports whether a visible rule with a selector was weighed (they come first).
func pickRule(rules []*DestinationRule, proxyNS string, labels map[string]string) (dr *DestinationRule, found, byLabels bool) {
	for i, r := range rules {
		if i > 0 && r.Host != rules[0].Host {
			break
		}
		if !visible(r.ExportTo, proxyNS) {
			continue
		}
		found = true
		byLabels = byLabels || r.Selector != nil
		if r.Selector == nil || labelsMatch(r.Selector, labels) {
			return r, true, byLabels
		}
	}
	return nil, found, byLabels
}

// localityAware reports whether any traffic policy of spec sets outlier detection or locality load balancing.
func localityAware(spec *networking.DestinationRule) bool {
	policies := []*networking.TrafficPolicy{spec.TrafficPolicy}
	for _, ss := range spec.Subsets {
		policies = append(policies, ss.TrafficPolicy)
	}
	for _, p := range policies {
		if p.GetOutlierDetection() != nil || p.GetLoadBalancer().GetLocalityLbSetting() != nil {
			return true
		}
		for _, pl := range p.GetPortLevelSettings() {
			if pl.GetOutlierDetection() != nil || pl.GetLoadBalancer().GetLocalityLbSetting() != nil {
				return true
			}
		}
	}
	return false
}

// LabelsKey spells a label set in one way, keys sorted, for use as a cache or map key.
func LabelsKey(labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(labels[k])
		b.WriteByte(0)
	}
	return b.String()
}

// resolveGatewayName turns "gw" or "ns/gw" (or "gw.ns.svc.cluster.local") into NAMESPACE/NAME.
func resolveGatewayName(g, ns string) string {
	if g == MeshGateway {
		return g
	}
	if strings.Contains(g, "/") {
		return g
	}
	if name, rest, ok := strings.Cut(g, "."); ok {
		gwNS, _, _ := strings.Cut(rest, ".")
		return gwNS + "/" + name
	}
	return ns + "/" + g
}

type gatewayIndex struct {
	all []*config.Config // oldest first
}

func buildGateways(reader ConfigReader) *gatewayIndex {
	all := reader.List(config.Gateway)
	slices.SortFunc(all, compareConfigs)
	return &gatewayIndex{all: all}
}

type sidecarIndex struct {
	withSelector map[string][]*config.Config // namespace → oldest first
	defaults     map[string]*config.Config   // namespace → oldest Sidecar without a selector
}

func buildSidecars(reader ConfigReader) *sidecarIndex {
	all := reader.List(config.Sidecar)
	slices.SortFunc(all, compareConfigs)
	idx := &sidecarIndex{withSelector: map[string][]*config.Config{}, defaults: map[string]*config.Config{}}
	for _, c := range all {
		spec := c.Spec.(*networking.Sidecar)
		if spec.WorkloadSelector != nil && len(spec.WorkloadSelector.Labels) > 0 {
			idx.withSelector[c.Namespace] = append(idx.withSelector[c.Namespace], c)
		} else if idx.defaults[c.Namespace] == nil {
			idx.defaults[c.Namespace] = c
		}
	}
	return idx
}

type namespacedPolicies struct {
	byNamespace map[string][]*config.Config // oldest first
}

func buildNamespaced(reader ConfigReader, kind config.Kind) *namespacedPolicies {
	all := reader.List(kind)
	slices.SortFunc(all, compareConfigs)
	idx := &namespacedPolicies{byNamespace: map[string][]*config.Config{}}
	for _, c := range all {
		idx.byNamespace[c.Namespace] = append(idx.byNamespace[c.Namespace], c)
	}
	return idx
}

// targetablePolicy is a policy kind that selects workloads by selector or binds to targets by targetRefs
// (AuthorizationPolicy; RequestAuthentication has the same fields).
type targetablePolicy interface {
	GetSelector() *typev1beta1.WorkloadSelector
	GetTargetRef() *typev1beta1.PolicyTargetReference
	GetTargetRefs() []*typev1beta1.PolicyTargetReference
}

// policyAttaches is istiod's WorkloadPolicyMatcher.ShouldAttachPolicy for a policy of namespace policyNS
// and a proxy in ns that is not a waypoint (Sextant serves none). A policy with targetRefs attaches only to
// the pods of a Gateway API Gateway it names (their gateway-name label), in the policy's own namespace:
// never to a sidecar, so a policy written for a gateway or a waypoint cannot deny a namespace's ordinary
// traffic. A policy without targetRefs attaches by selector, to gateways too (istiod's default).
func policyAttaches(policyNS string, p targetablePolicy, ns string, labels map[string]string) bool {
	refs := config.TargetRefs(p.GetTargetRef(), p.GetTargetRefs())
	if len(refs) == 0 {
		return selectorMatches(p.GetSelector(), labels)
	}
	gateway, isGateway := labels[config.GatewayNameLabel]
	if !isGateway || policyNS != ns {
		return false
	}
	for _, r := range refs {
		if config.IsGatewayTargetRef(r) && r.GetName() == gateway && (r.GetNamespace() == "" || r.GetNamespace() == ns) {
			return true
		}
	}
	return false
}

func selectorMatches(sel *typev1beta1.WorkloadSelector, labels map[string]string) bool {
	if sel == nil {
		return true
	}
	return labelsMatch(sel.MatchLabels, labels)
}

// AuthorizationPolicies are the policies that apply to one workload, grouped by action.
type AuthorizationPolicies struct {
	Allow, Deny, Audit, Custom []*config.Config
}

// Empty reports whether no policy applies.
func (a AuthorizationPolicies) Empty() bool {
	return len(a.Allow)+len(a.Deny)+len(a.Audit)+len(a.Custom) == 0
}

func (a *AuthorizationPolicies) add(c *config.Config) {
	switch c.Spec.(*security.AuthorizationPolicy).Action {
	case security.AuthorizationPolicy_ALLOW:
		a.Allow = append(a.Allow, c)
	case security.AuthorizationPolicy_DENY:
		a.Deny = append(a.Deny, c)
	case security.AuthorizationPolicy_AUDIT:
		a.Audit = append(a.Audit, c)
	case security.AuthorizationPolicy_CUSTOM:
		a.Custom = append(a.Custom, c)
	}
}

// MTLSMode is the effective inbound mutual TLS mode.
type MTLSMode string

const (
	MTLSPermissive MTLSMode = "PERMISSIVE"
	MTLSStrict     MTLSMode = "STRICT"
	MTLSDisable    MTLSMode = "DISABLE"
)

// EffectiveMTLS is the mutual TLS a workload accepts: a mode, and per-port overrides.
type EffectiveMTLS struct {
	Mode      MTLSMode
	PortModes map[uint32]MTLSMode
	// Sources are the PeerAuthentications that decided it, most specific first.
	Sources []config.Key
}

// ModeForPort returns the mode on a workload port.
func (e EffectiveMTLS) ModeForPort(port uint32) MTLSMode {
	if m, ok := e.PortModes[port]; ok {
		return m
	}
	return e.Mode
}

func mtlsMode(m security.PeerAuthentication_MutualTLS_Mode) (MTLSMode, bool) {
	switch m {
	case security.PeerAuthentication_MutualTLS_STRICT:
		return MTLSStrict, true
	case security.PeerAuthentication_MutualTLS_PERMISSIVE:
		return MTLSPermissive, true
	case security.PeerAuthentication_MutualTLS_DISABLE:
		return MTLSDisable, true
	}
	return "", false // UNSET inherits
}

func peerAuthMode(pa *security.PeerAuthentication) (MTLSMode, bool) {
	if pa.Mtls == nil {
		return "", false
	}
	return mtlsMode(pa.Mtls.Mode)
}

// GetSubsets returns the merged subsets; nil-safe so callers can ask a missing rule.
func (dr *DestinationRule) GetSubsets() []*networking.Subset {
	if dr == nil {
		return nil
	}
	return dr.Spec.Subsets
}

// AuthorizationProblems reports each CUSTOM AuthorizationPolicy whose provider the mesh config cannot honour
// (its rules then deny what they match), as warnings for /debug/config_errors, in namespace and name order.
func (ps *PushContext) AuthorizationProblems() []*config.Error {
	if ps.authorization == nil {
		return nil
	}
	var out []*config.Error
	for _, cfgs := range ps.authorization.byNamespace {
		for _, c := range cfgs {
			if msg := CustomProviderProblem(c, ps.Mesh); msg != "" {
				out = append(out, &config.Error{File: c.Source, Kind: string(c.Kind), Namespace: c.Namespace, Name: c.Name,
					Field: "spec.provider.name", Message: msg, Warning: true})
			}
		}
	}
	out = append(out, ps.autoPassthroughPolicyProblems()...)
	slices.SortFunc(out, func(a, b *config.Error) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name), strings.Compare(a.Message, b.Message))
	})
	return out
}

// autoPassthroughPolicyProblems warns about each AuthorizationPolicy applying to a gateway workload whose
// Gateways have an AUTO_PASSTHROUGH server: that server forwards the client's mTLS unopened, so, as in
// istiod, no policy is applied on its port (the destination's sidecar applies its own).
func (ps *PushContext) autoPassthroughPolicyProblems() []*config.Error {
	if ps.gateways == nil || ps.workloads == nil || ps.authorization == nil {
		return nil
	}
	hasPassthrough := func(g *config.Config) bool {
		return slices.ContainsFunc(g.Spec.(*networking.Gateway).Servers, func(s *networking.Server) bool {
			return s.GetTls().GetMode() == networking.ServerTLSSettings_AUTO_PASSTHROUGH
		})
	}
	if !slices.ContainsFunc(ps.gateways.all, hasPassthrough) {
		return nil
	}
	type pair struct{ policy, gateway config.Key }
	seen := map[pair]bool{}
	var out []*config.Error
	for _, w := range ps.workloads.byUID.All() {
		for _, g := range ps.Gateways(w.Labels) {
			if !hasPassthrough(g) {
				continue
			}
			pols := ps.AuthorizationPolicies(w.Namespace, w.Labels)
			for _, group := range [][]*config.Config{pols.Allow, pols.Deny, pols.Audit, pols.Custom} {
				for _, c := range group {
					if seen[pair{c.Key, g.Key}] {
						continue
					}
					seen[pair{c.Key, g.Key}] = true
					out = append(out, &config.Error{File: c.Source, Kind: string(c.Kind), Namespace: c.Namespace, Name: c.Name, Field: "spec",
						Warning: true, Message: "not applied on the AUTO_PASSTHROUGH servers of Gateway " + g.Namespace + "/" + g.Name +
							" (as in istiod): they forward the client's mTLS to its destination unopened, whose sidecar applies its own policies"})
				}
			}
		}
	}
	return out
}

// CustomProviderProblem says why a CUSTOM AuthorizationPolicy's field provider.name cannot be honoured under
// the mesh config: no provider has that name, or it is not of a kind Sextant implements (envoyExtAuthzGrpc,
// envoyExtAuthzHttp). The generators then make the policy's rules deny what they match, so this is what an
// operator must be told; empty for any other policy. (That the provider's service exists is checked when
// listeners are built, against the snapshot.)
func CustomProviderProblem(c *config.Config, m *mesh.Config) string {
	ap, ok := c.Spec.(*security.AuthorizationPolicy)
	if !ok || ap.Action != security.AuthorizationPolicy_CUSTOM {
		return ""
	}
	name := ap.GetProvider().GetName()
	p := m.ExtensionProvider(name)
	switch {
	case name == "":
		return "action CUSTOM names no provider: the requests its rules match are denied"
	case p == nil:
		return "provider " + strconv.Quote(name) +
			" is not defined in the mesh config's extensionProviders: the requests its rules match are denied"
	case p.EnvoyExtAuthzGRPC == nil && p.EnvoyExtAuthzHTTP == nil:
		return "provider " + strconv.Quote(name) + " is of kind " + strconv.Quote(p.Kind) +
			", not an external authorization provider Sextant implements: the requests its rules match are denied"
	}
	return ""
}

// destinationRuleDefaultExportTo is the exportTo of a DestinationRule that sets none: as in istiod, the
// mesh default counts only as "." (its own namespace) or, for anything else, everywhere.
func destinationRuleDefaultExportTo(m *mesh.Config) []string {
	if slices.Contains(m.DefaultDestinationRuleExportTo, ".") {
		return []string{"."}
	}
	return nil
}
