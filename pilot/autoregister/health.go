package autoregister

import (
	"context"
	"maps"
	"time"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/xds"
	"github.com/sextantmesh/sextant/pkg/loglimit"
)

// HealthType is the type of the requests in which Istio's agent reports its workload's readiness, as its
// proxy.istio.io/config readinessProbe finds it: no error_detail when ready, the probe's failure otherwise.
const HealthType = "type.googleapis.com/istio.v1.HealthInformation"

// conditionHealthy is the status condition the reports are written to, read by the endpoint generation.
const conditionHealthy = "Healthy"

// maxHealthMessage bounds the probe failure kept on the entry.
const maxHealthMessage = 1024

// Health is one report of an agent.
type Health struct {
	Healthy bool
	// Message is the probe's failure; empty when healthy.
	Message string
	At      time.Time
}

// ReportTypes makes the controller the transport's xds.ReportHook for the agents' health reports.
func (c *Controller) ReportTypes() []string { return []string{HealthType} }

var _ xds.ReportHook = (*Controller)(nil)

// Report writes an agent's health to the Healthy condition of the entry it registered, as istiod does: only
// for a connection that registered an entry and while this replica controls it. An entry marked
// proxy.istio.io/health-checks-enabled is served to sidecars only while that condition is True.
func (c *Controller) Report(ev xds.ConnectionEvent, _ string, failed bool, failure string) {
	p := ev.Proxy
	if p.AutoRegisterGroup == "" {
		c.log.Debug("health report ignored: the proxy registered no WorkloadEntry", "proxy", p.String())
		return
	}
	c.mu.Lock()
	_, registered := c.conns[keyOf(p)][ev.ID]
	c.mu.Unlock()
	if !registered {
		return
	}
	name, err := entryName(p)
	if err != nil {
		return
	}
	key := config.Key{Kind: config.WorkloadEntry, Namespace: p.Namespace, Name: name}
	ctx, cancel := context.WithTimeout(c.base, writeTimeout)
	defer cancel()
	cur, err := c.opts.Entries.Get(ctx, key)
	if err != nil || cur == nil || cur.Annotations[AnnotationController] != c.opts.Instance {
		return // gone, or its agent reconnected to another replica, which writes its health now
	}
	h := Health{Healthy: !failed, Message: loglimit.Cut(failure, maxHealthMessage), At: time.Now()}
	if err := c.opts.Entries.SetHealth(ctx, key, h); err != nil {
		c.log.Warn("could not write the agent's health to its WorkloadEntry", "entry", key.NamespacedName(), "error", err)
		return
	}
	c.log.Info("WorkloadEntry health", "entry", key.NamespacedName(), "healthy", h.Healthy, "message", h.Message)
}

// withHealth returns a copy of e's conditions with Healthy set from h.
func withHealth(conditions map[string]string, h Health) map[string]string {
	out := maps.Clone(conditions)
	if out == nil {
		out = map[string]string{}
	}
	out[conditionHealthy] = conditionStatus(h.Healthy)
	return out
}

func conditionStatus(ok bool) string {
	if ok {
		return "True"
	}
	return "False"
}
