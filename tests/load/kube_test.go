//go:build integration

package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sextantmesh/sextant/tests/kubeenv"
)

// TestKubeSource runs the harness with -source kube on a small mesh: a real etcd and kube-apiserver (from
// make test-env; skipped without them unless SEXTANT_REQUIRE_APISERVER is set), the mesh created and each
// change made through the API, Sextant on --kubeconfig. Run by make test-integration.
func TestKubeSource(t *testing.T) {
	kubeenv.SkipIfMissing(t)
	cfg := Config{
		Source:        "kube",
		Shape:         meshShape{Services: 6, PodsPerService: 3, Namespaces: 2, Ambient: true, Policies: true, RoutingEvery: 3},
		Sidecars:      6,
		Ztunnels:      1,
		Delta:         true,
		EnvoyVersion:  [2]uint32{1, 38},
		Reps:          3,
		Debounce:      20 * time.Millisecond,
		Timeout:       20 * time.Second,
		SendTimeout:   30 * time.Second,
		Quiet:         80 * time.Millisecond,
		Scenarios:     []string{"cold", "endpoint", "service-add", "destination-rule", "churn"},
		WorkDir:       t.TempDir(),
		ChurnRate:     10,
		ChurnDuration: 2 * time.Second,
		// The DestinationRule's updated clusters must warm; one left to this timeout is a miss.
		InitialFetchTimeout: 5 * time.Second,
	}
	cfg.ChurnTrace = filepath.Join(cfg.WorkDir, "churn.csv")
	var out io.Writer = io.Discard
	if testing.Verbose() {
		out = os.Stdout
	}
	start := time.Now()
	rep, err := Run(context.Background(), cfg, out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("whole run %s; mesh created with %d API requests in %.0f ms", time.Since(start).Round(time.Millisecond),
		rep.MeshAPIRequests, rep.MeshLoadMs)
	if rep.Config.Source != "kube" || rep.MeshAPIRequests == 0 {
		t.Errorf("source %q, %d API requests: the mesh did not go through the API", rep.Config.Source, rep.MeshAPIRequests)
	}
	got := map[string]*Result{}
	for _, r := range rep.Results {
		got[r.Scenario] = r
		if r.Missed > 0 {
			t.Errorf("%s: %d proxy-changes missed", r.Scenario, r.Missed)
		}
	}
	for _, s := range []string{"cold-start", "endpoint-add", "endpoint-remove", "service-add", "destination-rule"} {
		r := got[s]
		if r == nil {
			t.Errorf("no result for %s", s)
			continue
		}
		if r.Proxies == 0 || r.P99Ms <= 0 || r.BytesPerChange == 0 {
			t.Errorf("%s: %d proxies, p99 %.1f ms, %.0f bytes/change", s, r.Proxies, r.P99Ms, r.BytesPerChange)
		}
	}
	if c := got["cold-start"]; c != nil && c.Proxies != 7 {
		t.Errorf("cold start measured %d proxies, want 7", c.Proxies)
	}
	// The churn trace: a row per change, each with when the harness's own watch saw its EndpointSlice.
	trace, err := os.ReadFile(cfg.ChurnTrace)
	if err != nil {
		t.Fatal(err)
	}
	rows := strings.Split(strings.TrimSpace(string(trace)), "\n")
	if len(rows) < 2 || rows[0] != "began_unix_ms,service,first_proxy_ms,last_proxy_ms,write_ms,slice_seen_ms" {
		t.Fatalf("churn trace:\n%s", trace)
	}
	for _, row := range rows[1:] {
		f := strings.Split(row, ",")
		if len(f) != 6 || strings.HasPrefix(f[5], "-") || f[1] == "" {
			t.Errorf("churn trace row %q: want 6 fields and the EndpointSlice seen", row)
		}
	}
	// 6 services × 3 ports, and the API server's own "kubernetes" service.
	if rep.Mesh.Endpoints < 19 {
		t.Errorf("a sidecar has %d EDS clusters, want at least 19: %+v", rep.Mesh.Endpoints, rep.Mesh)
	}
}

// TestKubeSourceSecureTokens runs the cold start over the secure port with -source kube, each proxy
// authenticated by a real service-account token (TokenRequest, audience istio-ca) that the server
// reviews with the real TokenReview API: every proxy must get its whole configuration, with one review
// per service account.
func TestKubeSourceSecureTokens(t *testing.T) {
	kubeenv.SkipIfMissing(t)
	for _, delta := range []bool{true, false} {
		t.Run(map[bool]string{true: "delta", false: "sotw"}[delta], func(t *testing.T) {
			cfg := Config{
				Source:       "kube",
				Shape:        meshShape{Services: 6, PodsPerService: 2, Namespaces: 2, Policies: true, RoutingEvery: 3},
				Sidecars:     12, // two per service account
				Delta:        delta,
				Secure:       true,
				EnvoyVersion: [2]uint32{1, 38},
				Reps:         1,
				Debounce:     20 * time.Millisecond,
				Timeout:      20 * time.Second,
				Quiet:        80 * time.Millisecond,
				Scenarios:    []string{"cold"},
				WorkDir:      t.TempDir(),
			}
			rep, err := Run(context.Background(), cfg, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Config.SecureAuth != "token" {
				t.Errorf("secure auth %q, want token by default with -source kube", rep.Config.SecureAuth)
			}
			if len(rep.Results) == 0 || rep.Results[0].Scenario != "cold-start" || rep.Results[0].Proxies != 12 || rep.Results[0].Missed != 0 {
				t.Fatalf("cold start over the secure port with tokens: %+v (errors %v)", rep.Results, rep.Errors)
			}
			// Two proxies share each token: the second stream of an account may be reviewed too when both
			// arrive before the first review's answer, so reviews are between one and two per account.
			f := rep.Results[0].Figures
			if f["tokenReviews"] < 6 || f["tokenReviews"]+f["tokenCacheHits"] != 12 {
				t.Errorf("token reviews %v, cache hits %v: want every stream authenticated, at least one review per account",
					f["tokenReviews"], f["tokenCacheHits"])
			}
		})
	}
}
