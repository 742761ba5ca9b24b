package model

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pkg/cowmap"
)

// VirtualService is a VirtualService with its hosts and gateways resolved to full names. A root
// VirtualService's http routes that delegate are replaced by the delegate's routes merged with them, as
// istiod does (its Spec is then a copy): generators never see a delegate.
type VirtualService struct {
	*config.Config
	Spec     *networking.VirtualService
	Hosts    []string
	Gateways []string // "mesh" or NAMESPACE/NAME
	ExportTo []string
	// Delegates are the VirtualServices its http routes delegate to, found or not: a change to one of them
	// resolves this one again.
	Delegates []config.Key
	// Problems are the delegations that were left out (the delegate missing, not exported to this
	// namespace, or its routes all conflicting with the root's match), as config errors to report.
	Problems []*config.Error
}

// MeshGateway is the implicit gateway meaning "all sidecars".
const MeshGateway = "mesh"

type virtualServiceIndex struct {
	byGateway map[string][]*VirtualService // oldest first; delegates are routed only through their roots
	// byKey holds every routed VirtualService by config key; referencedBy the keys of the roots delegating
	// to a key (sorted), whether that VirtualService exists or not. A change re-resolves the changed
	// VirtualServices and the roots referencing them, and keeps every other one as it was.
	byKey        *cowmap.Map[*VirtualService]
	referencedBy *cowmap.Map[[]config.Key]
	// byHost caches, per [proxy namespace, gateway], the visible VirtualServices by host: a sidecar's route
	// tables look one up per service, and scanning every VirtualService each time was a tenth of a build.
	byHost sync.Map // [2]string → *vsHostIndex
	// l4Labelled are the mesh VirtualServices with a tcp or tls match on sourceLabels, found on first use:
	// only with one of them do a sidecar's listeners depend on its labels.
	l4Once     sync.Once
	l4Labelled []*VirtualService
}

// vsHostIndex answers VirtualServiceForHost and VirtualServicesForHost for one proxy namespace and gateway.
type vsHostIndex struct {
	exact    map[string]*VirtualService // the first VirtualService naming the host exactly
	wildcard []vsPattern                // wildcard hosts, in the VirtualServices' order
	// visible are the VirtualServices indexed, in PushContext.VirtualServices' order; exactAll every one naming a host exactly, in
	// that order, and pos each one's place in it.
	visible  []*VirtualService
	exactAll map[string][]*VirtualService
	pos      map[*VirtualService]int
}

type vsPattern struct {
	pattern string
	vs      *VirtualService
}

func newVSHostIndex(visible []*VirtualService) *vsHostIndex {
	idx := &vsHostIndex{exact: map[string]*VirtualService{}, visible: visible, exactAll: map[string][]*VirtualService{},
		pos: make(map[*VirtualService]int, len(visible))}
	for i, vs := range visible {
		idx.pos[vs] = i
		for _, h := range vs.Hosts {
			if strings.HasPrefix(h, "*") {
				idx.wildcard = append(idx.wildcard, vsPattern{h, vs})
				continue
			}
			if _, taken := idx.exact[h]; !taken {
				idx.exact[h] = vs
			}
			if list := idx.exactAll[h]; len(list) == 0 || list[len(list)-1] != vs {
				idx.exactAll[h] = append(list, vs)
			}
		}
	}
	return idx
}

// forHost is the exact match, else the longest matching wildcard (the first among equals): the order
// moreSpecific defines.
func (idx *vsHostIndex) forHost(host string) *VirtualService {
	if vs := idx.exact[host]; vs != nil {
		return vs
	}
	var best *VirtualService
	bestHost := ""
	for _, w := range idx.wildcard {
		if HostMatches(w.pattern, host) && (best == nil || moreSpecific(w.pattern, bestHost)) {
			best, bestHost = w.vs, w.pattern
		}
	}
	return best
}

