package discovery

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sextantmesh/sextant/pilot/debug"
)

// registerDebug adds the operator endpoints (/metrics, /debug/...) to the HTTP mux and hooks distribution
// tracking into the transport, the pipeline and the store. It runs in NewServer, before anything loads.
func (s *Server) registerDebug() {
	tokens := s.tokens
	if tokens == nil {
		tokens = s.args.TokenAuthenticator
	}
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
		Access: &debug.Access{Tokens: tokens,
			AdminNamespaces: append([]string{s.Mesh.RootNamespace}, s.args.DebugAdminNamespaces...)},
	}).Register(s.mux)
}
