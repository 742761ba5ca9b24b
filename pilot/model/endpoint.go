package model

import (
	"maps"
	"net/netip"
	"slices"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
)

// Health of an endpoint, as Envoy understands it.
type Health int

const (
	Healthy Health = iota
	Unhealthy
	Draining
)

func (h Health) String() string { return [...]string{"HEALTHY", "UNHEALTHY", "DRAINING"}[h] }

// Labels and annotations read from workloads.
const (
	LabelTLSMode  = "security.istio.io/tlsMode"
	LabelNetwork  = "topology.istio.io/network"
	LabelLocality = "istio-locality"
	// LabelTopologyLocality is a workload's locality as REGION.ZONE.SUBZONE, read before istio-locality.
	LabelTopologyLocality = "topology.istio.io/locality"
	LabelSubzone          = "topology.istio.io/subzone"
	LabelRegion           = "topology.kubernetes.io/region"
	LabelZone             = "topology.kubernetes.io/zone"
	DefaultTLSModeMesh    = "istio"
	// tlsModeDisabled is the tlsMode of an endpoint without a sidecar (istiod's DisabledTLSModeLabel).
	tlsModeDisabled = "disabled"
)

// Endpoint is one address serving one port of one service.
type Endpoint struct {
	Address string
	// Port is the port the workload listens on for this service port.
	Port uint32
	// ServicePort is the service port number this endpoint serves.
	ServicePort    uint32
	Labels         map[string]string
	Locality       string // region/zone/subzone
	Health         Health
	Weight         uint32
	Network        string
	TLSMode        string // "istio" when the workload accepts mutual TLS from the mesh
	ServiceAccount string // service account name; identity is spiffe://TRUST_DOMAIN/ns/NAMESPACE/sa/NAME
	Namespace      string
	WorkloadName   string
	NodeName       string
}

// ServiceEndpoints are the endpoints of one Service (namespace/hostname), grouped by service port.
// The value is immutable; a change replaces it.
type ServiceEndpoints struct {
	Service string
	// ByPort holds, per service port number, the endpoints sorted by address.
	ByPort map[uint32][]*Endpoint
	// ServiceAccounts are the identities (SPIFFE URIs, sorted) a client accepts from the service's servers
	// under mesh mTLS, as istiod's: those of every endpoint, and those the service declares.
	ServiceAccounts []string
	// WaitingForPods names the pods (in the service's namespace, sorted) whose endpoints a cluster's
	// EndpointSlice lists but that are not known with an IP yet: their endpoints are held back until they are.
	WaitingForPods []string
	// podRefs are the pods (in the service's namespace) its EndpointSlices point at, sorted, whether or not
	// they exist yet: a change to one of them must refresh these endpoints.
	podRefs []string
	// meshPorts are the service ports whose endpoints all accept mesh mTLS (see AllAcceptMeshTLS).
	meshPorts map[uint32]bool
}

// AllAcceptMeshTLS reports whether port has endpoints and none of them has tlsMode disabled: istiod's test
// (BestEffortInferServiceMTLSMode) before it sends mesh mTLS to an original-destination cluster, where
// Envoy knows no endpoint's metadata and one transport serves every address. Computed once per change, as
// generators ask it per proxy.
func (se *ServiceEndpoints) AllAcceptMeshTLS(port uint32) bool {
	return se != nil && se.meshPorts[port]
}

// Count returns the number of endpoints across all ports.
func (se *ServiceEndpoints) Count() int {
	n := 0
	for _, eps := range se.ByPort {
		n += len(eps)
	}
	return n
}

// Locality formats region/zone/subzone.
func Locality(region, zone, subzone string) string {
	if region == "" && zone == "" && subzone == "" {
		return ""
	}
	return region + "/" + zone + "/" + subzone
}

// resolver answers the lookups that turning config into endpoints and workloads needs, with caches that
// live for one build or update.
type resolver struct {
	reader ConfigReader
	m      *mesh.Config
	nodes  map[string]string // node name → locality
	// workload finds the workload of a pod or WorkloadEntry as of the snapshot being built.
	workload func(config.Key) *Workload
}

