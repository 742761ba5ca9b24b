package model

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pkg/cowmap"
)

// ConfigReader is what building a PushContext reads: the config store.
type ConfigReader interface {
	Get(config.Key) *config.Config
	List(config.Kind) []*config.Config
	ListUnsorted(config.Kind) []*config.Config
	ListNamespace(kind config.Kind, namespace string) []*config.Config
	EndpointSlicesFor(namespace, service string) []*config.Config
}

// PushContext is an immutable snapshot of the mesh. Everything a generator reads comes from it.
// Published snapshots are never modified; a change produces a new PushContext that shares every index the
// change did not touch.
type PushContext struct {
	// Version increases by one with every published snapshot.
	Version uint64
	// Mesh settings in force.
	Mesh *mesh.Config
	// BuiltAt and BuildDuration describe how this snapshot was made; Rebuilt names the indexes rebuilt
	// (all of them for the first snapshot).
	BuiltAt       time.Time
	BuildDuration time.Duration
	Rebuilt       []string

	services            *cowmap.Map[[]*Service] // hostname → services, oldest first
	servicesBySource    *cowmap.Map[[]*Service] // config key → services it produced
	servicesByNamespace *cowmap.Map[[]*Service] // namespace → services, by hostname
	endpoints           *cowmap.Map[*ServiceEndpoints]
	podRefs             *cowmap.Map[[]string] // NAMESPACE/POD → keys of services whose EndpointSlices name the pod
	workloads           *workloadIndex
	namespaces          *cowmap.Map[*config.Config]

	destinationRules *destinationRuleIndex
	virtualServices  *virtualServiceIndex
	gateways         *gatewayIndex
	// ingress holds the Gateways and VirtualServices made of Ingresses, which the two indexes above include.
	ingress       *ingressIndex
	sidecars      *sidecarIndex
	authorization *namespacedPolicies
	peerAuthn     *peerAuthnIndex
	requestAuthn  *requestAuthnIndex
	// accounts changes identity whenever some service's ServiceAccounts do.
	accounts *accountsGeneration
	// endpointAddresses changes identity whenever the endpoint addresses of a service that sidecars listen
	// for per endpoint (Service.ListensOnEndpoints) do.
	endpointAddresses *accountsGeneration
	// credentials: NAMESPACE/NAME → every Secret, parsed when first asked for.
	credentials *cowmap.Map[*Credential]

	// sortedServices is computed on first use and shared with later snapshots while services are unchanged.
	sortedServices *lazyServiceList
}

type lazyServiceList struct {
	once  sync.Once
	list  []*Service
	ready atomic.Bool // list is computed
	// With fromBase, base is the computed list of the previous snapshot and removed and added the services
	// that left and joined it since: the list is then a merge, not a sort of every service.
	fromBase             bool
	base, removed, added []*Service
	// aliases: concrete hostname → the hostnames of the ExternalName Services naming it (AliasesOf).
	aliasOnce sync.Once
	aliases   map[string][]string
}

// compareForAll is the order of AllServices: hostname, then namespace.
func compareForAll(a, b *Service) int {
	if c := strings.Compare(a.Hostname, b.Hostname); c != 0 {
		return c
	}
	return strings.Compare(a.Namespace, b.Namespace)
}

type workloadIndex struct {
	byUID     *cowmap.Map[*Workload]
	byAddress *cowmap.Map[[]string] // NETWORK/IP → uids sorted; the first wins a conflict (pods before WorkloadEntries)
	byService *cowmap.Map[[]string] // service key → sorted workload uids
}

// ServiceCount returns how many services (hostname, namespace pairs) the snapshot holds.
func (ps *PushContext) ServiceCount() int {
	n := 0
	for _, list := range ps.servicesBySource.All() {
		n += len(list)
	}
	return n
}

// EndpointCount returns the number of endpoints across every service and port.
func (ps *PushContext) EndpointCount() int {
	n := 0
	for _, se := range ps.endpoints.All() {
		n += se.Count()
	}
	return n
}

// EndpointsWaitingForPods returns how many pods, summed over services, have endpoints held back until the
// pod is known with an IP (ServiceEndpoints.WaitingForPods).
func (ps *PushContext) EndpointsWaitingForPods() int {
	n := 0
	for _, se := range ps.endpoints.All() {
		n += len(se.WaitingForPods)
	}
	return n
}

