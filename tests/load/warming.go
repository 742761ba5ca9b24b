package main

import (
	"time"
)

// Envoy's cluster warming, as its source has it (source/common/upstream/cluster_manager_impl.cc
// addOrUpdateCluster, cds_api_helper.cc, source/extensions/clusters/eds/eds.cc): every cluster a CDS
// response adds, or updates with a content hash other than the one held, is built anew and warms; an EDS
// cluster stays warming until a ClusterLoadAssignment for its EDS service name arrives after that (a
// removal counts: Envoy takes it as an empty assignment), or until initial_fetch_timeout (15 s by default)
// gives up on it. On delta the new cluster's subscription is to a name already subscribed, so Envoy sends no
// request for it: only the server can end the warming. Not modelled: Envoy holds the CDS ACK while any
// cluster warms (the harness ACKs at once).

// warmState is one proxy's warming clusters. Its methods are called with the proxy's mu held.
type warmState struct {
	timeout time.Duration
	// warming holds the clusters warming, by cluster name; byEDS the cluster names by EDS service name,
	// only for those whose service name is not their own (none of Sextant's).
	warming map[string]warming
	byEDS   map[string][]string
	// timedOut holds the clusters whose latest warming timed out; a later update clears them.
	timedOut map[string]bool
	// nextSweep is the earliest a warming can time out.
	nextSweep time.Time

	// What ended since the harness last took it (take).
	done     []time.Duration
	timeouts int
}

type warming struct {
	eds   string
	start time.Time
}

func newWarmState(timeout time.Duration) warmState {
	if timeout <= 0 {
		timeout = defaultInitialFetchTimeout
	}
	return warmState{timeout: timeout, warming: map[string]warming{}, timedOut: map[string]bool{}}
}

// defaultInitialFetchTimeout is Envoy's initial_fetch_timeout when its config source sets none.
const defaultInitialFetchTimeout = 15 * time.Second

// cluster notes that cluster name arrived as in (held before: old, or nil) at now.
func (w *warmState) cluster(name string, old, in *info, now time.Time) {
	if old != nil && old.content == in.content {
		return // the same cluster: Envoy skips the update
	}
	w.clusterGone(name)
	if !in.eds {
		return // only EDS clusters wait for the server here
	}
	w.warming[name] = warming{eds: in.edsName, start: now}
	if in.edsName != name {
		if w.byEDS == nil {
			w.byEDS = map[string][]string{}
		}
		w.byEDS[in.edsName] = append(w.byEDS[in.edsName], name)
	}
	if deadline := now.Add(w.timeout); w.nextSweep.IsZero() || deadline.Before(w.nextSweep) {
		w.nextSweep = deadline
	}
}

// clusterGone forgets a cluster removed, replaced or no longer EDS.
func (w *warmState) clusterGone(name string) {
	delete(w.timedOut, name)
	if c, ok := w.warming[name]; ok {
		delete(w.warming, name)
		if c.eds != name {
			w.dropAlias(c.eds, name)
		}
	}
}

func (w *warmState) dropAlias(eds, name string) {
	names := w.byEDS[eds]
	for i, n := range names {
		if n == name {
			names = append(names[:i], names[i+1:]...)
			break
		}
	}
	if len(names) == 0 {
		delete(w.byEDS, eds)
	} else {
		w.byEDS[eds] = names
	}
}

// assignment notes a load assignment (or its removal) for EDS service name eds at now.
func (w *warmState) assignment(eds string, now time.Time) {
	if c, ok := w.warming[eds]; ok && c.eds == eds {
		w.done = append(w.done, now.Sub(c.start))
		delete(w.warming, eds)
	}
	if names := w.byEDS[eds]; len(names) > 0 {
		for _, n := range names {
			if c, ok := w.warming[n]; ok {
				w.done = append(w.done, now.Sub(c.start))
				delete(w.warming, n)
			}
		}
		delete(w.byEDS, eds)
	}
}

// sweep ends the warmings older than the timeout, as Envoy's initial_fetch_timeout does.
func (w *warmState) sweep(now time.Time) {
	if w.nextSweep.IsZero() || now.Before(w.nextSweep) {
		return
	}
	w.nextSweep = time.Time{}
	for name, c := range w.warming {
		deadline := c.start.Add(w.timeout)
		if !now.Before(deadline) {
			w.timeouts++
			w.timedOut[name] = true
			delete(w.warming, name)
			if c.eds != name {
				w.dropAlias(c.eds, name)
			}
		} else if w.nextSweep.IsZero() || deadline.Before(w.nextSweep) {
			w.nextSweep = deadline
		}
	}
}

// isWarm reports whether cluster name is held and neither warming nor given up on.
func (w *warmState) isWarm(name string) bool {
	_, warmingNow := w.warming[name]
	return !warmingNow && !w.timedOut[name]
}

// take returns and clears what ended since the last take, and how many still warm.
func (w *warmState) take(now time.Time) (done []time.Duration, timeouts, pending int) {
	w.sweep(now)
	done, timeouts = w.done, w.timeouts
	w.done, w.timeouts = nil, 0
	return done, timeouts, len(w.warming)
}

// warmingFigures is the warming of every proxy since the last call (from the start for the first).
type warmingFigures struct {
	done              []time.Duration
	timeouts, pending int
}

func (h *harness) takeWarming() warmingFigures {
	var f warmingFigures
	now := time.Now()
	for _, p := range h.all() {
		p.mu.Lock()
		d, t, n := p.warm.take(now)
		p.mu.Unlock()
		f.done = append(f.done, d...)
		f.timeouts += t
		f.pending += n
	}
	return f
}

// addWarming puts the warming figures into r.
func (r *Result) addWarming(f warmingFigures) {
	r.Warmings = len(f.done)
	r.WarmingTimeouts = f.timeouts
	r.WarmingPending = f.pending
	r.WarmingP50Ms, r.WarmingP99Ms = pct(f.done, 50), pct(f.done, 99)
}