func newResolver(reader ConfigReader, m *mesh.Config) *resolver {
	return &resolver{reader: reader, m: m, nodes: map[string]string{}}
}

// nodeLocality returns the locality from a Node's topology labels.
func (r *resolver) nodeLocality(name string) string {
	if name == "" {
		return ""
	}
	if l, ok := r.nodes[name]; ok {
		return l
	}
	l := ""
	if node := r.reader.Get(config.Key{Kind: config.Node, Name: name}); node != nil {
		l = Locality(node.Labels[LabelRegion], node.Labels[LabelZone], node.Labels[LabelSubzone])
	}
	r.nodes[name] = l
	return l
}

// podLocality prefers the pod's istio-locality label ("region.zone.subzone"), then its node's labels.
func (r *resolver) podLocality(pod *corev1.Pod) string {
	if v := pod.Labels[LabelLocality]; v != "" {
		parts := strings.SplitN(v, ".", 3)
		for len(parts) < 3 {
			parts = append(parts, "")
		}
		return Locality(parts[0], parts[1], parts[2])
	}
	return r.nodeLocality(pod.Spec.NodeName)
}

func tlsMode(labels map[string]string) string {
	if v := labels[LabelTLSMode]; v != "" {
		return v
	}
	return tlsModeDisabled
}

// workloadEntryTLSMode is istiod's for a WorkloadEntry (or a ServiceEntry endpoint): its tlsMode label, else
// mesh mTLS when it names a service account (its workload has an identity), else none.
func workloadEntryTLSMode(we *networking.WorkloadEntry, labels map[string]string) string {
	if v, ok := labels[LabelTLSMode]; ok {
		return v
	}
	if we.ServiceAccount != "" {
		return DefaultTLSModeMesh
	}
	return tlsModeDisabled
}

// workloadEntryLabels are a WorkloadEntry's labels as istiod reads them (ConvertWorkloadEntry): its spec's,
// and its metadata's over them.
func workloadEntryLabels(c *config.Config, we *networking.WorkloadEntry) map[string]string {
	if len(c.Labels) == 0 {
		return we.Labels
	}
	if len(we.Labels) == 0 {
		return c.Labels
	}
	out := maps.Clone(we.Labels)
	maps.Copy(out, c.Labels)
	return out
}

// workloadEntryLocality is a WorkloadEntry's locality, else its labels' (topology.istio.io/locality, then
// istio-locality, dots read as slashes), as istiod's; "" for none.
func workloadEntryLocality(we *networking.WorkloadEntry, labels map[string]string) string {
	l := we.Locality
	if l == "" {
		l = labels[LabelTopologyLocality]
		if l == "" {
			l = labels[LabelLocality]
		}
		if !strings.Contains(l, "/") {
			l = strings.ReplaceAll(l, ".", "/")
		}
	}
	return l
}

// isIPAddress reports whether addr is an IP address (not a hostname nor a unix:// path).
func isIPAddress(addr string) bool {
	_, err := netip.ParseAddr(addr)
	return err == nil
}

func networkOf(labels map[string]string, explicit string, m *mesh.Config) string {
	if explicit != "" {
		return explicit
	}
	if v := labels[LabelNetwork]; v != "" {
		return v
	}
	return m.Network
}