// WorkloadCount returns the number of workloads (pods with an IP and WorkloadEntries).
func (ps *PushContext) WorkloadCount() int { return ps.workloads.byUID.Len() }

// AllServices returns every service sorted by hostname then namespace. The slice is shared: do not modify it.
func (ps *PushContext) AllServices() []*Service {
	l := ps.sortedServices
	l.once.Do(func() {
		if l.fromBase {
			l.list = replaceSorted(l.base, l.removed, l.added, compareForAll)
			l.base, l.removed, l.added = nil, nil, nil
		} else {
			list := make([]*Service, 0, ps.services.Len())
			for _, svcs := range ps.services.All() {
				list = append(list, svcs...)
			}
			slices.SortFunc(list, compareForAll)
			l.list = list
		}
		l.ready.Store(true)
	})
	return ps.sortedServices.list
}

// AliasesOf returns the hostnames of the ExternalName Services that name host, directly or through other
// ExternalName Services, sorted by namespace then hostname, as istiod's resolveServiceAliases: a chain
// that loops names nothing. Computed once per set of services. Do not modify.
func (ps *PushContext) AliasesOf(host string) []string {
	l := ps.sortedServices
	l.aliasOnce.Do(func() { l.aliases = resolveAliases(ps.AllServices()) })
	return l.aliases[host]
}

func resolveAliases(all []*Service) map[string][]string {
	var aliases []*Service
	target := map[string]string{} // alias hostname → what it names; an ExternalName is not namespaced
	for _, s := range all {
		if s.Resolution == Alias {
			aliases = append(aliases, s)
			target[s.Hostname] = s.AliasFor
		}
	}
	if len(aliases) == 0 {
		return nil
	}
	slices.SortFunc(aliases, func(a, b *Service) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Hostname, b.Hostname))
	})
	out := map[string][]string{}
	for _, a := range aliases {
		concrete, seen := a.AliasFor, map[string]bool{a.Hostname: true}
		for next, isAlias := target[concrete]; isAlias; next, isAlias = target[concrete] {
			if seen[concrete] {
				concrete = "" // a loop: Kubernetes answers NXDOMAIN for each of its names
				break
			}
			seen[concrete], concrete = true, next
		}
		if concrete != "" {
			out[concrete] = append(out[concrete], a.Hostname)
		}
	}
	return out
}

// ServicesForHostname returns every service with that hostname, oldest first.
func (ps *PushContext) ServicesForHostname(host string) []*Service {
	svcs, _ := ps.services.Get(host)
	return svcs
}

// ServiceForHostname returns the service a proxy in namespace proxyNS sees for host: one in its own
// namespace wins, then the oldest visible one.
func (ps *PushContext) ServiceForHostname(proxyNS, host string) *Service {
	svcs, _ := ps.services.Get(host)
	var first *Service
	for _, s := range svcs {
		if !s.VisibleTo(proxyNS) {
			continue
		}
		if s.Namespace == proxyNS {
			return s
		}
		if first == nil {
			first = s
		}
	}
	return first
}

// ServicesInNamespace returns the services defined in ns, by hostname.
func (ps *PushContext) ServicesInNamespace(ns string) []*Service {
	svcs, _ := ps.servicesByNamespace.Get(ns)
	return svcs
}

// accountsGeneration is a fresh pointer for each snapshot in which some service's accounts changed.
type accountsGeneration struct{ _ byte }

// ServiceAccounts returns the identities a client accepts from svc's servers under mesh mTLS (istiod's
// PushContext.ServiceAccounts): every endpoint's, and those the service declares. Sorted; do not modify.
func (ps *PushContext) ServiceAccounts(svc *Service) []string {
	if se := ps.Endpoints(svc.Key()); se != nil {
		return se.ServiceAccounts
	}
	return svc.ServiceAccounts
}

// ServiceAccountsID changes whenever some service's ServiceAccounts do; comparable, meant for equality.
func (ps *PushContext) ServiceAccountsID() any { return ps.accounts }

// Endpoints returns the endpoints of the service with key namespace/hostname.
func (ps *PushContext) Endpoints(serviceKey string) *ServiceEndpoints {
	se, _ := ps.endpoints.Get(serviceKey)
	return se
}

