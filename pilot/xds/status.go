package xds

import (
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sextantmesh/sextant/pilot/model"
)

// ConnectionStatus describes one connection for debug views.
type ConnectionStatus struct {
	ID          string
	ProxyID     string // POD.NAMESPACE
	NodeID      string
	Type        model.ProxyType
	Namespace   string
	Delta       bool
	Peer        string
	ConnectedAt time.Time
	// Watched holds a copy of each subscription, by type URL.
	Watched []model.WatchedResource
	// Notes say where the proxy is served otherwise than its type and version would have it, and why.
	Notes []string
}

// Connections returns the open connections, by id.
func (s *Server) Connections() []ConnectionStatus {
	conns := s.connections()
	out := make([]ConnectionStatus, 0, len(conns))
	for _, c := range conns {
		out = append(out, c.status())
	}
	slices.SortFunc(out, func(a, b ConnectionStatus) int { return strings.Compare(a.ID, b.ID) })
	return out
}

type typeCounters struct {
	responses, pushes, nacks, bytes atomic.Uint64
}

// TypeCounters count what happened for one type URL.
type TypeCounters struct {
	Responses uint64 // responses sent, for requests and pushes
	Pushes    uint64 // pushes started (a delta push with no change sends no response)
	NACKs     uint64
	BytesSent uint64 // serialized response size
}

// Counters are totals since the server started.
type Counters struct {
	ByType       map[string]TypeCounters
	Connected    int    // open now
	Connects     uint64 // streams accepted
	Disconnects  uint64
	Refused      uint64 // streams refused: not ready, shutting down, bad node, rate limit
	SendTimeouts uint64 // connections closed because the proxy did not read
	PushRequests uint64 // requests received from the pipeline
	PushesQueued uint64 // per-connection pushes enqueued (before merging)
	GenerateErrs uint64
	UnknownTypes uint64 // types requested that no generator serves (counted once per connection)
	QueueLen     int    // connections waiting for a push now
}

// Counters returns a snapshot of the counters.
func (s *Server) Counters() Counters {
	out := Counters{
		ByType:       make(map[string]TypeCounters, len(s.byType)),
		Connects:     s.connects.Load(),
		Disconnects:  s.disconnects.Load(),
		Refused:      s.refused.Load(),
		SendTimeouts: s.sendTimeouts.Load(),
		PushRequests: s.pushRequests.Load(),
		PushesQueued: s.pushesQueued.Load(),
		GenerateErrs: s.genErrors.Load(),
		UnknownTypes: s.unknownTy.Load(),
		QueueLen:     s.queue.Len(),
	}
	for _, t := range slices.Sorted(maps.Keys(s.byType)) {
		tc := s.byType[t]
		out.ByType[t] = TypeCounters{Responses: tc.responses.Load(), Pushes: tc.pushes.Load(), NACKs: tc.nacks.Load(),
			BytesSent: tc.bytes.Load()}
	}
	s.mu.RLock()
	out.Connected = len(s.conns)
	s.mu.RUnlock()
	return out
}
