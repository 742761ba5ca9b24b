package model

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/sextantmesh/sextant/pilot/config"
)

// RoundRobinEndpoint returns the one endpoint a DNS_ROUND_ROBIN service port resolves (Envoy's LOGICAL_DNS
// cluster takes one address), nil when there is none. Validation refuses a ServiceEntry listing several
// endpoints; several come only from workloads its selector picks, and istiod keeps the first workload by
// namespace and name (inline endpoints, which have no workload, first).
func RoundRobinEndpoint(eps []*Endpoint) *Endpoint {
	if len(eps) == 0 {
		return nil
	}
	return slices.MinFunc(eps, func(a, b *Endpoint) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.WorkloadName, b.WorkloadName),
			strings.Compare(a.Address, b.Address))
	})
}

// DNSRoundRobinProblems warns, per DNS_ROUND_ROBIN ServiceEntry port whose workloadSelector picks more than
// one workload, that only one of them (RoundRobinEndpoint) receives traffic.
func (ps *PushContext) DNSRoundRobinProblems() []*config.Error {
	var out []*config.Error
	for _, svc := range ps.AllServices() {
		if svc.Resolution != DNSRoundRobinLB || svc.Source.Kind != config.ServiceEntry {
			continue
		}
		se := ps.Endpoints(svc.Key())
		if se == nil {
			continue
		}
		for _, p := range svc.Ports {
			eps := se.ByPort[p.Port]
			if len(eps) < 2 {
				continue
			}
			kept := RoundRobinEndpoint(eps)
			out = append(out, &config.Error{Kind: string(svc.Source.Kind), Namespace: svc.Source.Namespace, Name: svc.Source.Name,
				Field: "spec.workloadSelector", Warning: true, Message: fmt.Sprintf(
					"resolution DNS_ROUND_ROBIN resolves one address per port: of the %d workloads selected for %s port %d, only %s (%s) receives "+
						"traffic, as in istiod",
					len(eps), svc.Hostname, p.Port, workloadRef(kept), kept.Address)})
		}
	}
	slices.SortFunc(out, func(a, b *config.Error) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name), strings.Compare(a.Message, b.Message))
	})
	return slices.CompactFunc(out, func(a, b *config.Error) bool { return *a == *b })
}

func workloadRef(ep *Endpoint) string {
	if ep.WorkloadName == "" {
		return "the inline endpoint"
	}
	return ep.Namespace + "/" + ep.WorkloadName
}