// EndpointsForPort returns the endpoints of svc on service port port whose labels carry subsetLabels.
func (ps *PushContext) EndpointsForPort(svc *Service, port uint32, subsetLabels map[string]string) []*Endpoint {
	se := ps.Endpoints(svc.Key())
	if se == nil {
		return nil
	}
	eps := se.ByPort[port]
	if len(subsetLabels) == 0 {
		return eps
	}
	out := make([]*Endpoint, 0, len(eps))
	for _, ep := range eps {
		if labelsMatch(subsetLabels, ep.Labels) {
			out = append(out, ep)
		}
	}
	return out
}

// Workload returns the workload with uid.
func (ps *PushContext) Workload(uid string) *Workload {
	w, _ := ps.workloads.byUID.Get(uid)
	return w
}

// WorkloadByAddress returns the workload at IP on network.
func (ps *PushContext) WorkloadByAddress(network, ip string) *Workload {
	uids, _ := ps.workloads.byAddress.Get(addressKey(network, ip))
	if len(uids) == 0 {
		return nil
	}
	return ps.Workload(uids[0])
}

// WorkloadsForService returns the workloads selected by the service with key namespace/hostname.
func (ps *PushContext) WorkloadsForService(serviceKey string) []*Workload {
	uids, _ := ps.workloads.byService.Get(serviceKey)
	out := make([]*Workload, 0, len(uids))
	for _, uid := range uids {
		if w := ps.Workload(uid); w != nil {
			out = append(out, w)
		}
	}
	return out
}

// AllWorkloads iterates over every workload in no particular order.
func (ps *PushContext) AllWorkloads(yield func(*Workload) bool) {
	for _, w := range ps.workloads.byUID.All() {
		if !yield(w) {
			return
		}
	}
}

// Namespace returns the Namespace object, or nil when unknown.
func (ps *PushContext) Namespace(name string) *config.Config {
	ns, _ := ps.namespaces.Get(name)
	return ns
}

// DestinationRule returns the DestinationRule a proxy in proxyNS applies to traffic for svc, ignoring
// rules with a workloadSelector (see DestinationRuleFor).
func (ps *PushContext) DestinationRule(proxyNS string, svc *Service) *DestinationRule {
	return ps.DestinationRuleFor(proxyNS, nil, svc)
}

// DestinationRuleFor returns the DestinationRule a proxy in proxyNS with labels applies to traffic for
// svc: its own namespace first (a rule whose workloadSelector selects it ahead of the rule without), then
// the service's namespace, then the root namespace — Istio's precedence. Once a namespace has a rule for
// the host, the search stops there, as in istiod, even if none of them selects the proxy.
func (ps *PushContext) DestinationRuleFor(proxyNS string, labels map[string]string, svc *Service) *DestinationRule {
	dr, _ := ps.DestinationRuleByLabels(proxyNS, labels, svc)
	return dr
}

// DestinationRuleByLabels is DestinationRuleFor, and reports whether the choice weighed a rule with a
// workloadSelector: then a proxy with other labels may apply another rule, and what is built from the
// answer can only be shared between proxies of the same labels.
func (ps *PushContext) DestinationRuleByLabels(proxyNS string, labels map[string]string,
	svc *Service) (dr *DestinationRule, byLabels bool) {
	dr, found, byLabels := ps.destinationRules.lookup(proxyNS, proxyNS, svc.Hostname, labels)
	if found {
		return dr, byLabels
	}
	// Rules with a selector are never exported: only the proxy's own namespace's depend on its labels.
	if svc.Namespace != proxyNS {
		if dr, found, _ := ps.destinationRules.lookup(svc.Namespace, proxyNS, svc.Hostname, labels); found {
			return dr, byLabels
		}
	}
	root := ps.Mesh.RootNamespace
	if root != proxyNS && root != svc.Namespace {
		dr, _, _ := ps.destinationRules.lookup(root, proxyNS, svc.Hostname, labels)
		return dr, byLabels
	}
	return nil, byLabels
}

// DestinationRulesLocalityAware reports whether some DestinationRule sets outlier detection or locality
// load balancing, the settings that make an endpoint assignment depend on the proxy's locality.
func (ps *PushContext) DestinationRulesLocalityAware() bool { return ps.destinationRules.localityAware }

// DestinationRuleSelection names the workloadSelector rules of namespace ns that select labels ("" when
// none does): proxies of a namespace with the same selection apply the same DestinationRules, so what is
// built from them can be shared between them.
func (ps *PushContext) DestinationRuleSelection(ns string, labels map[string]string) string {
	if !ps.destinationRules.selective[ns] {
		return ""
	}
	var b strings.Builder
	for _, dr := range ps.destinationRules.byNamespace[ns] {
		if dr.Selector != nil && labelsMatch(dr.Selector, labels) {
			for _, k := range dr.Sources {
				b.WriteString(k.String())
				b.WriteByte(0)
			}
		}
	}
	return b.String()
}

