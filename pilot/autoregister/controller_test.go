package autoregister_test

import (
	"context"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	meshconfig "istio.io/api/mesh/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/sextantmesh/sextant/pilot/authn"
	"github.com/sextantmesh/sextant/pilot/autoregister"
	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/store"
	"github.com/sextantmesh/sextant/pilot/xds"
)

const meshYAML = `apiVersion: networking.istio.io/v1
kind: WorkloadGroup
metadata: {name: reviews-vm, namespace: bookinfo}
spec:
  metadata:
    labels: {app: reviews, version: vm}
    annotations: {team: books}
  template:
    serviceAccount: reviews
    ports: {http: 9081}
    labels: {tier: backend, version: template}
---
apiVersion: v1
kind: Service
metadata: {name: reviews, namespace: bookinfo}
spec:
  clusterIP: 10.96.0.20
  selector: {app: reviews}
  ports: [{name: http, port: 9080}]
`

var reviewsSA = authn.Identity{TrustDomain: "cluster.local", Namespace: "bookinfo", ServiceAccount: "reviews"}

func newStore(t *testing.T) *store.Store {
	t.Helper()
	s := store.New()
	for i, doc := range strings.Split(meshYAML, "\n---\n") {
		c, err := config.Parse([]byte(doc), "mesh.yaml", i, "default")
		if err != nil {
			t.Fatal(err)
		}
		s.Upsert(store.LayerFile, c)
	}
	return s
}

// vm is a VM's agent as it connects: node metadata AUTO_REGISTER_GROUP, its address, a verified identity.
func vm(ip string, id *authn.Identity) *model.Proxy {
	return &model.Proxy{Type: model.Sidecar, NodeID: "sidecar~" + ip + "~vm1.bookinfo~bookinfo.svc.cluster.local", Namespace: "bookinfo",
		IPAddresses: []string{ip}, AutoRegisterGroup: "reviews-vm", Identity: id, Labels: map[string]string{"host": "vm1"},
		Node: &core.Node{Locality: &core.Locality{Region: "eu", Zone: "eu-1"}}}
}

func newController(t *testing.T, s *store.Store, grace time.Duration) *autoregister.Controller {
	t.Helper()
	c := autoregister.New(autoregister.Options{Store: s, Entries: autoregister.NewStoreEntries(s), Instance: "sextant-0", GracePeriod: grace})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return c
}

var entryKey = config.Key{Kind: config.WorkloadEntry, Namespace: "bookinfo", Name: "reviews-vm-10.0.0.7"}

// The entry istiod makes: the template with the agent's address, labels template < group < node, the
// node's locality, the group's annotations and name, connected to this replica; the service selecting its
// labels gets it as an endpoint on the template's named port.
func TestConnectRegistersTheWorkloadEntry(t *testing.T) {
	s := newStore(t)
	c := newController(t, s, time.Minute)
	at := time.Now()
	if err := c.Connected(xds.ConnectionEvent{ID: "a", Proxy: vm("10.0.0.7", &reviewsSA), ConnectedAt: at}); err != nil {
		t.Fatal(err)
	}
	e := s.Get(entryKey)
	if e == nil {
		t.Fatalf("no %s", entryKey)
	}
	spec := e.Spec.(*networking.WorkloadEntry)
	if spec.Address != "10.0.0.7" || spec.ServiceAccount != "reviews" || spec.Locality != "eu/eu-1" || spec.Ports["http"] != 9081 {
		t.Errorf("spec %v", spec)
	}
	wantLabels := map[string]string{"app": "reviews", "version": "vm", "tier": "backend", "host": "vm1"}
	for k, v := range wantLabels {
		if spec.Labels[k] != v || e.Labels[k] != v {
			t.Errorf("label %s: spec %q, metadata %q, want %q", k, spec.Labels[k], e.Labels[k], v)
		}
	}
	a := e.Annotations
	if a[autoregister.AnnotationGroup] != "reviews-vm" || a["team"] != "books" || a[autoregister.AnnotationController] != "sextant-0" ||
		a[autoregister.AnnotationConnectedAt] != at.Format(time.RFC3339Nano) || a[autoregister.AnnotationDisconnectedAt] != "" {
		t.Errorf("annotations %v", a)
	}
	ps := model.Build(s, mesh.Default())
	eps := ps.EndpointsForPort(ps.ServiceForHostname("bookinfo", "reviews.bookinfo.svc.cluster.local"), 9080, nil)
	if len(eps) != 1 || eps[0].Address != "10.0.0.7" || eps[0].Port != 9081 {
		t.Errorf("reviews endpoints %v, want the VM on 9081", eps)
	}
}

