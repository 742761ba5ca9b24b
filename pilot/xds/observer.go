package xds

import (
	"time"

	"github.com/sextantmesh/sextant/pilot/model"
)

// Push results reported to an Observer.
const (
	PushSent      = "sent"      // a response went out
	PushUnchanged = "unchanged" // nothing new for this client (delta), so nothing was sent
	PushError     = "error"     // generation or send failed
)

// Observer is told what the transport does, for metrics and for tracking which proxies run which snapshot.
// Methods are called concurrently for different connections but one at a time and in order for one
// (under the connection's turn), Closed last; they must be quick and must not block. connID is
// ConnectionStatus.ID.
type Observer interface {
	// Sent: a response for typeURL built from snapshot version went out. req is the push it belongs to, nil
	// when it answers the proxy's own request (a new or changed subscription).
	Sent(connID string, proxy *model.Proxy, typeURL, nonce string, version uint64, req *model.PushRequest)
	// Pushed: a push of snapshot version handled typeURL with result (PushSent, PushUnchanged, PushError);
	// took covers generation and sending.
	Pushed(connID, typeURL string, version uint64, req *model.PushRequest, result string, took time.Duration)
	// Acked: the proxy accepted (nack false) or rejected (nack true, with reason) the response with nonce.
	Acked(connID, typeURL, nonce string, nack bool, reason string)
	// Closed: the connection ended.
	Closed(connID string)
}

// observePush runs one type's push and reports it. Under the turn (it reads w's sent nonce unlocked, which
// only the turn's holder writes).
func (c *Connection) observePush(w *watch, push *model.PushContext, req *model.PushRequest, run func() error) error {
	o := c.observe(w, push, req)
	err := run()
	c.pushing = nil
	o.done(err != nil || c.genFailed)
	return err
}

// pushObservation is one type's push being observed; done reports it. A push whose removals are held for
// the end of the push (see pushDelta) is done only once they are sent.
type pushObservation struct {
	c      *Connection
	w      *watch
	push   *model.PushContext
	req    *model.PushRequest
	start  time.Time
	before string
}

// observe starts observing a type's push. Under the turn.
func (c *Connection) observe(w *watch, push *model.PushContext, req *model.PushRequest) pushObservation {
	c.genFailed, c.pushing = false, req
	if c.srv.opts.Observer == nil {
		return pushObservation{}
	}
	return pushObservation{c: c, w: w, push: push, req: req, start: time.Now(), before: w.NonceSent}
}

// done reports the push: failed if generating or sending failed, sent if a response went out.
func (o pushObservation) done(failed bool) {
	if o.c == nil {
		return
	}
	result := PushUnchanged
	switch {
	case failed:
		result = PushError
	case o.w.NonceSent != o.before:
		result = PushSent
	}
	o.c.srv.opts.Observer.Pushed(o.c.id, o.w.TypeURL, o.push.Version, o.req, result, time.Since(o.start))
}

// observeSent reports a response; during observePush it belongs to that push, otherwise to the proxy's request.
func (c *Connection) observeSent(w *watch, nonce string, push *model.PushContext) {
	if obs := c.srv.opts.Observer; obs != nil {
		obs.Sent(c.id, c.proxy, w.TypeURL, nonce, push.Version, c.pushing)
	}
}

func (c *Connection) observeAck(w *watch, nonce string, nack bool, reason string) {
	if obs := c.srv.opts.Observer; obs != nil {
		obs.Acked(c.id, w.TypeURL, nonce, nack, reason)
	}
}

// SetObserver sets Options.Observer after construction. Call it before the server serves streams.
func (s *Server) SetObserver(o Observer) { s.opts.Observer = o }
