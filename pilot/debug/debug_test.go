package debug_test

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/debug"
	"github.com/sextantmesh/sextant/pilot/store"
	"github.com/sextantmesh/sextant/tests/debugtest"
)

const (
	proxyA = debugtest.ReviewsProxy
	proxyB = debugtest.CartProxy
)

func TestViews(t *testing.T) {
	env, _, _ := debugtest.StartScenario(t)

	t.Run("index", func(t *testing.T) {
		var idx struct{ Endpoints []struct{ Path string } }
		env.GetJSON(t, "/debug", &idx)
		var paths []string
		for _, e := range idx.Endpoints {
			paths = append(paths, e.Path)
		}
		for _, want := range []string{"/debug/syncz", "/debug/adsz", "/debug/configz", "/debug/registryz", "/debug/endpointz",
			"/debug/push_status", "/debug/config_dump", "/debug/authorizationz", "/debug/config_errors", "/debug/distribution",
			"/debug/ui", "/debug/pprof/", "/metrics"} {
			if !strings.Contains(strings.Join(paths, " "), want) {
				t.Errorf("/debug lacks %s: %v", want, paths)
			}
		}
	})

	t.Run("syncz", func(t *testing.T) {
		var s []debug.ProxySync
		env.GetJSON(t, "/debug/syncz", &s)
		if len(s) != 2 || s[0].ID != proxyB || s[1].ID != proxyA {
			t.Fatalf("syncz proxies (sorted by id) = %+v", s)
		}
		a, b := s[1], s[0]
		if a.Type != "sidecar" || a.Namespace != "bookinfo" || len(a.Types) != 2 || a.Types[0].Type != "cds" || a.Types[1].Type != "lds" {
			t.Errorf("proxy A = %+v", a)
		}
		for _, ty := range a.Types {
			if ty.Status != debug.Synced || ty.VersionSent == "" || ty.VersionSent != ty.VersionAcked || ty.NonceSent != ty.NonceAcked {
				t.Errorf("A %s = %+v", ty.Type, ty)
			}
		}
		lds := b.Types[1]
		if lds.Status != debug.Error || lds.Error != "listener 0: bad filter chain" || lds.NACKs != 1 || lds.VersionAcked != "" {
			t.Errorf("B lds = %+v", lds)
		}
	})

	t.Run("adsz", func(t *testing.T) {
		var conns []struct {
			ID            string
			Type          string
			Subscriptions []struct {
				Type     string
				Wildcard bool
			}
		}
		env.GetJSON(t, "/debug/adsz", &conns)
		if len(conns) != 2 {
			t.Fatalf("adsz = %+v", conns)
		}
		for _, c := range conns {
			if len(c.Subscriptions) != 2 || c.Subscriptions[0].Type != "cds" || !c.Subscriptions[0].Wildcard {
				t.Errorf("subscriptions of %s = %+v", c.ID, c.Subscriptions)
			}
		}
	})

	t.Run("configz", func(t *testing.T) {
		var all, filtered []struct {
			Kind, Namespace, Name, Source, ResourceVersion string
			Generation                                     int64
		}
		env.GetJSON(t, "/debug/configz", &all)
		if len(all) < 8 {
			t.Fatalf("configz has %d objects: %+v", len(all), all)
		}
		env.GetJSON(t, "/debug/configz?kind=Service&namespace=shop", &filtered)
		if len(filtered) != 2 || filtered[0].Name != "cart" || filtered[1].Name != "fine" {
			t.Fatalf("filtered = %+v", filtered)
		}
		c := filtered[0]
		if !strings.Contains(c.Source, "10-services.yaml") || c.ResourceVersion == "" || c.Generation != 1 {
			t.Errorf("cart = %+v", c)
		}
	})

	t.Run("registryz", func(t *testing.T) {
		var svcs []struct {
			Hostname, Namespace, Source string
			Addresses                   []string
			Ports                       []struct{ Port uint32 }
			Endpoints                   int
		}
		env.GetJSON(t, "/debug/registryz", &svcs)
		var hosts []string
		for _, s := range svcs {
			hosts = append(hosts, s.Hostname)
			if s.Hostname == "reviews.bookinfo.svc.cluster.local" &&
				(s.Endpoints != 1 || s.Ports[0].Port != 9080 || s.Addresses[0] != "10.96.0.20") {
				t.Errorf("reviews = %+v", s)
			}
		}
		if strings.Join(hosts, ",") != "cart.shop.svc.cluster.local,fine.shop.svc.cluster.local,reviews.bookinfo.svc.cluster.local" {
			t.Errorf("hosts = %v", hosts)
		}
	})

	t.Run("endpointz", func(t *testing.T) {
		var eps []struct {
			Service string
			Ports   []struct {
				Port      uint32
				Endpoints []struct{ Address, Health string }
			}
		}
		env.GetJSON(t, "/debug/endpointz?service=bookinfo/reviews.bookinfo.svc.cluster.local", &eps)
		if len(eps) != 1 || len(eps[0].Ports) != 1 || eps[0].Ports[0].Endpoints[0].Address != "10.1.0.20" ||
			eps[0].Ports[0].Endpoints[0].Health != "HEALTHY" {
			t.Errorf("endpointz = %+v", eps)
		}
	})

	t.Run("push_status", func(t *testing.T) {
		var ps debug.PushStatus
		env.GetJSON(t, "/debug/push_status", &ps)
		if ps.Version < 1 || ps.Services != 3 || ps.Endpoints != 1 || ps.Connected != 2 || len(ps.Rebuilt) == 0 ||
			ps.ConfigObjects["Service"] != 3 || len(ps.Rejected) != 1 || ps.Rejected[0].Name != "broken" {
			t.Errorf("push_status = %+v", ps)
		}
	})

	t.Run("config_errors", func(t *testing.T) {
		var errs []struct {
			File, Kind, Namespace, Name, Field, Message, Error string
			Index                                              int
		}
		env.GetJSON(t, "/debug/config_errors", &errs)
		if len(errs) != 1 {
			t.Fatalf("config_errors = %+v", errs)
		}
		e := errs[0]
		if !strings.HasSuffix(e.File, "40-broken.yaml") || e.Index != 1 || e.Kind != "Service" || e.Name != "broken" ||
			!strings.Contains(e.Field, "ports") || !strings.Contains(e.Error, "40-broken.yaml: document 1") {
			t.Errorf("error = %+v", e)
		}
	})

	t.Run("authorizationz", func(t *testing.T) {
		var out []struct {
			Namespace string
			Policies  []struct {
				Name, Action string
				Spec         map[string]any
			}
		}
		env.GetJSON(t, "/debug/authorizationz", &out)
		if len(out) != 1 || out[0].Namespace != "bookinfo" || len(out[0].Policies) != 1 || out[0].Policies[0].Action != "ALLOW" ||
			out[0].Policies[0].Spec["rules"] == nil {
			t.Errorf("authorizationz = %+v", out)
		}
	})

	t.Run("config_dump", func(t *testing.T) {
		var dump debug.ConfigDump
		env.GetJSON(t, "/debug/config_dump?proxyID="+proxyA, &dump)
		if dump.Proxy != proxyA || len(dump.Configs) != 2 || dump.Configs[0].Type != "cds" || dump.Configs[1].Type != "lds" {
			t.Fatalf("config_dump = %+v", dump)
		}
		found := false
		for _, r := range dump.Configs[0].Resources {
			var c map[string]any
			if err := json.Unmarshal(r, &c); err != nil {
				t.Fatal(err)
			}
			if c["@type"] != "type.googleapis.com/envoy.config.cluster.v3.Cluster" {
				t.Errorf("cluster @type = %v", c["@type"])
			}
			if strings.Contains(c["name"].(string), "reviews.bookinfo.svc.cluster.local") {
				found = true
			}
		}
		if !found {
			t.Errorf("no reviews cluster in %s", dump.Configs[0].Resources)
		}
		env.GetJSON(t, "/debug/config_dump?proxyID="+proxyA+"&types=lds", &dump)
		if len(dump.Configs) != 1 || dump.Configs[0].Type != "lds" {
			t.Errorf("types=lds gave %+v", dump.Configs)
		}
		if code, _ := env.Get(t, "/debug/config_dump?proxyID=nobody.nowhere"); code != 404 {
			t.Errorf("unknown proxy: %d", code)
		}
	})

	t.Run("stable", func(t *testing.T) {
		for _, p := range []string{"/debug/configz", "/debug/registryz", "/debug/endpointz", "/debug/authorizationz",
			"/debug/config_dump?proxyID=" + proxyA} {
			_, first := env.Get(t, p)
			_, second := env.Get(t, p)
			if string(first) != string(second) {
				t.Errorf("%s differs between calls", p)
			}
		}
	})

	t.Run("pprof and ui", func(t *testing.T) {
		if code, body := env.Get(t, "/debug/pprof/"); code != 200 || !strings.Contains(string(body), "goroutine") {
			t.Errorf("pprof = %d", code)
		}
		if code, body := env.Get(t, "/debug/ui"); code != 200 || !strings.Contains(string(body), "<table id=\"proxies\"") {
			t.Errorf("ui = %d", code)
		}
	})
}