// VirtualServices returns the VirtualServices bound to gateway ("mesh" for sidecars) visible in proxyNS,
// the namespace of the proxy (a sidecar's, or a gateway's pods'), in istiod's order (the first one wins a
// host conflict): those of proxyNS exported to it alone (not everywhere), then those of other namespaces
// exported to it by name, then those exported everywhere, each oldest first. istiod's
// VirtualServicesForGateway hides from a gateway's pods, as from a sidecar, what is not exported to them.
func (ps *PushContext) VirtualServices(proxyNS, gateway string) []*VirtualService {
	all := ps.virtualServices.byGateway[gateway]
	out := make([]*VirtualService, 0, len(all))
	var exported, public []*VirtualService
	for _, vs := range all {
		switch {
		case slices.Contains(vs.ExportTo, "*"):
			public = append(public, vs)
		case !slices.Contains(vs.ExportTo, proxyNS):
		case vs.Namespace == proxyNS:
			out = append(out, vs)
		default:
			exported = append(exported, vs)
		}
	}
	return append(append(out, exported...), public...)
}

// VirtualServiceForHost returns the VirtualService for host on gateway visible in proxyNS: an exact host
// first, then the most specific wildcard; among equals, the first in VirtualServices' order.
func (ps *PushContext) VirtualServiceForHost(proxyNS, gateway, host string) *VirtualService {
	return ps.vsHostIndex(proxyNS, gateway).forHost(host)
}

// VirtualServicesForHost returns every VirtualService on gateway visible in proxyNS with a host
// overlapping host (either may be a wildcard), in the order of VirtualServices: istiod's getConfigsForHost,
// whose tcp and tls routes a sidecar's listeners for host take one VirtualService after the other. Shared:
// not to be modified.
func (ps *PushContext) VirtualServicesForHost(proxyNS, gateway, host string) []*VirtualService {
	return ps.vsHostIndex(proxyNS, gateway).allForHost(host)
}

func (ps *PushContext) vsHostIndex(proxyNS, gateway string) *vsHostIndex {
	key := [2]string{proxyNS, gateway}
	idx, ok := ps.virtualServices.byHost.Load(key)
	if !ok {
		idx, _ = ps.virtualServices.byHost.LoadOrStore(key, newVSHostIndex(ps.VirtualServices(proxyNS, gateway)))
	}
	return idx.(*vsHostIndex)
}

// L4SourceLabelled returns the VirtualServices bound to mesh (visible anywhere or not) with a tcp or tls
// match on sourceLabels, oldest first. Shared: not to be modified.
func (ps *PushContext) L4SourceLabelled() []*VirtualService {
	idx := ps.virtualServices
	idx.l4Once.Do(func() {
		for _, vs := range idx.byGateway[MeshGateway] {
			if hasL4SourceLabels(vs.Spec) {
				idx.l4Labelled = append(idx.l4Labelled, vs)
			}
		}
	})
	return idx.l4Labelled
}

func hasL4SourceLabels(s *networking.VirtualService) bool {
	for _, r := range s.Tcp {
		for _, m := range r.Match {
			if len(m.SourceLabels) > 0 {
				return true
			}
		}
	}
	for _, r := range s.Tls {
		for _, m := range r.Match {
			if len(m.SourceLabels) > 0 {
				return true
			}
		}
	}
	return false
}

// Gateways returns the Gateways whose selector matches a gateway proxy's labels, oldest first.
func (ps *PushContext) Gateways(labels map[string]string) []*config.Config {
	var out []*config.Config
	for _, g := range ps.gateways.all {
		if labelsMatch(g.Spec.(*networking.Gateway).Selector, labels) {
			out = append(out, g)
		}
	}
	return out
}

// Sidecar returns the Sidecar scoping a proxy: the oldest one in its namespace whose selector matches, else
// the namespace default, else the root namespace default; nil when none applies.
func (ps *PushContext) Sidecar(ns string, labels map[string]string) *config.Config {
	for _, c := range ps.sidecars.withSelector[ns] {
		if labelsMatch(c.Spec.(*networking.Sidecar).WorkloadSelector.Labels, labels) {
			return c
		}
	}
	if c := ps.sidecars.defaults[ns]; c != nil {
		return c
	}
	return ps.sidecars.defaults[ps.Mesh.RootNamespace]
}

