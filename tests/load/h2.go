package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// h2Stream is one delta ADS call on its own HTTP/2 connection, spoken by the harness itself, as Envoy's
// event loop does: the proxy's goroutine reads a response off the socket, handles it, and its ACK and any
// new subscriptions leave in one write before the next read. gRPC-Go's client moves every message through
// a reader goroutine and every request through a writer goroutine; on 300 connections that made the
// harness spend as much CPU per churn change as the server, on the same two cores.
//
// Not safe for concurrent use: one goroutine sends and receives.
type h2Stream struct {
	conn net.Conn
	bw   *bufio.Writer
	fr   *http2.Framer

	// The server's flow-control windows for what this side sends, and its initial stream window.
	sendConn, sendStream, peerInitial int64
	maxFrame                          int
	window                            int64 // this side's, opened again once half of it is used

	// Receiving: the gRPC message being assembled (need bytes long), complete messages not yet returned,
	// and the bytes received since this side last opened its windows again.
	head     [5]byte
	headLen  int
	msg      []byte
	need     int
	ready    [][]byte
	received int64
	err      error // the stream is over: every later call returns it
	// The buffer of the response Recv returned last is taken again for a later message: a churn's
	// thousands of small responses then allocate next to nothing, and the harness's collector, whose mark
	// phases stalled the simulated proxies every 15 s or so, seldom runs.
	lent, spare []byte

	scratch []byte
	// onGoAway, when set, is called on the server's first GOAWAY: the connection is closing and the stream
	// should move (it may still run until the server's grace ends).
	onGoAway func()
	goaway   bool
}

// h2StreamID is the only stream on the connection.
const h2StreamID = 1

// dialDelta connects to addr and opens the delta ADS stream. Windows are Envoy's defaults (envoyWindow) and,
// as in Envoy, fixed: no bandwidth-probing PINGs.
// With tlsCfg (nil: plaintext) the connection is TLS, as to the secure port; a token is sent as the
// stream's authorization metadata (Bearer), as Istio's agent sends its service-account token.
func dialDelta(addr string, tlsCfg *tls.Config, token string) (*h2Stream, error) {
	return dialDeltaWindow(addr, envoyWindow, tlsCfg, token)
}

// dialDeltaWindow is dialDelta with HTTP/2 stream and connection windows of window bytes (at least 65,535,
// the protocol's default).
func dialDeltaWindow(addr string, window uint32, tlsCfg *tls.Config, token string) (*h2Stream, error) {
	var conn net.Conn
	var err error
	scheme := "http"
	if tlsCfg != nil {
		conn, err = tls.Dial("tcp", addr, tlsCfg)
		scheme = "https"
	} else {
		conn, err = net.Dial("tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	bw := bufio.NewWriterSize(conn, 32<<10)
	fr := http2.NewFramer(bw, bufio.NewReaderSize(conn, 64<<10))
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	s := &h2Stream{conn: conn, bw: bw, fr: fr, sendConn: 65535, sendStream: 65535, peerInitial: 65535, maxFrame: 16384,
		window: int64(window)}

	var hdr bytes.Buffer
	enc := hpack.NewEncoder(&hdr)
	fields := []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: scheme}, {Name: ":path", Value: deltaMethod},
		{Name: ":authority", Value: addr}, {Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
		{Name: "user-agent", Value: "sextant-load"},
	}
	if token != "" {
		fields = append(fields, hpack.HeaderField{Name: "authorization", Value: "Bearer " + token, Sensitive: true})
	}
	for _, f := range fields {
		if err := enc.WriteField(f); err != nil {
			conn.Close()
			return nil, err
		}
	}
	_, err = bw.WriteString(http2.ClientPreface)
	if err == nil {
		err = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: window},
			http2.Setting{ID: http2.SettingEnablePush, Val: 0})
	}
	if err == nil && window > 65535 {
		err = fr.WriteWindowUpdate(0, window-65535)
	}
	if err == nil {
		err = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: h2StreamID, BlockFragment: hdr.Bytes(), EndHeaders: true})
	}
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	return s, nil
}

// Send writes req as one gRPC message. It is buffered: the next Recv sends it, with whatever else was
// sent since, in one write. When the server's window is short it reads until the server opens it.
func (s *h2Stream) Send(req *discovery.DeltaDiscoveryRequest) error {
	if s.err != nil {
		return s.err
	}
	b := append(s.scratch[:0], 0, 0, 0, 0, 0) // not compressed; the length follows
	b, err := proto.MarshalOptions{}.MarshalAppend(b, req)
	if err != nil {
		return err
	}
	binary.BigEndian.PutUint32(b[1:5], uint32(len(b)-5))
	s.scratch = b
	for len(b) > 0 {
		n := int(min(int64(len(b)), int64(s.maxFrame), s.sendConn, s.sendStream))
		if n <= 0 {
			if err := s.bw.Flush(); err != nil {
				return s.fail(err)
			}
			if err := s.readFrame(); err != nil {
				return err
			}
			continue
		}
		if err := s.fr.WriteData(h2StreamID, false, b[:n]); err != nil {
			return s.fail(err)
		}
		s.sendConn -= int64(n)
		s.sendStream -= int64(n)
		b = b[n:]
	}
	return nil
}

// flush sends what Send buffered without waiting for a response.
func (s *h2Stream) flush() error {
	if err := s.bw.Flush(); err != nil {
		return s.fail(err)
	}
	return nil
}

// maxSpare bounds the buffer kept for reuse: churn's responses fit, a cold start's megabytes are not kept.
const maxSpare = 64 << 10

