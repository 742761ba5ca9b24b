package xds

import (
	"context"
	"time"
)

// How long a refused stream is still read before its status is sent: until the client has been quiet for
// refusalQuiet after its first request, and never past refusalMax from the refusal.
const (
	refusalQuiet = 100 * time.Millisecond
	refusalMax   = 2 * time.Second
)

// refuse returns err, the status that ends a stream the server will not serve, once the client has stopped
// sending. A status that arrives while the client is still sending reaches it as a bare EOF from its next
// send, and a client that acts on whichever of its send and receive fails first (Istio's agent does)
// then reports "EOF" instead of the reason. So the client's requests are read and dropped until it has
// sent its first (unless firstRead says it already has) and then nothing for refusalQuiet. recv reads and
// drops one request; it returns an error once the stream is over. The wait ends early when ctx ends or
// the server shuts down.
func (s *Server) refuse(ctx context.Context, firstRead bool, recv func() error, err error) error {
	got := make(chan struct{}, 1)
	ended := make(chan struct{})
	// This goroutine's last recv returns when the stream ends, which the handler's return brings about.
	go func() {
		defer close(ended)
		for recv() == nil {
			select {
			case got <- struct{}{}:
			default:
			}
		}
	}()
	limit := time.NewTimer(refusalMax)
	defer limit.Stop()
	// Runs once the first request is in: a stopped timer's channel never fires.
	quiet := time.NewTimer(refusalQuiet)
	defer quiet.Stop()
	if !firstRead {
		quiet.Stop()
	}
	for {
		select {
		case <-got:
			quiet.Reset(refusalQuiet)
		case <-quiet.C:
			return err
		case <-limit.C:
			return err
		case <-ended:
			return err
		case <-ctx.Done():
			return err
		case <-s.base.Done():
			return err
		}
	}
}

// refuseUnread returns err, the status of a stream refused before its client was authenticated, without
// reading anything from it: gRPC reads a message whole, up to the server's limit, so reading an
// unauthenticated client's requests let it make the server hold that much per stream. Unread, a request
// holds at most the stream's flow-control window (requestWindow). The status is sent refusalMax after the
// refusal, or when the client goes: a client's first requests fit in the window meanwhile, so one that
// sends while refused still gets the reason from its receive side rather than an EOF from its send.
func (s *Server) refuseUnread(ctx context.Context, err error) error {
	limit := time.NewTimer(refusalMax)
	defer limit.Stop()
	select {
	case <-limit.C:
	case <-ctx.Done():
	case <-s.base.Done():
	}
	return err
}
