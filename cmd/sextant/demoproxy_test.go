package main

import (
	"bytes"
	"context"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sextantmesh/sextant/pilot/config"
	server "github.com/sextantmesh/sextant/pilot/discovery"
	"github.com/sextantmesh/sextant/pilot/source/file"
	"github.com/sextantmesh/sextant/pilot/store"
)

const exampleMesh = "../../examples/bookinfo"

// The demo proxy is the sidecar of a pod the example mesh has, with that pod's address, account and labels.
func TestDemoProxyIsAPodOfTheExample(t *testing.T) {
	st := store.New()
	if err := file.New(file.Options{Dir: exampleMesh, Store: st}).Load(); err != nil {
		t.Fatal(err)
	}
	c := st.Get(config.Key{Kind: config.Pod, Namespace: demoPod.Namespace, Name: demoPod.Pod})
	if c == nil {
		t.Fatalf("%s has no Pod %s/%s", exampleMesh, demoPod.Namespace, demoPod.Pod)
	}
	pod := c.Spec.(*corev1.Pod)
	if pod.Status.PodIP != demoPod.IP || pod.Spec.ServiceAccountName != demoPod.ServiceAccount || !maps.Equal(c.Labels, demoPod.Labels) {
		t.Errorf("the example's pod has IP %s, account %s, labels %v; the demo proxy says %s, %s, %v", pod.Status.PodIP,
			pod.Spec.ServiceAccountName, c.Labels, demoPod.IP, demoPod.ServiceAccount, demoPod.Labels)
	}
}

// syncWriter is the demo proxy's output, read while it runs.
type syncWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// What make run shows: the server on the example mesh with the demo proxy connected is reported SYNCED for
// every type, an edit to the example is distributed to it, and it stops when told.
func TestDemoProxySyncsWithTheExampleMesh(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(exampleMesh)); err != nil {
		t.Fatal(err)
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
	url := "http://" + srv.HTTPAddr()

	opts := demoPod
	opts.Addr, opts.Retry = srv.GRPCAddr(), 50*time.Millisecond
	var out syncWriter
	proxyCtx, stopProxy := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- runDemoProxy(proxyCtx, opts, &out) }()

	want := []string{demoPod.Pod + "." + demoPod.Namespace, "sidecar", "SYNCED", "SYNCED", "SYNCED", "SYNCED"}
	var status string
	if !eventually(10*time.Second, func() bool {
		status, _ = run(t, "proxy-status", "--server", url)
		lines := strings.Split(strings.TrimSpace(status), "\n")
		return len(lines) == 2 && slicesHavePrefix(strings.Fields(lines[1]), want)
	}) {
		t.Fatalf("proxy-status never showed %v:\n%s\ndemo proxy:\n%s", want, status, out.String())
	}
	for _, typ := range []string{"CDS", "EDS", "LDS", "RDS"} {
		if !strings.Contains(out.String(), "demo-proxy: "+typ+" +") || strings.Contains(out.String(), "NACK") {
			t.Errorf("the demo proxy did not ACK %s:\n%s", typ, out.String())
		}
	}

	// The walk-through of the README: edit the example, wait for the edit to reach the proxy.
	routing := filepath.Join(dir, "20-routing.yaml")
	b, err := os.ReadFile(routing)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(b), "timeout: 5s", "timeout: 7s", 1)
	if edited == string(b) {
		t.Fatal("20-routing.yaml has no timeout: 5s to edit")
	}
	writeAtomically(t, routing, edited)
	got, err := run(t, "wait", "--for", "distribution", "VirtualService", "reviews.bookinfo", "--generation", "2",
		"--timeout", "10s", "--server", url)
	if err != nil || !strings.Contains(got, "1 of 1 proxies ACKed") {
		t.Errorf("wait --for distribution: %v\n%s\ndemo proxy:\n%s", err, got, out.String())
	}

	stopProxy()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the demo proxy ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the demo proxy did not stop")
	}
}

func writeAtomically(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(content), fs.FileMode(0o644)); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

func slicesHavePrefix(s, prefix []string) bool {
	return len(s) >= len(prefix) && slices.Equal(s[:len(prefix)], prefix)
}

func eventually(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// demo-proxy names its proxy as the other commands do: POD.NAMESPACE or a sidecar's node id, to the same pod.
func TestDemoProxyArgumentForms(t *testing.T) {
	byPod, byNode := demoPod, demoPod
	if err := byPod.setProxy("reviews-v1-0002.bookinfo"); err != nil {
		t.Fatal(err)
	}
	if err := byNode.setProxy("sidecar~10.1.0.30~reviews-v1-0002.bookinfo~bookinfo.svc.cluster.local"); err != nil {
		t.Fatal(err)
	}
	if byPod.Pod != "reviews-v1-0002" || byPod.Namespace != "bookinfo" || byNode.Pod != byPod.Pod || byNode.Namespace != byPod.Namespace ||
		byNode.IP != "10.1.0.30" || byNode.nodeID() != "sidecar~10.1.0.30~reviews-v1-0002.bookinfo~bookinfo.svc.cluster.local" {
		t.Errorf("POD.NAMESPACE gave %+v, the node id %+v", byPod, byNode)
	}
	for _, bad := range []string{"reviews", "router~10.1.0.1~gw.istio-system~istio-system.svc.cluster.local", "a~b"} {
		if _, err := run(t, "demo-proxy", bad); err == nil || !strings.Contains(err.Error(), "want POD.NAMESPACE") {
			t.Errorf("demo-proxy %s: %v", bad, err)
		}
	}
}