// computeEndpoints builds the endpoints of svc from the store. Its cost is proportional to the service's own
// endpoints (and, for selector-based services, the workloads of its namespace).
func computeEndpoints(svc *Service, r *resolver) *ServiceEndpoints {
	reader, m := r.reader, r.m
	out := &ServiceEndpoints{Service: svc.Key(), ByPort: make(map[uint32][]*Endpoint, len(svc.Ports))}
	switch svc.Source.Kind {
	case config.Service:
		if svc.Resolution == Alias {
			break // an ExternalName Service has no endpoints of its own
		}
		addSliceEndpoints(out, svc, r)
		if len(svc.Selector) > 0 {
			addWorkloadEntryEndpoints(out, svc, reader, m)
		}
	case config.ServiceEntry:
		switch {
		case len(svc.inlineEndpoints) > 0:
			addInlineEndpoints(out, svc, m)
		case svc.Selector != nil:
			addWorkloadEntryEndpoints(out, svc, reader, m)
			addPodEndpoints(out, svc, r)
		case svc.Resolution.ByDNS():
			// No endpoints listed: the proxy resolves the host itself.
			for _, p := range svc.Ports {
				port := p.Port
				if p.TargetPort != 0 {
					port = p.TargetPort
				}
				out.ByPort[p.Port] = append(out.ByPort[p.Port],
					&Endpoint{Address: svc.Hostname, Port: port, ServicePort: p.Port, Weight: 1, Namespace: svc.Namespace, TLSMode: tlsModeDisabled})
			}
		}
	}
	out.ServiceAccounts = withTrustDomainAliases(serviceAccountsOf(svc, out, m.TrustDomain), m.TrustDomainAliases)
	slices.Sort(out.podRefs)
	out.podRefs = slices.Compact(out.podRefs)
	slices.Sort(out.WaitingForPods)
	out.WaitingForPods = slices.Compact(out.WaitingForPods)
	for port, eps := range out.ByPort {
		if len(eps) > 0 && !slices.ContainsFunc(eps, func(ep *Endpoint) bool { return ep.TLSMode == tlsModeDisabled }) {
			if out.meshPorts == nil {
				out.meshPorts = map[uint32]bool{}
			}
			out.meshPorts[port] = true
		}
		slices.SortFunc(eps, func(a, b *Endpoint) int {
			if c := strings.Compare(a.Address, b.Address); c != 0 {
				return c
			}
			return int(a.Port) - int(b.Port)
		})
		out.ByPort[port] = eps
	}
	return out
}

func addSliceEndpoints(out *ServiceEndpoints, svc *Service, r *resolver) {
	for _, sc := range r.reader.EndpointSlicesFor(svc.Namespace, svc.Name) {
		slice := sc.Spec.(*discoveryv1.EndpointSlice)
		if slice.AddressType == discoveryv1.AddressTypeFQDN {
			continue
		}
		fromCluster := sc.Source == config.KubeSource
		for _, sp := range svc.Ports {
			epPort, ok := slicePort(slice, sp)
			if !ok {
				continue
			}
			// One allocation for the slice's endpoints on this port rather than one per endpoint.
			block := make([]Endpoint, len(slice.Endpoints))
			for i := range slice.Endpoints {
				e := &slice.Endpoints[i]
				ep := &block[i]
				*ep = Endpoint{
					Address:     e.Addresses[0],
					Port:        epPort,
					ServicePort: sp.Port,
					Health:      sliceHealth(e.Conditions),
					Weight:      1,
					Namespace:   svc.Namespace,
					TLSMode:     tlsModeDisabled,
					Network:     r.m.Network,
				}
				if e.NodeName != nil {
					ep.NodeName = *e.NodeName
				}
				if ref := e.TargetRef; ref != nil && ref.Kind == "Pod" {
					out.podRefs = append(out.podRefs, ref.Name)
					// The pod's workload carries what the slice lacks: labels for subsets, identity, network.
					w := r.workload(config.Key{Kind: config.Pod, Namespace: svc.Namespace, Name: ref.Name})
					if w == nil && fromCluster {
						// A cluster lists a pod in a slice only once it has an IP, so the pod's own event is
						// on its way (watches of different kinds are not ordered). Sent now, the endpoint
						// would lack its tlsMode (auto mTLS would send it plaintext), labels (subsets would
						// miss it) and identity, and go out a second time when the pod arrives; podRefs
						// brings it in then.
						out.WaitingForPods = append(out.WaitingForPods, ref.Name)
						continue
					}
					if w != nil {
						ep.Labels = w.Labels
						ep.ServiceAccount = w.ServiceAccount
						ep.WorkloadName = w.Name
						ep.TLSMode = w.TLSMode
						ep.Network = w.Network
						ep.Locality = w.Locality
						if ep.NodeName == "" {
							ep.NodeName = w.NodeName
						}
					}
				}
				if ep.Locality == "" && ep.NodeName != "" {
					ep.Locality = r.nodeLocality(ep.NodeName)
				}
				if ep.Locality == "" && e.Zone != nil {
					ep.Locality = Locality("", *e.Zone, "")
				}
				out.ByPort[sp.Port] = append(out.ByPort[sp.Port], ep)
			}
		}
	}
}

