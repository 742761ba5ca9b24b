package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sextantmesh/sextant/tests/kubeenv"
)

// TestSmallRun runs every scenario of -scenario all on a small mesh so the harness keeps working: 10
// services, 10 sidecars, 2 ztunnels, 2 repetitions, 2 s of churn. It builds and runs the real server binary.
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
				// A warming the server does not end, and a lookup it does not answer, fail soon.
				InitialFetchTimeout: 5 * time.Second,
				OnDemandLookups:     40,
				OnDemandNames:       10,
				OnDemandTimeout:     time.Second,
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
					"authorization-change", "ztunnel-pod-add", "ztunnel-pod-remove", "destination-rule", "ztunnel-on-demand",
					"steady-churn"}
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
			// Every sidecar's EDS clusters warmed at cold start, and a DestinationRule change warms its service's
			// three clusters in every sidecar again; none may be left to initial_fetch_timeout.
			if c := got["cold-start"]; c != nil && (c.Warmings < 10*30 || c.WarmingTimeouts > 0) {
				t.Errorf("cold start: %d clusters warmed, %d warming timeouts", c.Warmings, c.WarmingTimeouts)
			}
			if r := got["destination-rule"]; r != nil && (r.Warmings != 2*10*3 || r.WarmingTimeouts > 0) {
				t.Errorf("destination-rule: %d clusters warmed, %d warming timeouts; want 60 and none", r.Warmings, r.WarmingTimeouts)
			}
			if r := got["ztunnel-on-demand"]; r != nil && (r.Changes != 40+10 || r.Figures["initialAddresses"] != 0 ||
				r.Figures["existingFound"] != 10) {
				t.Errorf("ztunnel-on-demand: %d lookups, figures %v", r.Changes, r.Figures)
			}
			if rep.Mesh.Clusters < 30 || rep.Mesh.Routes == 0 {
				t.Errorf("sidecar config looks wrong: %+v", rep.Mesh)
			}
			// Every host of the generated mesh is a Kubernetes Service, whose virtual host is in a route
			// configuration of its own (routes by service): none goes over VHDS, whatever the Envoy.
			if rep.Mesh.VirtualHosts > 0 {
				t.Errorf("%d virtual hosts over VHDS, want none", rep.Mesh.VirtualHosts)
			}
		})
	}
}

// TestSmallRunNamedOnly runs the scenarios -scenario all leaves out, briefly: connection-age with a 2 s age
// (a 5 s window) and slow-clients once, with a 3 s send timeout.
func TestSmallRunNamedOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server")
	}
	cfg := Config{
		Shape:            meshShape{Services: 10, PodsPerService: 3, Namespaces: 3, Policies: true, RoutingEvery: 5},
		Sidecars:         10,
		Delta:            true,
		EnvoyVersion:     [2]uint32{1, 38},
		Reps:             1,
		SlowReps:         1,
		StuckClients:     4,
		MaxConnectionAge: 2 * time.Second,
		Debounce:         20 * time.Millisecond,
		Timeout:          20 * time.Second,
		SendTimeout:      3 * time.Second,
		Quiet:            80 * time.Millisecond,
		Scenarios:        []string{"cold", "connection-age", "slow-clients"},
		WorkDir:          t.TempDir(),
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
	}
	// Whether streams move is the server's part (a finite --max-connection-age-grace): logged, not asserted.
	if r := got["connection-age"]; r == nil || r.Proxies != 10 || r.Figures["windowSeconds"] != 5 {
		t.Errorf("connection-age: %+v", r)
	} else {
		t.Logf("connection-age: %d of 10 sidecars moved, %v", 10-r.Missed, r.Figures)
	}
	for _, s := range []string{"slow-clients-alone", "slow-clients-stuck"} {
		if r := got[s]; r == nil || r.Changes != 1 || r.Missed != 0 || r.P50Ms <= 0 || r.BytesPerChange == 0 {
			t.Errorf("%s: %+v", s, r)
		}
	}
	if r := got["slow-clients-stuck"]; r != nil {
		t.Logf("slow-clients: %v", r.Figures)
		if r.Figures["stuckNeverListed"] > 0 {
			t.Errorf("stuck clients never seen in the server's connections: %v", r.Figures)
		}
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

// The DestinationRule the destination-rule scenario writes is one object the Kubernetes source can create
// (networking.istio.io/v1, the CRDs the harness installs), so the scenario runs on -source kube as well.
func TestDestinationRuleDecodes(t *testing.T) {
	s := &service{ns: "ns-1", name: "svc-1"}
	objs, err := kubeenv.Decode(strings.NewReader(destinationRule(s, "dr-svc-1", 1001)))
	if err != nil || len(objs) != 1 {
		t.Fatalf("%d objects, %v", len(objs), err)
	}
	o := objs[0]
	gvk := o.GroupVersionKind()
	got, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "trafficPolicy", "connectionPool", "tcp", "maxConnections")
	if gvk.Group != "networking.istio.io" || gvk.Kind != "DestinationRule" || o.GetNamespace() != "ns-1" || fmt.Sprint(got) != "1001" {
		t.Fatalf("decoded %v %s/%s, maxConnections %v", gvk, o.GetNamespace(), o.GetName(), got)
	}
}

// TestSmallRunSecure runs the cold start over the secure port, delta and SotW: every proxy must get its
// whole configuration, so the TLS handshake, the client certificate and the identity check (the node's
// NAMESPACE and SERVICE_ACCOUNT against the certificate) all passed.
func TestSmallRunSecure(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server")
	}
	for _, delta := range []bool{true, false} {
		t.Run(map[bool]string{true: "delta", false: "sotw"}[delta], func(t *testing.T) {
			cfg := Config{
				Shape:        meshShape{Services: 10, PodsPerService: 3, Namespaces: 3, Policies: true, RoutingEvery: 5},
				Sidecars:     10,
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
			if len(rep.Results) == 0 || rep.Results[0].Scenario != "cold-start" || rep.Results[0].Proxies != 10 || rep.Results[0].Missed != 0 {
				t.Fatalf("cold start over the secure port: %+v (errors %v)", rep.Results, rep.Errors)
			}
		})
	}
}
