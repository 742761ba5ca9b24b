package model

import (
	"strconv"

	"github.com/sextantmesh/sextant/pilot/config"
)

// annotationHealthChecks marks a WorkloadEntry whose agent reports its readiness over xDS.
const annotationHealthChecks = "proxy.istio.io/health-checks-enabled"

// workloadEntryServed is istiod's test of a WorkloadEntry for sidecars' endpoints: one whose agent reports
// its readiness is served only once its Healthy condition is True, so a VM gets no traffic before its probe
// passes; any other entry is served.
func workloadEntryServed(c *config.Config) bool {
	if on, err := strconv.ParseBool(c.Annotations[annotationHealthChecks]); err != nil || !on {
		return true
	}
	return c.Conditions["Healthy"] == "True"
}