// slicePort finds the endpoint port serving service port sp: EndpointSlice ports carry the service port's name.
func slicePort(slice *discoveryv1.EndpointSlice, sp *Port) (uint32, bool) {
	for _, p := range slice.Ports {
		name := ""
		if p.Name != nil {
			name = *p.Name
		}
		if name == sp.Name && p.Port != nil {
			return uint32(*p.Port), true
		}
	}
	return 0, false
}

func sliceHealth(c discoveryv1.EndpointConditions) Health {
	if c.Ready == nil || *c.Ready {
		return Healthy
	}
	if c.Terminating != nil && *c.Terminating && c.Serving != nil && *c.Serving {
		return Draining
	}
	return Unhealthy
}

func addInlineEndpoints(out *ServiceEndpoints, svc *Service, m *mesh.Config) {
	for _, we := range svc.inlineEndpoints {
		for _, p := range svc.Ports {
			out.ByPort[p.Port] = append(out.ByPort[p.Port], workloadEntryEndpoint(we, we.Labels, svc, p, "", svc.Namespace, m))
		}
	}
}

// workloadEntryEndpoint is we's endpoint for port p of svc; labels are its labels (workloadEntryLabels).
func workloadEntryEndpoint(we *networking.WorkloadEntry, labels map[string]string, svc *Service, p *Port, name, ns string,
	m *mesh.Config) *Endpoint {
	port := p.Port
	if p.TargetPort != 0 {
		port = p.TargetPort
	}
	if n, ok := we.Ports[p.Name]; ok {
		port = n
	}
	weight := we.Weight
	if weight == 0 {
		weight = 1
	}
	locality := ""
	if l := workloadEntryLocality(we, labels); l != "" {
		parts := strings.SplitN(l, "/", 3)
		for len(parts) < 3 {
			parts = append(parts, "")
		}
		locality = Locality(parts[0], parts[1], parts[2])
	}
	return &Endpoint{
		Address:        we.Address,
		Port:           port,
		ServicePort:    p.Port,
		Labels:         labels,
		Locality:       locality,
		Health:         Healthy,
		Weight:         weight,
		Network:        networkOf(labels, we.Network, m),
		TLSMode:        workloadEntryTLSMode(we, labels),
		ServiceAccount: we.ServiceAccount,
		Namespace:      ns,
		WorkloadName:   name,
	}
}

func addWorkloadEntryEndpoints(out *ServiceEndpoints, svc *Service, reader ConfigReader, m *mesh.Config) {
	for _, c := range reader.ListNamespace(config.WorkloadEntry, svc.Namespace) {
		if !workloadEntryServed(c) {
			continue
		}
		we := c.Spec.(*networking.WorkloadEntry)
		if !svc.Resolution.ByDNS() && !isIPAddress(we.Address) {
			continue // as istiod: a hostname (or unix://) WorkloadEntry serves DNS ServiceEntries only
		}
		labels := workloadEntryLabels(c, we)
		if !labelsMatch(svc.Selector, labels) {
			continue
		}
		for _, p := range svc.Ports {
			ep := workloadEntryEndpoint(we, labels, svc, p, c.Name, c.Namespace, m)
			if svc.Source.Kind == config.Service && p.TargetPortName != "" {
				if n, ok := we.Ports[p.TargetPortName]; ok {
					ep.Port = n
				}
			}
			out.ByPort[p.Port] = append(out.ByPort[p.Port], ep)
		}
	}
}

