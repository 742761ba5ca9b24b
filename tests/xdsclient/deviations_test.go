package xdsclient

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// One test per protocol deviation of the delta transport: each fails while the server deviates.

// settledWith starts a server on files with the given clients connected and waits until they settle.
func deviationEnv(t *testing.T, extra ...service) *server {
	t.Helper()
	files := baseFiles()
	for _, s := range extra {
		files[s.file()] = s.yaml()
	}
	return startServer(t, files)
}

func connectEnvoy(t *testing.T, s *server, delta bool) *Envoy {
	t.Helper()
	e := NewEnvoy(EnvoyOptions{Addr: s.addr(), NodeID: sidecarNode("alpha"), Delta: delta, BuildVersion: [3]uint32{1, 36, 0},
		InitialFetchTimeout: testFetchTimeout})
	if err := e.Connect(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	if !settled(s, []*Envoy{e}, nil, 10*time.Second) {
		t.Fatalf("%s did not settle: warming %v, unanswered %v", e.NodeID(), e.Warming(), e.Unanswered(0))
	}
	return e
}

func connectZtunnel(t *testing.T, s *server, onDemand bool) *Ztunnel {
	t.Helper()
	z := NewZtunnel(ZtunnelOptions{Addr: s.addr(), IP: "10.2.0.2", Pod: "ztunnel-b", Namespace: "istio-system",
		NodeName: "node-a", OnDemand: onDemand})
	if err := z.Connect(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(z.Disconnect)
	if !waitFor(10*time.Second, func() bool { return len(z.Unanswered(0)) == 0 }) {
		t.Fatalf("initial requests not answered: %v", z.Unanswered(0))
	}
	return z
}

// Deviation (a), delta: a DestinationRule that changes a cluster but not its endpoints. Envoy warms the
// updated cluster until a ClusterLoadAssignment for it arrives, and does not ask again for a name it is
// subscribed to already, so the server must send the assignment with the cluster.
func TestDeltaUpdatedClusterGetsItsEndpoints(t *testing.T) {
	reviews := service{ns: "alpha", name: "reviews", index: 1, ports: []port{{"http", 9080}}, pods: 2}
	s := deviationEnv(t, reviews)
	e := connectEnvoy(t, s, true)
	const name = "outbound|9080||reviews.alpha.svc.cluster.local"
	before := e.Held(ClusterType)[name]
	if before.Any == nil {
		t.Fatalf("%s not held; clusters %v", name, keys(e.Held(ClusterType)))
	}
	s.put(t, drFile(reviews), destinationRule{maxConn: 100}.yaml(reviews))
	if !waitFor(10*time.Second, func() bool { return len(e.Timeouts()) > 0 || changed(e, name, before) && len(e.Warming()) == 0 }) {
		t.Fatalf("the updated cluster did not become active: warming %v", e.Warming())
	}
	for _, to := range e.Timeouts() {
		t.Errorf("%s warmed only by initial_fetch_timeout (%v): the server sent no %s for it with the updated cluster",
			to.What, to.Waited.Round(time.Millisecond), to.Name)
	}
	if t.Failed() {
		return
	}
	settled(s, []*Envoy{e}, nil, 5*time.Second)
	report(t, e.NodeID(), checkEnvoy(s, e))
}

func changed(e *Envoy, name string, before Resource) bool {
	now, ok := e.Held(ClusterType)[name]
	return ok && !Same(now.Any, before.Any)
}

// Deviation (b), delta: subscribing again to a name already subscribed must be answered. ztunnel looks an
// unknown address up, is told it does not exist, and looks it up again later: each lookup waits for an
// answer.
func TestDeltaResubscribedNameIsAnswered(t *testing.T) {
	s := deviationEnv(t)
	z := connectZtunnel(t, s, true)
	const name = "/10.77.0.1"
	for i := range 2 {
		done, err := z.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			t.Fatalf("lookup %d of %s (unknown address) got neither the address nor its removal within 3s", i+1, name)
		}
	}
}

// Deviation (c), delta: a first request that subscribes and unsubscribes "*" at once (ztunnel on demand)
// subscribes to nothing; it must not become a wildcard.
func TestDeltaSubscribeAndUnsubscribeWildcardIsNotWildcard(t *testing.T) {
	reviews := service{ns: "alpha", name: "reviews", index: 1, ports: []port{{"http", 9080}}, pods: 2}
	s := deviationEnv(t, reviews)
	z := connectZtunnel(t, s, true)
	time.Sleep(quiet)
	if held := z.Held(AddressType); len(held) > 0 {
		t.Errorf("an on-demand ztunnel that looked nothing up was sent %d addresses: %v", len(held), keys(held))
	}
	subs, err := s.subscriptions(z.NodeID())
	if err != nil {
		t.Fatal(err)
	}
	if sub := subs[AddressType]; sub.Wildcard {
		t.Errorf("the server takes subscribe [*] + unsubscribe [*] as a wildcard subscription: %+v", sub)
	}
}

// Deviation (d), delta: unsubscribing an explicit name while "*" is subscribed must be answered. Envoy
// cannot tell whether the wildcard still covers the name, keeps it as "ambiguous" and waits for the server
// to send it again or remove it (delta_subscription_state.cc updateSubscriptionInterest; xds_protocol.rst,
// "unsubscribing ... while also subscribed to the wildcard": the server must send the resource).
func TestDeltaUnsubscribeUnderWildcardIsAnswered(t *testing.T) {
	reviews := service{ns: "alpha", name: "reviews", index: 1, ports: []port{{"http", 9080}}, pods: 2}
	s := deviationEnv(t, reviews)
	e := connectEnvoy(t, s, true)
	const name = "outbound|9080||reviews.alpha.svc.cluster.local"
	if _, ok := e.Held(ClusterType)[name]; !ok {
		t.Fatalf("%s not held", name)
	}
	responses, _, _ := e.Stats()
	e.Watch(ClusterType, name)
	time.Sleep(quiet)
	e.Unwatch(ClusterType, name)
	if !waitFor(3*time.Second, func() bool { return !slices.ContainsFunc(e.Unanswered(0), isAmbiguous) }) {
		after, _, _ := e.Stats()
		t.Errorf("after unsubscribing %s with \"*\" still subscribed, the server sent neither it nor its removal (%d responses since): %v",
			name, after-responses, e.Unanswered(0))
	}
	if _, ok := e.Held(ClusterType)[name]; !ok {
		t.Errorf("%s is no longer held, though the wildcard covers it", name)
	}
}

func isAmbiguous(s string) bool { return strings.Contains(s, "while \"*\" is on") }

func keys[V any](m map[string]V) []string {
	return slices.Sorted(func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	})
}
