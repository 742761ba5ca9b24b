package xdsclient

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

var (
	sequences = flag.Int("xdsclient.sequences", 4, "random sequences the property test runs")
	steps     = flag.Int("xdsclient.steps", 12, "steps in each random sequence")
	seedFlag  = flag.Uint64("xdsclient.seed", 0, "seed of the first sequence (0: from the clock); sequence i uses seed+i")
)

// TestClientsEndWhereTheServerSays drives a server and a set of client models through random sequences
// of config changes, lookups, NACKs and reconnects, then checks that every client holds exactly what the
// server generates for it, with no warming ended by timeout, nothing unanswered and no NACK loop.
func TestClientsEndWhereTheServerSays(t *testing.T) {
	if testing.Short() {
		t.Skip("the property test's random sequences against every client model: -short")
	}
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	for i := range *sequences {
		s := seed + uint64(i)
		t.Run(fmt.Sprint(s), func(t *testing.T) {
			log := runSequence(t, s, *steps)
			if t.Failed() {
				t.Logf("reproduce with: go test -race ./tests/xdsclient/ -run 'TestClientsEndWhereTheServerSays' -xdsclient.seed=%d "+
					"-xdsclient.sequences=1 -xdsclient.steps=%d\nsteps:\n  %s",
					s, *steps, strings.Join(log, "\n  "))
			}
		})
	}
}

// pool are the services a sequence may add, three per namespace.
var pool = []service{
	{ns: "alpha", name: "reviews", index: 1}, {ns: "alpha", name: "ratings", index: 2}, {ns: "alpha", name: "details", index: 3},
	{ns: "beta", name: "cart", index: 1}, {ns: "beta", name: "orders", index: 2}, {ns: "beta", name: "stock", index: 3},
}

var portNames = []string{"http", "http-web", "grpc", "tcp-main"}

// sequence is one run: the server, its config as the test wrote it, and the clients.
type sequence struct {
	t   *testing.T
	rnd *rand.Rand
	srv *server
	c   *clients
	// present services by file; their DestinationRules and VirtualServices.
	svcs map[string]*service
	drs  map[string]destinationRule
	vss  map[string]virtualService
	// reject holds, per Envoy, the host whose clusters it rejects ("" none); likewise per ztunnel for
	// workload names.
	reject  []*atomic.Pointer[string]
	zreject *atomic.Pointer[string]
	echo    *echo
	log     []string
}

func runSequence(t *testing.T, seed uint64, n int) []string {
	q := &sequence{t: t, rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), svcs: map[string]*service{},
		drs: map[string]destinationRule{}, vss: map[string]virtualService{}}
	files := baseFiles()
	for i := range pool {
		if q.rnd.IntN(2) == 0 {
			svc := q.randomService(pool[i])
			q.svcs[svc.file()] = &svc
			files[svc.file()] = svc.yaml()
		}
	}
	q.echo = startEcho(t)
	files[echoFile] = q.echo.yaml()
	q.srv = startServer(t, files)
	q.c = q.startClients()
	q.echo.dial(t, q.srv)
	for i := range n {
		q.step(i)
		time.Sleep(time.Duration(q.rnd.IntN(60)) * time.Millisecond)
	}
	if !settled(q.srv, q.c.envoys, q.c.ztunnels, 3*testFetchTimeout) {
		q.logf("not settled within %v", 3*testFetchTimeout)
	}
	q.c.check(t, q.srv)
	report(t, "grpc-go xDS client", q.echo.check())
	for i, e := range q.c.envoys {
		r, b, _ := e.Stats()
		q.logf("envoy %d %s delta=%v: %d responses, %d bytes, %d NACKs", i, e.NodeID(), e.Delta(), r, b, e.NACKs())
	}
	for i, z := range q.c.ztunnels {
		r, b, _ := z.Stats()
		q.logf("ztunnel %d on-demand=%v: %d responses, %d bytes, %d NACKs", i, z.OnDemand(), r, b, z.NACKs())
	}
	return q.log
}

