package ztunnel

import (
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	security "istio.io/api/security/v1beta1"

	"github.com/sextantmesh/sextant/api/workload"
	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
)

// Labels and annotations Istio users already put on their objects.
const (
	// DataplaneModeLabel on a namespace ("ambient") enrolls its workloads; on a pod or WorkloadEntry it
	// overrides the namespace: "ambient" enrolls, "none" opts out.
	DataplaneModeLabel = "istio.io/dataplane-mode"
	// UseWaypointLabel names the waypoint (a Service in the same namespace, or in UseWaypointNamespaceLabel's)
	// of a pod, service or namespace; "none" on a pod or service opts out of its namespace's waypoint.
	UseWaypointLabel          = "istio.io/use-waypoint"
	UseWaypointNamespaceLabel = "istio.io/use-waypoint-namespace"
	// RedirectionAnnotation is set by istio-cni on pods whose traffic it captured: they are in the mesh.
	RedirectionAnnotation = "ambient.istio.io/redirection"
	// TrafficDistributionAnnotation sets a service's load balancing ("PreferClose", ...), as in Istio.
	TrafficDistributionAnnotation = "networking.istio.io/traffic-distribution"
	// managedGatewayLabel marks pods of a waypoint: a waypoint never sends its own traffic to a waypoint.
	managedGatewayLabel = "gateway.istio.io/managed"
	waypointController  = "istio.io-mesh-controller"

	// HBONEPort is where waypoints accept mutual TLS HBONE.
	HBONEPort = 15008
)

// ambient reports whether w is in the mesh: captured by istio-cni, or enrolled by label (its own, else its
// namespace's). Host-network pods share the node's address and cannot be captured.
func ambient(ps *model.PushContext, w *model.Workload) bool {
	if w.HostNetwork {
		return false
	}
	if w.Annotations[RedirectionAnnotation] == "enabled" {
		return true
	}
	switch w.Labels[DataplaneModeLabel] {
	case "none":
		return false
	case "ambient":
		return true
	}
	return nsLabels(ps, w.Namespace)[DataplaneModeLabel] == "ambient"
}

func nsLabels(ps *model.PushContext, ns string) map[string]string {
	if c := ps.Namespace(ns); c != nil {
		return c.Labels
	}
	return nil
}

// included reports whether w is sent to ztunnel.
func (st *pushState) included(w *model.Workload) bool {
	return w != nil && (!st.g.opts.AmbientOnly || ambient(st.ps, w))
}

// selects mirrors the model's selection rule: same namespace, a selector, and (for Kubernetes Services) a
// non-empty one.
func selects(s *model.Service, w *model.Workload) bool {
	if s.Selector == nil || s.Namespace != w.Namespace {
		return false
	}
	if s.Source.Kind == config.Service && len(s.Selector) == 0 {
		return false
	}
	for k, v := range s.Selector {
		if lv, ok := w.Labels[k]; !ok || lv != v {
			return false
		}
	}
	return true
}

func (st *pushState) buildWorkloadServices() {
	m := map[string][]*model.Service{}
	for _, s := range st.ps.AllServices() {
		for _, w := range st.ps.WorkloadsForService(s.Key()) {
			m[w.UID] = append(m[w.UID], s)
		}
	}
	st.wlServices = m
}

// servicesOf returns the services selecting w. For the full state the reverse index is built once per
// snapshot; a single workload (incremental push) scans its namespace's services instead.
func (st *pushState) servicesOf(w *model.Workload, indexed bool) []*model.Service {
	if indexed {
		st.svcOnce.Do(st.buildWorkloadServices)
		return st.wlServices[w.UID]
	}
	var out []*model.Service
	for _, s := range st.ps.ServicesInNamespace(w.Namespace) {
		if selects(s, w) {
			out = append(out, s)
		}
	}
	return out
}

type workloadKey struct {
	w    *model.Workload
	ns   *config.Config
	m    *mesh.Config
	deps string // services and their ports, selecting policies
}

type serviceKey struct {
	s  *model.Service
	ns *config.Config
	m  *mesh.Config
}

