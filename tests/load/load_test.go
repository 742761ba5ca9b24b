package main

import (
	"context"
	"io"
	"os"
	"testing"
	"time"
)

// TestSmallRun runs every scenario on a small mesh so the harness keeps working: 10 services, 10 sidecars,
// 2 ztunnels, 2 repetitions, 2 s of churn. It builds and runs the real server binary.
func TestSmallRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server")
	}
	for _, mode := range []struct {
		name  string
		delta bool
		envoy [2]uint32
	}{{"delta", true, [2]uint32{1, 38}}, {"delta-without-vhds", true, [2]uint32{1, 36}}, {"sotw", false, [2]uint32{1, 38}}} {
		t.Run(mode.name, func(t *testing.T) {
			cfg := Config{
				Shape:         meshShape{Services: 10, PodsPerService: 3, Namespaces: 3, Ambient: true, Policies: true, RoutingEvery: 5},
				Sidecars:      10,
				Ztunnels:      2,
				Delta:         mode.delta,
				EnvoyVersion:  mode.envoy,
				NackFraction:  0.1,
				Reps:          2,
				ChurnRate:     10,
				ChurnDuration: 1500 * time.Millisecond,
				Debounce:      20 * time.Millisecond,
				Timeout:       20 * time.Second,
				SendTimeout:   30 * time.Second,
				Quiet:         80 * time.Millisecond,
				Scenarios:     allScenarios,
				WorkDir:       t.TempDir(),
			}
			switch mode.name {
			case "sotw":
				cfg.Scenarios = []string{"cold", "endpoint"}
			case "delta-without-vhds":
				cfg.Scenarios = []string{"cold", "service-add", "virtualservice"}
			}
			var out io.Writer = io.Discard
			if testing.Verbose() {
				out = os.Stdout
			}
			rep, err := Run(context.Background(), cfg, out)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]*Result{}
			for _, r := range rep.Results {
				got[r.Scenario] = r
				if r.Missed > 0 {
					t.Errorf("%s: %d proxy-changes missed", r.Scenario, r.Missed)
				}
				if r.Scenario != "steady-churn" && r.Changes > 0 && r.BytesPerChange == 0 {
					t.Errorf("%s: no bytes counted", r.Scenario)
				}
			}
			var want []string
			switch mode.name {
			case "delta":
				want = []string{"cold-start", "endpoint-add", "endpoint-remove", "service-add", "virtualservice-change",
					"authorization-change", "ztunnel-pod-add", "ztunnel-pod-remove", "steady-churn"}
			case "sotw":
				want = []string{"cold-start", "endpoint-add", "endpoint-remove"}
			default:
				want = []string{"cold-start", "service-add", "virtualservice-change"}
			}
			for _, s := range want {
				r := got[s]
				if r == nil {
					t.Errorf("no result for %s", s)
					continue
				}
				if r.Proxies == 0 || r.P99Ms <= 0 {
					t.Errorf("%s: %d proxies, p99 %.1f ms", s, r.Proxies, r.P99Ms)
				}
			}
			if c := got["cold-start"]; c != nil && c.Proxies != 12 {
				t.Errorf("cold start measured %d proxies, want 12", c.Proxies)
			}
			if rep.Mesh.Clusters < 30 || rep.Mesh.Routes == 0 {
				t.Errorf("sidecar config looks wrong: %+v", rep.Mesh)
			}
			// Envoy 1.38 on delta gets its virtual hosts over VHDS; older Envoys and SotW inside the routes.
			if vhds := mode.name == "delta"; (rep.Mesh.VirtualHosts > 0) != vhds {
				t.Errorf("%d virtual hosts over VHDS, want some: %v", rep.Mesh.VirtualHosts, vhds)
			}
		})
	}
}

func TestProtoName(t *testing.T) {
	b := []byte{0x0a, 0x02, '8', '0', 0x12, 0x00}
	if n, err := protoName(b); err != nil || n != "80" {
		t.Fatalf("protoName = %q, %v", n, err)
	}
	if _, err := protoName([]byte{0x12}); err == nil {
		t.Fatal("want an error for a message without a name")
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	if p := pct(d, 50); p != 50 {
		t.Errorf("p50 = %v", p)
	}
	if p := pct(d, 99); p != 99 {
		t.Errorf("p99 = %v", p)
	}
	if p := pct(nil, 99); p != 0 {
		t.Errorf("p99 of nothing = %v", p)
	}
}
