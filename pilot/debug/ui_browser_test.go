package debug_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sextantmesh/sextant/tests/debugtest"
)

// chromium returns the browser to drive, or skips the test saying why. scripts/install-test-deps.sh
// installs it.
func chromium(t *testing.T) string {
	for _, p := range []string{os.Getenv("SEXTANT_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skip("chromium not installed (run scripts/install-test-deps.sh as root); skipping the dashboard browser test")
	return ""
}

func headless(t *testing.T, browser string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
		"--user-data-dir=" + t.TempDir(),
		// Let the page's fetches and first render finish before the DOM is dumped.
		"--virtual-time-budget=5000"}
	cmd := exec.CommandContext(ctx, browser, append(base, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", browser, err, stderr.String())
	}
	return out
}

// TestDashboardInBrowser loads /debug/ui in headless Chromium from a live server with a synced proxy and
// one that NACKed, and checks both are rendered with their states and the NACK reason.
func TestDashboardInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("the dashboard in headless Chromium: -short")
	}
	browser := chromium(t)
	env, _, _ := debugtest.StartScenario(t)
	url := env.URL + "/debug/ui"

	dom := string(headless(t, browser, "--dump-dom", url))
	row := func(proxy string) string {
		m := regexp.MustCompile(`(?s)<tr data-proxy="` + regexp.QuoteMeta(proxy) + `">(.*?)</tr>`).FindStringSubmatch(dom)
		if m == nil {
			t.Fatalf("no row for %s in the rendered page:\n%s", proxy, dom)
		}
		return m[1]
	}
	cell := func(r, typ string) string {
		m := regexp.MustCompile(`<td class="([^"]*)" data-type="` + typ + `"[^>]*>([^<]*)</td>`).FindStringSubmatch(r)
		if m == nil {
			t.Fatalf("no %s cell in %s", typ, r)
		}
		return m[2]
	}
	a, b := row(proxyA), row(proxyB)
	for typ, want := range map[string]string{"cds": "SYNCED", "lds": "SYNCED", "eds": "NOT SENT", "wds": "NOT SENT"} {
		if got := cell(a, typ); got != want {
			t.Errorf("A %s = %q, want %q", typ, got, want)
		}
	}
	if got := cell(b, "lds"); got != "ERROR" {
		t.Errorf("B lds = %q", got)
	}
	if !strings.Contains(b, "LDS: listener 0: bad filter chain") {
		t.Errorf("B's NACK reason not shown: %s", b)
	}
	for _, want := range []string{`id="pushes"`, "full", `id="convergence"`, "40-broken.yaml", "updated "} {
		if !strings.Contains(dom, want) {
			t.Errorf("page lacks %q", want)
		}
	}

	shot := filepath.Join(t.ArtifactDir(), "dashboard.png")
	headless(t, browser, "--screenshot="+shot, "--window-size=1280,900", url)
	if st, err := os.Stat(shot); err != nil || st.Size() == 0 {
		t.Fatalf("no screenshot: %v", err)
	}
	t.Logf("dashboard screenshot: %s (kept with go test -artifacts -outputdir DIR)", shot)
}

// TestDashboardPagesAMillionErrors: with a million rejected documents the dashboard shows the first page
// of them and says how many there are, linking to the paged view.
func TestDashboardPagesAMillionErrors(t *testing.T) {
	browser := chromium(t)
	hs := boundedServer(t, manyErrors(1_000_000), nil)
	dom := string(headless(t, browser, "--dump-dom", hs.URL+"/debug/ui"))
	for _, want := range []string{"first 200 of 1000000 rejected shown", `href="/debug/config_errors?limit=1000"`, "updated "} {
		if !strings.Contains(dom, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if rows := strings.Count(dom, "/config/huge.yaml #"); rows != 200 {
		t.Errorf("%d rejected rows rendered, want 200", rows)
	}
}
