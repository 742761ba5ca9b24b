package main

import (
	"slices"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// resumeState is what a proxy's streams after the first did. Guarded by the proxy's mu.
type resumeState struct {
	streamStart time.Time // when the current stream was opened
	moves       []move    // since the harness last took them
}

// move is one stream's end and its successor.
type move struct {
	ended  time.Time     // when the old stream ended
	age    time.Duration // how long the old stream had lived
	goaway time.Duration // its age when its connection got the GOAWAY
	opened time.Time     // when the new stream's requests were sent
}

func (p *proxy) noteGoAway() { p.goawayAt.CompareAndSwap(0, time.Now().UnixNano()) }

// resumeAttempts bounds the dials after a stream ends; Envoy retries forever, the harness gives up so a
// server that is gone fails the run instead of hanging it.
const resumeAttempts = 20

// resume replaces an ended delta stream as Envoy does: after a jittered back-off (Envoy's first retry is
// within its 500 ms base interval) it dials a new connection and, per type, sends everything it holds as
// initial_resource_versions and, for the types it names resources of, every name it is subscribed to; the
// wildcard types (CDS, LDS; ztunnel's two) send no names, as Envoy's legacy wildcard does.
func (p *proxy) resume(cause error) (*h2Stream, error) {
	ended := time.Now()
	p.mu.Lock()
	closed := p.closed
	mv := move{ended: ended, age: ended.Sub(p.resumed.streamStart)}
	if at := p.goawayAt.Load(); at != 0 {
		mv.goaway = time.Unix(0, at).Sub(p.resumed.streamStart)
	}
	backoff := time.Duration(p.rng.Int64N(int64(500 * time.Millisecond)))
	p.mu.Unlock()
	if closed || p.h.ctx.Err() != nil {
		return nil, cause
	}
	p.goawayAt.Store(0)
	var stream *h2Stream
	var err error
	for attempt := range resumeAttempts {
		select {
		case <-p.h.ctx.Done():
			return nil, p.h.ctx.Err()
		case <-time.After(backoff):
		}
		if stream, err = dialDelta(p.addr, p.tls, p.token); err == nil {
			break
		}
		backoff = min(30*time.Second, 500*time.Millisecond<<min(attempt+1, 6))
	}
	if err != nil {
		return nil, err
	}
	stream.onGoAway = p.noteGoAway
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		stream.conn.Close()
		return nil, cause
	}
	reqs := p.resumeRequests()
	p.conn = stream.conn
	mv.opened = time.Now()
	p.resumed.streamStart = mv.opened
	p.resumed.moves = append(p.resumed.moves, mv)
	p.mu.Unlock()
	for _, r := range reqs {
		if err := stream.Send(r); err != nil {
			return nil, err
		}
	}
	return stream, nil
}

// resumeRequests are the first requests of a new stream, in the order the types were first subscribed.
// Called with p.mu held.
func (p *proxy) resumeRequests() []*discovery.DeltaDiscoveryRequest {
	types := []string{cdsType, edsType, ldsType, rdsType}
	if p.vhdsOn {
		types = append(types, vhdsType)
	}
	if p.kind == kindZtunnel {
		types = []string{addrType, authzType}
	}
	var reqs []*discovery.DeltaDiscoveryRequest
	for _, t := range types {
		req := &discovery.DeltaDiscoveryRequest{TypeUrl: t, InitialResourceVersions: map[string]string{}}
		for name, in := range p.res[t] {
			if in.version != "" {
				req.InitialResourceVersions[name] = in.version
			}
		}
		if subs := p.subs[t]; len(subs) > 0 {
			req.ResourceNamesSubscribe = make([]string, 0, len(subs))
			for n := range subs {
				req.ResourceNamesSubscribe = append(req.ResourceNamesSubscribe, n)
			}
			slices.Sort(req.ResourceNamesSubscribe)
		} else if t == edsType || t == rdsType {
			continue // nothing subscribed yet: Envoy has no such subscription
		}
		reqs = append(reqs, req)
	}
	if len(reqs) > 0 {
		reqs[0].Node = p.node
	}
	return reqs
}

// takeMoves returns and clears the proxy's stream moves since the last call.
func (p *proxy) takeMoves() []move {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.resumed.moves
	p.resumed.moves = nil
	return m
}

// stop closes the proxy's connection for good; the end of its stream is no error.
func (p *proxy) stop() {
	p.mu.Lock()
	p.closed = true
	c := p.conn
	p.mu.Unlock()
	if c != nil {
		_ = c.Close() // an error means the server closed it first
	}
}
