package envoy

import (
	"slices"
	"testing"
	"time"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	previouspriorities "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"
	"google.golang.org/protobuf/proto"

	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
)

// retryMesh: "plain" has no DestinationRule; "hashed" hashes on a header. Its VirtualService routes one
// path to a single destination, one to a split, and one with retryRemoteLocalities.
const retryMesh = `
apiVersion: v1
kind: Service
metadata: {name: plain, namespace: ns}
spec:
  clusterIP: 10.1.0.1
  ports: [{name: http, port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: hashed, namespace: ns}
spec:
  clusterIP: 10.1.0.2
  ports: [{name: http, port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: routed, namespace: ns}
spec:
  clusterIP: 10.1.0.3
  ports: [{name: http, port: 80}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: hashed, namespace: ns}
spec:
  host: hashed
  trafficPolicy:
    loadBalancer:
      consistentHash: {httpHeaderName: x-user}
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: routed, namespace: ns}
spec:
  hosts: [routed]
  http:
  - name: single-hashed
    match: [{uri: {prefix: /single}}]
    route: [{destination: {host: hashed}}]
  - name: split-hashed
    match: [{uri: {prefix: /split}}]
    route:
    - {destination: {host: hashed, subset: v1}, weight: 50}
    - {destination: {host: hashed, subset: v2}, weight: 50}
  - name: single-hashed-own-retries
    match: [{uri: {prefix: /own}}]
    retries: {attempts: 3, retryOn: "5xx,409"}
    route: [{destination: {host: hashed}}]
  - name: remote-localities
    retries: {attempts: 2, retryOn: 5xx, retryRemoteLocalities: true}
    route: [{destination: {host: plain}}]
`

func retryRoutes(t *testing.T) map[string]*route.Route {
	t.Helper()
	rcs := generateRoutes(t, newByPort(), &model.Proxy{Type: model.Sidecar, Namespace: "ns"},
		pushFromYAML(t, []byte(retryMesh)), named(RouteType, "80"))
	if len(rcs) != 1 {
		t.Fatalf("got %d route configurations", len(rcs))
	}
	out := map[string]*route.Route{}
	for _, host := range []string{"plain", "hashed", "routed"} {
		for _, r := range virtualHost(t, rcs[0], host+".ns.svc.cluster.local:80").Routes {
			out[host+"/"+r.Name] = r
		}
	}
	return out
}

func previousHosts(p *route.RetryPolicy) bool {
	return slices.ContainsFunc(p.GetRetryHostPredicate(), func(h *route.RetryPolicy_RetryHostPredicate) bool {
		return h.Name == previousHostsPredicate
	})
}

// istiod's default retry policy (retry.DefaultPolicy): two retries on connection failures, refused streams
// and gRPC unavailable / cancelled; no retry on an HTTP status (retriable-status-codes lists no code, so a
// 503 from the service reaches the client); another host on each retry, up to 5 picks.
func TestRouteDefaultRetryPolicyIsIstiods(t *testing.T) {
	p := retryRoutes(t)["plain/default"].GetRoute().GetRetryPolicy()
	if p.GetNumRetries().GetValue() != 2 || p.GetRetryOn() != DefaultRetryOn {
		t.Errorf("retries %d on %q, want 2 on %q", p.GetNumRetries().GetValue(), p.GetRetryOn(), DefaultRetryOn)
	}
	if len(p.GetRetriableStatusCodes()) != 0 {
		t.Errorf("retriable status codes %v, want none", p.GetRetriableStatusCodes())
	}
	if !previousHosts(p) || p.GetHostSelectionRetryMaxAttempts() != 5 {
		t.Errorf("host predicates %v, max attempts %d: want previous_hosts, 5", p.GetRetryHostPredicate(), p.GetHostSelectionRetryMaxAttempts())
	}
}

