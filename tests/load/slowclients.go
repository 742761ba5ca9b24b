package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// slowClients measures one healthy sidecar's full initial fetch (connect, subscribe as Envoy does, until it
// has CDS, EDS, LDS, RDS and VHDS and has ACKed them) -slow-reps times alone, then as often while
// -stuck-clients (4) more clients connect as sidecars, subscribe everything a sidecar does and never read; and how long after
// their connect the stuck ones leave the server's connection table (its send timeout should cut them off).
func (h *harness) slowClients() ([]*Result, error) {
	if len(h.sidecars) == 0 {
		return nil, nil
	}
	// The stuck clients cannot read their CDS and LDS to learn what to subscribe: they ask for what a
	// connected sidecar of the same namespace has.
	tmpl := h.sidecars[0]
	tmpl.mu.Lock()
	eds, rds := slices.Sorted(maps.Keys(tmpl.subs[edsType])), slices.Sorted(maps.Keys(tmpl.subs[rdsType]))
	vhds := tmpl.vhdsOn
	tmpl.mu.Unlock()
	reps, stuckClients := max(1, h.cfg.SlowReps), max(1, h.cfg.StuckClients)

	var alone, stuck []sample
	var aloneW, stuckW warmingFigures
	for range reps {
		smp, w, err := h.healthyFetch()
		if err != nil {
			return nil, err
		}
		alone, aloneW = append(alone, smp), aloneW.add(w)
	}
	var gone []time.Duration
	notGone, neverListed := 0, 0
	for range reps {
		cs, err := h.openStuck(stuckClients, tmpl, eds, rds, vhds)
		if err != nil {
			return nil, err
		}
		smp, w, err := h.healthyFetch()
		if err != nil {
			closeStuck(cs)
			return nil, err
		}
		stuck, stuckW = append(stuck, smp), stuckW.add(w)
		g, missing, never := h.waitStuckGone(cs)
		closeStuck(cs)
		gone = append(gone, g...)
		notGone += missing
		neverListed += never
		h.quiet(2*h.cfg.Quiet, 10*time.Second)
	}
	ra := h.summarize("slow-clients-alone", alone)
	ra.addWarming(aloneW)
	ra.warmingSet = true
	ra.Note = fmt.Sprintf("a new sidecar's full initial fetch (until every type is received and ACKed), alone, %d times", reps)
	rs := h.summarize("slow-clients-stuck", stuck)
	rs.addWarming(stuckW)
	rs.warmingSet = true
	sendTimeout := h.cfg.SendTimeout
	if sendTimeout <= 0 {
		sendTimeout = 5 * time.Second // the server's default
	}
	rs.Figures = map[string]float64{
		"stuckClients":         float64(stuckClients),
		"p50RatioToAlone":      ratio(rs.P50Ms, ra.P50Ms),
		"maxRatioToAlone":      ratio(rs.MaxMs, ra.MaxMs),
		"stuckGoneP50Ms":       pct(gone, 50),
		"stuckGoneMaxMs":       pct(gone, 100),
		"stuckNotGone":         float64(notGone),
		"stuckNeverListed":     float64(neverListed),
		"serverSendTimeoutSec": sendTimeout.Seconds(),
	}
	rs.Note = fmt.Sprintf("the same fetch while %d clients that never read (HTTP/2 window 64 KiB) connect just before it: "+
		"p50 %.2f× and max %.2f× alone (target ≤ 2×); the stuck ones left the server's /debug/syncz after p50 %s, max %s "+
		"from their connect (send timeout %s); %d not gone within the wait, %d never listed",
		stuckClients, rs.Figures["p50RatioToAlone"], rs.Figures["maxRatioToAlone"], msText(pct(gone, 50)), msText(pct(gone, 100)),
		sendTimeout, notGone, neverListed)
	return []*Result{ra, rs}, nil
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

func (f warmingFigures) add(g warmingFigures) warmingFigures {
	return warmingFigures{done: append(f.done, g.done...), timeouts: f.timeouts + g.timeouts, pending: f.pending + g.pending}
}

// healthyFetch connects a new sidecar in the namespace of the first service, waits until it has its whole
// initial config, and disconnects it.
func (h *harness) healthyFetch() (sample, warmingFigures, error) {
	h.quiet(h.cfg.Quiet, 5*time.Second)
	s := h.mesh.svcs[0]
	h.extraSeq++
	p := newProxy(h, 200000+h.extraSeq, kindSidecar, s.ns, s.name, fmt.Sprintf("%s-fetch-%d", s.name, h.extraSeq), h.mesh.nextIP(),
		map[string]string{"app": s.name, "version": "v1", "security.istio.io/tlsMode": "istio"})
	st0, fleet0 := h.srv.stats(), procCPUSeconds("self", h.srv.clkTck)
	t0 := h.typeBytes()
	if err := p.start(h.srv.grpcAddr); err != nil {
		return sample{}, warmingFigures{}, err
	}
	defer p.stop()
	deadline := time.Now().Add(h.cfg.Timeout)
	var lat time.Duration
	for time.Now().Before(deadline) {
		p.mu.Lock()
		synced, started, err := p.synced, p.started, p.err
		p.mu.Unlock()
		if err != nil {
			return sample{}, warmingFigures{}, fmt.Errorf("healthy sidecar: %w", err)
		}
		if !synced.IsZero() {
			lat = synced.Sub(started)
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	st1 := h.srv.stats()
	smp := sample{interest: 1, bytes: p.bytes.Load(), responses: p.responses.Load(), cpu: st1.CPUSeconds - st0.CPUSeconds,
		fleetCPU: procCPUSeconds("self", h.srv.clkTck) - fleet0, byType: typeDiff(h.typeBytes(), t0)}
	if lat > 0 {
		smp.lats = []time.Duration{lat}
	} else {
		smp.missed = 1
	}
	p.mu.Lock()
	done, timeouts, pending := p.warm.take(time.Now())
	p.mu.Unlock()
	return smp, warmingFigures{done: done, timeouts: timeouts, pending: pending}, nil
}

type stuckClient struct {
	s      *h2Stream
	node   string
	opened time.Time
}

// openStuck connects n clients as sidecars of tmpl's namespace that subscribe to CDS, LDS, the
// EDS and RDS names given (and VHDS) and then never read. Their HTTP/2 windows are the protocol's default
// 64 KiB, not Envoy's 256 MiB: what the server sends beyond that waits on it, as for an Envoy whose event
// loop is stuck once its socket buffers are full.
func (h *harness) openStuck(n int, tmpl *proxy, eds, rds []string, vhds bool) ([]*stuckClient, error) {
	var out []*stuckClient
	for range n {
		h.extraSeq++
		p := newProxy(h, 200000+h.extraSeq, kindSidecar, tmpl.ns, tmpl.sa, fmt.Sprintf("stuck-%d", h.extraSeq), h.mesh.nextIP(), nil)
		s, err := dialDeltaWindow(h.srv.grpcAddr, 65535, nil, "")
		if err != nil {
			closeStuck(out)
			return nil, err
		}
		c := &stuckClient{s: s, node: p.node.Id, opened: time.Now()}
		out = append(out, c)
		reqs := []*discovery.DeltaDiscoveryRequest{{TypeUrl: cdsType, Node: p.node}, {TypeUrl: ldsType},
			{TypeUrl: edsType, ResourceNamesSubscribe: eds}, {TypeUrl: rdsType, ResourceNamesSubscribe: rds}}
		if vhds {
			reqs = append(reqs, &discovery.DeltaDiscoveryRequest{TypeUrl: vhdsType})
		}
		for _, r := range reqs {
			if err = s.Send(r); err != nil {
				break
			}
		}
		if err == nil {
			err = s.flush()
		}
		if err != nil {
			closeStuck(out)
			return nil, fmt.Errorf("stuck client: %w", err)
		}
	}
	return out, nil
}

func closeStuck(cs []*stuckClient) {
	for _, c := range cs {
		c.s.conn.Close()
	}
}

// waitStuckGone polls the server's /debug/syncz (its connections, without their resource names, which
// /debug/adsz lists: megabytes per poll at 300 sidecars) until none of cs is listed, at most three send
// timeouts and 30 s. It returns how long after its connect each left, how many were still there, and how
// many were never listed.
func (h *harness) waitStuckGone(cs []*stuckClient) (gone []time.Duration, still, never int) {
	sendTimeout := h.cfg.SendTimeout
	if sendTimeout <= 0 {
		sendTimeout = 5 * time.Second
	}
	deadline := time.Now().Add(3*sendTimeout + 30*time.Second)
	seen := map[string]bool{}
	left := map[string]time.Time{}
	for time.Now().Before(deadline) && len(left) < len(cs) {
		ids, err := h.srv.connectedNodes()
		now := time.Now()
		if err == nil {
			for _, c := range cs {
				switch {
				case ids[c.node]:
					seen[c.node] = true
				case seen[c.node] || now.Sub(c.opened) > sendTimeout:
					// Not listed: gone (or never there, if it was not seen before its send timeout).
					if _, ok := left[c.node]; !ok {
						left[c.node] = now
					}
				}
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	for _, c := range cs {
		at, ok := left[c.node]
		switch {
		case !ok:
			still++
		case !seen[c.node]:
			never++
		default:
			gone = append(gone, at.Sub(c.opened))
		}
	}
	return gone, still, never
}

// connectedNodes returns the node ids of the server's connections (/debug/syncz).
func (s *serverProc) connectedNodes() (map[string]bool, error) {
	resp, err := http.Get("http://" + s.httpAddr + "/debug/syncz")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/debug/syncz: %s", resp.Status)
	}
	var conns []struct {
		NodeID string `json:"nodeId"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&conns); err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(conns))
	for _, c := range conns {
		out[c.NodeID] = true
	}
	return out, nil
}
