package xdsclient

import (
	"testing"
	"time"
)

// clients are the proxies a test runs against one server.
type clients struct {
	envoys   []*Envoy
	ztunnels []*Ztunnel
}

// startClients connects delta and state-of-the-world sidecars in both namespaces (the alpha delta one new
// enough for VHDS), a wildcard ztunnel and an on-demand one.
func startClients(t *testing.T, s *server) *clients {
	t.Helper()
	c := &clients{}
	for _, spec := range []struct {
		ns    string
		delta bool
		build [3]uint32
	}{{"alpha", true, [3]uint32{1, 38, 0}}, {"beta", true, [3]uint32{1, 36, 0}}, {"alpha", false, [3]uint32{1, 36, 0}}, {"beta", false, [3]uint32{1, 38, 0}}} {
		id := sidecarNode(spec.ns)
		if !spec.delta {
			id = "sidecar~10.9.0." + map[string]string{"alpha": "1", "beta": "2"}[spec.ns] + "~sotw-0." + spec.ns + "~" + spec.ns + ".svc.cluster.local"
		}
		e := NewEnvoy(EnvoyOptions{Addr: s.addr(), NodeID: id, Delta: spec.delta, BuildVersion: spec.build,
			InitialFetchTimeout: testFetchTimeout, Reject: rejectHook(t)})
		c.envoys = append(c.envoys, e)
	}
	c.ztunnels = []*Ztunnel{
		NewZtunnel(ZtunnelOptions{Addr: s.addr(), IP: "10.2.0.1", Pod: "ztunnel-a", Namespace: "istio-system", NodeName: "node-a",
			Reject: zrejectHook(t)}),
		NewZtunnel(ZtunnelOptions{Addr: s.addr(), IP: "10.2.0.2", Pod: "ztunnel-b", Namespace: "istio-system", NodeName: "node-a", OnDemand: true}),
	}
	for _, e := range c.envoys {
		if err := e.Connect(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Close)
	}
	for _, z := range c.ztunnels {
		if err := z.Connect(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(z.Disconnect)
	}
	return c
}

func (c *clients) check(t *testing.T, s *server) {
	t.Helper()
	for _, e := range c.envoys {
		report(t, e.NodeID(), checkEnvoy(s, e))
	}
	for _, z := range c.ztunnels {
		report(t, z.NodeID(), checkZtunnel(s, z))
	}
}

// The models agree with the server on a plain mesh: every client ends up holding exactly what the server
// generates for it, with no warming left and nothing unanswered.
func TestModelsFollowTheServer(t *testing.T) {
	files := baseFiles()
	reviews := service{ns: "alpha", name: "reviews", index: 1, ports: []port{{"http", 9080}}, pods: 2}
	db := service{ns: "beta", name: "db", index: 2, ports: []port{{"tcp", 5432}, {"http-admin", 8081}}, pods: 1}
	for _, svc := range []service{reviews, db} {
		files[svc.file()] = svc.yaml()
	}
	files[drFile(reviews)] = destinationRule{subsets: true}.yaml(reviews)
	files[vsFile(reviews)] = virtualService{weightV1: 80}.yaml(reviews)
	s := startServer(t, files)
	c := startClients(t, s)
	if !settled(s, c.envoys, c.ztunnels, 10*time.Second) {
		t.Log("not settled within 10s")
	}
	c.check(t, s)
	for _, e := range c.envoys {
		if len(e.Held(ClusterType)) == 0 || len(e.Held(ListenerType)) == 0 {
			t.Errorf("%s holds no clusters or listeners", e.NodeID())
		}
	}
	if len(c.ztunnels[0].Held(AddressType)) == 0 {
		t.Error("the wildcard ztunnel holds no address")
	}

	// An endpoint change and a new service.
	reviews.pods = 3
	s.put(t, reviews.file(), reviews.yaml())
	ratings := service{ns: "beta", name: "ratings", index: 3, ports: []port{{"http", 9080}}, pods: 1}
	s.put(t, ratings.file(), ratings.yaml())
	if _, err := c.ztunnels[1].Lookup("/" + reviews.podIP(2)); err != nil {
		t.Fatal(err)
	}
	if !settled(s, c.envoys, c.ztunnels, 10*time.Second) {
		t.Log("not settled within 10s")
	}
	c.check(t, s)
}

// rejectHook NACKs nothing; the property test swaps in its own predicates.
func rejectHook(*testing.T) func(string, string, anyRes) error { return nil }

func zrejectHook(*testing.T) func(string, string, anyRes) error { return nil }
