package main

import (
	"fmt"
	"time"
)

// connectionAge watches the delta proxies for 2.5 × --max-connection-age (the harness passes the flag to
// the server when this scenario runs) without changing any config: every stream should end once its
// connection is older than the age plus the server's grace, and its proxy resume on a new connection with
// initial_resource_versions (resume.go), receiving next to nothing since nothing changed. It reports when
// each proxy first moved (from the window's start), how old the streams were when the GOAWAY came and when
// they ended, and the bytes resumed streams received against a full initial fetch.
func (h *harness) connectionAge() (*Result, error) {
	var ps []*proxy
	for _, p := range h.all() {
		if p.delta {
			ps = append(ps, p)
		}
	}
	if len(ps) == 0 || h.cfg.MaxConnectionAge <= 0 {
		return nil, nil
	}
	window := h.cfg.MaxConnectionAge * 5 / 2
	h.quiet(h.cfg.Quiet, 5*time.Second)
	for _, p := range ps {
		p.takeMoves()
	}
	st0, fleet0 := h.srv.stats(), procCPUSeconds("self", h.srv.clkTck)
	b0, r0, t0 := h.bytes.Load(), h.responses.Load(), h.typeBytes()
	start := time.Now()
	for time.Since(start) < window {
		time.Sleep(100 * time.Millisecond)
		for _, p := range ps {
			p.mu.Lock()
			err := p.err
			p.mu.Unlock()
			if err != nil {
				return nil, fmt.Errorf("proxy %d: %w", p.id, err)
			}
		}
	}
	st1 := h.srv.stats()
	var first, ages, goaways []time.Duration
	reconnects, most, told, fullBytes := 0, 0, 0, int64(0)
	for _, p := range ps {
		moves := p.takeMoves()
		reconnects += len(moves)
		most = max(most, len(moves))
		if len(moves) > 0 {
			first = append(first, moves[0].ended.Sub(start))
		}
		for _, m := range moves {
			ages = append(ages, m.age)
			if m.goaway > 0 {
				goaways = append(goaways, m.goaway)
			}
		}
		// A GOAWAY on a stream still open: the server asked it to move and it has not (yet).
		if at := p.goawayAt.Load(); at != 0 {
			told++
			p.mu.Lock()
			goaways = append(goaways, time.Unix(0, at).Sub(p.resumed.streamStart))
			p.mu.Unlock()
		}
		p.mu.Lock()
		fullBytes += p.initialBytes
		p.mu.Unlock()
	}
	bytes := h.bytes.Load() - b0
	r := h.summarize("connection-age", []sample{{lats: first, missed: len(ps) - len(first), interest: len(ps), bytes: bytes,
		responses: h.responses.Load() - r0, cpu: st1.CPUSeconds - st0.CPUSeconds,
		fleetCPU: procCPUSeconds("self", h.srv.clkTck) - fleet0, byType: typeDiff(h.typeBytes(), t0)}})
	full := float64(fullBytes) / float64(len(ps))
	r.Figures = map[string]float64{
		"windowSeconds":           window.Seconds(),
		"proxiesMoved":            float64(len(first)),
		"reconnects":              float64(reconnects),
		"mostReconnectsOneProxy":  float64(most),
		"streamAgeAtEndP50Ms":     pct(ages, 50),
		"streamAgeAtEndMaxMs":     pct(ages, 100),
		"streamAgeAtGoawayP50Ms":  pct(goaways, 50),
		"streamAgeAtGoawayMaxMs":  pct(goaways, 100),
		"goawayButStillOpen":      float64(told),
		"fullFetchBytesPerProxy":  full,
		"bytesPerResumedStream":   0,
		"resumedToFullFetchRatio": 0,
		"maxConnectionAgeSeconds": h.cfg.MaxConnectionAge.Seconds(),
	}
	if reconnects > 0 {
		r.Figures["bytesPerResumedStream"] = float64(bytes) / float64(reconnects)
		if full > 0 {
			r.Figures["resumedToFullFetchRatio"] = float64(bytes) / float64(reconnects) / full
		}
	}
	r.Note = fmt.Sprintf("%d delta proxies watched for %s (--max-connection-age %s, no config change): p50/p99/max are when each first "+
		"moved, from the window's start; missed: never moved. %d reconnects; streams ended at age p50 %s; "+
		"%d streams got a GOAWAY and are still open; "+
		"a resumed stream received %s on average, a full initial fetch is %s",
		len(ps), window, h.cfg.MaxConnectionAge, reconnects, msText(pct(ages, 50)), told,
		mb(r.Figures["bytesPerResumedStream"]), mb(full))
	return r, nil
}

func msText(ms float64) string {
	return (time.Duration(ms * float64(time.Millisecond))).Round(time.Millisecond).String()
}