// metric returns the value of the sample whose line starts with prefix (name and labels), or -1.
func metric(text, prefix string) float64 {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(prefix) + ` (\S+)$`)
	m := re.FindStringSubmatch(text)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

func TestMetricsAndDistribution(t *testing.T) {
	env, a, _ := debugtest.StartScenario(t)
	scrape := func() string { _, b := env.Get(t, "/metrics"); return string(b) }
	before := scrape()
	for _, want := range []string{
		`sextant_xds_connected_proxies{proxy_type="sidecar"} 2`,
		`sextant_xds_nacks_total{type="lds"} 1`,
		`sextant_config_rejected{kind="Service"} 1`,
		`sextant_push_snapshots_total{kind="full"} 1`,
		`go_goroutines `,
	} {
		if !strings.Contains(before, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if metric(before, `sextant_xds_sent_bytes_total{type="cds"}`) <= 0 {
		t.Errorf("no CDS bytes counted")
	}

	// The VirtualService (exported to bookinfo only) concerns A, which ACKed it.
	var dist debug.Distribution
	env.GetJSON(t, "/debug/distribution?kind=VirtualService&name=reviews&namespace=bookinfo", &dist)
	if !dist.Exists || dist.Generation != 1 || dist.SnapshotVersion != 1 || len(dist.Proxies) != 1 || dist.Acked != 1 {
		t.Fatalf("distribution = %+v", dist)
	}
	if p := dist.Proxies[0]; p.ID != proxyA || p.State != debug.Acked {
		t.Errorf("A = %+v", p)
	}
	// The shop namespace concerns B, which NACKed listeners.
	var shop debug.Distribution
	env.GetJSON(t, "/debug/distribution?kind=Namespace&name=shop", &shop)
	if len(shop.Proxies) != 1 || shop.NACKed != 1 {
		t.Fatalf("shop distribution = %+v", shop)
	}
	if p := shop.Proxies[0]; p.ID != proxyB || p.State != debug.NACKed || !strings.Contains(p.Reason, "bad filter chain") {
		t.Errorf("B = %+v", p)
	}

	// A new generation: PENDING on A while it holds the push, ACKED after.
	a.Hold()
	env.Write(t, "20-routing.yaml", debugtest.RoutingV2)
	debugtest.Eventually(t, "the push to reach A", func() bool { return a.Held() >= 2 })
	// The view learns of the snapshot as the pipeline hands it over and as responses go out, both of which
	// may come after A has the responses: wait for it to name the snapshot. A holds its answers, so the
	// state cannot move past PENDING meanwhile.
	debugtest.Eventually(t, "the view to place generation 2 in a snapshot", func() bool {
		env.GetJSON(t, "/debug/distribution?kind=VirtualService&name=reviews&namespace=bookinfo", &dist)
		return dist.SnapshotVersion != 0
	})
	if dist.Generation != 2 || dist.SnapshotVersion < 2 || dist.Proxies[0].State != debug.Pending {
		t.Fatalf("while held: %+v", dist)
	}
	pushed := dist.SnapshotVersion
	a.Release()
	debugtest.Eventually(t, "A to ACK generation 2", func() bool {
		env.GetJSON(t, "/debug/distribution?kind=VirtualService&name=reviews&namespace=bookinfo", &dist)
		return dist.Proxies[0].State == debug.Acked
	})
	env.GetJSON(t, "/debug/distribution?kind=Namespace&name=shop", &shop)
	if shop.Proxies[0].State != debug.NACKed {
		t.Errorf("B after the push = %+v", shop.Proxies[0])
	}
	// Objects in other namespaces that A does not see leave it out; unknown objects are 404.
	env.GetJSON(t, "/debug/distribution?kind=AuthorizationPolicy&name=allow-shop&namespace=bookinfo", &dist)
	if len(dist.Proxies) != 1 || dist.Proxies[0].ID != proxyA || dist.Proxies[0].State != debug.Acked {
		t.Errorf("authz distribution = %+v", dist)
	}
	if code, _ := env.Get(t, "/debug/distribution?kind=VirtualService&name=nope&namespace=bookinfo"); code != 404 {
		t.Errorf("unknown object: %d", code)
	}

	// Nothing above waits for B, which gets the push too: wait for its NACK of the new listeners, the last
	// thing this test counts (the push record counts it after the metrics and /debug/syncz do).
	var pz struct {
		Pushes []struct {
			Version     uint64
			Responses   int
			ACKs        int
			NACKs       int
			Convergence float64 `json:"convergenceSeconds"`
		}
		Convergence debug.Histogram
	}
	debugtest.Eventually(t, "B to NACK the push", func() bool {
		env.GetJSON(t, "/debug/pushz", &pz)
		return len(pz.Pushes) > 0 && pz.Pushes[0].Version >= pushed && pz.Pushes[0].NACKs > 0
	})
	after := scrape()
	for _, m := range []string{
		`sextant_xds_pushes_total{result="sent",type="cds"}`,
		`sextant_proxy_convergence_seconds_count{type="lds"}`,
		`sextant_xds_push_duration_seconds_count{type="lds"}`,
		`sextant_push_context_build_seconds_count`,
		`sextant_xds_responses_total{type="lds"}`,
	} {
		if metric(after, m) <= max(0, metric(before, m)) {
			t.Errorf("%s did not move: %v → %v", m, metric(before, m), metric(after, m))
		}
	}
	if metric(after, `sextant_xds_nacks_total{type="lds"}`) < 2 {
		t.Errorf("B's second NACK not counted")
	}

	if len(pz.Pushes) < 2 || pz.Pushes[0].Version != pushed || pz.Pushes[0].Responses < 4 || pz.Pushes[0].ACKs < 2 || pz.Pushes[0].NACKs < 1 ||
		pz.Pushes[0].Convergence <= 0 || pz.Convergence.Count == 0 {
		t.Errorf("pushz = %+v", pz)
	}
}

// TestEndpointsWaitingForPods: an endpoint a cluster's EndpointSlice lists for a pod not yet known with an
// IP is named in /debug/endpointz and counted in /debug/push_status until the pod arrives.
func TestEndpointsWaitingForPods(t *testing.T) {
	env := debugtest.Start(t, map[string]string{"svc.yaml": `apiVersion: v1
kind: Service
metadata: {name: api, namespace: shop}
spec:
  clusterIP: 10.96.0.40
  selector: {app: api}
  ports: [{name: http, port: 8080}]
`})
	const service = "shop/api.shop.svc.cluster.local"
	ready, port, portName := true, int32(8080), "http"
	env.Server.Store.Upsert(store.LayerKube, &config.Config{Key: config.Key{Kind: config.EndpointSlice, Namespace: "shop", Name: "api-x"},
		Source: config.KubeSource, Spec: &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "api-x", Namespace: "shop", Labels: map[string]string{discoveryv1.LabelServiceName: "api"}},
			AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{{Name: &portName, Port: &port}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.1.0.40"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready},
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: "api-1"}}}}})
	type view struct {
		Service string
		Ports   []struct {
			Endpoints []struct{ Address, TLSMode string }
		}
		WaitingForPods []string
	}
	get := func() (view, debug.PushStatus) {
		var eps []view
		var ps debug.PushStatus
		env.GetJSON(t, "/debug/endpointz?service="+service, &eps)
		env.GetJSON(t, "/debug/push_status", &ps)
		if len(eps) != 1 {
			t.Fatalf("endpointz = %+v", eps)
		}
		return eps[0], ps
	}
	debugtest.Eventually(t, "the endpoint waiting for its pod", func() bool {
		v, ps := get()
		return strings.Join(v.WaitingForPods, ",") == "shop/api-1" && ps.EndpointsWaitingForPods == 1
	})
	if v, _ := get(); len(v.Ports) != 0 {
		t.Errorf("endpoint served before its pod: %+v", v)
	}

	labels := map[string]string{"app": "api", "security.istio.io/tlsMode": "istio"}
	env.Server.Store.Upsert(store.LayerKube,
		&config.Config{Key: config.Key{Kind: config.Pod, Namespace: "shop", Name: "api-1"}, Labels: labels,
			Source: config.KubeSource, Spec: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "api-1", Namespace: "shop", Labels: labels},
				Status: corev1.PodStatus{PodIP: "10.1.0.40", Phase: corev1.PodRunning}}})
	debugtest.Eventually(t, "the endpoint served once its pod has an IP", func() bool {
		v, ps := get()
		return len(v.WaitingForPods) == 0 && ps.EndpointsWaitingForPods == 0 && len(v.Ports) == 1 &&
			len(v.Ports[0].Endpoints) == 1 && v.Ports[0].Endpoints[0].TLSMode == "istio"
	})
}
