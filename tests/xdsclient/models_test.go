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

// sidecars are the Envoys of every test mesh: delta and state-of-the-world in both namespaces, the alpha
// delta one (and the beta state-of-the-world one, which must not get VHDS) new enough for VHDS.
var sidecars = []struct {
	ns    string
	delta bool
	build [3]uint32
	ip    string // state-of-the-world sidecars run outside the home pods
}{{"alpha", true, [3]uint32{1, 38, 0}, ""}, {"beta", true, [3]uint32{1, 36, 0}, ""},
	{"alpha", false, [3]uint32{1, 36, 0}, "10.9.0.1"}, {"beta", false, [3]uint32{1, 38, 0}, "10.9.0.2"}}

// newClients makes the sidecars, a wildcard ztunnel and an on-demand one; reject gives sidecar i's and the
// wildcard ztunnel's (-1) NACK hook, nil for none.
func newClients(addr string, reject func(i int) func(typeURL, name string, a anyRes) error) *clients {
	if reject == nil {
		reject = func(int) func(string, string, anyRes) error { return nil }
	}
	c := &clients{}
	for i, sc := range sidecars {
		id := sidecarNode(sc.ns)
		if sc.ip != "" {
			id = "sidecar~" + sc.ip + "~sotw-0." + sc.ns + "~" + sc.ns + ".svc.cluster.local"
		}
		c.envoys = append(c.envoys, NewEnvoy(EnvoyOptions{Addr: addr, NodeID: id, Delta: sc.delta, BuildVersion: sc.build,
			InitialFetchTimeout: testFetchTimeout, Reject: reject(i)}))
	}
	c.ztunnels = []*Ztunnel{
		NewZtunnel(ZtunnelOptions{Addr: addr, IP: "10.2.0.1", Pod: "ztunnel-a", Namespace: "istio-system",
			NodeName: "node-a", Reject: reject(-1)}),
		NewZtunnel(ZtunnelOptions{Addr: addr, IP: "10.2.0.2", Pod: "ztunnel-b", Namespace: "istio-system", NodeName: "node-a", OnDemand: true}),
	}
	return c
}

// connect connects every client and closes them at the end of the test.
func (c *clients) connect(t *testing.T) {
	t.Helper()
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
	c := newClients(s.addr(), nil)
	c.connect(t)
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
