package e2e

import (
	"context"
	"crypto/tls"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

const (
	floodBytes   = 60 << 20
	floodCallers = 16
	// peakRSSLimit is what the server may reach under the flood: it idles at about 60 MB, and 16 callers
	// each read whole took it to several GB.
	peakRSSLimit = 300 << 20
)

const (
	caMethod  = "/istio.v1.auth.IstioCertificateService/CreateCertificate"
	adsMethod = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
)

// flood is a request of floodBytes that the client holds only 64 KiB of: every buffer of the slice it
// marshals to is the same chunk of zeros, so 16 callers cost the test nothing while the server sees 60 MiB each.
type flood struct{}

var floodChunk = make([]byte, 64<<10)

// floodCodec marshals a flood and ignores any answer; requests are never decoded here.
type floodCodec struct{}

func (floodCodec) Name() string { return "proto" }

func (floodCodec) Marshal(any) (mem.BufferSlice, error) {
	out := make(mem.BufferSlice, floodBytes/len(floodChunk))
	for i := range out {
		out[i] = mem.SliceBuffer(floodChunk)
	}
	return out, nil
}

func (floodCodec) Unmarshal(mem.BufferSlice, any) error { return nil }

// Callers without credentials each sending a 60 MiB request (to the CA and to ADS on the secure port, and
// to ADS on the plaintext port) are refused without the server buffering their requests: its peak RSS
// stays under peakRSSLimit.
func TestUnauthenticatedFloodDoesNotGrowTheServer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server binary")
	}
	bin := buildSextant(t)
	p := startSextant(t, bin, "--config-dir", moduleRoot(t)+"/examples/bookinfo", "--http-addr", "127.0.0.1:0",
		"--grpc-addr", "127.0.0.1:0", "--secure-grpc-addr", "127.0.0.1:0", "--log-level", "warn")
	idle := p.peakRSS(t)

	secure := credentials.NewTLS(&tls.Config{InsecureSkipVerify: true}) // the attacker trusts anything
	plain := insecure.NewCredentials()
	type call struct {
		name   string
		addr   string
		creds  credentials.TransportCredentials
		method string
		want   codes.Code
	}
	calls := []call{
		{"CA, secure port", p.secAddr, secure, caMethod, codes.Unauthenticated},
		{"ADS, secure port", p.secAddr, secure, adsMethod, codes.Unauthenticated},
		{"ADS, plaintext port", p.grpcAddr, plain, adsMethod, codes.ResourceExhausted},
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(calls)*floodCallers)
	for _, c := range calls {
		for range floodCallers {
			wg.Go(func() {
				err := sendFlood(t.Context(), c.addr, c.creds, c.method)
				if status.Code(err) != c.want {
					errs <- status.Errorf(codes.Unknown, "%s: %v, want %s", c.name, err, c.want)
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(status.Convert(err).Message())
	}
	peak := p.peakRSS(t)
	t.Logf("server peak RSS: %d MB idle, %d MB after %d unauthenticated %d MiB requests", idle>>20, peak>>20,
		len(calls)*floodCallers, floodBytes>>20)
	if peak > peakRSSLimit {
		t.Fatalf("server peak RSS %d MB, over %d MB: the unauthenticated requests were buffered", peak>>20, peakRSSLimit>>20)
	}
}

// sendFlood sends one flood on its own connection to method and returns the status it ends with.
func sendFlood(ctx context.Context, addr string, creds credentials.TransportCredentials, method string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	opt := grpc.ForceCodecV2(floodCodec{})
	if method == caMethod {
		return conn.Invoke(ctx, method, &flood{}, &flood{}, opt)
	}
	stream, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, method, opt)
	if err != nil {
		return err
	}
	_ = stream.SendMsg(&flood{}) // the status comes from the receive side
	return stream.RecvMsg(&flood{})
}
