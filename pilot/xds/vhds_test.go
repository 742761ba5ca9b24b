package xds

import (
	"maps"
	"slices"
	"testing"
	"time"
)

// VHDS: Envoy keeps a virtual host only if it holds the route configuration named before the last "/" when
// the virtual host arrives, and never asks again. So a virtual host goes out only after its route
// configuration, follows it when it is first sent, and is sent again if the route configuration comes back.
func TestDeltaVirtualHostsFollowTheirRouteConfiguration(t *testing.T) {
	e := newEnv(t, snapshot{
		RouteType:       {"80": "rc80", "8080": "rc8080"},
		VirtualHostType: {"80/a:80": "a", "80/b:80": "b", "8080/a:8080": "a8080"},
	})
	c := e.delta(t)
	n := sidecar("pod", "ns1")

	// VHDS asked first (no names: everything), before any route configuration: nothing can be kept yet.
	deltaAsk(c, n, VirtualHostType, nil, nil, nil)
	r := c.recv()
	if len(r.Resources) != 0 {
		t.Fatalf("virtual hosts sent before their route configuration: %v", deltaResources(t, r))
	}
	deltaAsk(c, nil, VirtualHostType, nil, nil, r)

	// Route configuration 80 arrives, then its virtual hosts, not 8080's.
	deltaAsk(c, nil, RouteType, []string{"80"}, nil, nil)
	r = c.recv()
	if r.TypeUrl != RouteType || !maps.Equal(deltaResources(t, r), map[string]string{"80": "rc80"}) {
		t.Fatalf("want route configuration 80, got %s %v", r.TypeUrl, deltaResources(t, r))
	}
	deltaAsk(c, nil, RouteType, nil, nil, r)
	r = c.recv()
	if r.TypeUrl != VirtualHostType || !maps.Equal(deltaResources(t, r), map[string]string{"80/a:80": "a", "80/b:80": "b"}) {
		t.Fatalf("want the virtual hosts of 80, got %s %v", r.TypeUrl, deltaResources(t, r))
	}
	deltaAsk(c, nil, VirtualHostType, nil, nil, r)

	// A new virtual host: only it is sent; the route configuration is not.
	e.set(VirtualHostType, "80/c:80", "c")
	r = c.recv()
	if r.TypeUrl != VirtualHostType || !maps.Equal(deltaResources(t, r), map[string]string{"80/c:80": "c"}) {
		t.Fatalf("want only 80/c:80, got %s %v", r.TypeUrl, deltaResources(t, r))
	}
	deltaAsk(c, nil, VirtualHostType, nil, nil, r)
	c.none(200 * time.Millisecond)

	// 8080 subscribed: its route configuration, then its virtual host.
	deltaAsk(c, nil, RouteType, []string{"8080"}, nil, nil)
	r = c.recv()
	if r.TypeUrl != RouteType || !maps.Equal(deltaResources(t, r), map[string]string{"8080": "rc8080"}) {
		t.Fatalf("want route configuration 8080, got %s %v", r.TypeUrl, deltaResources(t, r))
	}
	deltaAsk(c, nil, RouteType, nil, nil, r)
	r = c.recv()
	if r.TypeUrl != VirtualHostType || !maps.Equal(deltaResources(t, r), map[string]string{"8080/a:8080": "a8080"}) {
		t.Fatalf("want the virtual host of 8080, got %s %v", r.TypeUrl, deltaResources(t, r))
	}
	deltaAsk(c, nil, VirtualHostType, nil, nil, r)

	// 80 unsubscribed (Envoy drops its virtual hosts with it), then subscribed again: all of them again.
	deltaAsk(c, nil, RouteType, nil, []string{"80"}, nil)
	c.none(200 * time.Millisecond)
	deltaAsk(c, nil, RouteType, []string{"80"}, nil, nil)
	r = c.recv()
	if r.TypeUrl != RouteType {
		t.Fatalf("want route configuration 80 again, got %s", r.TypeUrl)
	}
	deltaAsk(c, nil, RouteType, nil, nil, r)
	r = c.recv()
	got := slices.Sorted(maps.Keys(deltaResources(t, r)))
	if r.TypeUrl != VirtualHostType || !slices.Equal(got, []string{"80/a:80", "80/b:80", "80/c:80"}) {
		t.Fatalf("want every virtual host of 80 again, got %s %v", r.TypeUrl, got)
	}
	deltaAsk(c, nil, VirtualHostType, nil, nil, r)

	// A removed virtual host is reported removed.
	e.del(VirtualHostType, "80/b:80")
	r = c.recv()
	if r.TypeUrl != VirtualHostType || len(r.Resources) != 0 || !slices.Equal(r.RemovedResources, []string{"80/b:80"}) {
		t.Fatalf("want 80/b:80 removed, got %s %v removed %v", r.TypeUrl, deltaResources(t, r), r.RemovedResources)
	}
}
