package xds

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sextantmesh/sextant/pkg/loglimit"
)

// roundLogEvery is the least time between two "config pushed" lines.
const roundLogEvery = time.Second

// rounds sums what pushes send until the push queue drains (a round), then hands the round to the log,
// where rounds closer than roundLogEvery are summed up in one line.
type rounds struct {
	mu  sync.Mutex
	cur round
	log *loglimit.Fold[round]
}

// round is what one or more push rounds sent.
type round struct {
	rounds    int
	version   uint64 // the newest snapshot sent
	proxies   map[string]struct{}
	responses map[string]int // by type, short: the type URL's last part
	bytes     int64
}

func newRounds(log *slog.Logger) *rounds {
	return &rounds{log: loglimit.NewFold(roundLogEvery, func(r round) { logRound(log, r) })}
}

// sent counts a response of a push. Called by the connection's goroutine after the send.
func (r *rounds) sent(connID, typeURL string, version uint64, size int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur.proxies == nil {
		r.cur.proxies, r.cur.responses = map[string]struct{}{}, map[string]int{}
	}
	r.cur.proxies[connID] = struct{}{}
	r.cur.responses[typeURL[strings.LastIndexByte(typeURL, '.')+1:]]++
	r.cur.bytes += int64(size)
	r.cur.version = max(r.cur.version, version)
}

// end closes the round, if it sent anything. Called when the push queue has drained.
func (r *rounds) end() {
	r.mu.Lock()
	cur := r.cur
	r.cur = round{}
	r.mu.Unlock()
	if len(cur.proxies) == 0 {
		return
	}
	r.log.Add(func(sum *round) {
		if sum.proxies == nil {
			sum.proxies, sum.responses = map[string]struct{}{}, map[string]int{}
		}
		sum.rounds++
		sum.version = max(sum.version, cur.version)
		maps.Copy(sum.proxies, cur.proxies)
		for t, n := range cur.responses {
			sum.responses[t] += n
		}
		sum.bytes += cur.bytes
	})
}

func logRound(log *slog.Logger, r round) {
	types := slices.Sorted(maps.Keys(r.responses))
	for i, t := range types {
		types[i] = fmt.Sprintf("%s:%d", t, r.responses[t])
	}
	attrs := []any{"version", r.version, "proxies", len(r.proxies), "responses", strings.Join(types, ","), "bytes", r.bytes}
	if r.rounds > 1 {
		attrs = append(attrs, "rounds", r.rounds)
	}
	log.Info("config pushed", attrs...)
}
