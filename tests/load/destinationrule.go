package main

import (
	"fmt"
	"time"
)

// destinationRuleChange changes one service's DestinationRule -reps times (connectionPool.tcp.maxConnections,
// a new value each time): its three clusters change, their endpoints do not. Envoy warms each updated EDS
// cluster until a load assignment for it arrives after the update, so the change has reached a sidecar once
// it holds the new clusters and they are warm again; a warming that reaches initial_fetch_timeout is a miss.
func (h *harness) destinationRuleChange() (*Result, error) {
	if len(h.sidecars) == 0 {
		return nil, nil
	}
	s := h.mesh.svcs[1%len(h.mesh.svcs)]
	var clusters []string
	for _, sp := range servicePorts {
		clusters = append(clusters, outbound(sp.port, s.host()))
	}
	file, name := "dr-"+s.name+".yaml", "dr-"+s.name
	// A warming the server never ends is over at initial_fetch_timeout: waiting a little longer lets its
	// timeout count in the change it belongs to.
	within := min(h.cfg.Timeout, h.warmTimeout()+time.Second)
	const base = 1000
	// A first rule, not measured, so that every measured change is an update of the same kind.
	h.settleClusters(clusters, within, func(c *info) bool { return c.maxConns == base }, func(begin func()) error {
		return h.mesh.out.apply(file, destinationRule(s, name, base), begin)
	})
	h.takeWarming()
	var samples []sample
	for i := range h.cfg.Reps {
		want := uint32(base + 1 + i)
		smp, err := h.measureFor(within, func(c *change) int {
			n := 0
			for _, p := range h.sidecars {
				if held := heldClusters(p, clusters); len(held) > 0 {
					c.watch(p, clustersWarmWith(held, want))
					n++
				}
			}
			return n
		}, func(begin func()) error {
			return h.mesh.out.apply(file, destinationRule(s, name, int(want)), begin)
		})
		if err != nil {
			return nil, err
		}
		samples = append(samples, smp)
	}
	r := h.summarize("destination-rule", samples)
	r.addWarming(h.takeWarming())
	r.warmingSet = true
	r.Note = fmt.Sprintf("maxConnections of %s's DestinationRule changed; a sidecar has it once its 3 clusters are updated and warm "+
		"(a load assignment arrived after the update); waited %s per change (initial_fetch_timeout %s)", s.host(),
		within.Round(time.Millisecond), h.warmTimeout())
	// Put the mesh back, and wait until the clusters are back and done warming (or given up on), so that
	// their warming does not count in the next scenario.
	last := uint32(base + h.cfg.Reps)
	h.settleClusters(clusters, within, func(c *info) bool { return c.maxConns != last }, func(begin func()) error {
		begin()
		return h.mesh.out.remove(file)
	})
	h.takeWarming()
	return r, nil
}

func (h *harness) warmTimeout() time.Duration {
	if h.cfg.InitialFetchTimeout > 0 {
		return h.cfg.InitialFetchTimeout
	}
	return defaultInitialFetchTimeout
}

// settleClusters applies a change and waits (at most within) until every sidecar holding any of clusters
// has each of them as want says and none of them warming; a warming given up on counts as settled.
func (h *harness) settleClusters(clusters []string, within time.Duration, want func(*info) bool, apply func(begin func()) error) {
	c := newChange()
	for _, p := range h.sidecars {
		held := heldClusters(p, clusters)
		if len(held) == 0 {
			continue
		}
		c.watch(p, func(p *proxy) bool {
			for _, name := range held {
				in, ok := p.res[cdsType][name]
				if !ok || !want(in) {
					return false
				}
				if _, warming := p.warm.warming[name]; warming {
					return false
				}
			}
			return true
		})
	}
	c.seal()
	must(apply(c.begin))
	c.wait(time.Now().Add(within), h.sidecars)
	h.quiet(h.cfg.Quiet, 5*time.Second)
}

// heldClusters returns those of names in p's CDS.
func heldClusters(p *proxy, names []string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, n := range names {
		if _, ok := p.res[cdsType][n]; ok {
			out = append(out, n)
		}
	}
	return out
}

// clustersWarmWith holds once each of names has max_connections maxConns and has finished warming with a
// load assignment.
func clustersWarmWith(names []string, maxConns uint32) func(*proxy) bool {
	return func(p *proxy) bool {
		for _, name := range names {
			in, ok := p.res[cdsType][name]
			if !ok || in.maxConns != maxConns || !p.warm.isWarm(name) {
				return false
			}
		}
		return true
	}
}
