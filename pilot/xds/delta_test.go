package xds

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sextantmesh/sextant/pilot/model"
)

func deltaAsk(c *deltaClient, n *core.Node, typeURL string, sub, unsub []string, ackOf *discovery.DeltaDiscoveryResponse) {
	req := &discovery.DeltaDiscoveryRequest{Node: n, TypeUrl: typeURL, ResourceNamesSubscribe: sub, ResourceNamesUnsubscribe: unsub}
	if ackOf != nil {
		req.ResponseNonce = ackOf.Nonce
	}
	c.send(req)
}

func TestDeltaAddUpdateRemove(t *testing.T) {
	e := newEnv(t, twoClusters())
	c := e.delta(t)
	deltaAsk(c, sidecar("pod", "ns1"), ClusterType, nil, nil, nil)
	r := c.recv()
	if got := deltaResources(t, r); !maps.Equal(got, map[string]string{"a": "a1", "b": "b1"}) || len(r.RemovedResources) > 0 {
		t.Fatalf("initial: %v removed %v", got, r.RemovedResources)
	}
	v1 := versions(r)
	deltaAsk(c, nil, ClusterType, nil, nil, r)
	c.none(200 * time.Millisecond)

	e.set(ClusterType, "a", "a2") // update: only a is sent
	r = c.recv()
	if got := deltaResources(t, r); !maps.Equal(got, map[string]string{"a": "a2"}) || versions(r)["a"] == v1["a"] {
		t.Fatalf("update: %v versions %v", got, versions(r))
	}
	deltaAsk(c, nil, ClusterType, nil, nil, r)

	e.set(ClusterType, "c", "c1") // add
	r = c.recv()
	if got := deltaResources(t, r); !maps.Equal(got, map[string]string{"c": "c1"}) {
		t.Fatalf("add: %v", got)
	}
	deltaAsk(c, nil, ClusterType, nil, nil, r)

	e.del(ClusterType, "b") // remove
	r = c.recv()
	if len(r.Resources) != 0 || !slices.Equal(r.RemovedResources, []string{"b"}) {
		t.Fatalf("remove: resources %v removed %v", r.Resources, r.RemovedResources)
	}
	deltaAsk(c, nil, ClusterType, nil, nil, r)

	e.publish(true, nil, func(snapshot) {}) // a full push that changes nothing sends nothing
	c.none(300 * time.Millisecond)
	eventually(t, "ACK", func() bool { return watched(t, e.srv, ClusterType).NonceAcked == r.Nonce })
	if w := watched(t, e.srv, ClusterType); w.VersionAcked != r.SystemVersionInfo {
		t.Fatalf("acked %q, want %q", w.VersionAcked, r.SystemVersionInfo)
	}
}

// A reconnecting client says what it has; only what changed meanwhile is sent.
func TestDeltaReconnectInitialVersions(t *testing.T) {
	e := newEnv(t, snapshot{ClusterType: {"a": "a1", "b": "b1", "c": "c1"}})
	c1 := e.delta(t)
	n := sidecar("pod", "ns1")
	deltaAsk(c1, n, ClusterType, nil, nil, nil)
	r := c1.recv()
	have := versions(r)
	if len(have) != 3 {
		t.Fatalf("initial %v", have)
	}
	c1.cancel()

	e.set(ClusterType, "b", "b2")
	e.del(ClusterType, "c")
	c2 := e.delta(t)
	c2.send(&discovery.DeltaDiscoveryRequest{Node: n, TypeUrl: ClusterType, InitialResourceVersions: have})
	r = c2.recv()
	if got := deltaResources(t, r); !maps.Equal(got, map[string]string{"b": "b2"}) || !slices.Equal(r.RemovedResources, []string{"c"}) {
		t.Fatalf("after reconnect: %v removed %v (a is unchanged and must not be re-sent)", got, r.RemovedResources)
	}

	// Nothing changed at all: the answer is empty (it still completes the client's initial fetch).
	c2.cancel()
	c3 := e.delta(t)
	have["b"] = versions(r)["b"]
	delete(have, "c")
	c3.send(&discovery.DeltaDiscoveryRequest{Node: n, TypeUrl: ClusterType, InitialResourceVersions: have})
	if r = c3.recv(); len(r.Resources) != 0 || len(r.RemovedResources) != 0 {
		t.Fatalf("unchanged reconnect got %v removed %v", r.Resources, r.RemovedResources)
	}
}

