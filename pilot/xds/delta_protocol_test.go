package xds

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/sextantmesh/sextant/pilot/model"
)

// ackDelta reads one response of typeURL and ACKs it.
func ackDelta(t *testing.T, c *deltaClient, typeURL string) *discovery.DeltaDiscoveryResponse {
	t.Helper()
	r := c.recv()
	if r.TypeUrl != typeURL {
		t.Fatalf("got a %s response, want %s: %v", r.TypeUrl, typeURL, r)
	}
	deltaAsk(c, nil, typeURL, nil, nil, r)
	return r
}

// Envoy warms a cluster it updates until a load assignment for it arrives, and does not ask again for a
// name it is subscribed to: a cluster change that leaves the endpoints as they were must still bring them.
func TestDeltaUpdatedClusterGetsItsAssignment(t *testing.T) {
	e := newEnv(t, twoClusters())
	c := e.delta(t)
	deltaAsk(c, sidecar("pod", "ns1"), ClusterType, nil, nil, nil)
	ackDelta(t, c, ClusterType)
	deltaAsk(c, nil, EndpointType, []string{"a", "b"}, nil, nil)
	ackDelta(t, c, EndpointType)

	e.set(ClusterType, "a", "a2") // a DestinationRule edit: the cluster changes, its endpoints do not
	if got := deltaResources(t, ackDelta(t, c, ClusterType)); !maps.Equal(got, map[string]string{"a": "a2"}) {
		t.Fatalf("clusters %v", got)
	}
	if got := deltaResources(t, ackDelta(t, c, EndpointType)); !maps.Equal(got, map[string]string{"a": "ea1"}) {
		t.Fatalf("endpoints after the cluster update: %v, want a's unchanged assignment", got)
	}
	c.none(200 * time.Millisecond)
}

// A resumed stream whose clusters changed while it was away: the client's first EDS request claims the old
// assignments, which must be sent all the same for the updated clusters to warm.
func TestDeltaResumedUpdatedClusterGetsItsAssignment(t *testing.T) {
	e := newEnv(t, twoClusters())
	n := sidecar("pod", "ns1")
	c1 := e.delta(t)
	deltaAsk(c1, n, ClusterType, nil, nil, nil)
	cds := ackDelta(t, c1, ClusterType)
	deltaAsk(c1, nil, EndpointType, []string{"a", "b"}, nil, nil)
	eds := ackDelta(t, c1, EndpointType)
	c1.cancel()

	e.set(ClusterType, "a", "a2")
	c2 := e.delta(t)
	c2.send(&discovery.DeltaDiscoveryRequest{Node: n, TypeUrl: ClusterType, InitialResourceVersions: versions(cds)})
	if got := deltaResources(t, ackDelta(t, c2, ClusterType)); !maps.Equal(got, map[string]string{"a": "a2"}) {
		t.Fatalf("resumed clusters %v", got)
	}
	c2.send(&discovery.DeltaDiscoveryRequest{TypeUrl: EndpointType, ResourceNamesSubscribe: []string{"a", "b"},
		InitialResourceVersions: versions(eds)})
	r := ackDelta(t, c2, EndpointType)
	if got := deltaResources(t, r); !maps.Equal(got, map[string]string{"a": "ea1"}) || len(r.RemovedResources) > 0 {
		t.Fatalf("resumed endpoints %v removed %v, want only a's", got, r.RemovedResources)
	}
}

// The protocol asks the server to answer every subscription, even to a name subscribed already: the client
// may have dropped it. On-demand ztunnel subscribes on every lookup and waits with no timeout.
func TestDeltaSubscribingAgainIsAnswered(t *testing.T) {
	e := newEnv(t, twoClusters())
	c := e.delta(t)
	deltaAsk(c, sidecar("pod", "ns1"), EndpointType, []string{"a", "missing"}, nil, nil)
	ackDelta(t, c, EndpointType)
	for range 3 {
		deltaAsk(c, nil, EndpointType, []string{"a", "missing"}, nil, nil)
		r := ackDelta(t, c, EndpointType)
		if got := deltaResources(t, r); !maps.Equal(got, map[string]string{"a": "ea1"}) ||
			!slices.Equal(r.RemovedResources, []string{"missing"}) {
			t.Fatalf("subscribed again: %v removed %v", got, r.RemovedResources)
		}
	}
}

// On-demand ztunnel's first request subscribes to "*" and unsubscribes from it: nothing, not everything.
func TestDeltaFirstRequestUnsubscribingStarIsNotWildcard(t *testing.T) {
	e := newEnv(t, snapshot{AddressType: {"w1": "1", "w2": "1", "net/10.0.0.9": "1"}})
	c := e.delta(t)
	deltaAsk(c, node("ztunnel~10.0.0.2~zt-1.istio-system~istio-system.svc.cluster.local", nil), AddressType,
		[]string{"*"}, []string{"*"}, nil)
	r := ackDelta(t, c, AddressType)
	if len(r.Resources) != 0 || len(r.RemovedResources) != 0 {
		t.Fatalf("first response %v removed %v, want nothing", deltaResources(t, r), r.RemovedResources)
	}
	if w := watched(t, e.srv, AddressType); w.Wildcard {
		t.Fatal("the subscription became a wildcard")
	}
	deltaAsk(c, nil, AddressType, []string{"net/10.0.0.9"}, nil, nil)
	if got := deltaResources(t, ackDelta(t, c, AddressType)); !maps.Equal(got, map[string]string{"net/10.0.0.9": "1"}) {
		t.Fatalf("lookup %v", got)
	}
	e.set(AddressType, "w1", "2") // not subscribed
	c.none(300 * time.Millisecond)
}

