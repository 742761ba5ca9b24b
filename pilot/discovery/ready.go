package discovery

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/push"
)

// securityKinds are the kinds whose loss opens traffic: a policy that is not served allows what it denied.
var securityKinds = map[string]bool{
	string(config.AuthorizationPolicy): true,
	string(config.PeerAuthentication):  true,
	"RequestAuthentication":            true,
}

// startupBlockers returns the rejections that keep a starting server from becoming ready: rejected security
// objects, and input whose kind cannot be told (an unreadable file or directory, a document that is not
// YAML), which may hold one. A duplicate is not one (the object it repeats is served), nor a FIFO or device
// where a file was expected (it never held config).
func startupBlockers(rejected []*config.Error) []*config.Error {
	var out []*config.Error
	for _, e := range rejected {
		if securityKinds[e.Kind] || (e.Kind == "" && !e.NotConfig) {
			out = append(out, e)
		}
	}
	return out
}

// notReadyReason says why the server is not ready, or "" when it is. Security input rejected at startup keeps
// it not ready until fixed (unless Args.ReadyWithSecurityErrors); once ready, later rejections keep the last
// good objects served instead, so readiness is not withdrawn.
func (s *Server) notReadyReason() string {
	if !s.Pipeline.Ready() {
		return "the first configuration snapshot is not built yet"
	}
	if s.startupCleared.Load() {
		return ""
	}
	if !s.args.ReadyWithSecurityErrors {
		if blockers := startupBlockers(s.Rejected()); len(blockers) > 0 {
			return describeBlockers(blockers)
		}
	}
	s.startupCleared.Store(true)
	return ""
}

func describeBlockers(blockers []*config.Error) string {
	const shown = 10
	var b strings.Builder
	fmt.Fprintf(&b, "%d security input(s) could not be read or were rejected at startup; serving without them "+
		"could allow traffic they deny (fix them, or start with --ready-with-security-errors):", len(blockers))
	for i, e := range blockers {
		if i == shown {
			fmt.Fprintf(&b, "\n  ... and %d more (see /debug/config_errors)", len(blockers)-shown)
			break
		}
		b.WriteString("\n  " + e.Error())
	}
	return b.String()
}

// watchStartupGate logs why the server is held not ready, and once more when it is released.
func (s *Server) watchStartupGate(ctx context.Context) {
	reason := s.notReadyReason()
	if reason == "" {
		return
	}
	s.log.Error("not ready: " + reason)
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		next := s.notReadyReason()
		if next == "" {
			s.log.Info("ready: the security input rejected at startup is fixed")
			return
		}
		if next != reason {
			reason = next
			s.log.Error("not ready: " + reason)
		}
	}
}

// handleReady answers /ready. Why the server is not ready names policy files and objects, so only a
// loopback caller (an exec'd probe, kubectl port-forward) is told; anyone else who reaches the port, as the
// kubelet does, gets the status alone. The reason is also logged (watchStartupGate).
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	reason := s.notReadyReason()
	switch {
	case reason == "":
		fmt.Fprintln(w, "ready")
	case fromLoopback(r):
		http.Error(w, "not ready: "+reason, http.StatusServiceUnavailable)
	default:
		http.Error(w, "not ready", http.StatusServiceUnavailable)
	}
}

func fromLoopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// readyPipeline is the pipeline as the xDS server sees it: no stream is admitted while the server is not
// ready, so no proxy gets config without the security objects that were rejected.
type readyPipeline struct {
	*push.Pipeline
	server *Server
}

func (r readyPipeline) Ready() bool { return r.server.notReadyReason() == "" }

// NotReadyReason is what a refused stream is told.
func (r readyPipeline) NotReadyReason() string { return r.server.notReadyReason() }