// ztunnel subscribes to every workload and asks for addresses it does not know on demand.
func TestDeltaOnDemandOnWildcard(t *testing.T) {
	e := newEnv(t, snapshot{AddressType: {"w1": "1", "w2": "1", "net/10.0.0.9": "1"}})
	c := e.delta(t)
	deltaAsk(c, node("ztunnel~10.0.0.2~zt-1.istio-system~istio-system.svc.cluster.local", nil), AddressType, nil, nil, nil)
	r := c.recv()
	if got := deltaResources(t, r); !maps.Equal(got, map[string]string{"w1": "1", "w2": "1"}) {
		t.Fatalf("wildcard: %v", got)
	}
	deltaAsk(c, nil, AddressType, []string{"net/10.0.0.9", "net/10.9.9.9"}, nil, r)
	r = c.recv()
	if got := deltaResources(t, r); !maps.Equal(got, map[string]string{"net/10.0.0.9": "1"}) ||
		!slices.Equal(r.RemovedResources, []string{"net/10.9.9.9"}) {
		t.Fatalf("on demand: %v removed %v (a name that does not exist is reported removed)", got, r.RemovedResources)
	}
	if w := watched(t, e.srv, AddressType); !w.Wildcard || w.ResourceNames.Len() != 2 {
		t.Fatalf("watch %+v", w)
	}
	deltaAsk(c, nil, AddressType, nil, nil, r)

	e.set(AddressType, "net/10.0.0.9", "2")
	r = c.recv()
	if got := deltaResources(t, r); !maps.Equal(got, map[string]string{"net/10.0.0.9": "2"}) {
		t.Fatalf("on-demand update: %v", got)
	}
	// Unsubscribed while "*" stays, a name is answered with what the wildcard says of it: "net/" names exist
	// only on demand, so it is removed.
	deltaAsk(c, nil, AddressType, nil, []string{"net/10.0.0.9"}, r)
	r = c.recv()
	if len(r.Resources) != 0 || !slices.Equal(r.RemovedResources, []string{"net/10.0.0.9"}) {
		t.Fatalf("unsubscribed under the wildcard: %v removed %v", deltaResources(t, r), r.RemovedResources)
	}
	deltaAsk(c, nil, AddressType, nil, nil, r)
	e.set(AddressType, "net/10.0.0.9", "3")
	c.none(300 * time.Millisecond)
	e.set(AddressType, "w1", "2")
	if got := deltaResources(t, c.recv()); !maps.Equal(got, map[string]string{"w1": "2"}) {
		t.Fatalf("wildcard update: %v", got)
	}
}

func TestDeltaExplicitNames(t *testing.T) {
	e := newEnv(t, twoClusters())
	c := e.delta(t)
	deltaAsk(c, sidecar("pod", "ns1"), EndpointType, []string{"a"}, nil, nil)
	r := c.recv()
	if got := deltaResources(t, r); !maps.Equal(got, map[string]string{"a": "ea1"}) {
		t.Fatalf("subscribe a: %v", got)
	}
	deltaAsk(c, nil, EndpointType, []string{"b", "missing"}, nil, r)
	r = c.recv()
	if got := deltaResources(t, r); !maps.Equal(got, map[string]string{"b": "eb1"}) || !slices.Equal(r.RemovedResources, []string{"missing"}) {
		t.Fatalf("subscribe b, missing: %v removed %v", got, r.RemovedResources)
	}
	deltaAsk(c, nil, EndpointType, nil, []string{"a"}, r)
	c.none(200 * time.Millisecond)
	e.set(EndpointType, "a", "ea2") // no longer subscribed
	c.none(300 * time.Millisecond)
	e.set(EndpointType, "missing", "now") // appears: it was subscribed, so it is sent
	if got := deltaResources(t, c.recv()); !maps.Equal(got, map[string]string{"missing": "now"}) {
		t.Fatalf("late resource: %v", got)
	}
}