// Envoy holds a name it unsubscribes while "*" is subscribed as ambiguous, and waits for the server's word.
func TestDeltaUnsubscribingUnderWildcardIsAnswered(t *testing.T) {
	e := newEnv(t, twoClusters())
	c := e.delta(t)
	deltaAsk(c, sidecar("pod", "ns1"), ClusterType, []string{"*", "a"}, nil, nil)
	ackDelta(t, c, ClusterType)
	deltaAsk(c, nil, ClusterType, nil, []string{"a"}, nil)
	r := ackDelta(t, c, ClusterType)
	if got := deltaResources(t, r); !maps.Equal(got, map[string]string{"a": "a1"}) || len(r.RemovedResources) > 0 {
		t.Fatalf("unsubscribed under the wildcard: %v removed %v, want a again", got, r.RemovedResources)
	}
}

// Make-before-break: what a push removes from clusters goes after the listeners that stopped using it.
func TestDeltaRemovalsFollowListeners(t *testing.T) {
	e := newEnv(t, snapshot{ClusterType: {"old": "1"}, ListenerType: {"l": "to-old"}})
	c := e.delta(t)
	n := sidecar("pod", "ns1")
	deltaAsk(c, n, ClusterType, nil, nil, nil)
	ackDelta(t, c, ClusterType)
	deltaAsk(c, nil, ListenerType, nil, nil, nil)
	ackDelta(t, c, ListenerType)

	e.publish(true, nil, func(s snapshot) { // a rename: new cluster, listener moved to it, old one gone
		delete(s[ClusterType], "old")
		s[ClusterType]["new"] = "1"
		s[ListenerType]["l"] = "to-new"
	})
	r := ackDelta(t, c, ClusterType)
	if got := deltaResources(t, r); !maps.Equal(got, map[string]string{"new": "1"}) || len(r.RemovedResources) > 0 {
		t.Fatalf("first: clusters %v removed %v, want only the new cluster", got, r.RemovedResources)
	}
	if got := deltaResources(t, ackDelta(t, c, ListenerType)); !maps.Equal(got, map[string]string{"l": "to-new"}) {
		t.Fatalf("then the listener: %v", got)
	}
	r = ackDelta(t, c, ClusterType)
	if len(r.Resources) > 0 || !slices.Equal(r.RemovedResources, []string{"old"}) {
		t.Fatalf("last: clusters %v removed %v, want the old cluster removed", deltaResources(t, r), r.RemovedResources)
	}
	c.none(200 * time.Millisecond)
}

// pushLog records the Observer's Pushed and Sent calls as "TYPE:result" and "TYPE:sent-in-push".
type pushLog struct {
	mu   sync.Mutex
	seen []string
}

func (l *pushLog) add(s string) {
	l.mu.Lock()
	l.seen = append(l.seen, s)
	l.mu.Unlock()
}

func (l *pushLog) Sent(_ string, _ *model.Proxy, typeURL, _ string, _ uint64, req *model.PushRequest) {
	if req != nil {
		l.add(shortType(typeURL) + ":response")
	}
}
func (l *pushLog) Pushed(_, typeURL string, _ uint64, _ *model.PushRequest, result string, _ time.Duration) {
	l.add(shortType(typeURL) + ":" + result)
}
func (l *pushLog) Acked(string, string, string, bool, string) {}
func (l *pushLog) Closed(string)                              {}

func shortType(typeURL string) string { return typeURL[strings.LastIndexByte(typeURL, '.')+1:] }

// A push that only removes clusters reports them sent, as part of the push, once the removal went out: the
// distribution tracker must not count the proxy as current before.
func TestDeltaHeldRemovalsAreObservedWithTheirPush(t *testing.T) {
	log := &pushLog{}
	e := newEnv(t, snapshot{ClusterType: {"old": "1", "kept": "1"}, ListenerType: {"l": "to-old"}},
		func(_ *testEnv, o *Options) { o.Observer = log })
	c := e.delta(t)
	deltaAsk(c, sidecar("pod", "ns1"), ClusterType, nil, nil, nil)
	ackDelta(t, c, ClusterType)
	deltaAsk(c, nil, ListenerType, nil, nil, nil)
	ackDelta(t, c, ListenerType)
	log.mu.Lock()
	log.seen = nil
	log.mu.Unlock()

	e.publish(true, nil, func(s snapshot) {
		delete(s[ClusterType], "old")
		s[ListenerType]["l"] = "to-kept"
	})
	ackDelta(t, c, ListenerType)
	if r := ackDelta(t, c, ClusterType); !slices.Equal(r.RemovedResources, []string{"old"}) {
		t.Fatalf("removal %v", r.RemovedResources)
	}
	want := []string{"Listener:response", "Listener:sent", "Cluster:response", "Cluster:sent"}
	eventually(t, "the push observed", func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		return len(log.seen) >= len(want)
	})
	log.mu.Lock()
	defer log.mu.Unlock()
	if !slices.Equal(log.seen, want) {
		t.Fatalf("observed %v, want %v", log.seen, want)
	}
}