func (q *sequence) logf(format string, args ...any) {
	q.log = append(q.log, fmt.Sprintf(format, args...))
}

func (q *sequence) randomService(s service) service {
	s.ports = []port{{portNames[q.rnd.IntN(len(portNames))], 9080}}
	if q.rnd.IntN(3) == 0 {
		s.ports = append(s.ports, port{"tcp-extra", 7070})
	}
	s.pods = q.rnd.IntN(4)
	return s
}

// startClients connects the clients with NACK hooks the steps switch: sidecars reject the clusters of a
// host, the wildcard ztunnel the workloads of a pod name prefix.
func (q *sequence) startClients() *clients {
	q.zreject = &atomic.Pointer[string]{}
	for range sidecars {
		q.reject = append(q.reject, &atomic.Pointer[string]{})
	}
	c := newClients(q.srv.addr(), func(i int) func(string, string, anyRes) error {
		if i < 0 {
			return func(_, name string, _ anyRes) error {
				if p := q.zreject.Load(); p != nil && strings.Contains(name, *p) {
					return fmt.Errorf("rejected by the test")
				}
				return nil
			}
		}
		host := q.reject[i]
		return func(typeURL, name string, _ anyRes) error {
			if h := host.Load(); h != nil && typeURL == ClusterType && strings.HasSuffix(name, "|"+*h) {
				return fmt.Errorf("rejected by the test")
			}
			return nil
		}
	})
	c.connect(q.t)
	return c
}

func (q *sequence) pick() service { return pool[q.rnd.IntN(len(pool))] }