func TestDeltaNackIsNotRepushed(t *testing.T) {
	e := newEnv(t, twoClusters())
	c := e.delta(t)
	deltaAsk(c, sidecar("pod", "ns1"), ClusterType, nil, nil, nil)
	r := c.recv()
	deltaAsk(c, nil, ClusterType, nil, nil, r)
	e.set(ClusterType, "a", "bad")
	r = c.recv()
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: ClusterType, ResponseNonce: r.Nonce, ErrorDetail: statusProto("bad a")})
	c.none(time.Second)
	e.publish(true, nil, func(snapshot) {}) // same content again: not re-sent either
	c.none(300 * time.Millisecond)
	if w := watched(t, e.srv, ClusterType); w.LastError != "bad a" || w.NACKs != 1 {
		t.Fatalf("watch after NACK %+v", w)
	}
	e.set(ClusterType, "a", "good")
	if got := deltaResources(t, c.recv()); !maps.Equal(got, map[string]string{"a": "good"}) {
		t.Fatalf("fix: %v", got)
	}
}

// One full push that changes, adds and removes resources at once, next to unchanged ones handed out again
// as the same *Resource: exactly the changes go out.
func TestDeltaFullStateMixedChanges(t *testing.T) {
	t.Run("shared", func(t *testing.T) { testDeltaFullStateMixedChanges(t, false, nil) })
	t.Run("rebuilt", func(t *testing.T) { testDeltaFullStateMixedChanges(t, true, nil) })
	// Full states out of name order are not kept as lists; the next diff must still be exact.
	t.Run("reversed", func(t *testing.T) {
		testDeltaFullStateMixedChanges(t, false, func(_ uint64, res model.Resources) { slices.Reverse(res) })
	})
	// Sorted first, so the client's state is a list; later states swap two resources the client has.
	t.Run("swapped", func(t *testing.T) {
		testDeltaFullStateMixedChanges(t, false, func(v uint64, res model.Resources) {
			if v > 1 && len(res) > 2 {
				res[0], res[2] = res[2], res[0]
			}
		})
	})
}

func testDeltaFullStateMixedChanges(t *testing.T, rebuild bool, order func(uint64, model.Resources)) {
	e := newEnv(t, snapshot{ClusterType: {"a": "a1", "b": "b1", "c": "c1", "d": "d1", "f": "f1"}})
	e.rebuild, e.order = rebuild, order
	c := e.delta(t)
	deltaAsk(c, sidecar("pod", "ns1"), ClusterType, nil, nil, nil)
	r := c.recv()
	if len(r.Resources) != 5 {
		t.Fatalf("initial %v", deltaResources(t, r))
	}
	deltaAsk(c, nil, ClusterType, nil, nil, r)
	for i, step := range []struct {
		edit        func(snapshot)
		want        map[string]string
		wantRemoved []string
	}{
		{func(s snapshot) { delete(s[ClusterType], "b"); s[ClusterType]["c"] = "c2"; s[ClusterType]["e"] = "e1" },
			map[string]string{"c": "c2", "e": "e1"}, []string{"b"}},
		{func(s snapshot) { delete(s[ClusterType], "d") }, map[string]string{}, []string{"d"}},
		{func(s snapshot) { delete(s[ClusterType], "e"); s[ClusterType]["a"] = "a2" }, map[string]string{"a": "a2"}, []string{"e"}},
		{func(s snapshot) { s[ClusterType]["b"] = "b1" }, map[string]string{"b": "b1"}, nil}, // back, same payload
	} {
		e.publish(true, nil, step.edit)
		r = c.recv()
		got, removed := deltaResources(t, r), r.RemovedResources
		if len(step.want) > 0 && len(step.wantRemoved) > 0 {
			// Removals follow the changes in a response of their own: make-before-break.
			if len(removed) > 0 {
				t.Fatalf("step %d: removals %v ride with the changes %v", i, removed, got)
			}
			deltaAsk(c, nil, ClusterType, nil, nil, r)
			r = c.recv()
			if len(r.Resources) > 0 {
				t.Fatalf("step %d: a second response with resources %v", i, deltaResources(t, r))
			}
			removed = r.RemovedResources
		}
		if !maps.Equal(got, step.want) || !slices.Equal(removed, step.wantRemoved) {
			t.Fatalf("step %d: got %v removed %v; want %v removed %v", i, got, removed, step.want, step.wantRemoved)
		}
		deltaAsk(c, nil, ClusterType, nil, nil, r)
	}
	e.publish(true, nil, func(snapshot) {})
	c.none(200 * time.Millisecond)
}

