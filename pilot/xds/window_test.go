package xds

import (
	"context"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
)

// frameCountingConn hands everything the client reads to an HTTP/2 frame parser as well.
type frameCountingConn struct {
	net.Conn
	tee *io.PipeWriter
}

func (c *frameCountingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		_, _ = c.tee.Write(b[:n])
	}
	return n, err
}

func (c *frameCountingConn) Close() error {
	_ = c.tee.Close()
	return c.Conn.Close()
}

// A proxy ACKing pushes gets no PING from the server for each ACK: the server's request window is fixed, so
// gRPC's bandwidth probing (a window update and a PING per burst of incoming data) is off.
func TestServerDoesNotProbeBandwidthOnRequests(t *testing.T) {
	e := newEnv(t, snapshot{ClusterType: {"a": "a1"}})
	var pings, frames atomic.Int64
	dialer := func(ctx context.Context, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		r, w := io.Pipe()
		go func() {
			fr := http2.NewFramer(io.Discard, r)
			for {
				f, err := fr.ReadFrame()
				if err != nil {
					_, _ = io.Copy(io.Discard, r) // keep the connection's reads from blocking
					return
				}
				frames.Add(1)
				if p, ok := f.(*http2.PingFrame); ok && !p.IsAck() {
					pings.Add(1)
				}
			}
		}()
		return &frameCountingConn{Conn: conn, tee: w}, nil
	}
	c := e.sotw(t, grpc.WithContextDialer(dialer))
	ask(c, sidecar("pod", "ns1"), ClusterType, nil, nil)
	r := c.recv()
	for i := range 20 {
		ask(c, nil, ClusterType, nil, r) // ACK
		e.set(ClusterType, "a", "a"+strconv.Itoa(i+2))
		r = c.recv()
		time.Sleep(5 * time.Millisecond) // a probe's answer would arrive in between
	}
	ask(c, nil, ClusterType, nil, r)
	time.Sleep(50 * time.Millisecond)
	if frames.Load() == 0 {
		t.Fatal("no HTTP/2 frame was parsed from the server's side of the connection")
	}
	if n := pings.Load(); n > 0 {
		t.Errorf("the server sent %d PINGs while the proxy ACKed 21 responses; want none", n)
	}
}
