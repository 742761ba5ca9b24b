package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/spf13/cobra"

	"github.com/sextantmesh/sextant/pilot/debug"
	"github.com/sextantmesh/sextant/tests/debugtest"
)

// run executes the CLI with args and returns what it printed and its error (non-nil: exit status 1).
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := &cobra.Command{Use: "sextant", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(proxyStatusCommand(), waitCommand(), configDumpCommand(), validateCommand(), translateCommand(), versionCommand(),
		demoProxyCommand())
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestProxyStatus(t *testing.T) {
	env, _, _ := debugtest.StartScenario(t)
	out, err := run(t, "proxy-status", "--server", env.URL)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("proxy-status:\n%s", out)
	}
	if f := strings.Fields(lines[0]); strings.Join(f, " ") != "NAME TYPE CDS LDS EDS RDS WDS" {
		t.Errorf("header = %q", lines[0])
	}
	// Sorted by id: cart-v1.shop, then reviews-v1.bookinfo.
	if !strings.HasPrefix(lines[1], "cart-v1.shop") || !strings.Contains(lines[1], "SYNCED") ||
		!strings.Contains(lines[1], "ERROR (listener 0: bad filter chain)") || !strings.Contains(lines[1], "NOT SENT") {
		t.Errorf("B = %q", lines[1])
	}
	if f := strings.Fields(lines[2]); len(f) < 4 || f[0] != "reviews-v1.bookinfo" || f[1] != "sidecar" ||
		f[2] != "SYNCED" || f[3] != "SYNCED" || !strings.Contains(lines[2], "NOT SENT") {
		t.Errorf("A = %q", lines[2])
	}

	out, err = run(t, "proxy-status", "reviews-v1.bookinfo", "--server", env.URL, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var sync []debug.ProxySync
	if err := json.Unmarshal([]byte(out), &sync); err != nil || len(sync) != 1 || sync[0].Types[1].Status != debug.Synced {
		t.Errorf("json: %v %s", err, out)
	}
	if _, err := run(t, "proxy-status", "nobody.nowhere", "--server", env.URL); err == nil {
		t.Error("unknown proxy accepted")
	}
	if _, err := run(t, "proxy-status", "--server", "127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "cannot reach") {
		t.Errorf("unreachable server: %v", err)
	}
}

func TestWait(t *testing.T) {
	env, a, _ := debugtest.StartScenario(t)

	// The VirtualService in bookinfo: only A depends on it, and A ACKed it.
	out, err := run(t, "wait", "--server", env.URL, "--for", "distribution", "VirtualService", "reviews.bookinfo", "--timeout", "5s")
	if err != nil || !strings.Contains(out, "generation 1 of VirtualService/bookinfo/reviews: 1 of 1 proxies ACKed") {
		t.Fatalf("wait after ACK: %v\n%s", err, out)
	}

	// A holds the next push: the wait times out, then succeeds once A answers.
	a.Hold()
	env.Write(t, "20-routing.yaml", debugtest.RoutingV2)
	debugtest.Eventually(t, "the push to reach A", func() bool { return a.Held() >= 2 })
	debugtest.Eventually(t, "generation 2 in a snapshot", func() bool {
		var d debug.Distribution
		env.GetJSON(t, "/debug/distribution?kind=VirtualService&name=reviews&namespace=bookinfo", &d)
		return d.Generation == 2 && d.SnapshotVersion >= 2
	})
	_, err = run(t, "wait", "--server", env.URL, "VirtualService", "reviews", "-n", "bookinfo", "--generation", "2", "--timeout", "300ms")
	if err == nil || !strings.Contains(err.Error(), "timed out after 300ms") ||
		!strings.Contains(err.Error(), "pending: reviews-v1.bookinfo") {
		_, body := env.Get(t, "/debug/distribution?kind=VirtualService&name=reviews&namespace=bookinfo")
		_, pz := env.Get(t, "/debug/pushz")
		t.Fatalf("wait while held: %v\n%s\n%.1500s", err, body, pz)
	}
	a.Release()
	if out, err := run(t, "wait", "--server", env.URL, "VirtualService", "reviews.bookinfo", "--generation", "2",
		"--timeout", "5s"); err != nil {
		t.Fatalf("wait after release: %v\n%s", err, out)
	}

	// The cart Service is in B's namespace and B NACKs listeners: the wait fails at once.
	_, err = run(t, "wait", "--server", env.URL, "Service", "cart.shop", "--timeout", "5s")
	if err == nil || !strings.Contains(err.Error(), "rejected") ||
		!strings.Contains(err.Error(), "cart-v1.shop (lds: listener 0: bad filter chain)") {
		t.Fatalf("wait with a NACK: %v", err)
	}
	// Half the relevant proxies is not enough when one NACKed either: NACK always fails.
	if _, err := run(t, "wait", "--server", env.URL, "Namespace", "shop", "--threshold", "0.5", "--timeout", "1s"); err == nil {
		t.Fatal("NACK ignored with a threshold")
	}

	// Deletion: the object is gone once the file no longer has it.
	if err := os.Remove(filepath.Join(env.Dir, "30-security.yaml")); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, "wait", "--server", env.URL, "--for", "delete", "AuthorizationPolicy", "allow-shop.bookinfo",
		"--timeout", "5s"); err != nil {
		t.Fatalf("wait for delete: %v\n%s", err, out)
	}
	if _, err := run(t, "wait", "--server", env.URL, "--for", "delete", "VirtualService", "reviews.bookinfo",
		"--timeout", "200ms"); err == nil ||
		!strings.Contains(err.Error(), "still exists") {
		t.Fatalf("delete of an existing object: %v", err)
	}
	if _, err := run(t, "wait", "--server", env.URL, "Frobnicator", "x"); err == nil || !strings.Contains(err.Error(), "unknown kind") {
		t.Errorf("unknown kind: %v", err)
	}
}