// workloadResource returns w's Address, marshaled once for every ztunnel and every snapshot in which
// nothing it depends on changed.
func (st *pushState) workloadResource(w *model.Workload, indexed bool) *model.Resource {
	svcs := st.servicesOf(w, indexed)
	ports := make([]svcPorts, 0, len(svcs))
	var deps strings.Builder
	for _, s := range svcs {
		sp := svcPorts{key: s.Key(), ports: workloadPorts(s, w)}
		ports = append(ports, sp)
		deps.WriteString(sp.key)
		for _, p := range sp.ports.Ports {
			deps.WriteByte(':')
			deps.WriteString(strconv.FormatUint(uint64(p.ServicePort), 10))
			deps.WriteByte('>')
			deps.WriteString(strconv.FormatUint(uint64(p.TargetPort), 10))
		}
		deps.WriteByte(';')
	}
	policies := st.policiesFor(w)
	deps.WriteByte('|')
	deps.WriteString(strings.Join(policies, ","))
	key := workloadKey{w: w, ns: st.ps.Namespace(w.Namespace), m: meshOf(st.ps), deps: deps.String()}
	if r, ok := st.g.resources.Get(key); ok {
		return r
	}
	msg := &workload.Address{Type: &workload.Address_Workload{Workload: st.workloadMessage(w, ports, policies)}}
	r := marshal(w.UID, AddressType, msg)
	st.g.resources.Add(key, r)
	return r
}

type svcPorts struct {
	key   string
	ports *workload.PortList
}

// workloadPorts maps each port of s to the port w serves it on: a named target port through the pod's
// container ports (left out when the pod has no such port, as Kubernetes does), a WorkloadEntry's port
// override by port name, else the numeric target port, else the service port.
func workloadPorts(s *model.Service, w *model.Workload) *workload.PortList {
	pl := &workload.PortList{}
	for _, p := range s.Ports {
		target := p.Port
		switch {
		case p.TargetPortName != "":
			n, ok := w.ContainerPorts[p.TargetPortName]
			if !ok {
				continue
			}
			target = n
		case w.Source.Kind == config.WorkloadEntry && w.ContainerPorts[p.Name] != 0:
			target = w.ContainerPorts[p.Name]
		case p.TargetPort != 0:
			target = p.TargetPort
		}
		pl.Ports = append(pl.Ports, &workload.Port{ServicePort: p.Port, TargetPort: target})
	}
	return pl
}

// policiesFor returns "namespace/name" of the selector-based policies (its namespace's and the root
// namespace's) that select w and that ztunnel enforces, sorted; namespace- and mesh-wide ones apply by
// scope. Then, as in istiod, those enforcing its PeerAuthentication (see peerauth.go).
func (st *pushState) policiesFor(w *model.Workload) []string {
	aps := st.ps.AuthorizationPolicies(w.Namespace, w.Labels)
	var out []string
	for _, list := range [][]*config.Config{aps.Allow, aps.Deny} {
		for _, c := range list {
			ap := c.Spec.(*security.AuthorizationPolicy)
			if ap.GetSelector() == nil || hasTargetRef(ap) {
				continue
			}
			out = append(out, c.Namespace+"/"+c.Name)
		}
	}
	slices.Sort(out)
	return append(out, peerAuthView(st.ps, w).refs(meshOf(st.ps).RootNamespace)...)
}

func (st *pushState) workloadMessage(w *model.Workload, ports []svcPorts, policies []string) *workload.Workload {
	m := meshOf(st.ps)
	name, typ := workloadNameAndType(w)
	msg := &workload.Workload{
		Uid:                   w.UID,
		Name:                  w.Name,
		Namespace:             w.Namespace,
		Network:               w.Network,
		TunnelProtocol:        workload.TunnelProtocol_NONE,
		TrustDomain:           m.TrustDomain,
		ServiceAccount:        w.ServiceAccount,
		Node:                  w.NodeName,
		CanonicalName:         firstLabel(w.Labels, name, "service.istio.io/canonical-name", "app.kubernetes.io/name", "app"),
		CanonicalRevision:     firstLabel(w.Labels, "latest", "service.istio.io/canonical-revision", "app.kubernetes.io/version", "version"),
		WorkloadType:          typ,
		WorkloadName:          name,
		AuthorizationPolicies: policies,
		Status:                workload.WorkloadStatus_UNHEALTHY,
		ClusterId:             m.ClusterID,
		Locality:              locality(w.Locality),
	}
	for _, a := range w.Addresses {
		if ip, err := netip.ParseAddr(a); err == nil {
			msg.Addresses = append(msg.Addresses, ip.AsSlice())
		} else if msg.Hostname == "" {
			msg.Hostname = a // a WorkloadEntry addressed by DNS name: ztunnel resolves it
		}
	}
	if ambient(st.ps, w) {
		msg.TunnelProtocol = workload.TunnelProtocol_HBONE
	}
	if w.Ready {
		msg.Status = workload.WorkloadStatus_HEALTHY
	}
	if w.HostNetwork {
		msg.NetworkMode = workload.NetworkMode_HOST_NETWORK
	}
	if len(ports) > 0 {
		msg.Services = make(map[string]*workload.PortList, len(ports))
		for _, sp := range ports {
			msg.Services[sp.key] = sp.ports
		}
	}
	if w.Labels[managedGatewayLabel] != waypointController {
		msg.Waypoint = waypoint(w.Labels, nsLabels(st.ps, w.Namespace), w.Namespace, m.DomainSuffix)
	}
	return msg
}

