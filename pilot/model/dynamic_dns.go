package model

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/sextantmesh/sextant/pilot/config"
)

// DynamicDNSProblems warns about the DestinationRule fields that have no effect on a DYNAMIC_DNS host,
// whose dynamic forward proxy cluster picks the address of each request's host itself: istiod ignores the
// rule's loadBalancer there (the cluster's own, CLUSTER_PROVIDED, stands) and builds no subset cluster, so
// a route to a subset finds none. Sextant does the same; these warnings keep it from being silent.
func (ps *PushContext) DynamicDNSProblems() []*config.Error {
	var dynamic []*Service
	for _, svc := range ps.AllServices() {
		if svc.Resolution == DynamicDNS {
			dynamic = append(dynamic, svc)
		}
	}
	if len(dynamic) == 0 {
		return nil
	}
	var out []*config.Error
	for _, rules := range ps.destinationRules.byNamespace {
		for _, dr := range rules {
			for _, svc := range dynamic {
				if HostMatches(dr.Host, svc.Hostname) {
					out = append(out, dynamicDNSRuleProblems(dr, svc)...)
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b *config.Error) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name), strings.Compare(a.Field, b.Field),
			strings.Compare(a.Message, b.Message))
	})
	// A rule whose host covers several DYNAMIC_DNS hosts is warned once per field.
	return slices.CompactFunc(out, func(a, b *config.Error) bool {
		return a.Namespace == b.Namespace && a.Name == b.Name && a.Field == b.Field
	})
}

// dynamicDNSRuleProblems are the warnings of each object merged into dr, which applies to svc.
func dynamicDNSRuleProblems(dr *DestinationRule, svc *Service) []*config.Error {
	var out []*config.Error
	for _, c := range dr.origins {
		spec, ok := c.Spec.(*networking.DestinationRule)
		if !ok {
			continue
		}
		warn := func(field, format string, args ...any) {
			out = append(out, &config.Error{File: c.Source, Kind: string(c.Kind), Namespace: c.Namespace, Name: c.Name, Field: field,
				Warning: true, Message: fmt.Sprintf(format, args...)})
		}
		if spec.GetTrafficPolicy().GetLoadBalancer() != nil {
			warn("spec.trafficPolicy.loadBalancer",
				"ignored for %s (resolution DYNAMIC_DNS), as istiod ignores it: the dynamic forward proxy picks each request's address itself",
				svc.Hostname)
		}
		for i, pl := range spec.GetTrafficPolicy().GetPortLevelSettings() {
			if pl.GetLoadBalancer() != nil && slices.ContainsFunc(svc.Ports, func(p *Port) bool { return p.Port == pl.GetPort().GetNumber() }) {
				warn(fmt.Sprintf("spec.trafficPolicy.portLevelSettings[%d].loadBalancer", i),
					"ignored for %s port %d (resolution DYNAMIC_DNS), as istiod ignores it: the dynamic forward proxy picks each request's address itself",
					svc.Hostname, pl.GetPort().GetNumber())
			}
		}
		for i, ss := range spec.GetSubsets() {
			warn(fmt.Sprintf("spec.subsets[%d]", i),
				"subset %q of %s (resolution DYNAMIC_DNS) gets no cluster, as in istiod: the host has no endpoints to choose from, so a route to the "+
					"subset finds no cluster",
				ss.GetName(), svc.Hostname)
		}
	}
	return out
}