// Recv sends what Send buffered, then returns the next response. Its payloads are valid until the next Recv.
func (s *h2Stream) Recv() (*deltaResponse, error) {
	if s.lent != nil {
		if cap(s.lent) <= maxSpare && cap(s.lent) > cap(s.spare) {
			s.spare = s.lent
		}
		s.lent = nil
	}
	if s.bw.Buffered() > 0 {
		if err := s.bw.Flush(); err != nil {
			return nil, s.fail(err)
		}
	}
	for len(s.ready) == 0 {
		if s.err != nil {
			return nil, s.err
		}
		if err := s.readFrame(); err != nil {
			return nil, err
		}
	}
	b := s.ready[0]
	s.ready[0] = nil
	s.ready = s.ready[1:]
	s.lent = b
	return parseDeltaResponse(b)
}

func (s *h2Stream) fail(err error) error {
	if s.err == nil {
		s.err = err
		s.conn.Close()
	}
	return s.err
}

// readFrame reads and handles one frame.
func (s *h2Stream) readFrame() error {
	if s.err != nil {
		return s.err
	}
	f, err := s.fr.ReadFrame()
	if err != nil {
		return s.fail(err)
	}
	switch f := f.(type) {
	case *http2.DataFrame:
		if f.StreamID != h2StreamID {
			return s.fail(fmt.Errorf("http2: DATA on stream %d", f.StreamID))
		}
		if err := s.take(f.Data()); err != nil {
			return s.fail(err)
		}
		// Flow control counts the whole payload, padding included. Opened again in large steps, as
		// Envoy does once half the window is used.
		s.received += int64(f.Length)
		if s.received >= s.window/2 {
			if err := s.writeControl(func() error {
				if err := s.fr.WriteWindowUpdate(0, uint32(s.received)); err != nil {
					return err
				}
				return s.fr.WriteWindowUpdate(h2StreamID, uint32(s.received))
			}); err != nil {
				return err
			}
			s.received = 0
		}
		if f.StreamEnded() {
			return s.fail(errors.New("http2: the server ended the stream without trailers"))
		}
	case *http2.MetaHeadersFrame:
		if f.StreamEnded() { // trailers, or a trailers-only response
			return s.fail(grpcStatus(f))
		}
		if st := f.PseudoValue("status"); st != "200" {
			return s.fail(fmt.Errorf("http2: response status %s", st))
		}
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
			s.sendStream += int64(v) - s.peerInitial
			s.peerInitial = int64(v)
		}
		if v, ok := f.Value(http2.SettingMaxFrameSize); ok {
			s.maxFrame = int(v)
		}
		return s.writeControl(s.fr.WriteSettingsAck)
	case *http2.PingFrame:
		if !f.IsAck() {
			return s.writeControl(func() error { return s.fr.WritePing(true, f.Data) })
		}
	case *http2.WindowUpdateFrame:
		if f.StreamID == 0 {
			s.sendConn += int64(f.Increment)
		} else {
			s.sendStream += int64(f.Increment)
		}
	case *http2.RSTStreamFrame:
		return s.fail(fmt.Errorf("http2: stream reset (%v)", f.ErrCode))
	case *http2.GoAwayFrame:
		// The server finishes the stream or closes the connection (gRPC-Go: after its max-connection-age
		// grace); the stream runs until then.
		if !s.goaway {
			s.goaway = true
			if s.onGoAway != nil {
				s.onGoAway()
			}
		}
	}
	return nil
}

// writeControl writes a frame the server waits for at once.
func (s *h2Stream) writeControl(write func() error) error {
	if err := write(); err != nil {
		return s.fail(err)
	}
	if err := s.bw.Flush(); err != nil {
		return s.fail(err)
	}
	return nil
}

// take adds DATA payload to the gRPC messages being read (a 5-byte prefix, then the message).
func (s *h2Stream) take(b []byte) error {
	for len(b) > 0 {
		if s.msg == nil {
			n := copy(s.head[s.headLen:], b)
			s.headLen += n
			b = b[n:]
			if s.headLen < len(s.head) {
				return nil
			}
			if s.head[0] != 0 {
				return errors.New("grpc: compressed message (none was asked for)")
			}
			s.headLen = 0
			s.need = int(binary.BigEndian.Uint32(s.head[1:]))
			if cap(s.spare) >= s.need {
				s.msg, s.spare = s.spare[:0], nil
			} else {
				s.msg = make([]byte, 0, s.need)
			}
			if s.need == 0 {
				s.ready = append(s.ready, s.msg)
				s.msg = nil
				continue
			}
		}
		n := min(len(b), s.need-len(s.msg))
		s.msg = append(s.msg, b[:n]...)
		b = b[n:]
		if len(s.msg) == s.need {
			s.ready = append(s.ready, s.msg)
			s.msg = nil
		}
	}
	return nil
}

// grpcStatus is the error the trailers report (io.EOF for OK).
func grpcStatus(f *http2.MetaHeadersFrame) error {
	code, msg := "", ""
	for _, h := range f.RegularFields() {
		switch h.Name {
		case "grpc-status":
			code = h.Value
		case "grpc-message":
			msg = h.Value
		}
	}
	switch code {
	case "0":
		return io.EOF
	case "":
		return fmt.Errorf("http2: stream ended with HTTP status %s and no grpc-status", f.PseudoValue("status"))
	}
	c, err := strconv.ParseUint(code, 10, 32)
	if err != nil {
		return fmt.Errorf("http2: grpc-status %q", code)
	}
	return status.Error(codes.Code(c), msg)
}
