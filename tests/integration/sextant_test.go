//go:build integration

package integration

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sextantmesh/sextant/pilot/discovery"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/source/kube"
	"github.com/sextantmesh/sextant/pilot/store"
)

// syncBuffer is a log sink the test can read while Sextant writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// lines returns the log lines containing every one of words.
func (s *syncBuffer) lines(words ...string) []string {
	var out []string
	for _, l := range strings.Split(s.String(), "\n") {
		ok := l != ""
		for _, w := range words {
			ok = ok && strings.Contains(l, w)
		}
		if ok {
			out = append(out, l)
		}
	}
	return out
}

func newLogger(t testing.TB) (*slog.Logger, *syncBuffer) {
	buf := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			s := buf.String()
			if len(s) > 8000 {
				s = s[len(s)-8000:]
			}
			t.Logf("--- Sextant log (tail) ---\n%s", s)
		}
	})
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelInfo})), buf
}

// sextant is a full discovery server (the `sextant discovery --kubeconfig` of the CLI) in the test process.
type sextant struct {
	srv    *discovery.Server
	log    *syncBuffer
	cancel context.CancelFunc
	// Pushes counts the PushRequests the pipeline handed to the xDS server; Full the full ones.
	Pushes, Full atomic.Int64
	SyncTook     time.Duration
}

// startSextant starts the discovery server on loopback, watching the cluster in kubeconfig, and returns once
// its informers synced and the first snapshot is published.
func startSextant(t testing.TB, kubeconfig string) *sextant {
	t.Helper()
	return startSextantWithMesh(t, kubeconfig, "")
}

// startSextantWithMesh is startSextant with the mesh config file meshConfig ("" for the defaults).
func startSextantWithMesh(t testing.TB, kubeconfig, meshConfig string) *sextant {
	t.Helper()
	logger, buf := newLogger(t)
	srv, err := discovery.NewServer(discovery.Args{Kubeconfig: kubeconfig, GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		DebounceAfter: 50 * time.Millisecond, DebounceMax: time.Second, Logger: logger, MeshConfigFile: meshConfig})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sx := &sextant{srv: srv, log: buf, cancel: cancel}
	srv.Pipeline.Subscribe(func(r *model.PushRequest) {
		sx.Pushes.Add(1)
		if r.Full {
			sx.Full.Add(1)
		}
	})
	t.Cleanup(func() { cancel(); srv.Wait() })
	start := time.Now()
	timer := time.AfterFunc(2*time.Minute, cancel)
	err = srv.Start(ctx)
	timer.Stop()
	if err != nil {
		t.Fatalf("sextant did not start: %v", err)
	}
	sx.SyncTook = time.Since(start)
	return sx
}

func (sx *sextant) current() *model.PushContext { return sx.srv.Pipeline.Current() }

// source runs only the Kubernetes source on a store, with its own logger.
type source struct {
	src   *kube.Source
	store *store.Store
	log   *syncBuffer
}

func startSource(t testing.TB, cfg *rest.Config, crdPoll time.Duration) *source {
	t.Helper()
	logger, buf := newLogger(t)
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st := store.New()
	src, err := kube.New(kube.Options{KubeClient: kc, Dynamic: dc, Store: st, Logger: logger, CRDPollInterval: crdPoll})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { src.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return &source{src: src, store: st, log: buf}
}

// proxy forwards TCP to target and can refuse connections for a while (Pause), as a partitioned network does.
type proxy struct {
	t      testing.TB
	target string
	addr   string
	mu     sync.Mutex
	lis    net.Listener
	conns  map[net.Conn]bool
}

func newProxy(t testing.TB, target string) *proxy {
	p := &proxy{t: t, target: target, conns: map[net.Conn]bool{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = lis.Addr().String()
	p.serve(lis)
	t.Cleanup(p.Pause)
	return p
}

func (p *proxy) serve(lis net.Listener) {
	p.mu.Lock()
	p.lis = lis
	p.mu.Unlock()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go p.forward(c)
		}
	}()
}

func (p *proxy) forward(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[up] = true, true
	p.mu.Unlock()
	go func() { _, _ = io.Copy(up, c); up.Close() }()
	_, _ = io.Copy(c, up)
	c.Close()
}

// Pause closes every connection and the listener: clients get "connection refused" until Resume.
func (p *proxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lis != nil {
		p.lis.Close()
		p.lis = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// Resume listens again on the same address.
func (p *proxy) Resume() {
	var lis net.Listener
	var err error
	for range 50 {
		if lis, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		p.t.Fatal(err)
	}
	p.serve(lis)
}
