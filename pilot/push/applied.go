package push

import (
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/model"
)

// appliedListed is how many changed objects one "config change applied" line names; the rest are counted.
const appliedListed = 5

// applied sums the snapshots published since the last "config change applied" line.
type applied struct {
	snapshots int
	version   uint64 // the newest
	full      bool
	objects   int
	// The first objects changed, each once, kind/namespace/name: those of config kinds, and of endpoint kinds.
	config, endpoints []string
}

func (a *applied) add(version uint64, full bool, changes []model.Change) {
	a.snapshots++
	a.version = version
	a.full = a.full || full
	a.objects += len(changes)
	for _, ch := range changes {
		list := &a.config
		if config.IsEndpointKind(ch.Key.Kind) {
			list = &a.endpoints
		}
		if name := ch.Key.String(); len(*list) < appliedListed && !slices.Contains(*list, name) {
			*list = append(*list, name)
		}
	}
}

// logApplied writes one line about the changes applied since the last line.
func logApplied(log *slog.Logger, a applied) {
	// Config objects are what an operator changed; endpoints churn on their own: config first.
	listed := append(a.config, a.endpoints...)[:min(appliedListed, len(a.config)+len(a.endpoints))]
	// changes counts object changes, an object changed in two snapshots twice; changed names the first few.
	attrs := []any{"version", a.version, "changes", a.objects, "changed", strings.Join(listed, " ")}
	if a.snapshots > 1 {
		attrs = append(attrs, "snapshots", a.snapshots)
	}
	log.Info("config change applied", append(attrs, "full", a.full)...)
}

// appliedLogEvery is the default Options.LogEvery.
const appliedLogEvery = time.Second