func firstLabel(labels map[string]string, def string, keys ...string) string {
	for _, k := range keys {
		if v := labels[k]; v != "" {
			return v
		}
	}
	return def
}

func locality(l string) *workload.Locality {
	if l == "" {
		return nil
	}
	parts := strings.SplitN(l, "/", 3)
	parts = append(parts, "", "")
	return &workload.Locality{Region: parts[0], Zone: parts[1], Subzone: parts[2]}
}

// waypoint reads istio.io/use-waypoint from the object, else from its namespace. "none" on the object opts
// out. The waypoint is named by its Service: NAME.NAMESPACE.svc.DOMAIN, reached on HBONE port 15008.
func waypoint(labels, nsLabels map[string]string, ns, domain string) *workload.GatewayAddress {
	name, wpNS := labels[UseWaypointLabel], labels[UseWaypointNamespaceLabel]
	if name == "" {
		name, wpNS = nsLabels[UseWaypointLabel], nsLabels[UseWaypointNamespaceLabel]
	}
	if name == "" || name == "none" {
		return nil
	}
	if wpNS == "" {
		wpNS = ns
	}
	return &workload.GatewayAddress{
		Destination: &workload.GatewayAddress_Hostname{Hostname: &workload.NamespacedHostname{
			Namespace: wpNS, Hostname: model.ServiceHostname(name, wpNS, domain)}},
		HboneMtlsPort: HBONEPort,
	}
}

// workloadNameAndType names the controller of a pod from the pod name, since Sextant does not keep owner
// references: NAME-<replicaset hash>-<5 chars> is a Deployment NAME; NAME-<digits>-<5 chars> a CronJob
// NAME; NAME-<5 chars> (DaemonSet, Job, generateName) is NAME with type POD; anything else is the pod
// name. The hash alphabet (Kubernetes' SafeEncodeString: no vowels, no 0, 1, 3) makes false positives on
// ordinary words unlikely. WorkloadEntries are their own workload, of type POD, as in istiod.
func workloadNameAndType(w *model.Workload) (string, workload.WorkloadType) {
	if w.Source.Kind != config.Pod {
		return w.Name, workload.WorkloadType_POD
	}
	parts := strings.Split(w.Name, "-")
	n := len(parts)
	if n >= 2 && isKubeHash(parts[n-1], 5, 5) {
		if n >= 3 && isKubeHash(parts[n-2], 4, 10) {
			return strings.Join(parts[:n-2], "-"), workload.WorkloadType_DEPLOYMENT
		}
		if n >= 3 && len(parts[n-2]) >= 8 && isDigits(parts[n-2]) {
			return strings.Join(parts[:n-2], "-"), workload.WorkloadType_CRONJOB
		}
		return strings.Join(parts[:n-1], "-"), workload.WorkloadType_POD
	}
	return w.Name, workload.WorkloadType_POD
}

const kubeHashAlphabet = "bcdfghjklmnpqrstvwxz2456789"

func isKubeHash(s string, minLen, maxLen int) bool {
	if len(s) < minLen || len(s) > maxLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(kubeHashAlphabet, s[i]) < 0 {
			return false
		}
	}
	return true
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// serviceIncluded reports whether s is sent: always by default (like istiod, which sends every service it
// knows); in AmbientOnly mode when it has a waypoint or selects an ambient workload.
func (st *pushState) serviceIncluded(s *model.Service) bool {
	if !st.g.opts.AmbientOnly {
		return true
	}
	if st.serviceWaypoint(s) != nil {
		return true
	}
	for _, w := range st.ps.WorkloadsForService(s.Key()) {
		if ambient(st.ps, w) {
			return true
		}
	}
	return false
}