// allForHost is every VirtualService with a host overlapping host, in the index's order, whatever the
// specificity of the host that matched. The result is shared: not to be modified.
func (idx *vsHostIndex) allForHost(host string) []*VirtualService {
	if strings.HasPrefix(host, "*") {
		// A wildcard service host (a ServiceEntry's) overlaps exact hosts too: rare enough to scan.
		var out []*VirtualService
		for _, vs := range idx.visible {
			if slices.ContainsFunc(vs.Hosts, func(h string) bool { return hostsOverlap(h, host) }) {
				out = append(out, vs)
			}
		}
		return out
	}
	exact := idx.exactAll[host]
	var out []*VirtualService
	for _, w := range idx.wildcard {
		if !HostMatches(w.pattern, host) {
			continue
		}
		if out == nil {
			out = slices.Clone(exact)
		}
		if !slices.Contains(out, w.vs) {
			out = append(out, w.vs)
		}
	}
	if out == nil {
		return exact
	}
	slices.SortFunc(out, func(a, b *VirtualService) int { return idx.pos[a] - idx.pos[b] })
	return out
}

// hostsOverlap is istiod's host.Name.Matches: equal hosts, or a wildcard matching the other host (both
// wildcards: the longer is within the shorter).
func hostsOverlap(a, b string) bool {
	aw, bw := strings.HasPrefix(a, "*"), strings.HasPrefix(b, "*")
	switch {
	case aw && bw:
		if len(a) < len(b) {
			return strings.HasSuffix(b[1:], a[1:])
		}
		return strings.HasSuffix(a[1:], b[1:])
	case aw:
		return strings.HasSuffix(b, a[1:])
	case bw:
		return strings.HasSuffix(a, b[1:])
	}
	return a == b
}

func compareVirtualServices(a, b *VirtualService) int { return compareConfigs(a.Config, b.Config) }

func buildVirtualServices(reader ConfigReader, m *mesh.Config) *virtualServiceIndex {
	all := reader.List(config.VirtualService)
	slices.SortFunc(all, compareConfigs)
	idx := &virtualServiceIndex{byGateway: map[string][]*VirtualService{}}
	byKey, refs := cowmap.New[*VirtualService]().Edit(), cowmap.New[[]config.Key]().Edit()
	for _, c := range all {
		vs := resolveVirtualService(c, reader, m)
		if vs == nil {
			continue
		}
		byKey.Set(c.Key.String(), vs)
		for _, d := range vs.Delegates {
			list, _ := refs.Get(d.String())
			refs.Set(d.String(), insertKey(list, c.Key))
		}
		for _, g := range vs.Gateways {
			idx.byGateway[g] = append(idx.byGateway[g], vs)
		}
	}
	idx.byKey, idx.referencedBy = byKey.Map(), refs.Map()
	return idx
}

// updateVirtualServices returns prev after the VirtualServices with keys changed: those and the roots
// delegating to them are resolved again; every other VirtualService is kept, pointer and all, so what
// generators built from it stays valid.
func updateVirtualServices(prev *virtualServiceIndex, reader ConfigReader, m *mesh.Config, changed []config.Key) *virtualServiceIndex {
	affected := map[config.Key]bool{}
	for _, k := range changed {
		affected[k] = true
		roots, _ := prev.referencedBy.Get(k.String())
		for _, r := range roots {
			affected[r] = true
		}
	}
	next := &virtualServiceIndex{byGateway: maps.Clone(prev.byGateway)}
	byKey, refs := prev.byKey.Edit(), prev.referencedBy.Edit()
	edited := map[string]bool{}
	for k := range affected {
		old, _ := byKey.Get(k.String())
		var fresh *VirtualService
		if c := reader.Get(k); c != nil {
			fresh = resolveVirtualService(c, reader, m)
		}
		if old != nil {
			byKey.Delete(k.String())
			for _, d := range old.Delegates {
				list, _ := refs.Get(d.String())
				if list = removeKey(list, k); len(list) == 0 {
					refs.Delete(d.String())
				} else {
					refs.Set(d.String(), list)
				}
			}
			for _, g := range old.Gateways {
				if !edited[g] {
					next.byGateway[g], edited[g] = slices.Clone(next.byGateway[g]), true
				}
				next.byGateway[g] = slices.DeleteFunc(next.byGateway[g], func(v *VirtualService) bool { return v == old })
			}
		}
		if fresh == nil {
			continue
		}
		byKey.Set(k.String(), fresh)
		for _, d := range fresh.Delegates {
			list, _ := refs.Get(d.String())
			refs.Set(d.String(), insertKey(list, k))
		}
		for _, g := range fresh.Gateways {
			if !edited[g] {
				next.byGateway[g], edited[g] = slices.Clone(next.byGateway[g]), true
			}
			list := next.byGateway[g]
			i, _ := slices.BinarySearchFunc(list, fresh, compareVirtualServices)
			next.byGateway[g] = slices.Insert(list, i, fresh)
		}
	}
	for g, list := range next.byGateway {
		if len(list) == 0 {
			delete(next.byGateway, g)
		}
	}
	next.byKey, next.referencedBy = byKey.Map(), refs.Map()
	return next
}