// A network from the node is part of the name (GROUP-IP-NETWORK) and the entry's network; an IPv6 address's
// colons become dashes.
func TestEntryNameHasNetworkAndIPv6(t *testing.T) {
	s := newStore(t)
	c := newController(t, s, time.Minute)
	p := vm("fd00::7", &reviewsSA)
	p.Network = "net-b"
	if err := c.Connected(xds.ConnectionEvent{ID: "a", Proxy: p, ConnectedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	e := s.Get(config.Key{Kind: config.WorkloadEntry, Namespace: "bookinfo", Name: "reviews-vm-fd00--7-net-b"})
	if e == nil || e.Spec.(*networking.WorkloadEntry).Network != "net-b" {
		t.Fatalf("entry %v", e)
	}
}

// Refusals, as istiod's: no such group, no verified identity, an identity of another service account.
func TestConnectRefused(t *testing.T) {
	other := authn.Identity{TrustDomain: "cluster.local", Namespace: "bookinfo", ServiceAccount: "ratings"}
	for _, tc := range []struct {
		name  string
		proxy func() *model.Proxy
		code  codes.Code
		msg   string
	}{
		{"no group", func() *model.Proxy { p := vm("10.0.0.7", &reviewsSA); p.AutoRegisterGroup = "nope"; return p },
			codes.FailedPrecondition, "cannot find WorkloadGroup bookinfo/nope"},
		{"not authenticated", func() *model.Proxy { return vm("10.0.0.7", nil) }, codes.PermissionDenied, "requires a verified identity"},
		{"other account", func() *model.Proxy { return vm("10.0.0.7", &other) }, codes.PermissionDenied,
			`service account mismatch: identity spiffe://cluster.local/ns/bookinfo/sa/ratings, ` +
				`entry (its WorkloadGroup's template.serviceAccount) "reviews"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			c := newController(t, s, time.Minute)
			err := c.Connected(xds.ConnectionEvent{ID: "a", Proxy: tc.proxy(), ConnectedAt: time.Now()})
			if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %v, want %s: %s", err, tc.code, tc.msg)
			}
			if n := s.Count(config.WorkloadEntry); n != 0 {
				t.Errorf("%d entries registered", n)
			}
		})
	}
}

// A proxy that is not registering is let through untouched.
func TestConnectWithoutGroup(t *testing.T) {
	s := newStore(t)
	c := newController(t, s, time.Minute)
	p := vm("10.0.0.7", nil)
	p.AutoRegisterGroup = ""
	if err := c.Connected(xds.ConnectionEvent{ID: "a", Proxy: p, ConnectedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	c.Disconnected(xds.ConnectionEvent{ID: "a", Proxy: p})
	if n := s.Count(config.WorkloadEntry); n != 0 {
		t.Errorf("%d entries", n)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The agent's last connection ending marks the entry disconnected; the grace period later it is deleted.
// While another connection of the same agent is open, nothing changes.
func TestDisconnectDeletesAfterGracePeriod(t *testing.T) {
	s := newStore(t)
	c := newController(t, s, 200*time.Millisecond)
	p := vm("10.0.0.7", &reviewsSA)
	first := xds.ConnectionEvent{ID: "a", Proxy: p, ConnectedAt: time.Now()}
	second := xds.ConnectionEvent{ID: "b", Proxy: p, ConnectedAt: time.Now()}
	for _, ev := range []xds.ConnectionEvent{first, second} {
		if err := c.Connected(ev); err != nil {
			t.Fatal(err)
		}
	}
	c.Disconnected(first)
	time.Sleep(50 * time.Millisecond)
	if e := s.Get(entryKey); e == nil || e.Annotations[autoregister.AnnotationDisconnectedAt] != "" {
		t.Fatalf("after one of two connections ended: %v", e)
	}
	gone := time.Now()
	c.Disconnected(second)
	waitFor(t, "marked disconnected", func() bool {
		e := s.Get(entryKey)
		return e != nil && e.Annotations[autoregister.AnnotationDisconnectedAt] != "" && e.Annotations[autoregister.AnnotationConnectedAt] == ""
	})
	waitFor(t, "deleted", func() bool { return s.Get(entryKey) == nil })
	if d := time.Since(gone); d < 200*time.Millisecond {
		t.Errorf("deleted %s after the agent went, before the grace period", d)
	}
}

// An agent that reconnects within the grace period keeps its entry, connected again.
func TestReconnectWithinGracePeriodKeepsTheEntry(t *testing.T) {
	s := newStore(t)
	c := newController(t, s, 300*time.Millisecond)
	p := vm("10.0.0.7", &reviewsSA)
	first := xds.ConnectionEvent{ID: "a", Proxy: p, ConnectedAt: time.Now()}
	if err := c.Connected(first); err != nil {
		t.Fatal(err)
	}
	c.Disconnected(first)
	waitFor(t, "marked disconnected", func() bool {
		e := s.Get(entryKey)
		return e != nil && e.Annotations[autoregister.AnnotationDisconnectedAt] != ""
	})
	if err := c.Connected(xds.ConnectionEvent{ID: "b", Proxy: p, ConnectedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	e := s.Get(entryKey)
	if e == nil || e.Annotations[autoregister.AnnotationDisconnectedAt] != "" || e.Annotations[autoregister.AnnotationConnectedAt] == "" {
		t.Fatalf("after reconnecting: %v", e)
	}
}

// An agent with a readiness probe in its proxy config gets istiod's health-check annotation.
func TestReadinessProbeAnnotates(t *testing.T) {
	s := newStore(t)
	c := newController(t, s, time.Minute)
	p := vm("10.0.0.7", &reviewsSA)
	p.ProxyConfig = &meshconfig.ProxyConfig{ReadinessProbe: &networking.ReadinessProbe{
		HealthCheckMethod: &networking.ReadinessProbe_TcpSocket{TcpSocket: &networking.TCPHealthCheckConfig{Port: 9081}}}}
	if err := c.Connected(xds.ConnectionEvent{ID: "a", Proxy: p, ConnectedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if e := s.Get(entryKey); e == nil || e.Annotations[autoregister.AnnotationHealthChecks] != "true" {
		t.Fatalf("entry %v", e)
	}
}

// A WorkloadEntry a user wrote under the same name wins over the registered one.
func TestUsersEntryWins(t *testing.T) {
	s := newStore(t)
	c := newController(t, s, time.Minute)
	doc := "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: reviews-vm-10.0.0.7, namespace: bookinfo}\n" +
		"spec: {address: 10.9.9.9, serviceAccount: reviews}\n"
	mine, err := config.Parse([]byte(doc), "we.yaml", 0, "default")
	if err != nil {
		t.Fatal(err)
	}
	s.Upsert(store.LayerFile, mine)
	if err := c.Connected(xds.ConnectionEvent{ID: "a", Proxy: vm("10.0.0.7", &reviewsSA), ConnectedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if e := s.Get(entryKey); e != mine {
		t.Errorf("effective entry %v, want the user's", e)
	}
}

// The agent's health reports become the entry's Healthy condition (a failure with its message), for the
// connection that registered the entry only.
func TestHealthReportsWriteTheHealthyCondition(t *testing.T) {
	s := newStore(t)
	c := newController(t, s, time.Minute)
	p := vm("10.0.0.7", &reviewsSA)
	p.ProxyConfig = &meshconfig.ProxyConfig{ReadinessProbe: &networking.ReadinessProbe{
		HealthCheckMethod: &networking.ReadinessProbe_TcpSocket{TcpSocket: &networking.TCPHealthCheckConfig{Port: 9081}}}}
	ev := xds.ConnectionEvent{ID: "a", Proxy: p, ConnectedAt: time.Now()}
	if err := c.Connected(ev); err != nil {
		t.Fatal(err)
	}
	if e := s.Get(entryKey); e == nil || e.Conditions != nil {
		t.Fatalf("entry before any report: %v, conditions %v", e, e.Conditions)
	}
	c.Report(ev, autoregister.HealthType, true, "dial tcp 10.0.0.7:9081: connection refused")
	if got := s.Get(entryKey).Conditions["Healthy"]; got != "False" {
		t.Errorf("after a failed probe Healthy = %q, want False", got)
	}
	c.Report(ev, autoregister.HealthType, false, "")
	if got := s.Get(entryKey).Conditions["Healthy"]; got != "True" {
		t.Errorf("after a passed probe Healthy = %q, want True", got)
	}
	other := ev
	other.ID = "not-registered"
	c.Report(other, autoregister.HealthType, true, "from another stream")
	if got := s.Get(entryKey).Conditions["Healthy"]; got != "True" {
		t.Errorf("a stream that registered nothing changed Healthy to %q", got)
	}
}
