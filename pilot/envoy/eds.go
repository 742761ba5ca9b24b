package envoy

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/model"
)

type endpointGenerator struct{ g *Generators }

// edsKey is everything one ClusterLoadAssignment depends on: the service's endpoint set (replaced on any
// change), the subset's labels (from the DestinationRule) and the client flavor.
type edsKey struct {
	cluster   string
	endpoints *model.ServiceEndpoints
	dr        *model.DestinationRule
	flavor    flavor
	// locality: the proxy's, when locality load balancing makes the assignment depend on it; localitySetting:
	// the setting that does (the rule's, or the mesh config's, which a mesh config change replaces).
	locality        string
	localitySetting *networking.LocalityLoadBalancerSetting
	// zoneSetting: the zone-aware setting that applies instead (the rule's or the mesh config's).
	zoneSetting *networking.ZoneAwareLoadBalancerSetting
	// peerAuthn: the PeerAuthentications of the service's namespace and the mesh, which decide which
	// endpoints keep their tlsMode (serverMTLS).
	peerAuthn model.PeerAuthenticationsKey
	// node: the proxy's node, for a service with internalTrafficPolicy Local alone, so that other
	// services' assignments stay shared by every proxy.
	node string
}

// Generate returns a ClusterLoadAssignment for each watched EDS cluster the proxy can see.
func (e endpointGenerator) Generate(proxy *model.Proxy, push *model.PushContext, w *model.WatchedResource,
	_ *model.PushRequest) (model.Resources, error) {
	return e.assignments(proxy, push, w.ResourceNames.Sorted())
}