// budgetForOne starts a server with room in flight for one response and a delta sidecar holding it: the
// clusters it got, not yet ACKed.
func budgetForOne(t *testing.T) (*testEnv, *deltaClient, *discovery.DeltaDiscoveryResponse) {
	e := newEnv(t, twoClusters(), func(_ *testEnv, o *Options) { o.MaxBytesInFlight = 1 })
	c := e.delta(t)
	deltaAsk(c, sidecar("pod", "ns1"), ClusterType, nil, nil, nil)
	return e, c, c.recv()
}

// Envoy subscribes to the endpoints of new clusters before it ACKs the clusters. With room in flight for one
// response, the endpoints wait for the clusters' budget, which only that ACK frees: the ACK must be read
// while the subscription waits, not after it (the flight timeout would free it only seconds later).
func TestAckBehindAWaitingSubscriptionIsRead(t *testing.T) {
	_, c, cds := budgetForOne(t)
	start := time.Now()
	deltaAsk(c, nil, EndpointType, []string{"a", "b"}, nil, nil)
	deltaAsk(c, nil, ClusterType, nil, nil, cds)
	eds := c.recv()
	if got := deltaResources(t, eds); !maps.Equal(got, map[string]string{"a": "ea1", "b": "eb1"}) {
		t.Fatalf("endpoints %v", got)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("endpoints came %v after the subscription: the ACK behind it was not read", d)
	}
}

// The same with a second subscription between the waiting one and the ACK, as Envoy sends its listeners'
// after its clusters': the reader must not stop reading while the handler is busy, or the ACK that frees
// the budget is never read and every stream waiting for budget waits for the flight timeout.
func TestAckBehindTwoWaitingSubscriptionsIsRead(t *testing.T) {
	_, c, cds := budgetForOne(t)
	start := time.Now()
	deltaAsk(c, nil, EndpointType, []string{"a", "b"}, nil, nil)
	deltaAsk(c, nil, ListenerType, nil, nil, nil)
	deltaAsk(c, nil, ClusterType, nil, nil, cds)
	if eds := c.recv(); eds.TypeUrl != EndpointType {
		t.Fatalf("got %s, want the endpoints first", eds.TypeUrl)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("endpoints came %v after the subscription: the ACK behind two requests was not read", d)
	}
}

// The reader queues what it cannot hand over, but not without bound: a client that keeps sending requests
// that need an answer while its handler waits has its stream ended, saying why.
func TestFloodingClientIsEndedWhileItsHandlerWaits(t *testing.T) {
	_, c, _ := budgetForOne(t) // the clusters are not ACKed: the budget stays taken
	for i := range maxQueuedRequests + 2 {
		deltaAsk(c, nil, EndpointType, []string{"e" + strconv.Itoa(i)}, nil, nil)
	}
	if err := c.end(); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "requests waiting") {
		t.Fatalf("flooding client ended with %v, want ResourceExhausted naming the queued requests", err)
	}
}

// A push that waits for budget holds the connection's turn: an ACK that arrives meanwhile must still be
// read and free its response's budget, even when the proxy has other ACKs queued before it.
func TestAcksAreReadWhileAPushWaitsForBudget(t *testing.T) {
	e, c, cds := budgetForOne(t)
	deltaAsk(c, nil, ClusterType, nil, nil, cds)
	deltaAsk(c, nil, EndpointType, []string{"a", "b"}, nil, nil)
	eds := c.recv()
	// The EDS response holds the budget; the push of a new cluster waits for it under the turn.
	e.set(ClusterType, "a", "a2")
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	deltaAsk(c, nil, ListenerType, nil, nil, nil)
	deltaAsk(c, nil, EndpointType, nil, nil, eds)
	if r := c.recv(); r.TypeUrl != ClusterType {
		t.Fatalf("got %s, want the pushed clusters", r.TypeUrl)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("the push came %v after the ACK that freed its budget", d)
	}
}