func TestConfigDump(t *testing.T) {
	env, _, _ := debugtest.StartScenario(t)
	out, err := run(t, "config-dump", "reviews-v1.bookinfo", "--server", env.URL, "--type", "cds")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "proxy reviews-v1.bookinfo") || !strings.Contains(out, "reviews.bookinfo.svc.cluster.local") ||
		strings.Contains(out, "LDS") {
		t.Errorf("config-dump:\n%s", out)
	}
	out, err = run(t, "config-dump", "reviews-v1.bookinfo", "--server", env.URL, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var dump debug.ConfigDump
	if err := json.Unmarshal([]byte(out), &dump); err != nil || len(dump.Configs) != 2 {
		t.Errorf("json: %v %+v", err, dump)
	}
	if _, err := run(t, "config-dump", "nobody.nowhere", "--server", env.URL); err == nil ||
		!strings.Contains(err.Error(), "no connected proxy") {
		t.Errorf("unknown proxy: %v", err)
	}
}

func TestValidateMatchesServer(t *testing.T) {
	files := debugtest.Scenario()
	// A second bad file: a bad field in an Istio kind.
	files["50-bad-dr.yaml"] = "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata:\n  name: dr\n  namespace: shop\nspec:\n" +
		"  host: cart\n  trafficPolicy:\n    loadBalancer:\n      simple: SOMETIMES\n"
	env := debugtest.Start(t, files)
	var serverErrs []struct{ Error string }
	env.GetJSON(t, "/debug/config_errors", &serverErrs)
	if len(serverErrs) != 2 {
		t.Fatalf("server errors = %+v", serverErrs)
	}

	out, err := run(t, "validate", "-f", env.Dir)
	if err == nil {
		t.Fatal("validate accepted rejected config")
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasSuffix(lines[2], "2 documents rejected") {
		t.Fatalf("validate:\n%s", out)
	}
	for i, e := range serverErrs {
		if lines[i] != e.Error {
			t.Errorf("validate says\n  %s\nthe server says\n  %s", lines[i], e.Error)
		}
	}

	// One file at a time, JSON, and a clean file passes.
	out, err = run(t, "validate", "-f", filepath.Join(env.Dir, "50-bad-dr.yaml"), "-o", "json")
	var res struct {
		Rejected []struct{ Field, Error string }
	}
	if err == nil || json.Unmarshal([]byte(out), &res) != nil || len(res.Rejected) != 1 || res.Rejected[0].Error != serverErrs[1].Error {
		t.Errorf("validate one file: %v\n%s", err, out)
	}
	if out, err := run(t, "validate", "-f", filepath.Join(env.Dir, "10-services.yaml")); err != nil ||
		!strings.Contains(out, "3 objects accepted, 0 documents rejected") {
		t.Errorf("clean file: %v\n%s", err, out)
	}
}

// A sidecar's VHDS state shows in its RDS column: the worse of the two.
func TestProxyStatusFoldsVHDSIntoRDS(t *testing.T) {
	var b strings.Builder
	err := proxyStatusTable(&b, []debug.ProxySync{
		{ID: "a.ns", Type: "sidecar", Types: []debug.TypeSync{{Type: "rds", Status: debug.Synced},
			{Type: "vhds", Status: debug.Error, Error: "duplicate domain"}}},
		{ID: "b.ns", Type: "sidecar", Types: []debug.TypeSync{{Type: "rds", Status: debug.Synced}, {Type: "vhds", Status: debug.Synced}}},
		{ID: "c.ns", Type: "sidecar", Types: []debug.TypeSync{{Type: "rds", Status: debug.Stale}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	// The other columns are NOT SENT: what is left is the RDS cell.
	for i, want := range []string{"ERROR (duplicate domain)", "SYNCED", "STALE"} {
		rest := strings.ReplaceAll(lines[i+1], debug.NotSent, "")
		if f := strings.Fields(rest); strings.Join(f[2:], " ") != want {
			t.Errorf("%s: RDS %q, want %q", lines[i+1], strings.Join(f[2:], " "), want)
		}
	}
}

// validate accepts the durations istiod and the CRD schema accept ("5m", "24h", "500ms"), as the server does.
func TestValidateGoDurations(t *testing.T) {
	dir := t.TempDir()
	doc := "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: r, namespace: shop}\nspec:\n  hosts: [r]\n" +
		"  http:\n  - timeout: 5m\n    retries: {attempts: 2, perTryTimeout: 500ms}\n    route:\n    - destination: {host: r}\n" +
		"---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: r, namespace: shop}\nspec:\n  host: r\n" +
		"  trafficPolicy: {connectionPool: {tcp: {idleTimeout: 24h}}}\n"
	if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "validate", "-f", dir)
	if err != nil || !strings.Contains(out, "2 objects accepted, 0 documents rejected") {
		t.Errorf("validate: %v\n%s", err, out)
	}
}

// A field accepted but not implemented: validate lists it after the errors and exits 0; the server lists the
// same text in /debug/config_errors marked as a warning, in /debug/push_status for the dashboard, and counts it.
func TestValidateWarnings(t *testing.T) {
	files := debugtest.Scenario()
	files["60-stat-prefix.yaml"] = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: stats, namespace: shop}\n" +
		"spec:\n  hosts: [cart]\n  tcp:\n  - match: [{sourceSubnet: 10.1.0.0/16}]\n    route: [{destination: {host: cart}}]\n"
	env := debugtest.Start(t, files)
	var serverErrs []struct {
		Warning bool
		Field   string
		Error   string
	}
	env.GetJSON(t, "/debug/config_errors", &serverErrs)
	if len(serverErrs) != 2 || serverErrs[0].Warning || !serverErrs[1].Warning || serverErrs[1].Field != "spec.tcp[0].match[0].sourceSubnet" {
		t.Fatalf("config_errors = %+v", serverErrs)
	}
	var ps debug.PushStatus
	env.GetJSON(t, "/debug/push_status", &ps)
	if len(ps.Warnings) != 1 || ps.Warnings[0].Name != "stats" {
		t.Errorf("push_status warnings = %+v", ps.Warnings)
	}
	if _, body := env.Get(t, "/metrics"); !strings.Contains(string(body), `sextant_config_warnings{kind="VirtualService"} 1`) {
		t.Errorf("no warnings metric in /metrics")
	}

	out, err := run(t, "validate", "-f", filepath.Join(env.Dir, "60-stat-prefix.yaml"))
	if err != nil {
		t.Fatalf("validate failed on a warning only: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || lines[0] != "warning: "+serverErrs[1].Error ||
		!strings.HasPrefix(lines[1], "1 object accepted, 0 documents rejected, 1 warning ") {
		t.Errorf("validate:\n%s\nserver: %s", out, serverErrs[1].Error)
	}
	// With an error too, the error comes first and the exit status is non-zero.
	out, err = run(t, "validate", "-f", env.Dir)
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if err == nil || len(lines) != 3 || lines[0] != serverErrs[0].Error || !strings.HasPrefix(lines[1], "warning: ") {
		t.Errorf("validate dir: %v\n%s", err, out)
	}
	out, _ = run(t, "validate", "-f", env.Dir, "-o", "json")
	var res struct{ Rejected, Warnings []struct{ Warning bool } }
	if json.Unmarshal([]byte(out), &res) != nil || len(res.Rejected) != 1 || len(res.Warnings) != 1 || !res.Warnings[0].Warning {
		t.Errorf("validate json:\n%s", out)
	}
}

// The commands that read /debug send --token (or the token in --token-file, read at each request) as a
// Bearer token, as the server's debug access asks of callers off loopback.
func TestDebugCommandsSendTheToken(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer good-token" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"debug endpoints answer loopback callers, or callers with a service-account token"}`))
			return
		}
		switch r.URL.Path {
		case "/debug/syncz":
			_, _ = w.Write([]byte(`[]`))
		case "/debug/config_dump":
			_, _ = w.Write([]byte(`{"configs":[]}`))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("good-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	if _, err := run(t, "proxy-status", "--server", srv.URL, "--token", "good-token"); err != nil {
		t.Errorf("proxy-status --token: %v", err)
	}
	if _, err := run(t, "proxy-status", "--server", srv.URL, "--token-file", tokenFile); err != nil {
		t.Errorf("proxy-status --token-file: %v", err)
	}
	if _, err := run(t, "config-dump", "cart-v1.shop", "--server", srv.URL, "--token-file", tokenFile); err != nil &&
		strings.Contains(err.Error(), "401") {
		t.Errorf("config-dump --token-file: %v", err)
	}
	_, err := run(t, "proxy-status", "--server", srv.URL)
	if err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "--token") {
		t.Errorf("without a token: %v, want the 401 and a hint to give --token", err)
	}
	if _, err := run(t, "proxy-status", "--server", srv.URL, "--token", "a", "--token-file", tokenFile); err == nil {
		t.Error("--token and --token-file together accepted")
	}
	if _, err := run(t, "proxy-status", "--server", srv.URL, "--token-file", filepath.Join(t.TempDir(), "none")); err == nil ||
		!strings.Contains(err.Error(), "--token-file") {
		t.Errorf("a missing token file: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) < 4 || seen[0] != "Bearer good-token" || seen[1] != "Bearer good-token" || seen[2] != "Bearer good-token" ||
		seen[len(seen)-1] != "" {
		t.Errorf("Authorization headers sent: %q", seen)
	}
}

// A VirtualService delegating to one the validated files do not define is warned (it may live in the
// cluster), naming the object and spec.http[N].delegate, in the server's words; a delegate defined in
// another -f path resolves.
func TestValidateWarnsMissingDelegate(t *testing.T) {
	files := debugtest.Scenario()
	files["70-root.yaml"] = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: root, namespace: shop}\n" +
		"spec:\n  hosts: [cart]\n  http:\n  - match: [{uri: {prefix: /a}}]\n    delegate: {name: cart-a}\n" +
		"  - delegate: {name: cart-b, namespace: shop}\n"
	env := debugtest.Start(t, files)
	var serverErrs []struct {
		Warning bool
		Field   string
		Error   string
	}
	env.GetJSON(t, "/debug/config_errors", &serverErrs)
	var want []string
	for _, e := range serverErrs {
		if e.Warning && strings.HasSuffix(e.Field, ".delegate") {
			want = append(want, "warning: "+e.Error)
		}
	}
	if len(want) != 2 {
		t.Fatalf("server config_errors = %+v, want two delegate warnings", serverErrs)
	}
	root := filepath.Join(env.Dir, "70-root.yaml")
	out, err := run(t, "validate", "-f", root)
	if err != nil {
		t.Fatalf("validate failed on warnings only: %v\n%s", err, out)
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(l, "warning: ") {
			got = append(got, l)
		}
	}
	if !slices.Equal(got, want) || !strings.Contains(got[0], "spec.http[0].delegate") || !strings.Contains(got[1], "spec.http[1].delegate") {
		t.Errorf("validate warnings\n  %s\nthe server's\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}

	// The delegates in a second path: nothing to warn about.
	other := t.TempDir()
	doc := "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: cart-a, namespace: shop}\nspec:\n  http:\n" +
		"  - route: [{destination: {host: cart}}]\n" +
		"---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: cart-b, namespace: shop}\nspec:\n  http:\n" +
		"  - route: [{destination: {host: cart}}]\n"
	if err := os.WriteFile(filepath.Join(other, "d.yaml"), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = run(t, "validate", "-f", root, "-f", other)
	if err != nil || strings.Contains(out, "warning:") || !strings.Contains(out, "3 objects accepted, 0 documents rejected") {
		t.Errorf("validate with the delegates: %v\n%s", err, out)
	}
}
