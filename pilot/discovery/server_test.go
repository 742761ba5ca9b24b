package discovery_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sextantmesh/sextant/pilot/discovery"
)

func copyDir(t *testing.T, from string) string {
	t.Helper()
	dir := t.TempDir()
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestServerServesExampleAndFollowsEdits(t *testing.T) {
	dir := copyDir(t, "../../examples/bookinfo")
	srv, err := discovery.NewServer(discovery.Args{ConfigDir: dir, GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		DebounceAfter: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); srv.Wait() }()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + srv.HTTPAddr() + "/ready")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/ready = %d %s", resp.StatusCode, body)
	}
	summary := srv.Summary()
	for _, want := range []string{"7 services", "10 endpoints", "5 Service", "rejected documents: 0"} {
		if !strings.Contains(summary, want) {
			t.Errorf("summary lacks %q:\n%s", want, summary)
		}
	}
	// A new file with a broken document is reported; a new valid service appears.
	extra := "apiVersion: v1\nkind: Service\nmetadata:\n  name: extra\n  namespace: bookinfo\nspec:\n  ports:\n  - name: http\n" +
		"    port: 80\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: broken\nspec:\n  ports: 7\n"
	if err := os.WriteFile(filepath.Join(dir, "60-extra.yaml"), []byte(extra), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		ps := srv.Pipeline.Current()
		if ps.ServiceForHostname("bookinfo", "extra.bookinfo.svc.cluster.local") != nil && len(srv.Rejected()) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("edit not applied; rejected=%v", srv.Rejected())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := srv.Rejected()[0]; r.Name != "broken" || r.Index != 1 || !strings.Contains(r.Field, "ports") {
		t.Errorf("rejection = %+v", r)
	}
}

func TestServerNeedsASource(t *testing.T) {
	if _, err := discovery.NewServer(discovery.Args{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0"}); err == nil {
		t.Fatal("no source accepted")
	}
}

// The config dir vanishing keeps the mesh served, and operators see why in /debug/config_errors and /metrics.
func TestServerKeepsConfigWhenConfigDirVanishes(t *testing.T) {
	dir := copyDir(t, "../../examples/bookinfo")
	srv, err := discovery.NewServer(discovery.Args{ConfigDir: dir, GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		DebounceAfter: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); srv.Wait() }()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	services := srv.Pipeline.Current().ServiceCount()
	get := func(path string) string {
		t.Helper()
		resp, err := http.Get("http://" + srv.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
	// The watcher may not be watching yet when Start returns; rewrite until it reports the loss.
	deadline := time.Now().Add(3 * time.Second)
	for !strings.Contains(get("/debug/config_errors"), dir) {
		if time.Now().After(deadline) {
			t.Fatalf("the vanished config dir is not in /debug/config_errors: %s", get("/debug/config_errors"))
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // past the debounce: a withdrawal would be in the snapshot by now
	if n := srv.Pipeline.Current().ServiceCount(); n != services {
		t.Errorf("%d services served after the config dir vanished, want %d", n, services)
	}
	if m := get("/metrics"); !strings.Contains(m, `sextant_config_rejected{kind=""}`) {
		t.Error("/metrics does not count the rejection")
	}
	if r := get("/ready"); !strings.Contains(r, "ready") {
		t.Errorf("/ready = %s", r)
	}
}