// AuthorizationPolicies returns the policies applying to a workload in ns with labels: the root namespace's
// (mesh-wide) and its own namespace's, each filtered by selector.
//
// A policy with targetRefs applies only to the proxies of the Gateway API Gateway it names; a policy without
// applies by selector (see policyAttaches).
func (ps *PushContext) AuthorizationPolicies(ns string, labels map[string]string) AuthorizationPolicies {
	var out AuthorizationPolicies
	for _, c := range ps.authorization.byNamespace[ps.Mesh.RootNamespace] {
		if policyAttaches(c.Namespace, c.Spec.(*security.AuthorizationPolicy), ns, labels) {
			out.add(c)
		}
	}
	if ns == ps.Mesh.RootNamespace {
		return out
	}
	for _, c := range ps.authorization.byNamespace[ns] {
		if policyAttaches(c.Namespace, c.Spec.(*security.AuthorizationPolicy), ns, labels) {
			out.add(c)
		}
	}
	return out
}

// AuthorizationPoliciesInNamespace returns every policy defined in ns, oldest first.
func (ps *PushContext) AuthorizationPoliciesInNamespace(ns string) []*config.Config {
	return ps.authorization.byNamespace[ns]
}

// PeerAuthentication returns the mutual TLS a workload accepts: a workload policy (selector) over the
// namespace policy over the mesh policy (root namespace); UNSET inherits; the default is PERMISSIVE. A policy
// with a selector in the root namespace selects nothing, as in istiod.
func (ps *PushContext) PeerAuthentication(ns string, labels map[string]string) EffectiveMTLS {
	idx := ps.peerAuthn
	workload := idx.workloadPolicy(ns, labels)
	var namespace, meshWide *config.Config
	if e := idx.byNamespace[ns]; e != nil && ns != idx.root {
		namespace = e.wide
	}
	if e := idx.byNamespace[idx.root]; e != nil {
		meshWide = e.wide
	}
	out := EffectiveMTLS{Mode: MTLSPermissive}
	decided := false
	for _, c := range []*config.Config{workload, namespace, meshWide} {
		if c == nil {
			continue
		}
		out.Sources = append(out.Sources, c.Key)
		if m, ok := peerAuthMode(c.Spec.(*security.PeerAuthentication)); ok && !decided {
			out.Mode, decided = m, true
		}
	}
	if workload != nil {
		for port, pm := range workload.Spec.(*security.PeerAuthentication).PortLevelMtls {
			if m, ok := mtlsMode(pm.Mode); ok {
				if out.PortModes == nil {
					out.PortModes = map[uint32]MTLSMode{}
				}
				out.PortModes[port] = m
			}
		}
	}
	return out
}

// Index identities. Each changes exactly when its index was rebuilt or edited, so generators can key
// caches on them and reuse output across snapshots that did not touch what it depends on. They are
// comparable and meant only for equality.

// ServicesID identifies the services (hostnames, ports, visibility) of the snapshot.
func (ps *PushContext) ServicesID() any { return ps.servicesBySource }

// SidecarsID identifies the Sidecar index.
func (ps *PushContext) SidecarsID() any { return ps.sidecars }

// DestinationRulesID identifies the DestinationRule index.
func (ps *PushContext) DestinationRulesID() any { return ps.destinationRules }

// VirtualServicesID identifies the VirtualService index.
func (ps *PushContext) VirtualServicesID() any { return ps.virtualServices }

// GatewaysID identifies the Gateway index.
func (ps *PushContext) GatewaysID() any { return ps.gateways }

// PoliciesID identifies the AuthorizationPolicy, PeerAuthentication and RequestAuthentication indexes
// together (the last with the key sets fetched for it).
func (ps *PushContext) PoliciesID() any {
	return [3]any{ps.authorization, ps.peerAuthn, ps.requestAuthn}
}

// WorkloadsID identifies the workload index.
func (ps *PushContext) WorkloadsID() any { return ps.workloads }

// EndpointAddressesID changes whenever the endpoint addresses of some service that sidecars reach through a
// listener per endpoint (Service.ListensOnEndpoints) do, and with no other endpoint change; comparable.
func (ps *PushContext) EndpointAddressesID() any { return ps.endpointAddresses }

// EndpointsID identifies the endpoint index.
func (ps *PushContext) EndpointsID() any { return ps.endpoints }