// addPodEndpoints serves a ServiceEntry's workloadSelector from pods, as Istio does.
func addPodEndpoints(out *ServiceEndpoints, svc *Service, r *resolver) {
	m := r.m
	for _, c := range r.reader.ListNamespace(config.Pod, svc.Namespace) {
		pod := c.Spec.(*corev1.Pod)
		if pod.Status.PodIP == "" || !labelsMatch(svc.Selector, pod.Labels) {
			continue
		}
		named := podNamedPorts(pod)
		for _, p := range svc.Ports {
			port := p.Port
			if n, ok := named[p.Name]; ok {
				port = n
			} else if p.TargetPort != 0 {
				port = p.TargetPort
			}
			out.ByPort[p.Port] = append(out.ByPort[p.Port], &Endpoint{
				Address:        pod.Status.PodIP,
				Port:           port,
				ServicePort:    p.Port,
				Labels:         pod.Labels,
				Locality:       r.podLocality(pod),
				Health:         podHealth(pod),
				Weight:         1,
				Network:        networkOf(pod.Labels, "", m),
				TLSMode:        tlsMode(pod.Labels),
				ServiceAccount: pod.Spec.ServiceAccountName,
				Namespace:      pod.Namespace,
				WorkloadName:   pod.Name,
				NodeName:       pod.Spec.NodeName,
			})
		}
	}
}

// podNamedPorts are a pod's named TCP container ports (the first of a name wins, as in Kubernetes), those
// of its native sidecars (init containers that always restart) too: istiod's port map, which a ServiceEntry
// port of the same name targets before its targetPort. An unset protocol is Kubernetes' default, TCP.
func podNamedPorts(pod *corev1.Pod) map[string]uint32 {
	var out map[string]uint32
	add := func(ports []corev1.ContainerPort) {
		for _, cp := range ports {
			if cp.Name == "" || (cp.Protocol != corev1.ProtocolTCP && cp.Protocol != "") {
				continue
			}
			if _, seen := out[cp.Name]; !seen {
				if out == nil {
					out = map[string]uint32{}
				}
				out[cp.Name] = uint32(cp.ContainerPort)
			}
		}
	}
	for _, c := range pod.Spec.Containers {
		add(c.Ports)
	}
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			add(c.Ports)
		}
	}
	return out
}

func podHealth(pod *corev1.Pod) Health {
	if pod.DeletionTimestamp != nil {
		return Draining
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			if c.Status == corev1.ConditionTrue {
				return Healthy
			}
			return Unhealthy
		}
	}
	if pod.Status.Phase == corev1.PodRunning {
		return Healthy
	}
	return Unhealthy
}

// serviceAccountsOf gathers the identities of se's endpoints and those svc declares, sorted and without
// repeats (istiod's PushContext.ServiceAccounts).
func serviceAccountsOf(svc *Service, se *ServiceEndpoints, trustDomain string) []string {
	out := slices.Clone(svc.ServiceAccounts)
	var lastNS, lastSA string // endpoints of one service mostly share an account: spell it once
	for _, eps := range se.ByPort {
		for _, ep := range eps {
			if ep.ServiceAccount != "" && (ep.ServiceAccount != lastSA || ep.Namespace != lastNS) {
				lastNS, lastSA = ep.Namespace, ep.ServiceAccount
				out = append(out, SpiffeID(trustDomain, ep.Namespace, ep.ServiceAccount))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// withTrustDomainAliases adds, for each SPIFFE identity, its spelling in every alias of the mesh's trust
// domain, as istiod does: a server whose certificate still carries the old trust domain passes the client's
// check during a migration.
func withTrustDomainAliases(accounts, aliases []string) []string {
	if len(aliases) == 0 {
		return accounts
	}
	out := slices.Clone(accounts)
	for _, a := range accounts {
		rest, ok := strings.CutPrefix(a, "spiffe://")
		if !ok {
			continue
		}
		_, path, ok := strings.Cut(rest, "/")
		if !ok {
			continue
		}
		for _, td := range aliases {
			out = append(out, "spiffe://"+td+"/"+path)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
