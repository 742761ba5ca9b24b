package conformance

import (
	"strconv"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
)

// normaliseEndpoints adds one entry per load assignment of a mesh cluster.
func normaliseEndpoints(out Snapshot, assignments []*endpoint.ClusterLoadAssignment) {
	for _, cla := range assignments {
		key, ok := clusterKey(KindEndpoints, cla.GetClusterName())
		if !ok {
			continue
		}
		out[key] = endpointFields(cla)
	}
}

// transportMatchKey is the metadata filter transport_socket_matches read (tlsMode istio or disabled).
const transportMatchKey = "envoy.transport_socket_match"

// endpointFields lists the address set and, per address, what decides how it is reached and picked: its
// class for the transport matches (see endpointClasses), locality, priority and weights. Health UNKNOWN is what Envoy treats as HEALTHY.
func endpointFields(cla *endpoint.ClusterLoadAssignment) Fields {
	f := Fields{}
	var addrs []string
	for _, group := range cla.GetEndpoints() {
		loc := group.GetLocality()
		locality := loc.GetRegion() + "/" + loc.GetZone() + "/" + loc.GetSubZone()
		for _, lb := range group.GetLbEndpoints() {
			addr := socketText(lb.GetEndpoint().GetAddress())
			addrs = append(addrs, addr)
			p := "ep(" + addr + ")."
			f[p+"locality"] = locality
			f[p+"priority"] = strconv.FormatUint(uint64(group.GetPriority()), 10)
			f[p+"locality_weight"] = uint32Or(group.GetLoadBalancingWeight(), "unset")
			f[p+"weight"] = uint32Or(lb.GetLoadBalancingWeight(), "1")
			health := lb.GetHealthStatus()
			if health == core.HealthStatus_UNKNOWN {
				health = core.HealthStatus_HEALTHY
			}
			f[p+"health"] = health.String()
			f[p+"class"] = endpointClass(structText(lb.GetMetadata().GetFilterMetadata()[transportMatchKey]))
		}
	}
	f["addresses"] = joinSorted(addrs)
	return f
}

func socketText(a *core.Address) string {
	if p := a.GetPipe(); p != nil {
		return "unix:" + p.GetPath()
	}
	if e := a.GetEnvoyInternalAddress(); e != nil {
		return "internal:" + e.GetServerListenerName()
	}
	s := a.GetSocketAddress()
	return s.GetAddress() + ":" + strconv.FormatUint(uint64(s.GetPortValue()), 10)
}