func (st *pushState) serviceWaypoint(s *model.Service) *workload.GatewayAddress {
	if s.Labels[managedGatewayLabel] == waypointController {
		return nil // the waypoint's own service
	}
	return waypoint(s.Labels, nsLabels(st.ps, s.Namespace), s.Namespace, meshOf(st.ps).DomainSuffix)
}

// serviceResource returns s's Address, marshaled once while s, its namespace and the mesh are unchanged.
func (st *pushState) serviceResource(s *model.Service) *model.Resource {
	key := serviceKey{s: s, ns: st.ps.Namespace(s.Namespace), m: meshOf(st.ps)}
	if r, ok := st.g.resources.Get(key); ok {
		return r
	}
	r := marshal(s.Key(), AddressType, &workload.Address{Type: &workload.Address_Service{Service: st.serviceMessage(s)}})
	st.g.resources.Add(key, r)
	return r
}

func (st *pushState) serviceMessage(s *model.Service) *workload.Service {
	m := meshOf(st.ps)
	// The Service's trafficDistribution, else its annotation (which may also say PreferNetwork).
	distribution := s.TrafficDistribution
	if distribution == "" {
		distribution = s.Annotations[TrafficDistributionAnnotation]
	}
	msg := &workload.Service{
		Name:          s.Name,
		Namespace:     s.Namespace,
		Hostname:      s.Hostname,
		Waypoint:      st.serviceWaypoint(s),
		LoadBalancing: loadBalancing(distribution),
		// istiod marks Kubernetes Services canonical: they win hostname lookups over ServiceEntries.
		Canonical: s.Source.Kind == config.Service,
	}
	for _, a := range s.Addresses {
		if ip, err := netip.ParseAddr(a); err == nil && !ip.IsUnspecified() {
			msg.Addresses = append(msg.Addresses, &workload.NetworkAddress{Network: m.Network, Address: ip.AsSlice()})
		}
	}
	for _, p := range s.Ports {
		target := p.TargetPort
		if target == 0 && p.TargetPortName == "" {
			target = p.Port
		}
		msg.Ports = append(msg.Ports, &workload.Port{ServicePort: p.Port, TargetPort: target})
	}
	return msg
}

// loadBalancing follows Istio's networking.istio.io/traffic-distribution values.
func loadBalancing(v string) *workload.LoadBalancing {
	close := []workload.LoadBalancing_Scope{workload.LoadBalancing_NETWORK, workload.LoadBalancing_REGION,
		workload.LoadBalancing_ZONE, workload.LoadBalancing_SUBZONE}
	switch v {
	case "PreferClose", "PreferSameZone":
		return &workload.LoadBalancing{RoutingPreference: close, Mode: workload.LoadBalancing_FAILOVER}
	case "PreferSameNode":
		return &workload.LoadBalancing{RoutingPreference: append(close, workload.LoadBalancing_NODE), Mode: workload.LoadBalancing_FAILOVER}
	case "PreferNetwork":
		return &workload.LoadBalancing{RoutingPreference: close[:1], Mode: workload.LoadBalancing_FAILOVER}
	}
	return nil
}

// buildFull computes every Address of the snapshot once; all wildcard subscribers share it.
func (st *pushState) buildFull() {
	var out model.Resources
	st.ps.AllWorkloads(func(w *model.Workload) bool {
		if st.included(w) {
			out = append(out, st.workloadResource(w, true))
		}
		return true
	})
	for _, s := range st.ps.AllServices() {
		if st.serviceIncluded(s) {
			out = append(out, st.serviceResource(s))
		}
	}
	slices.SortFunc(out, func(a, b *model.Resource) int { return strings.Compare(a.Name, b.Name) })
	// Two services may share a key (a Service and a ServiceEntry for the same host in one namespace):
	// the oldest, first in AllServices' order for a hostname, wins.
	out = slices.CompactFunc(out, func(a, b *model.Resource) bool { return a.Name == b.Name })
	st.byName = make(map[string]*model.Resource, len(out))
	for _, r := range out {
		st.byName[r.Name] = r
	}
	st.full = out
}