func insertKey(list []config.Key, k config.Key) []config.Key {
	i, found := slices.BinarySearchFunc(list, k, config.CompareKeys)
	if found {
		return list
	}
	return slices.Insert(slices.Clone(list), i, k)
}

func removeKey(list []config.Key, k config.Key) []config.Key {
	i, found := slices.BinarySearchFunc(list, k, config.CompareKeys)
	if !found {
		return list
	}
	return slices.Delete(slices.Clone(list), i, i+1)
}

// resolveVirtualService resolves c's hosts and gateways and merges its delegates. nil for a VirtualService
// without hosts: a delegate, routed only through the roots that name it.
func resolveVirtualService(c *config.Config, reader ConfigReader, m *mesh.Config) *VirtualService {
	spec := c.Spec.(*networking.VirtualService)
	if len(spec.Hosts) == 0 {
		return nil
	}
	vs := &VirtualService{Config: c, Spec: spec, ExportTo: normalizeExportTo(spec.ExportTo, c.Namespace, m.DefaultVirtualServiceExportTo)}
	for _, h := range spec.Hosts {
		vs.Hosts = append(vs.Hosts, ResolveHost(h, c.Namespace, m.DomainSuffix))
	}
	gws := spec.Gateways
	if len(gws) == 0 {
		gws = []string{MeshGateway}
	}
	for _, g := range gws {
		vs.Gateways = append(vs.Gateways, resolveGatewayName(g, c.Namespace))
	}
	if slices.ContainsFunc(spec.Http, func(r *networking.HTTPRoute) bool { return r.GetDelegate() != nil }) {
		vs.Spec = mergeDelegates(vs, reader, m)
	}
	return vs
}

// mergeDelegates returns vs's spec with each delegating http route replaced by the delegate's routes merged
// with it, in place (istiod's mergeVirtualServices). A delegate that is missing (or has hosts: then it is
// no delegate) or is not exported to vs's namespace leaves that route out, and only that route.
func mergeDelegates(vs *VirtualService, reader ConfigReader, m *mesh.Config) *networking.VirtualService {
	spec := vs.Spec
	out := &networking.VirtualService{
		Hosts: spec.Hosts, Gateways: spec.Gateways, Tls: spec.Tls, Tcp: spec.Tcp, ExportTo: spec.ExportTo,
		Http: make([]*networking.HTTPRoute, 0, len(spec.Http)),
	}
	for i, root := range spec.Http {
		ref := root.GetDelegate()
		if ref == nil {
			out.Http = append(out.Http, root)
			continue
		}
		ns := cmp.Or(ref.Namespace, vs.Namespace)
		key := config.Key{Kind: config.VirtualService, Namespace: ns, Name: ref.Name}
		if !slices.Contains(vs.Delegates, key) {
			vs.Delegates = append(vs.Delegates, key)
		}
		field := fmt.Sprintf("spec.http[%d].delegate", i)
		d := reader.Get(key)
		var dspec *networking.VirtualService
		if d != nil {
			dspec = d.Spec.(*networking.VirtualService)
		}
		switch {
		case dspec == nil || len(dspec.Hosts) > 0:
			vs.problem(field, "VirtualService %s/%s is not a delegate VirtualService (it must exist and have no hosts): this route is left out", ns,
				ref.Name)
			continue
		case !visible(normalizeExportTo(dspec.ExportTo, ns, m.DefaultVirtualServiceExportTo), vs.Namespace):
			vs.problem(field, "VirtualService %s/%s is not exported to namespace %s: this route is left out", ns, ref.Name, vs.Namespace)
			continue
		}
		n := len(out.Http)
		for _, leaf := range dspec.Http {
			if leaf.GetDelegate() != nil {
				continue // a delegate cannot delegate again (validation refuses it)
			}
			if merged := mergeHTTPRoute(root, resolveDelegateRoute(leaf, ns, m)); merged != nil {
				out.Http = append(out.Http, merged)
			}
		}
		if len(out.Http) == n && len(dspec.Http) > 0 {
			vs.problem(field, "every route of VirtualService %s/%s conflicts with this route's match: none is taken", ns, ref.Name)
		}
	}
	return out
}

