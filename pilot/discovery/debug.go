package discovery

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sextantmesh/sextant/pilot/debug"
)

// registerDebug adds the operator endpoints (/metrics, /debug/...) to the HTTP mux and hooks distribution
// tracking into the transport, the pipeline and the store. It runs in NewServer, before anything loads.
func (s *Server) registerDebug() {
	debug.New(debug.Sources{
		Store:      s.Store,
		Pipeline:   s.Pipeline,
		XDS:        s.XDS,
		Generators: s.Generators,
		Mesh:       s.Mesh,
		Rejected:   s.Rejected,
		Warnings:   s.Warnings,
		Collectors: []prometheus.Collector{s.JWKS.Collector()},
		Logger:     s.log,
	}).Register(s.mux)
}