// Under consistent hashing istiod keeps another-host retries on a service's default route and on a split;
// only a route to one hashed destination retries on the hashed host, still with 5 host picks.
func TestRouteRetryHostSelectionUnderConsistentHashing(t *testing.T) {
	routes := retryRoutes(t)
	for _, tc := range []struct {
		route         string
		previousHosts bool
	}{
		{"hashed/default", true},
		{"routed/split-hashed", true},
		{"routed/single-hashed", false},
		{"routed/single-hashed-own-retries", false},
	} {
		r := routes[tc.route]
		if r == nil {
			t.Fatalf("no route %s", tc.route)
		}
		if len(r.GetRoute().GetHashPolicy()) == 0 {
			t.Errorf("%s: no hash policy", tc.route)
		}
		p := r.GetRoute().GetRetryPolicy()
		if got := previousHosts(p); got != tc.previousHosts {
			t.Errorf("%s: previous_hosts predicate %v, want %v", tc.route, got, tc.previousHosts)
		}
		if p.GetHostSelectionRetryMaxAttempts() != 5 {
			t.Errorf("%s: host_selection_retry_max_attempts %d, want 5", tc.route, p.GetHostSelectionRetryMaxAttempts())
		}
	}
	own := routes["routed/single-hashed-own-retries"].GetRoute().GetRetryPolicy()
	if own.GetNumRetries().GetValue() != 3 || own.GetRetryOn() != "5xx,retriable-status-codes" ||
		!slices.Equal(own.GetRetriableStatusCodes(), []uint32{409}) {
		t.Errorf("own retries: %v", own)
	}
}

// retryRemoteLocalities retries in other priorities first (istiod: previous_priorities, update frequency 2).
func TestRouteRetryRemoteLocalities(t *testing.T) {
	routes := retryRoutes(t)
	p := routes["routed/remote-localities"].GetRoute().GetRetryPolicy()
	pr := p.GetRetryPriority()
	if pr.GetName() != previousPrioritiesPriority {
		t.Fatalf("retry priority %v, want %s", pr, previousPrioritiesPriority)
	}
	cfg := &previouspriorities.PreviousPrioritiesConfig{}
	if err := pr.GetTypedConfig().UnmarshalTo(cfg); err != nil {
		t.Fatal(err)
	}
	if err := cfg.ValidateAll(); err != nil || cfg.UpdateFrequency != 2 {
		t.Errorf("previous priorities config %v (ValidateAll: %v), want update frequency 2", cfg, err)
	}
	if !previousHosts(p) {
		t.Errorf("host predicates %v, want previous_hosts", p.GetRetryHostPredicate())
	}
	if other := routes["routed/single-hashed-own-retries"].GetRoute().GetRetryPolicy(); other.GetRetryPriority() != nil {
		t.Errorf("retry priority without retryRemoteLocalities: %v", other.GetRetryPriority())
	}
}