func (vs *VirtualService) problem(field, format string, args ...any) {
	vs.Problems = append(vs.Problems, &config.Error{File: vs.Source, Kind: string(vs.Kind), Namespace: vs.Namespace, Name: vs.Name,
		Field: field, Message: fmt.Sprintf(format, args...), Warning: true})
}

// resolveDelegateRoute copies a delegate's route with its short names resolved in the delegate's own
// namespace (destinations, mirrors, match gateways), as istiod does, so they keep their meaning under the
// root, which may live elsewhere.
func resolveDelegateRoute(in *networking.HTTPRoute, ns string, m *mesh.Config) *networking.HTTPRoute {
	r := proto.Clone(in).(*networking.HTTPRoute)
	for _, d := range r.Route {
		if d.Destination != nil {
			d.Destination.Host = ResolveHost(d.Destination.Host, ns, m.DomainSuffix)
		}
	}
	if r.Mirror != nil {
		r.Mirror.Host = ResolveHost(r.Mirror.Host, ns, m.DomainSuffix)
	}
	for _, mp := range r.Mirrors {
		if mp.Destination != nil {
			mp.Destination.Host = ResolveHost(mp.Destination.Host, ns, m.DomainSuffix)
		}
	}
	for _, match := range r.Match {
		for i, g := range match.Gateways {
			match.Gateways[i] = resolveGatewayName(g, ns)
		}
	}
	return r
}

// mergeHTTPRoute merges a root route into a (copied) delegate route: the matches combined, and what the
// delegate route leaves unset taken from the root. nil when the matches conflict (istiod's mergeHTTPRoute).
func mergeHTTPRoute(root, leaf *networking.HTTPRoute) *networking.HTTPRoute {
	merged, conflict := mergeHTTPMatchRequests(root.Match, leaf.Match)
	if conflict {
		return nil
	}
	leaf.Match = merged
	if leaf.Name == "" {
		leaf.Name = root.Name
	} else if root.Name != "" {
		leaf.Name = root.Name + "-" + leaf.Name
	}
	if leaf.Rewrite == nil {
		leaf.Rewrite = root.Rewrite
	}
	if leaf.DirectResponse == nil {
		leaf.DirectResponse = root.DirectResponse
	}
	if leaf.Timeout == nil {
		leaf.Timeout = root.Timeout
	}
	if leaf.Retries == nil {
		leaf.Retries = root.Retries
	}
	if leaf.Fault == nil {
		leaf.Fault = root.Fault
	}
	if leaf.Mirror == nil {
		leaf.Mirror = root.Mirror
	}
	if leaf.MirrorPercent == nil { // deprecated, still merged as istiod does
		leaf.MirrorPercent = root.MirrorPercent
	}
	if leaf.MirrorPercentage == nil {
		leaf.MirrorPercentage = root.MirrorPercentage
	}
	if leaf.CorsPolicy == nil {
		leaf.CorsPolicy = root.CorsPolicy
	}
	if leaf.Mirrors == nil {
		leaf.Mirrors = root.Mirrors
	}
	if leaf.Headers == nil {
		leaf.Headers = root.Headers
	}
	return leaf
}

// mergeHTTPMatchRequests combines every delegate match with every root match it does not conflict with;
// conflict when some delegate match fits no root match.
func mergeHTTPMatchRequests(root, leaf []*networking.HTTPMatchRequest) (out []*networking.HTTPMatchRequest, conflict bool) {
	if len(root) == 0 {
		return leaf, false
	}
	if len(leaf) == 0 {
		return root, false
	}
	for _, lm := range leaf {
		found := false
		for _, rm := range root {
			if matchConflict(rm, lm) {
				continue
			}
			out = append(out, mergeHTTPMatchRequest(rm, lm))
			found = true
		}
		if !found {
			return nil, true
		}
	}
	return out, len(out) == 0
}

