package envoy

import (
	"math"
	"slices"
	"strconv"
	"strings"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
)

// localityPolicy is what locality load balancing (a DestinationRule's, else the mesh's) does to one proxy's assignments, as
// istiod applies it: distribute weights localities by the proxy's own; otherwise, with outlier detection
// (without it nothing marks a locality unhealthy, so Envoy would never fail over), localities get
// priorities by how much of the proxy's locality they share, and failover names the region to try next.
// failoverPriority, when set, gives the priorities instead by the labels the endpoints share with the proxy;
// failover, if also set, then splits each of those by locality.
type localityPolicy struct {
	proxy            *core.Locality
	distribute       []*networking.LocalityLoadBalancerSetting_Distribute
	failover         []*networking.LocalityLoadBalancerSetting_Failover
	prioritize       bool
	failoverPriority *distributionPolicy
}

// meshDefaultLocality is istiod's default mesh localityLbSetting: on, with no distribution or failover.
var meshDefaultLocality = &networking.LocalityLoadBalancerSetting{Enabled: wrapperspb.Bool(true)}

// effectiveLocality is the locality setting istiod applies to a cluster (GetEffectiveLbSetting): that of
// lb, the DestinationRule's for the cluster, else the mesh config's localityLbSetting; nil when the one
// that applies is disabled, or the mesh config has none.
func effectiveLocality(lb *networking.LoadBalancerSettings, m *mesh.Config) *networking.LocalityLoadBalancerSetting {
	s := lb.GetLocalityLbSetting()
	if s == nil {
		s = meshDefaultLocality
		if m != nil && m.Spec != nil {
			s = m.Spec.GetLocalityLbSetting()
		}
	}
	if s == nil || s.Enabled != nil && !s.Enabled.GetValue() {
		return nil
	}
	return s
}

// localityPolicyOf is the locality policy of an effective setting (nil: locality load balancing off).
func localityPolicyOf(setting *networking.LocalityLoadBalancerSetting, outlier bool, proxy *model.Proxy) localityPolicy {
	if setting == nil {
		return localityPolicy{}
	}
	if len(setting.GetDistribute()) > 0 {
		return localityPolicy{proxy: proxy.Locality, distribute: setting.GetDistribute()}
	}
	if outlier {
		lp := localityPolicy{proxy: proxy.Locality, failover: setting.GetFailover(), prioritize: true}
		if labels := setting.GetFailoverPriority(); len(labels) > 0 {
			dp := failoverPriorityPolicy(labels, proxy)
			lp.failoverPriority = &dp
		}
		return lp
	}
	return localityPolicy{}
}

func (lp localityPolicy) applies() bool { return lp.prioritize || len(lp.distribute) > 0 }

// String is the proxy's side of the policy, what the assignment depends on: its locality, and its values
// of the failover priority labels.
func (lp localityPolicy) String() string {
	s := localityString(lp.proxy)
	if lp.failoverPriority != nil {
		s += " " + lp.failoverPriority.String()
	}
	return s
}

// assignment builds the load assignment of eps for the proxy under the policy.
func (lp localityPolicy) assignment(name string, eps []*model.Endpoint, subsetLabels map[string]string, fl flavor,
	mtls serverMTLS) *endpoint.ClusterLoadAssignment {
	var cla *endpoint.ClusterLoadAssignment
	if lp.failoverPriority != nil {
		cla = lp.failoverPriority.assignment(name, eps, subsetLabels, fl, mtls)
	} else {
		cla = loadAssignment(name, eps, subsetLabels, fl, mtls)
	}
	switch {
	case len(lp.distribute) > 0:
		lp.applyWeights(cla)
	case lp.prioritize && (lp.failoverPriority == nil || len(lp.failover) > 0):
		lp.applyPriorities(cla)
	}
	return cla
}

