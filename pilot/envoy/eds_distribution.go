package envoy

import (
	"cmp"
	"slices"
	"strings"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	networking "istio.io/api/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"

	"github.com/sextantmesh/sextant/pilot/model"
)

// The topology labels istiod's failover priority compares between a proxy and an endpoint.
const (
	labelNetwork  = "topology.istio.io/network"
	labelSubzone  = "topology.istio.io/subzone"
	labelHostname = "kubernetes.io/hostname"
)

// distributionPolicy is what a Service's traffic distribution does to one proxy's assignments when no
// DestinationRule sets locality or zone-aware load balancing, as istiod's GetEffectiveLbSetting: endpoints get
// priorities by how many of the labels, in order, they share with the proxy (failover priority, always on
// whether or not outlier detection is set). A different network only lowers the priority further.
type distributionPolicy struct {
	labels  []string
	proxy   []string // the proxy's value of each label
	network bool     // the first label is the network, whose mismatch lowers the priority without deciding it
}

// distributionPolicyOf is svc's distribution policy for proxy under lb (the DestinationRule's load
// balancer settings for the cluster); ok is false when none applies.
func distributionPolicyOf(svc *model.Service, lb *networking.LoadBalancerSettings, proxy *model.Proxy) (distributionPolicy, bool) {
	labels := distributionLabels(svc)
	if labels == nil || lb.GetLocalityLbSetting() != nil || lb.GetZoneAwareLbSetting() != nil {
		return distributionPolicy{}, false
	}
	return failoverPriorityPolicy(labels, proxy), true
}

// failoverPriorityPolicy is the policy of a failoverPriority list for proxy: each entry a label, whose
// value for the proxy is its own, or "label=value", which gives the value (istiod's priorityLabelOverrides).
func failoverPriorityPolicy(entries []string, proxy *model.Proxy) distributionPolicy {
	dp := distributionPolicy{network: len(entries) > 0 && entries[0] == labelNetwork}
	for _, e := range entries {
		parts := strings.Split(e, "=")
		value := proxyTopology(proxy, parts[0])
		if len(parts) == 2 {
			value = parts[1]
		}
		dp.labels = append(dp.labels, parts[0])
		dp.proxy = append(dp.proxy, value)
	}
	return dp
}

// distributionLabels are the failover priority labels of svc's traffic distribution, nil for none.
func distributionLabels(svc *model.Service) []string {
	switch svc.TrafficDistribution {
	case corev1.ServiceTrafficDistributionPreferSameZone:
		return []string{labelNetwork, model.LabelRegion, model.LabelZone}
	case corev1.ServiceTrafficDistributionPreferSameNode:
		return []string{labelNetwork, model.LabelRegion, model.LabelZone, labelSubzone, labelHostname}
	}
	return nil
}

// distributionWeighted reports whether a cluster of svc weights localities for its traffic distribution:
// istiod's forced failover priority sets locality weighting on the cluster.
func distributionWeighted(svc *model.Service, lb *networking.LoadBalancerSettings) bool {
	return svc != nil && distributionLabels(svc) != nil && lb.GetLocalityLbSetting() == nil && lb.GetZoneAwareLbSetting() == nil
}

// String is the proxy's side of the policy, what the assignment depends on.
func (dp distributionPolicy) String() string { return strings.Join(dp.proxy, "/") }

// proxyTopology is the proxy's value of a topology label as istiod's AugmentLabels makes it: from its
// locality, node and network metadata, else its own label.
func proxyTopology(p *model.Proxy, label string) string {
	var v string
	switch label {
	case model.LabelRegion:
		v = p.Locality.GetRegion()
	case model.LabelZone:
		v = p.Locality.GetZone()
	case labelSubzone:
		v = p.Locality.GetSubZone()
	case labelHostname:
		v = p.NodeName
	case labelNetwork:
		if v = p.Labels[labelNetwork]; v == "" {
			v = p.Network
		}
	}
	if v == "" {
		v = p.Labels[label]
	}
	return v
}

// endpointTopology is an endpoint's value of a topology label, as istiod's endpoint labels carry it.
func endpointTopology(ep *model.Endpoint, label string) string {
	region, rest, _ := strings.Cut(ep.Locality, "/")
	zone, subzone, _ := strings.Cut(rest, "/")
	var v string
	switch label {
	case model.LabelRegion:
		v = region
	case model.LabelZone:
		v = zone
	case labelSubzone:
		v = subzone
	case labelHostname:
		v = ep.NodeName
	case labelNetwork:
		if v = ep.Labels[labelNetwork]; v == "" {
			v = ep.Network
		}
	}
	if v == "" {
		v = ep.Labels[label]
	}
	return v
}

// priority is istiod's applyFailoverPriorityPerLocality for one endpoint: 0 when it matches every label,
// else the number of labels from the first it differs on; a different network (the first label) adds
// the number of labels instead of stopping there.
func (dp distributionPolicy) priority(ep *model.Endpoint) uint32 {
	n := len(dp.labels)
	prio, adjust := 0, 0
	for j, l := range dp.labels {
		if dp.proxy[j] == endpointTopology(ep, l) {
			continue
		}
		if j == 0 && dp.network {
			adjust = n
			continue
		}
		prio = n - j
		break
	}
	return uint32(prio + adjust)
}

// assignment builds the load assignment of eps under the policy: each locality's endpoints split by
// priority, the priorities then renumbered from 0 without gaps, as Envoy wants.
func (dp distributionPolicy) assignment(name string, eps []*model.Endpoint, subsetLabels map[string]string, fl flavor,
	mtls serverMTLS) *endpoint.ClusterLoadAssignment {
	byPriority := map[uint32][]*model.Endpoint{}
	for _, ep := range eps {
		p := dp.priority(ep)
		byPriority[p] = append(byPriority[p], ep)
	}
	levels := make([]uint32, 0, len(byPriority))
	for p := range byPriority {
		levels = append(levels, p)
	}
	slices.Sort(levels)
	out := &endpoint.ClusterLoadAssignment{ClusterName: name}
	next := uint32(0)
	for _, p := range levels {
		groups := loadAssignment(name, byPriority[p], subsetLabels, fl, mtls).Endpoints
		if len(groups) == 0 {
			continue // all left out (another subset's): no gap in the numbering
		}
		for _, grp := range groups {
			grp.Priority = next
		}
		out.Endpoints = append(out.Endpoints, groups...)
		next++
	}
	slices.SortStableFunc(out.Endpoints, func(a, b *endpoint.LocalityLbEndpoints) int {
		return cmp.Or(strings.Compare(a.Locality.Region, b.Locality.Region), strings.Compare(a.Locality.Zone, b.Locality.Zone),
			strings.Compare(a.Locality.SubZone, b.Locality.SubZone), cmp.Compare(a.Priority, b.Priority))
	})
	return out
}