func mergeHTTPMatchRequest(root, leaf *networking.HTTPMatchRequest) *networking.HTTPMatchRequest {
	out := proto.Clone(leaf).(*networking.HTTPMatchRequest)
	if out.Name == "" {
		out.Name = root.Name
	} else if root.Name != "" {
		out.Name = root.Name + "-" + out.Name
	}
	if out.Uri == nil {
		out.Uri = root.Uri
	}
	if out.Scheme == nil {
		out.Scheme = root.Scheme
	}
	if out.Method == nil {
		out.Method = root.Method
	}
	if out.Authority == nil {
		out.Authority = root.Authority
	}
	out.Headers = mergeMaps(root.Headers, leaf.Headers)
	out.WithoutHeaders = mergeMaps(root.WithoutHeaders, leaf.WithoutHeaders)
	out.QueryParams = mergeMaps(root.QueryParams, leaf.QueryParams)
	if out.Port == 0 {
		out.Port = root.Port
	}
	out.SourceLabels = mergeMaps(root.SourceLabels, leaf.SourceLabels)
	if out.SourceNamespace == "" {
		out.SourceNamespace = root.SourceNamespace
	}
	if len(out.Gateways) == 0 {
		out.Gateways = root.Gateways
	}
	if out.StatPrefix == "" {
		out.StatPrefix = root.StatPrefix
	}
	return out
}

// mergeMaps is base with override on top; nil when both are empty.
func mergeMaps[V any](base, override map[string]V) map[string]V {
	if len(base) == 0 && len(override) == 0 {
		return nil
	}
	out := make(map[string]V, len(base)+len(override))
	maps.Copy(out, base)
	maps.Copy(out, override)
	return out
}

// matchConflict reports whether a delegate match can match requests the root match does not (istiod's
// hasConflict): the delegate must narrow the root, never widen or contradict it.
func matchConflict(root, leaf *networking.HTTPMatchRequest) bool {
	roots := []*networking.StringMatch{root.Uri, root.Scheme, root.Method, root.Authority}
	leaves := []*networking.StringMatch{leaf.Uri, leaf.Scheme, leaf.Method, leaf.Authority}
	for i := range roots {
		if stringMatchConflict(roots[i], leaves[i]) {
			return true
		}
	}
	for k, v := range leaf.Headers {
		if stringMatchConflict(root.Headers[k], v) {
			return true
		}
	}
	for k, v := range leaf.WithoutHeaders {
		if stringMatchConflict(root.WithoutHeaders[k], v) {
			return true
		}
	}
	for k, v := range leaf.QueryParams {
		if stringMatchConflict(root.QueryParams[k], v) {
			return true
		}
	}
	if root.IgnoreUriCase != leaf.IgnoreUriCase {
		return true
	}
	if root.Port > 0 && leaf.Port > 0 && root.Port != leaf.Port {
		return true
	}
	if root.SourceNamespace != "" && leaf.SourceNamespace != root.SourceNamespace {
		return true
	}
	for k, v := range leaf.SourceLabels {
		if rv, ok := root.SourceLabels[k]; ok && rv != v {
			return true
		}
	}
	if len(root.Gateways) > 0 && len(leaf.Gateways) > 0 {
		if len(root.Gateways) < len(leaf.Gateways) {
			return true
		}
		for _, g := range leaf.Gateways {
			if !slices.Contains(root.Gateways, g) {
				return true
			}
		}
	}
	return false
}

// stringMatchConflict: unset on either side never conflicts; a regex only goes with an unset other side;
// under an exact root the delegate must be the same exact; under a prefix root, a prefix or exact value
// that starts with it.
func stringMatchConflict(root, leaf *networking.StringMatch) bool {
	if root == nil || leaf == nil {
		return false
	}
	if root.GetRegex() != "" && (leaf.GetRegex() != "" || leaf.GetPrefix() != "" || leaf.GetExact() != "") {
		return true
	}
	if leaf.GetRegex() != "" && (root.GetRegex() != "" || root.GetPrefix() != "" || root.GetExact() != "") {
		return true
	}
	if exact := root.GetExact(); exact != "" {
		return leaf.GetPrefix() != "" || leaf.GetExact() != exact
	}
	if prefix := root.GetPrefix(); prefix != "" {
		if p := leaf.GetPrefix(); p != "" {
			return !strings.HasPrefix(p, prefix)
		}
		if e := leaf.GetExact(); e != "" {
			return !strings.HasPrefix(e, prefix)
		}
	}
	return true
}

// VirtualServiceProblems reports the delegations left out of root VirtualServices, as warnings for
// /debug/config_errors, in namespace and name order.
func (ps *PushContext) VirtualServiceProblems() []*config.Error {
	var out []*config.Error
	for _, vs := range ps.virtualServices.byKey.All() {
		out = append(out, vs.Problems...)
	}
	slices.SortFunc(out, func(a, b *config.Error) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name), strings.Compare(a.Field, b.Field))
	})
	return out
}