// applyPriorities: 0 for the proxy's own subzone, 1 its zone, 2 its region, 3 elsewhere — 4 for a region
// other than the one failover names for the proxy's — within the priority a group already has (from the
// failover priority labels), then renumbered from 0 without gaps, as Envoy wants.
func (lp localityPolicy) applyPriorities(cla *endpoint.ClusterLoadAssignment) {
	used := map[uint32]bool{}
	for _, grp := range cla.Endpoints {
		p := lbPriority(lp.proxy, grp.Locality)
		if p == 3 {
			for _, f := range lp.failover {
				if f.From == lp.proxy.GetRegion() {
					if grp.Locality.GetRegion() != f.To {
						p = 4
					}
					break
				}
			}
		}
		p += grp.Priority * 5 // five locality priorities (0-4) within each the labels gave
		grp.Priority = p
		used[p] = true
	}
	levels := make([]uint32, 0, len(used))
	for p := range used {
		levels = append(levels, p)
	}
	slices.Sort(levels)
	for _, grp := range cla.Endpoints {
		grp.Priority = uint32(slices.Index(levels, grp.Priority))
	}
}

func lbPriority(proxy, ep *core.Locality) uint32 {
	switch {
	case proxy.GetRegion() != ep.GetRegion():
		return 3
	case proxy.GetZone() != ep.GetZone():
		return 2
	case proxy.GetSubZone() != ep.GetSubZone():
		return 1
	}
	return 0
}

// applyWeights applies the first distribute rule whose from matches the proxy: each to pattern's weight
// is shared by the localities it matches (in proportion to their own weights), and localities no pattern
// matches get no traffic.
func (lp localityPolicy) applyWeights(cla *endpoint.ClusterLoadAssignment) {
	for _, d := range lp.distribute {
		if d == nil || !localityMatch(lp.proxy, d.From) {
			continue
		}
		unmatched := make([]bool, len(cla.Endpoints))
		for i := range unmatched {
			unmatched[i] = true
		}
		patterns := make([]string, 0, len(d.To))
		for p := range d.To {
			patterns = append(patterns, p)
		}
		slices.Sort(patterns) // one outcome whatever the map's order: the first pattern claims a locality
		for _, pattern := range patterns {
			weight := d.To[pattern]
			own := map[int]uint32{}
			var total uint32
			for i, grp := range cla.Endpoints {
				if unmatched[i] && localityMatch(grp.Locality, pattern) {
					unmatched[i] = false
					own[i] = max(grp.LoadBalancingWeight.GetValue(), 1)
					total += own[i]
				}
			}
			for i, w := range own {
				if share := float64(w*weight) / float64(total); share > 0 {
					cla.Endpoints[i].LoadBalancingWeight = wrapperspb.UInt32(uint32(math.Ceil(share)))
				}
			}
		}
		for i, u := range unmatched {
			if u {
				cla.Endpoints[i].LbEndpoints = nil
			}
		}
		return
	}
}

// localityMatch reports whether loc matches a pattern region[/zone[/subzone]], each part exact or "*";
// parts left out match anything.
func localityMatch(loc *core.Locality, pattern string) bool {
	region, rest, _ := strings.Cut(pattern, "/")
	zone, subzone, _ := strings.Cut(rest, "/")
	part := func(want, got string) bool { return want == "*" || want == "" || want == got }
	return (region == "*" || region == loc.GetRegion()) && part(zone, loc.GetZone()) && part(subzone, loc.GetSubZone())
}

// localityString spells a locality region/zone/subzone.
func localityString(l *core.Locality) string {
	return l.GetRegion() + "/" + l.GetZone() + "/" + l.GetSubZone()
}

// zoneAwareSetting is the zone-aware setting istiod applies to a cluster of svc (GetEffectiveLbSetting): the
// rule's (lb), else the mesh config's when neither the rule's locality setting nor svc's traffic
// distribution decides first; it then wins over the mesh's localityLbSetting. nil for none.
func zoneAwareSetting(lb *networking.LoadBalancerSettings, m *mesh.Config, svc *model.Service) *networking.ZoneAwareLoadBalancerSetting {
	if z := lb.GetZoneAwareLbSetting(); z != nil {
		return z
	}
	if lb.GetLocalityLbSetting() != nil || svc != nil && distributionLabels(svc) != nil {
		return nil
	}
	return m.GetSpec().GetZoneAwareLbSetting()
}

