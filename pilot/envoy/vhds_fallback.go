package envoy

import (
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pkg/loglimit"
)

// vhdsRefusals remembers the nodes that rejected a route configuration or virtual host in the VHDS shape:
// they get their virtual hosts inside the route configurations (istiod's shape) from then on, on that stream
// and the next ones, so one Envoy that cannot take VHDS does not stay without routes.
type vhdsRefusals struct {
	mu     sync.RWMutex
	byNode map[string]string // node id → the rejection's message
	total  atomic.Uint64
}

// maxVHDSRefusals bounds what clients can make the server remember; past it an older node is forgotten (its
// next stream is offered VHDS again, and falls back again if it rejects it).
const maxVHDSRefusals = 100_000

func (r *vhdsRefusals) refused(node string) bool {
	if r.total.Load() == 0 {
		return false // no proxy ever refused: generation takes no lock
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, ok := r.byNode[node]
	return ok
}

// add records node's refusal and reports whether it is new.
func (r *vhdsRefusals) add(node, msg string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.byNode[node]; ok {
		return false
	}
	if r.byNode == nil {
		r.byNode = map[string]string{}
	}
	for old := range r.byNode {
		if len(r.byNode) < maxVHDSRefusals {
			break
		}
		delete(r.byNode, old)
	}
	r.byNode[node] = msg
	r.total.Add(1)
	return true
}

// vhdsRejected is the route and virtual host types' TypePolicy.Rejected: a proxy served VHDS that rejects
// either falls back to inline virtual hosts, and says so among its notes (proxy-status).
func (g *Generators) vhdsRejected(p *model.Proxy, msg string) bool {
	if !g.usesVHDS(p) {
		return false
	}
	msg = loglimit.Cut(msg, 512)
	g.vhdsRefusals.add(p.NodeID, msg)
	p.NoteShape("RDS: virtual hosts inside the route configurations, not over VHDS, which the proxy rejected: " + msg)
	slog.Warn("proxy rejected routes in the VHDS shape: it now gets its virtual hosts inside the route configurations",
		"proxy", loglimit.Text(p.NodeID), "error", msg)
	return true
}

// Policies returns Policies() with the route and virtual host types' fallback from VHDS to inline virtual
// hosts wired to these generators.
func (g *Generators) Policies() map[string]model.TypePolicy {
	out := maps.Clone(Policies())
	for _, t := range []string{RouteType, VirtualHostType} {
		p := out[t]
		p.Rejected = g.vhdsRejected
		out[t] = p
	}
	return out
}

// VHDSRefusals returns how many times a proxy fell back from VHDS since start, and the nodes remembered with
// their rejection's message.
func (g *Generators) VHDSRefusals() (total uint64, byNode map[string]string) {
	g.vhdsRefusals.mu.RLock()
	defer g.vhdsRefusals.mu.RUnlock()
	return g.vhdsRefusals.total.Load(), maps.Clone(g.vhdsRefusals.byNode)
}