// cutAddressName splits "NETWORK/IP".
func cutAddressName(name string) (string, netip.Addr, bool) {
	i := strings.LastIndexByte(name, '/')
	if i < 0 || strings.IndexByte(name[:i], '/') >= 0 {
		return "", netip.Addr{}, false
	}
	ip, err := netip.ParseAddr(name[i+1:])
	if err != nil {
		return "", netip.Addr{}, false
	}
	return name[:i], ip, true
}

// resolve answers an explicitly subscribed name: a workload uid, a service "namespace/hostname", or an
// on-demand lookup "NETWORK/IP" (a workload at that address, else a service VIP), answered under the
// requested name. target is the uid or service key it resolved to.
func (st *pushState) resolve(name string) (r *model.Resource, target string) {
	if network, ip, ok := cutAddressName(name); ok {
		if w := st.ps.WorkloadByAddress(network, ip.String()); st.included(w) && !w.HostNetwork {
			return rename(st.workloadResource(w, false), name), w.UID
		}
		st.vipOnce.Do(st.buildVIPs)
		if s := st.vips[network+"/"+ip.String()]; s != nil && st.serviceIncluded(s) {
			return rename(st.serviceResource(s), name), s.Key()
		}
		return nil, ""
	}
	if w := st.ps.Workload(name); w != nil {
		if st.included(w) {
			return st.workloadResource(w, false), w.UID
		}
		return nil, ""
	}
	if s := lookupService(st.ps, name); s != nil && st.serviceIncluded(s) {
		return st.serviceResource(s), s.Key()
	}
	return nil, ""
}

func (st *pushState) buildVIPs() {
	network := meshOf(st.ps).Network
	st.vips = map[string]*model.Service{}
	for _, s := range st.ps.AllServices() {
		for _, a := range s.Addresses {
			if ip, err := netip.ParseAddr(a); err == nil {
				k := network + "/" + ip.String()
				if st.vips[k] == nil {
					st.vips[k] = s
				}
			}
		}
	}
}

// delta returns the shared part of an incremental push for req, computed once for all connections.
func (st *pushState) delta(req *model.PushRequest) *delta {
	st.mu.Lock()
	d := st.deltas[req]
	if d == nil {
		d = &delta{}
		st.deltas[req] = d
	}
	st.mu.Unlock()
	d.once.Do(func() { st.computeDelta(req, d) })
	return d
}

func (st *pushState) computeDelta(req *model.PushRequest, d *delta) {
	for _, uid := range sortedNames(req.WorkloadsUpdated) {
		if w := st.ps.Workload(uid); st.included(w) {
			d.resources = append(d.resources, st.workloadResource(w, false))
		} else {
			d.removed = append(d.removed, uid)
		}
	}
	// Service content depends only on the service, its namespace and the mesh, all of which cause full
	// pushes; in AmbientOnly mode whether a service is sent also depends on its workloads.
	if !st.g.opts.AmbientOnly {
		return
	}
	// Candidates: services whose endpoints changed, and those selecting a changed workload (a new pod may
	// not change EndpointSlices yet).
	candidates := maps.Clone(req.ServicesUpdated)
	if candidates == nil {
		candidates = map[string]struct{}{}
	}
	for uid := range req.WorkloadsUpdated {
		if w := st.ps.Workload(uid); w != nil {
			for _, s := range st.servicesOf(w, false) {
				candidates[s.Key()] = struct{}{}
			}
		}
	}
	for _, key := range sortedNames(candidates) {
		s := lookupService(st.ps, key)
		switch {
		case s == nil || !st.serviceIncluded(s):
			d.removed = append(d.removed, key)
		case st.serviceWaypoint(s) != nil:
			// always included: unchanged
		case st.mayHaveFlipped(s, req):
			d.resources = append(d.resources, st.serviceResource(s))
		}
	}
}

// mayHaveFlipped reports whether s could have been excluded before this push: no ambient workload that
// this push left unchanged keeps it included.
func (st *pushState) mayHaveFlipped(s *model.Service, req *model.PushRequest) bool {
	for _, w := range st.ps.WorkloadsForService(s.Key()) {
		if _, changed := req.WorkloadsUpdated[w.UID]; !changed && ambient(st.ps, w) {
			return false
		}
	}
	return true
}