// assignments returns the ClusterLoadAssignments of the named clusters, in the order of names, leaving out
// those the proxy cannot see.
func (e endpointGenerator) assignments(proxy *model.Proxy, push *model.PushContext, names []string) (model.Resources, error) {
	g := e.g
	scope := g.scopeFor(proxy, push)
	fl := flavorOf(proxy)
	out := make(model.Resources, 0, len(names))
	for _, name := range names {
		cn, ok := ParseClusterName(name)
		sniDNAT := false
		if !ok {
			// A gateway's SNI-DNAT cluster has the endpoints of the cluster it stands for.
			cn, ok = ParseSNIDNATClusterName(name)
			sniDNAT = ok
		}
		if !ok || cn.Direction != Outbound {
			continue
		}
		svc := scope.clusterService(cn.Host)
		if svc == nil || svc.PortByNumber(cn.Port) == nil {
			continue
		}
		// The rule matters for a subset's labels, for the endpoints' tlsMode (clusterMTLS) and, where some
		// rule has them, for locality settings.
		var dr *model.DestinationRule
		if cn.Subset != "" || fl == flavorEnvoy || push.DestinationRulesLocalityAware() {
			dr = push.DestinationRuleFor(proxy.Namespace, proxy.Labels, svc)
		}
		var subsetLabels map[string]string
		if cn.Subset != "" {
			found := false
			for _, ss := range dr.GetSubsets() {
				if ss.Name == cn.Subset {
					subsetLabels, found = ss.Labels, true
				}
			}
			if !found {
				continue
			}
		}
		se := push.Endpoints(svc.Key())
		key := edsKey{cluster: name, endpoints: se, dr: dr, flavor: fl}
		if fl == flavorEnvoy {
			key.peerAuthn = push.PeerAuthenticationsOf(svc.Namespace)
		}
		slot := slotName(fl, name)
		var lp localityPolicy
		var zp zoneAwarePolicy
		var zoned bool
		policy := effectivePolicy(dr, cn.Subset, cn.Port)
		dp, distributed := distributionPolicyOf(svc, policy.GetLoadBalancer(), proxy)
		distributed = distributed && fl == flavorEnvoy
		if distributed {
			// The Service's traffic distribution: the assignment is that of the proxy's topology.
			key.locality = dp.String()
			slot = "distribution " + key.locality + "\x00" + slot
		} else if z := zoneAwareSetting(policy.GetLoadBalancer(), push.Mesh, svc); z != nil && fl == flavorEnvoy {
			if zp, zoned = zoneAwarePolicyOf(z, proxy); zoned {
				key.zoneSetting = z
				key.locality = zp.String()
				slot = "zone " + key.locality + "\x00" + slot
			}
		} else if fl == flavorEnvoy {
			setting := effectiveLocality(policy.GetLoadBalancer(), push.Mesh)
			lp = localityPolicyOf(setting, policy.GetOutlierDetection() != nil, proxy)
			if lp.applies() {
				key.localitySetting = setting
				// The assignment is the proxy's locality's own (and its failover priority labels'): a slot per locality.
				key.locality = lp.String()
				slot = "locality " + key.locality + "\x00" + slot // Envoy's slot names carry no prefix of their own
			}
		}
		if svc.NodeLocal {
			// Only the endpoints on the proxy's node (istiod's filterIstioEndpoint): a slot per node, its
			// prefix cut off with the others' at the first NUL (resourceName).
			key.node = proxy.NodeName
			sep := "\x00"
			if strings.IndexByte(slot, 0) >= 0 {
				sep = "\x01"
			}
			slot = "node " + key.node + sep + slot
		}
		r, err := slotResource(g.assignments, slot, key, func() proto.Message {
			var eps []*model.Endpoint
			if se != nil {
				eps = se.ByPort[cn.Port]
			}
			if svc.NodeLocal {
				eps = slices.DeleteFunc(slices.Clone(eps), func(ep *model.Endpoint) bool { return ep.NodeName != key.node })
			}
			mtls := clusterMTLS(push, dr, cn.Subset, cn.Port)
			if sniDNAT {
				// As istiod's EndpointsWithMTLSFilter: the gateway cannot tell whether the connection it
				// passes through is mesh mTLS, so it reaches only endpoints that require it.
				eps = slices.DeleteFunc(slices.Clone(eps), func(ep *model.Endpoint) bool { return mtls.tlsMode(ep) != model.DefaultTLSModeMesh })
			}
			if distributed {
				return dp.assignment(name, eps, subsetLabels, fl, mtls)
			}
			if zoned {
				return zp.assignment(name, eps, subsetLabels, fl, mtls)
			}
			return lp.assignment(name, eps, subsetLabels, fl, mtls)
		})
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// GenerateDeltas answers an endpoint-only push with the assignments of the changed services alone; a full
// push gets the full state. This keeps an endpoint change proportional to the clusters it touches.
func (e endpointGenerator) GenerateDeltas(proxy *model.Proxy, push *model.PushContext, w *model.WatchedResource,
	req *model.PushRequest) (model.Resources, []string, bool, error) {
	if req == nil || req.Full {
		services, ok := endpointServicesOfConfigs(req, push)
		if !ok {
			res, err := e.Generate(proxy, push, w, req)
			return res, nil, false, err
		}
		req = &model.PushRequest{ServicesUpdated: services}
	}
	changed := watchedClustersOf(proxy, w, push, req)
	if len(changed) == 0 {
		return nil, nil, true, nil
	}
	slices.Sort(changed)
	changed = slices.Compact(changed)
	res, err := e.assignments(proxy, push, changed)
	if err != nil {
		return nil, nil, true, err
	}
	// A changed cluster the proxy can no longer see was removed (its service went away). res follows the
	// order of changed, leaving those out.
	var removed []string
	j := 0
	for _, name := range changed {
		if j < len(res) && res[j].Name == name {
			j++
			continue
		}
		removed = append(removed, name)
	}
	return res, removed, true, nil
}

// watchedClustersOf returns the EDS clusters in w that belong to the services req changed.
func watchedClustersOf(proxy *model.Proxy, w *model.WatchedResource, push *model.PushContext, req *model.PushRequest) []string {
	names, _ := watchedClusters(proxy, w, push, req, false)
	return names
}

// watchesChangedClusters reports whether w holds an EDS cluster of a service req changed.
func watchesChangedClusters(proxy *model.Proxy, w *model.WatchedResource, push *model.PushContext, req *model.PushRequest) bool {
	_, found := watchedClusters(proxy, w, push, req, true)
	return found
}

// watchedClusters finds the EDS clusters in w that belong to the services req changed: all of them, or
// with firstOnly just whether there is one. It builds the candidate names from each changed service's
// ports and the subsets of the DestinationRule the proxy applies, so its cost follows the change, not the
// number of clusters the proxy watches; only when a changed service is gone from the snapshot (its names
// unknown) does it scan the watch. A candidate is built in a buffer on the stack and looked up without
// becoming a string: each proxy is asked two or three times per push, and under endpoint churn the names
// were an eighth of the server's allocations.
func watchedClusters(proxy *model.Proxy, w *model.WatchedResource, push *model.PushContext, req *model.PushRequest,
	firstOnly bool) ([]string, bool) {
	var out []string
	var scanHosts map[string]struct{}
	var buf [256]byte
	for key := range req.ServicesUpdated {
		ns, host, _ := strings.Cut(key, "/")
		var svc *model.Service
		if push != nil {
			for _, s := range push.ServicesForHostname(host) {
				if s.Namespace == ns {
					svc = s
				}
			}
		}
		if svc == nil || proxy == nil {
			if scanHosts == nil {
				scanHosts = map[string]struct{}{}
			}
			scanHosts[host] = struct{}{}
			continue
		}
		if w.Wildcard {
			continue
		}
		subsets := push.DestinationRuleFor(proxy.Namespace, proxy.Labels, svc).GetSubsets()
		for _, p := range svc.Ports {
			for i := -1; i < len(subsets); i++ {
				subset := ""
				if i >= 0 {
					subset = subsets[i].Name
				}
				if name, ok := w.ResourceNames.Lookup(appendOutboundClusterName(buf[:0], p.Port, subset, host)); ok {
					if firstOnly {
						return nil, true
					}
					out = append(out, name)
				}
				if proxy.Type != model.Router {
					continue // only gateways have SNI-DNAT clusters
				}
				if name, ok := w.ResourceNames.Lookup(appendSNIDNATClusterName(buf[:0], p.Port, subset, host)); ok {
					if firstOnly {
						return nil, true
					}
					out = append(out, name)
				}
			}
		}
	}
	if scanHosts != nil {
		for _, name := range w.ResourceNames.Sorted() {
			if _, hit := scanHosts[clusterHost(name)]; hit {
				if firstOnly {
					return nil, true
				}
				out = append(out, name)
			}
		}
	}
	return out, len(out) > 0
}

// clusterHost returns the HOST of DIRECTION|PORT|SUBSET|HOST (or of outbound_.PORT_.SUBSET_.HOST) without
// allocating.
func clusterHost(name string) string {
	if i := strings.LastIndexByte(name, '|'); i >= 0 {
		return name[i+1:]
	}
	if i := strings.LastIndex(name, "_."); i >= 0 && strings.HasPrefix(name, Outbound+"_.") {
		return name[i+2:]
	}
	return name
}

// endpointServicesOfConfigs tells whether a full push can leave every load assignment alone except those of
// the services returned (namespace/hostname, as in ServicesUpdated): true when every changed config is a
// Kubernetes Service (its ports and visibility may have changed), an endpoint source (whose services are in
// req.ServicesUpdated when their endpoints changed), or a kind that no assignment reads. DestinationRules
// (subsets), Sidecars (scope), ServiceEntries, Namespaces, mesh-wide PeerAuthentications, and pushes naming
// no config (initial, mesh) rebuild everything; a namespace's PeerAuthentication, its services' assignments.
// Without this, adding one service rebuilt and compared every sidecar's 900 assignments.
func endpointServicesOfConfigs(req *model.PushRequest, push *model.PushContext) (map[string]struct{}, bool) {
	if req == nil || len(req.ConfigsUpdated) == 0 || push == nil {
		return nil, false
	}
	services := maps.Clone(req.ServicesUpdated)
	if services == nil {
		services = map[string]struct{}{}
	}
	for k := range req.ConfigsUpdated {
		switch k.Kind {
		case config.Service:
			services[k.Namespace+"/"+k.Name+"."+k.Namespace+".svc."+push.Mesh.DomainSuffix] = struct{}{}
		case config.PeerAuthentication:
			// It decides which endpoints of its namespace's services keep tlsMode istio; mesh-wide, of all.
			if k.Namespace == push.Mesh.RootNamespace {
				return nil, false
			}
			for _, svc := range push.ServicesInNamespace(k.Namespace) {
				services[svc.Key()] = struct{}{}
			}
		case config.EndpointSlice, config.Pod, config.WorkloadEntry, config.Node,
			config.VirtualService, config.Gateway, config.AuthorizationPolicy:
		default:
			return nil, false
		}
	}
	return services, true
}

// NeedsPush sends EDS on an incremental push only to proxies watching a cluster of a changed service.
func (e endpointGenerator) NeedsPush(proxy *model.Proxy, w *model.WatchedResource, req *model.PushRequest) bool {
	if req == nil || req.Full {
		return true
	}
	if len(req.ServicesUpdated) == 0 {
		return false
	}
	return watchesChangedClusters(proxy, w, req.Push, req)
}

// loadAssignment groups endpoints by locality, sorted, each group weighted by the sum of its endpoints'
// weights. Every group has a locality and a weight: gRPC clients reject or ignore groups without them.
func loadAssignment(name string, eps []*model.Endpoint, subsetLabels map[string]string, fl flavor,
	mtls serverMTLS) *endpoint.ClusterLoadAssignment {
	groups := map[string]*endpoint.LocalityLbEndpoints{}
	for _, ep := range eps {
		if !selectorMatch(subsetLabels, ep.Labels) {
			continue
		}
		if fl == flavorGRPC && ep.Health != model.Healthy {
			continue // gRPC clients have no use for endpoints they may not send to
		}
		grp := groups[ep.Locality]
		if grp == nil {
			region, rest, _ := strings.Cut(ep.Locality, "/")
			zone, subzone, _ := strings.Cut(rest, "/")
			grp = &endpoint.LocalityLbEndpoints{Locality: &core.Locality{Region: region, Zone: zone, SubZone: subzone}}
			groups[ep.Locality] = grp
		}
		lb := &endpoint.LbEndpoint{
			HostIdentifier:      &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{Address: socketAddress(ep.Address, ep.Port)}},
			HealthStatus:        healthStatus(ep.Health),
			LoadBalancingWeight: wrapperspb.UInt32(max(ep.Weight, 1)),
		}
		if fl == flavorEnvoy {
			lb.Metadata = endpointMetadata(ep, mtls.tlsMode(ep))
		}
		grp.LbEndpoints = append(grp.LbEndpoints, lb)
	}
	out := &endpoint.ClusterLoadAssignment{ClusterName: name}
	for _, grp := range groups {
		var weight uint32
		for _, lb := range grp.LbEndpoints {
			weight += lb.LoadBalancingWeight.GetValue()
		}
		grp.LoadBalancingWeight = wrapperspb.UInt32(weight)
		out.Endpoints = append(out.Endpoints, grp)
	}
	slices.SortFunc(out.Endpoints, func(a, b *endpoint.LocalityLbEndpoints) int {
		return cmp.Or(strings.Compare(a.Locality.Region, b.Locality.Region), strings.Compare(a.Locality.Zone, b.Locality.Zone),
			strings.Compare(a.Locality.SubZone, b.Locality.SubZone))
	})
	return out
}

func healthStatus(h model.Health) core.HealthStatus {
	switch h {
	case model.Unhealthy:
		return core.HealthStatus_UNHEALTHY
	case model.Draining:
		return core.HealthStatus_DRAINING
	}
	return core.HealthStatus_HEALTHY
}

// serverMTLS decides an endpoint's tlsMode as istiod's mtlsChecker does: an endpoint with a sidecar keeps
// tlsMode istio, which auto mTLS's transport socket match selects, unless its server's PeerAuthentication
// disables mTLS on the endpoint's port (workload, port-level, namespace or mesh policy), or the
// DestinationRule's mode for the port (rule, see ruleTLSMode) decides it.
type serverMTLS struct {
	push *model.PushContext
	rule *networking.ClientTLSSettings_TLSmode
}

func (m serverMTLS) tlsMode(ep *model.Endpoint) string {
	if ep.TLSMode != model.DefaultTLSModeMesh || m.push == nil {
		return ep.TLSMode
	}
	if m.rule != nil {
		if *m.rule != networking.ClientTLSSettings_ISTIO_MUTUAL {
			return "disabled"
		}
		return ep.TLSMode
	}
	if m.push.ServerMTLSMode(ep.Namespace, ep.Labels, ep.Port) == model.MTLSDisable {
		return "disabled"
	}
	return ep.TLSMode
}

// clusterMTLS is the serverMTLS of the endpoints of dr's cluster for subset and port. istiod's mtlsChecker
// reads the rule's TLS mode with its own precedence (ruleTLSMode); it changes what a proxy does only where
// the cluster does auto mTLS although the rule sets a mode, i.e. where a port-level entry without tls
// replaced the rule's (forPort), so it is looked up for those clusters alone.
func clusterMTLS(push *model.PushContext, dr *model.DestinationRule, subset string, port uint32) serverMTLS {
	m := serverMTLS{push: push}
	if dr != nil && effectivePolicy(dr, subset, port).GetTls() == nil {
		m.rule = ruleTLSMode(dr, subset, port)
	}
	return m
}

// ruleTLSMode is istiod's tlsModeForDestinationRule: a policy's port-level tls for port, else its own; the
// subset's policy's, else the rule's. Unlike the clusters' forPort, a port-level entry without tls leaves
// the top level's mode.
func ruleTLSMode(dr *model.DestinationRule, subset string, port uint32) *networking.ClientTLSSettings_TLSmode {
	modeOf := func(tp *networking.TrafficPolicy) *networking.ClientTLSSettings_TLSmode {
		var mode *networking.ClientTLSSettings_TLSmode
		if tp.GetTls() != nil {
			mode = &tp.Tls.Mode
		}
		for _, pl := range tp.GetPortLevelSettings() {
			if pl.GetPort().GetNumber() == port && pl.Tls != nil {
				mode = &pl.Tls.Mode
				break
			}
		}
		return mode
	}
	if subset == "" {
		return modeOf(dr.Spec.GetTrafficPolicy())
	}
	for _, ss := range dr.Spec.GetSubsets() {
		if ss.GetName() == subset {
			if mode := modeOf(ss.GetTrafficPolicy()); mode != nil {
				return mode
			}
			return modeOf(dr.Spec.GetTrafficPolicy())
		}
	}
	return nil
}

// endpointMetadata carries what auto mTLS and telemetry read: the tlsMode transport socket match and
// the workload's identity.
func endpointMetadata(ep *model.Endpoint, tlsMode string) *core.Metadata {
	md := &core.Metadata{FilterMetadata: map[string]*structpb.Struct{
		"envoy.transport_socket_match": {Fields: map[string]*structpb.Value{"tlsMode": structpb.NewStringValue(tlsMode)}},
	}}
	if ep.WorkloadName != "" {
		md.FilterMetadata["istio"] = &structpb.Struct{Fields: map[string]*structpb.Value{
			"workload": structpb.NewStringValue(ep.WorkloadName + ";" + ep.Namespace),
		}}
	}
	return md
}