// zoneAwareLbConfig is the cluster's side of a zone-aware setting, as istiod's: Envoy's zone-aware routing
// with the setting's minimum cluster size, or turned off (routing enabled for 0 %) when it says enabled: false.
func zoneAwareLbConfig(z *networking.ZoneAwareLoadBalancerSetting) *cluster.Cluster_CommonLbConfig_ZoneAwareLbConfig_ {
	zc := &cluster.Cluster_CommonLbConfig_ZoneAwareLbConfig{}
	if z.MinClusterSize != nil {
		zc.MinClusterSize = wrapperspb.UInt64(uint64(z.MinClusterSize.GetValue()))
	}
	if z.Enabled != nil && !z.Enabled.GetValue() {
		zc.RoutingEnabled = &typev3.Percent{Value: 0}
	}
	return &cluster.Cluster_CommonLbConfig_ZoneAwareLbConfig_{ZoneAwareLbConfig: zc}
}

// zoneAwarePolicy is what zone-aware load balancing does to one proxy's assignments, as istiod's
// ApplyZoneAwareLoadBalancer, whether or not outlier detection is set: the localities of the proxy's region
// first (Envoy's zone-aware routing then balances across their zones), then those of the region failover
// names for it, then the rest; within the priorities failoverPriority's labels give, when set.
type zoneAwarePolicy struct {
	region           string
	failover         bool   // failover names a region for the proxy's
	failoverTo       string // that region
	failoverPriority *distributionPolicy
}

// zoneAwarePolicyOf is the policy of setting z for proxy; ok is false when z turns routing off, which leaves
// the assignment as it is.
func zoneAwarePolicyOf(z *networking.ZoneAwareLoadBalancerSetting, proxy *model.Proxy) (_ zoneAwarePolicy, ok bool) {
	if z == nil || z.Enabled != nil && !z.Enabled.GetValue() {
		return zoneAwarePolicy{}, false
	}
	zp := zoneAwarePolicy{region: proxy.Locality.GetRegion()}
	for _, f := range z.Failover {
		if f.From == zp.region {
			zp.failover, zp.failoverTo = true, f.To
			break // the first entry for the proxy's region decides, as istiod's
		}
	}
	if labels := z.FailoverPriority; len(labels) > 0 {
		dp := failoverPriorityPolicy(labels, proxy)
		zp.failoverPriority = &dp
	}
	return zp, true
}

// String is the proxy's side of the policy, what the assignment depends on.
func (zp zoneAwarePolicy) String() string {
	s := zp.region + " " + strconv.FormatBool(zp.failover) + " " + zp.failoverTo
	if zp.failoverPriority != nil {
		s += " " + zp.failoverPriority.String()
	}
	return s
}

// assignment builds the load assignment of eps for the proxy under the policy: three region priorities
// (own, failover, other) within each the labels gave, renumbered from 0 without gaps.
func (zp zoneAwarePolicy) assignment(name string, eps []*model.Endpoint, subsetLabels map[string]string, fl flavor,
	mtls serverMTLS) *endpoint.ClusterLoadAssignment {
	var cla *endpoint.ClusterLoadAssignment
	if zp.failoverPriority != nil {
		cla = zp.failoverPriority.assignment(name, eps, subsetLabels, fl, mtls)
	} else {
		cla = loadAssignment(name, eps, subsetLabels, fl, mtls)
	}
	used := map[uint32]bool{}
	for _, grp := range cla.Endpoints {
		p := uint32(2)
		switch region := grp.Locality.GetRegion(); {
		case region == zp.region:
			p = 0
		case zp.failover && region == zp.failoverTo:
			p = 1
		}
		grp.Priority = grp.Priority*3 + p
		used[grp.Priority] = true
	}
	levels := make([]uint32, 0, len(used))
	for p := range used {
		levels = append(levels, p)
	}
	slices.Sort(levels)
	for _, grp := range cla.Endpoints {
		grp.Priority = uint32(slices.Index(levels, grp.Priority))
	}
	return cla
}
