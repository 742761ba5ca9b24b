package xds

import (
	"time"

	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pkg/loglimit"
)

// ConnectionHook is told of every stream whose proxy was accepted (node parsed, identity checked), before
// the stream is served, and of its end: the auto-registration of VM workloads (pilot/autoregister) starts
// and ends with the agent's connection, as istiod's does.
type ConnectionHook interface {
	// Connected may refuse the stream: the error's gRPC status is sent (PermissionDenied if it has none).
	// It runs on the stream's goroutine before anything is served, so it may take a moment (an API write).
	Connected(ConnectionEvent) error
	// Disconnected is called once for each stream Connected accepted, after it has ended.
	Disconnected(ConnectionEvent)
}

// ReportHook, when the ConnectionHook implements it, hears the requests of the types ReportTypes names:
// reports a client sends on its stream rather than subscriptions (Istio's agent sends its workload's health
// so, as istio.v1.HealthInformation). They are neither answered nor tracked.
type ReportHook interface {
	// ReportTypes is read once, when the server is made.
	ReportTypes() []string
	// Report runs on the stream's goroutine; failure is the request's error_detail message, "" when it has
	// none (a success).
	Report(ev ConnectionEvent, typeURL string, failed bool, failure string)
}

// report hands a request of a reported type to the hook and says whether it was one.
func (c *Connection) report(typeURL string, detail *rpcstatus.Status) bool {
	if !c.srv.reportTypes[typeURL] {
		return false
	}
	c.srv.reports.Report(ConnectionEvent{ID: c.id, Proxy: c.proxy, ConnectedAt: c.connectedAt}, typeURL, detail != nil, detail.GetMessage())
	return true
}

// ConnectionEvent is one stream as a ConnectionHook sees it.
type ConnectionEvent struct {
	// ID is the connection's id, as ConnectionStatus.ID.
	ID          string
	Proxy       *model.Proxy
	ConnectedAt time.Time
}

// connectHook tells the hook of c; a refusal is returned as the stream's status, after the client has been
// heard out (see refuse). On success it returns the call that tells the hook of the stream's end.
func (s *Server) connectHook(c *Connection, drain func() error) (func(), error) {
	hook := s.opts.ConnectionHook
	if hook == nil {
		return func() {}, nil
	}
	ev := ConnectionEvent{ID: c.id, Proxy: c.proxy, ConnectedAt: c.connectedAt}
	if err := hook.Connected(ev); err != nil {
		s.refused.Add(1)
		s.connLog.Warn("rejected stream: registration", "proxy", loglimit.Text(c.proxy.NodeID), "error", err)
		st, ok := status.FromError(err)
		if !ok {
			st = status.New(codes.PermissionDenied, err.Error())
		}
		return nil, s.refuse(c.ctx, true, drain, st.Err())
	}
	return func() { hook.Disconnected(ev) }, nil
}
