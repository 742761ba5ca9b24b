package xds

import (
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/sextantmesh/sextant/pilot/model"
)

func twoClusters() snapshot {
	return snapshot{ClusterType: {"a": "a1", "b": "b1"}, EndpointType: {"a": "ea1", "b": "eb1", "c": "ec1"}}
}

func TestSotWAckAndPush(t *testing.T) {
	e := newEnv(t, twoClusters())
	c := e.sotw(t)
	n := sidecar("pod", "ns1")

	ask(c, n, ClusterType, nil, nil)
	r1 := c.recv()
	if got := payloads(t, ClusterType, r1.Resources); !maps.Equal(got, map[string]string{"a": "a1", "b": "b1"}) {
		t.Fatalf("first response %v", got)
	}
	if !strings.HasPrefix(r1.VersionInfo, "1.") || r1.Nonce == "" {
		t.Fatalf("version %q nonce %q", r1.VersionInfo, r1.Nonce)
	}
	ask(c, nil, ClusterType, nil, r1) // ACK
	c.none(200 * time.Millisecond)

	v := e.set(ClusterType, "a", "a2")
	r2 := c.recv()
	if got := payloads(t, ClusterType, r2.Resources); !maps.Equal(got, map[string]string{"a": "a2", "b": "b1"}) {
		t.Fatalf("pushed %v", got)
	}
	if !strings.HasPrefix(r2.VersionInfo, strconv.FormatUint(v, 10)+".") || r2.Nonce == r1.Nonce || r2.VersionInfo == r1.VersionInfo {
		t.Fatalf("second response version %q nonce %q after %q %q", r2.VersionInfo, r2.Nonce, r1.VersionInfo, r1.Nonce)
	}
	ask(c, nil, ClusterType, nil, r2)
	eventually(t, "ACK recorded", func() bool { return watched(t, e.srv, ClusterType).NonceAcked == r2.Nonce })
	w := watched(t, e.srv, ClusterType)
	if w.VersionAcked != r2.VersionInfo || w.VersionSent != r2.VersionInfo || w.NonceSent != r2.Nonce || !w.Wildcard {
		t.Fatalf("watch state %+v", w)
	}
	st := e.srv.Connections()[0]
	if st.ProxyID != "pod.ns1" || st.Namespace != "ns1" || st.Type != model.Sidecar || st.Delta {
		t.Fatalf("status %+v", st)
	}
	cnt := e.srv.Counters().ByType[ClusterType]
	if cnt.Responses != 2 || cnt.Pushes != 1 || cnt.BytesSent == 0 {
		t.Fatalf("counters %+v", cnt)
	}
}

// A NACK leaves the proxy on its last good config and is not answered: go-control-plane answers a NACK with
// the same config again, and a client that rejects it each time makes the two loop.
func TestSotWNackIsNotRepushed(t *testing.T) {
	e := newEnv(t, twoClusters())
	c := e.sotw(t)
	ask(c, sidecar("pod", "ns1"), ClusterType, nil, nil)
	r1 := c.recv()
	ask(c, nil, ClusterType, nil, r1)
	eventually(t, "ACK", func() bool { return watched(t, e.srv, ClusterType).NonceAcked == r1.Nonce })

	e.set(ClusterType, "a", "bad")
	r2 := c.recv()
	nack(c, ClusterType, nil, r1, r2, "cluster a: bad config")
	c.none(time.Second) // zero responses: no re-send loop
	nack(c, ClusterType, nil, r1, r2, "cluster a: bad config")
	c.none(200 * time.Millisecond)

	w := watched(t, e.srv, ClusterType)
	if w.LastError != "cluster a: bad config" || w.VersionAcked != r1.VersionInfo || w.NACKs != 1 {
		t.Fatalf("after NACK: %+v", w)
	}
	if n := e.srv.Counters().ByType[ClusterType].NACKs; n != 1 {
		t.Fatalf("NACKs counted %d, want 1 (a repeated NACK of one response counts once)", n)
	}

	// The fix arrives with the next push; its ACK clears the error.
	e.set(ClusterType, "a", "a3")
	r3 := c.recv()
	if got := payloads(t, ClusterType, r3.Resources)["a"]; got != "a3" {
		t.Fatalf("fix not pushed: %q", got)
	}
	ask(c, nil, ClusterType, nil, r3)
	eventually(t, "error cleared", func() bool {
		w := watched(t, e.srv, ClusterType)
		return w.LastError == "" && w.VersionAcked == r3.VersionInfo
	})
}

// A request carrying an older nonce was sent before the client saw our latest response; it is ignored,
// names and all, because the client will send a current one.
func TestSotWStaleNonceIgnored(t *testing.T) {
	e := newEnv(t, twoClusters())
	c := e.sotw(t)
	ask(c, sidecar("pod", "ns1"), EndpointType, []string{"a"}, nil)
	r1 := c.recv()
	e.set(EndpointType, "a", "ea2")
	r2 := c.recv()

	ask(c, nil, EndpointType, []string{"a", "b"}, r1) // stale
	c.none(300 * time.Millisecond)
	nack(c, EndpointType, []string{"a"}, r1, r1, "old") // a NACK of a stale response is ignored too
	c.none(200 * time.Millisecond)
	if w := watched(t, e.srv, EndpointType); w.LastError != "" || w.ResourceNames.Len() != 1 {
		t.Fatalf("stale request changed state: %+v", w)
	}

	ask(c, nil, EndpointType, []string{"a", "b"}, r2)
	r3 := c.recv()
	if got := payloads(t, EndpointType, r3.Resources); !maps.Equal(got, map[string]string{"a": "ea2", "b": "eb1"}) {
		t.Fatalf("after current request: %v", got)
	}
}