// As istiod, the mesh config's defaultHttpRetryPolicy replaces the built-in default on every route that
// sets no retries, the default route of a service without a VirtualService too (retry.ConvertPolicy of the
// mesh policy: a single hashed destination still retries on the same host); a route's own retries win, and
// attempts 0 in the mesh turns retries off. One generator serves both meshes without mixing them up.
func TestRouteMeshDefaultRetryPolicy(t *testing.T) {
	st := storeFromYAML(t, []byte(retryMesh))
	g := newByPort()
	routesFor := func(m *mesh.Config) map[string]*route.Route {
		t.Helper()
		rcs := generateRoutes(t, g, &model.Proxy{Type: model.Sidecar, Namespace: "ns"}, model.Build(st, m), named(RouteType, "80"))
		out := map[string]*route.Route{}
		for _, host := range []string{"plain", "hashed", "routed"} {
			for _, r := range virtualHost(t, rcs[0], host+".ns.svc.cluster.local:80").Routes {
				out[host+"/"+r.Name] = r
			}
		}
		return out
	}
	withPolicy := func(yaml string) *mesh.Config {
		m := mesh.Default()
		if err := mesh.Parse([]byte(yaml), m); err != nil {
			t.Fatal(err)
		}
		return m
	}

	before := routesFor(mesh.Default())
	if n := before["plain/default"].GetRoute().GetRetryPolicy().GetNumRetries().GetValue(); n != 2 {
		t.Fatalf("without a mesh policy: %d retries, want istiod's 2", n)
	}
	routes := routesFor(withPolicy("defaultHttpRetryPolicy: {attempts: 4, retryOn: \"5xx,409\", perTryTimeout: 3s}\n"))
	for _, name := range []string{"plain/default", "hashed/default", "routed/single-hashed", "routed/split-hashed"} {
		p := routes[name].GetRoute().GetRetryPolicy()
		if p.GetNumRetries().GetValue() != 4 || p.GetRetryOn() != "5xx,retriable-status-codes" ||
			!slices.Equal(p.GetRetriableStatusCodes(), []uint32{409}) ||
			p.GetPerTryTimeout().AsDuration() != 3*time.Second || p.GetHostSelectionRetryMaxAttempts() != 5 {
			t.Errorf("%s: retry policy %v, want the mesh's", name, p)
		}
		if got, want := previousHosts(p), name != "routed/single-hashed"; got != want {
			t.Errorf("%s: previous hosts %v, want %v", name, got, want)
		}
	}
	if p := routes["routed/single-hashed-own-retries"].GetRoute().GetRetryPolicy(); p.GetNumRetries().GetValue() != 3 {
		t.Errorf("a route's own retries: %v, want 3 attempts", p)
	}
	off := routesFor(withPolicy("defaultHttpRetryPolicy: {attempts: 0}\n"))
	for _, name := range []string{"plain/default", "routed/single-hashed"} {
		if p := off[name].GetRoute().GetRetryPolicy(); p != nil {
			t.Errorf("%s: retry policy %v, want none under attempts 0", name, p)
		}
	}
	if p := off["routed/remote-localities"].GetRoute().GetRetryPolicy(); p.GetNumRetries().GetValue() != 2 {
		t.Errorf("a route's own retries under attempts 0: %v", p)
	}
}

// A proxyless gRPC client's routes retry as a sidecar's do, as istiod's gRPC generator builds them with the
// sidecar's route builder: the default policy (two retries) when neither the route nor the mesh sets one,
// the mesh's defaultHttpRetryPolicy, a route's own retries, none under attempts 0.
func TestRouteGRPCRetryPolicyIsTheSidecars(t *testing.T) {
	st := storeFromYAML(t, []byte(retryMesh))
	withPolicy := func(yaml string) *mesh.Config {
		m := mesh.Default()
		if err := mesh.Parse([]byte(yaml), m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	g := newByPort()
	for _, m := range []*mesh.Config{mesh.Default(),
		withPolicy("defaultHttpRetryPolicy: {attempts: 4, retryOn: \"unavailable,409\", backoff: 0.05s}\n"),
		withPolicy("defaultHttpRetryPolicy: {attempts: 0}\n")} {
		push := model.Build(st, m)
		sidecar := generateRoutes(t, g, &model.Proxy{Type: model.Sidecar, Namespace: "ns"}, push, named(RouteType, "80"))[0]
		for _, host := range []string{"plain", "hashed", "routed"} {
			name := host + ".ns.svc.cluster.local:80"
			want := virtualHost(t, sidecar, name).Routes
			rcs := generateRoutes(t, g, &model.Proxy{Type: model.GRPC, Namespace: "ns"}, push, named(RouteType, name))
			if len(rcs) != 1 || len(rcs[0].VirtualHosts) != 1 || len(rcs[0].VirtualHosts[0].Routes) != len(want) {
				t.Fatalf("%s: gRPC route configuration %v, want %d routes", name, rcs, len(want))
			}
			for i, r := range rcs[0].VirtualHosts[0].Routes {
				got, w := r.GetRoute().GetRetryPolicy(), want[i].GetRoute().GetRetryPolicy()
				if !proto.Equal(got, w) {
					t.Errorf("mesh retries %v, %s route %s: gRPC retry policy %v, want the sidecar's %v", m.DefaultRetries(), name, r.Name, got, w)
				}
				if m.DefaultRetries() == nil && r.Name != "remote-localities" && r.Name != "single-hashed-own-retries" &&
					got.GetNumRetries().GetValue() != 2 {
					t.Errorf("%s route %s: %v, want istiod's default two retries", name, r.Name, got)
				}
			}
		}
	}
}
