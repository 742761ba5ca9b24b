package model

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/sextantmesh/sextant/pilot/config"
)

// ServiceHostProblems warns, for each hostname that several services of one namespace define (ServiceEntries
// naming the same host), about every definition but the oldest: Sextant serves the oldest alone in that
// namespace, where istiod merges the ports of such ServiceEntries into one service.
func (ps *PushContext) ServiceHostProblems() []*config.Error {
	var out []*config.Error
	for host, svcs := range ps.services.All() {
		if len(svcs) < 2 {
			continue
		}
		served := map[string]*Service{} // by namespace: the oldest, as ServiceForHostname picks
		for _, s := range svcs {
			first := served[s.Namespace]
			if first == nil {
				served[s.Namespace] = s
				continue
			}
			var lost []string
			for _, p := range s.Ports {
				if first.PortByNumber(p.Port) == nil {
					lost = append(lost, strconv.FormatUint(uint64(p.Port), 10))
				}
			}
			effect := "its ports, resolution and endpoints are not served"
			if len(lost) > 0 {
				effect = "its port(s) " + strings.Join(lost, ", ") + " are not served, nor its resolution and endpoints"
			}
			out = append(out, &config.Error{Kind: string(s.Source.Kind), Namespace: s.Source.Namespace, Name: s.Source.Name,
				Field: "spec.hosts", Warning: true, Message: fmt.Sprintf(
					"host %s is also defined in this namespace by %s %s, which is older and which Sextant serves alone: %s (istiod merges the ports of "+
						"such ServiceEntries)",
					host, first.Source.Kind, first.Source.Name, effect)})
		}
	}
	slices.SortFunc(out, func(a, b *config.Error) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name), strings.Compare(a.Message, b.Message))
	})
	return out
}
