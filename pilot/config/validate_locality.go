package config

import (
	"fmt"

	networking "istio.io/api/networking/v1alpha3"
)

// The node topology labels a failoverPriority may name; failover already orders these levels itself.
var localityPriorityLabels = map[string]bool{
	"topology.kubernetes.io/region": true,
	"topology.kubernetes.io/zone":   true,
	"topology.istio.io/subzone":     true,
}

// ValidateLocalityLbSetting refuses what istiod's validation refuses in a locality load balancing setting
// (a DestinationRule's at f, or the mesh config's): distribute with failover, whose orders contradict each
// other, and failover with a region, zone or subzone label in failoverPriority, which would order them twice.
func ValidateLocalityLbSetting(f string, lb *networking.LocalityLoadBalancerSetting) error {
	if lb == nil {
		return nil
	}
	if len(lb.GetDistribute()) > 0 && len(lb.GetFailover()) > 0 {
		return fieldErr(f+".failover", "can not simultaneously specify 'distribute' and 'failover'")
	}
	if len(lb.GetFailover()) == 0 {
		return nil
	}
	for i, l := range lb.GetFailoverPriority() {
		if localityPriorityLabels[l] {
			return fieldErr(fmt.Sprintf("%s.failoverPriority[%d]", f, i), "can not simultaneously set 'failover' and topology label %q", l)
		}
	}
	return nil
}
