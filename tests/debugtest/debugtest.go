// Package debugtest runs a discovery server on loopback ports with test ADS clients, for tests of the
// debug views, the CLI and the dashboard.
package debugtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	server "github.com/sextantmesh/sextant/pilot/discovery"
)

// WaitFor bounds every wait: generous, since -race on a small machine is slow.
const WaitFor = 10 * time.Second

// Env is a running discovery server.
type Env struct {
	Server *server.Server
	Dir    string
	// URL is the HTTP base, e.g. http://127.0.0.1:41234.
	URL string
}

// Start writes files (name → content) into a temp dir and serves it with a short debounce.
func Start(t testing.TB, files map[string]string) *Env {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := server.NewServer(server.Args{ConfigDir: dir, GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		DebounceAfter: 10 * time.Millisecond, DebounceMax: 200 * time.Millisecond, SendTimeout: 5 * time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := srv.Start(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); srv.Wait() })
	return &Env{Server: srv, Dir: dir, URL: "http://" + srv.HTTPAddr()}
}

// Write replaces a file in the config dir; the server picks it up. The replacement is atomic (a rename):
// written in place, a watcher slowed by load could read the file truncated and publish a snapshot without
// its objects before the one with the new content.
func (e *Env) Write(t testing.TB, name, content string) {
	t.Helper()
	p := filepath.Join(e.Dir, name)
	if err := os.WriteFile(p+".tmp", []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		t.Fatal(err)
	}
}

// Get fetches path and returns status and body.
func (e *Env) Get(t testing.TB, path string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(e.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

// GetJSON fetches path, expects 200 and decodes into v.
func (e *Env) GetJSON(t testing.TB, path string, v any) {
	t.Helper()
	code, body := e.Get(t, path)
	if code != http.StatusOK {
		t.Fatalf("GET %s = %d: %s", path, code, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v\n%s", path, err, body)
	}
}

// Eventually polls cond until it holds or WaitFor passes.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(WaitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Proxy is a state-of-the-world ADS client that answers every response by itself: it ACKs, or NACKs the
// types told to, or holds responses unanswered while Hold is on.
type Proxy struct {
	t      testing.TB
	Node   *core.Node
	stream grpc.BidiStreamingClient[discovery.DiscoveryRequest, discovery.DiscoveryResponse]

	mu       sync.Mutex
	names    map[string][]string // type URL → subscribed names
	nack     map[string]string   // type URL → NACK message
	hold     bool
	held     []*discovery.DiscoveryResponse
	accepted map[string]*discovery.DiscoveryResponse // latest ACKed response by type
	sendMu   sync.Mutex
}

// SidecarNode returns the Istio node id of a sidecar POD in NS.
func SidecarNode(pod, ns string) string {
	return "sidecar~10.0.0.1~" + pod + "." + ns + "~" + ns + ".svc.cluster.local"
}

// Connect opens an ADS stream for nodeID. Subscribe starts the types.
func (e *Env) Connect(t testing.TB, nodeID string) *Proxy {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+e.Server.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); _ = cc.Close() })
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{t: t, Node: &core.Node{Id: nodeID}, stream: stream, names: map[string][]string{}, nack: map[string]string{},
		accepted: map[string]*discovery.DiscoveryResponse{}}
	go p.read()
	return p
}

func (p *Proxy) send(req *discovery.DiscoveryRequest) {
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	_ = p.stream.Send(req) // an ended stream shows in the server's views
}

func (p *Proxy) read() {
	for {
		resp, err := p.stream.Recv()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.hold {
			p.held = append(p.held, resp)
			p.mu.Unlock()
			continue
		}
		p.mu.Unlock()
		p.answer(resp)
	}
}

func (p *Proxy) answer(resp *discovery.DiscoveryResponse) {
	p.mu.Lock()
	msg, nack := p.nack[resp.TypeUrl]
	names := p.names[resp.TypeUrl]
	good := p.accepted[resp.TypeUrl]
	if !nack {
		p.accepted[resp.TypeUrl] = resp
	}
	p.mu.Unlock()
	req := &discovery.DiscoveryRequest{TypeUrl: resp.TypeUrl, ResourceNames: names, ResponseNonce: resp.Nonce}
	if nack {
		req.ErrorDetail = &rpcstatus.Status{Code: 3, Message: msg}
		if good != nil {
			req.VersionInfo = good.VersionInfo
		}
	} else {
		req.VersionInfo = resp.VersionInfo
	}
	p.send(req)
}

// Subscribe asks for typeURL (names nil: wildcard).
func (p *Proxy) Subscribe(typeURL string, names ...string) {
	p.mu.Lock()
	p.names[typeURL] = names
	p.mu.Unlock()
	p.send(&discovery.DiscoveryRequest{Node: p.Node, TypeUrl: typeURL, ResourceNames: names})
}

// NACK makes the proxy reject every later response of typeURL with msg ("" accepts again).
func (p *Proxy) NACK(typeURL, msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if msg == "" {
		delete(p.nack, typeURL)
	} else {
		p.nack[typeURL] = msg
	}
}

// Hold stops answering responses until Release.
func (p *Proxy) Hold() {
	p.mu.Lock()
	p.hold = true
	p.mu.Unlock()
}

// Release answers the held responses and answers at once from now on.
func (p *Proxy) Release() {
	p.mu.Lock()
	held := p.held
	p.held, p.hold = nil, false
	p.mu.Unlock()
	for _, r := range held {
		p.answer(r)
	}
}

// Held returns how many responses are waiting for an answer.
func (p *Proxy) Held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.held)
}

// Syncz is the part of /debug/syncz tests look at.
type Syncz []struct {
	ID    string `json:"id"`
	Types []struct {
		Type   string `json:"type"`
		Status string `json:"status"`
		Error  string `json:"error"`
	} `json:"types"`
}

// Status returns the sync status of proxy id's type (short name), "" when absent.
func (s Syncz) Status(id, typ string) (string, string) {
	for _, p := range s {
		if p.ID != id {
			continue
		}
		for _, t := range p.Types {
			if t.Type == typ {
				return t.Status, t.Error
			}
		}
	}
	return "", ""
}

// WaitStatus waits until proxy id's type has status.
func (e *Env) WaitStatus(t testing.TB, id, typ, status string) {
	t.Helper()
	Eventually(t, fmt.Sprintf("%s %s to be %s", id, typ, status), func() bool {
		var s Syncz
		e.GetJSON(t, "/debug/syncz", &s)
		got, _ := s.Status(id, typ)
		return got == status
	})
}