func TestSotWSubscriptions(t *testing.T) {
	e := newEnv(t, twoClusters())
	c := e.sotw(t)
	n := sidecar("pod", "ns1")
	names := func(r *discovery.DiscoveryResponse) string {
		got := payloads(t, r.TypeUrl, r.Resources)
		keys := make([]string, 0, len(got))
		for k := range got {
			keys = append(keys, k)
		}
		return strings.Join(sortStrings(keys), ",")
	}

	// EDS: explicit names.
	ask(c, n, EndpointType, []string{"a"}, nil)
	r := c.recv()
	if got := names(r); got != "a" {
		t.Fatalf("subscribe a: %q", got)
	}
	ask(c, nil, EndpointType, []string{"a", "b", "missing"}, r)
	if r = c.recv(); names(r) != "a,b" { // a missing name is simply absent, answered at once
		t.Fatalf("subscribe a,b,missing: %q", names(r))
	}
	ask(c, nil, EndpointType, []string{"b"}, r)
	if r = c.recv(); names(r) != "b" {
		t.Fatalf("unsubscribe a: %q", names(r))
	}
	ask(c, nil, EndpointType, []string{}, r)
	if r = c.recv(); names(r) != "" {
		t.Fatalf("unsubscribe all: %q", names(r))
	}
	ask(c, nil, EndpointType, []string{"*"}, r)
	if r = c.recv(); names(r) != "a,b,c" {
		t.Fatalf("explicit wildcard: %q", names(r))
	}
	ask(c, nil, EndpointType, []string{"*"}, r) // ACK, same names
	c.none(200 * time.Millisecond)

	// CDS: an empty first request is a wildcard, kept by later empty requests, ended by explicit names.
	ask(c, nil, ClusterType, nil, nil)
	r = c.recv()
	if names(r) != "a,b" {
		t.Fatalf("CDS wildcard: %q", names(r))
	}
	ask(c, nil, ClusterType, nil, r)
	c.none(200 * time.Millisecond)
	ask(c, nil, ClusterType, []string{"b"}, r)
	if r = c.recv(); names(r) != "b" {
		t.Fatalf("CDS explicit after wildcard: %q", names(r))
	}
	if w := watched(t, e.srv, ClusterType); w.Wildcard {
		t.Fatal("still wildcard after explicit names")
	}

	// A type nobody serves gets no answer and does not break the stream.
	ask(c, nil, SecretType, []string{"default"}, nil)
	c.none(200 * time.Millisecond)
	if e.srv.Counters().UnknownTypes != 1 {
		t.Fatalf("unknown types %d", e.srv.Counters().UnknownTypes)
	}
}

func sortStrings(s []string) []string {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s
}

// On a full push, clusters go before endpoints before listeners before routes, whatever the order the
// proxy subscribed in, so nothing refers to something not yet received.
func TestSotWPushOrder(t *testing.T) {
	e := newEnv(t, snapshot{ClusterType: {"a": "1"}, EndpointType: {"a": "1"}, ListenerType: {"l": "1"}, RouteType: {"r": "1"}})
	c := e.sotw(t)
	n := sidecar("pod", "ns1")
	for i, sub := range []struct {
		typ   string
		names []string
	}{{RouteType, []string{"r"}}, {ListenerType, nil}, {EndpointType, []string{"a"}}, {ClusterType, nil}} {
		if i == 0 {
			ask(c, n, sub.typ, sub.names, nil)
		} else {
			ask(c, nil, sub.typ, sub.names, nil)
		}
		r := c.recv()
		ask(c, nil, sub.typ, sub.names, r)
	}
	c.none(100 * time.Millisecond)
	e.publish(true, nil, func(s snapshot) {})
	var order []string
	for range 4 {
		order = append(order, c.recv().TypeUrl)
	}
	want := []string{ClusterType, EndpointType, ListenerType, RouteType}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("push order %v, want %v", order, want)
		}
	}
}

// A non-full push goes only to the types and proxies it concerns.
func TestSotWIncrementalPushFiltered(t *testing.T) {
	e := newEnv(t, twoClusters())
	c := e.sotw(t)
	ask(c, sidecar("pod", "ns1"), ClusterType, nil, nil)
	r := c.recv()
	ask(c, nil, ClusterType, nil, r)
	ask(c, nil, EndpointType, []string{"a"}, nil)
	r = c.recv()
	ask(c, nil, EndpointType, []string{"a"}, r)
	c.none(100 * time.Millisecond)

	e.publish(false, []string{"ns2/svc"}, func(s snapshot) { s[EndpointType]["a"] = "ea2" })
	c.none(300 * time.Millisecond)
	e.publish(false, []string{"ns1/svc"}, func(s snapshot) { s[EndpointType]["a"] = "ea3" })
	r = c.recv()
	if r.TypeUrl != EndpointType || payloads(t, EndpointType, r.Resources)["a"] != "ea3" {
		t.Fatalf("incremental push: %v", r)
	}
	c.none(200 * time.Millisecond) // CDS is not pushed for an endpoint change
}