// step makes one random change.
func (q *sequence) step(i int) {
	t := q.t
	base := q.pick()
	f := base.file()
	cur := q.svcs[f]
	switch k := q.rnd.IntN(100); {
	case k < 15: // add or remove a service
		if cur != nil {
			q.logf("%d: remove service %s/%s with its rules", i, base.ns, base.name)
			delete(q.svcs, f)
			q.srv.remove(t, f)
			q.srv.remove(t, drFile(base))
			q.srv.remove(t, vsFile(base))
			delete(q.drs, f)
			delete(q.vss, f)
			return
		}
		svc := q.randomService(base)
		q.logf("%d: add service %s/%s ports %v pods %d", i, svc.ns, svc.name, svc.ports, svc.pods)
		q.svcs[f] = &svc
		q.srv.put(t, f, svc.yaml())
	case k < 30 && cur != nil: // endpoints only
		cur.pods = (cur.pods + 1 + q.rnd.IntN(3)) % 4
		q.logf("%d: %s/%s now has %d pods", i, cur.ns, cur.name, cur.pods)
		q.srv.put(t, f, cur.yaml())
	case k < 40 && cur != nil: // port rename (the protocol may change with it) or a second port
		if q.rnd.IntN(2) == 0 {
			cur.ports[0].name = portNames[(indexOf(portNames, cur.ports[0].name)+1+q.rnd.IntN(len(portNames)-1))%len(portNames)]
		} else if len(cur.ports) == 1 {
			cur.ports = append(cur.ports, port{"tcp-extra", 7070})
		} else {
			cur.ports = cur.ports[:1]
		}
		q.logf("%d: %s/%s ports now %v", i, cur.ns, cur.name, cur.ports)
		q.srv.put(t, f, cur.yaml())
	case k < 55 && cur != nil: // a DestinationRule: clusters change, endpoints do not
		dr := destinationRule{policy: []string{"", "LEAST_REQUEST", "RANDOM"}[q.rnd.IntN(3)], maxConn: []int{0, 50, 100}[q.rnd.IntN(3)],
			subsets: q.rnd.IntN(2) == 0}
		if q.rnd.IntN(5) == 0 {
			q.logf("%d: remove the DestinationRule of %s/%s", i, cur.ns, cur.name)
			delete(q.drs, f)
			q.srv.remove(t, drFile(*cur))
			return
		}
		q.logf("%d: DestinationRule of %s/%s: %+v", i, cur.ns, cur.name, dr)
		q.drs[f] = dr
		q.srv.put(t, drFile(*cur), dr.yaml(*cur))
	case k < 65 && cur != nil: // a VirtualService
		if q.rnd.IntN(4) == 0 {
			q.logf("%d: remove the VirtualService of %s/%s", i, cur.ns, cur.name)
			delete(q.vss, f)
			q.srv.remove(t, vsFile(*cur))
			return
		}
		vs := virtualService{timeout: q.rnd.IntN(3) * 5}
		if q.drs[f].subsets && q.rnd.IntN(2) == 0 {
			vs.weightV1 = 10 + 10*q.rnd.IntN(9)
		}
		q.logf("%d: VirtualService of %s/%s: %+v", i, cur.ns, cur.name, vs)
		q.vss[f] = vs
		q.srv.put(t, vsFile(*cur), vs.yaml(*cur))
	case k < 69: // the proxyless client's backends: one, the other, both or none
		q.echo.up = map[int]bool{0: q.rnd.IntN(3) > 0, 1: q.rnd.IntN(3) > 0}
		q.logf("%d: echo backends up: v1 %v, v2 %v", i, q.echo.up[0], q.echo.up[1])
		q.srv.put(t, echoFile, q.echo.yaml())
	case k < 75: // an on-demand lookup: a pod, a VIP, or nothing there
		z := q.c.ztunnels[1]
		var name string
		switch q.rnd.IntN(3) {
		case 0:
			name = "/" + base.podIP(q.rnd.IntN(4))
		case 1:
			name = "/" + base.vip()
		default:
			name = fmt.Sprintf("/10.77.0.%d", 1+q.rnd.IntN(3))
		}
		q.logf("%d: ztunnel looks up %s", i, name)
		if _, err := z.Lookup(name); err != nil {
			t.Fatal(err)
		}
	case k < 85: // a disconnect and a reconnect
		if n := q.rnd.IntN(len(q.c.envoys) + len(q.c.ztunnels)); n < len(q.c.envoys) {
			e := q.c.envoys[n]
			q.logf("%d: envoy %d (%s) reconnects", i, n, e.NodeID())
			e.Disconnect()
			time.Sleep(time.Duration(q.rnd.IntN(50)) * time.Millisecond)
			if err := e.Connect(); err != nil {
				t.Fatal(err)
			}
		} else {
			z := q.c.ztunnels[n-len(q.c.envoys)]
			q.logf("%d: ztunnel %d reconnects", i, n-len(q.c.envoys))
			z.Disconnect()
			time.Sleep(time.Duration(q.rnd.IntN(50)) * time.Millisecond)
			if err := z.Connect(); err != nil {
				t.Fatal(err)
			}
		}
	case k < 93: // NACKs switched on or off
		if q.rnd.IntN(3) == 0 {
			pod := base.name + "-"
			if q.zreject.Load() != nil {
				q.logf("%d: the wildcard ztunnel accepts every address again", i)
				q.zreject.Store(nil)
			} else {
				q.logf("%d: the wildcard ztunnel rejects the pods %s*", i, pod)
				q.zreject.Store(&pod)
			}
			return
		}
		n := q.rnd.IntN(len(q.reject))
		if q.reject[n].Load() != nil {
			q.logf("%d: envoy %d accepts every cluster again", i, n)
			q.reject[n].Store(nil)
		} else {
			host := base.host()
			q.logf("%d: envoy %d rejects the clusters of %s", i, n, host)
			q.reject[n].Store(&host)
		}
	default: // an on-demand cluster on top of the wildcard (delta Envoys), asked for or dropped
		e := q.c.envoys[q.rnd.IntN(2)]
		name := "outbound|9080||" + base.host()
		if names, _ := e.Subscribed(ClusterType); indexOf(names, name) >= 0 {
			q.logf("%d: %s drops its explicit watch of %s", i, e.NodeID(), name)
			e.Unwatch(ClusterType, name)
		} else {
			q.logf("%d: %s watches %s explicitly", i, e.NodeID(), name)
			e.Watch(ClusterType, name)
		}
	}
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}
