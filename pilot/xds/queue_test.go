package xds

import (
	"testing"

	"github.com/sextantmesh/sextant/pilot/model"
)

func queueConn(name, ns string) *Connection {
	return &Connection{id: name, proxy: &model.Proxy{ID: name, Namespace: ns}}
}

func svcReq(svcs ...string) *model.PushRequest {
	r := &model.PushRequest{ServicesUpdated: map[string]struct{}{}}
	for _, s := range svcs {
		r.ServicesUpdated[s] = struct{}{}
	}
	return r
}

func TestQueueMergesAndKeepsOneInFlight(t *testing.T) {
	q := newPushQueue()
	c1, c2 := queueConn("c1", "ns"), queueConn("c2", "ns")
	q.Enqueue(c1, svcReq("ns/a"))
	q.Enqueue(c2, svcReq("ns/x"))
	q.Enqueue(c1, svcReq("ns/b")) // merged, keeps its place ahead of c2
	if q.Len() != 2 {
		t.Fatalf("len %d", q.Len())
	}
	c, req := q.Dequeue()
	if c != c1 || len(req.ServicesUpdated) != 2 {
		t.Fatalf("got %s %v", c.id, req.ServicesUpdated)
	}
	q.Enqueue(c1, svcReq("ns/c")) // c1 is in flight: held back
	if c, _ = q.Dequeue(); c != c2 {
		t.Fatalf("got %s, want c2 (c1 is in flight)", c.id)
	}
	if q.Len() != 0 {
		t.Fatalf("len %d while c1 in flight", q.Len())
	}
	q.Done(c1)
	c, req = q.Dequeue()
	if c != c1 || len(req.ServicesUpdated) != 1 {
		t.Fatalf("after Done: %v %v", c, req)
	}
	q.Done(c1)
	q.Done(c2)

	c3 := queueConn("c3", "ns")
	q.Enqueue(c3, svcReq("ns/a"))
	q.Remove(c3)
	q.Enqueue(c3, svcReq("ns/a")) // a closed connection is never queued again
	if q.Len() != 0 {
		t.Fatalf("len %d after remove", q.Len())
	}
	q.Close()
	if c, _ := q.Dequeue(); c != nil {
		t.Fatal("Dequeue after Close returned a connection")
	}
}

// Namespaces are served round-robin, connections within one in FIFO order.
func TestQueueRoundRobinAcrossNamespaces(t *testing.T) {
	q := newPushQueue()
	var busy []*Connection
	for _, n := range []string{"a1", "a2", "a3", "a4"} {
		c := queueConn(n, "busy")
		busy = append(busy, c)
		q.Enqueue(c, svcReq("busy/s"))
	}
	q.Enqueue(queueConn("q1", "quiet"), svcReq("quiet/s"))
	q.Enqueue(queueConn("o1", "other"), svcReq("other/s"))
	q.Enqueue(queueConn("q2", "quiet"), svcReq("quiet/s"))
	q.Remove(busy[1])
	var got []string
	for q.Len() > 0 {
		c, _ := q.Dequeue()
		got = append(got, c.id)
		q.Done(c)
	}
	want := "a1 q1 o1 a3 q2 a4"
	if s := join(got); s != want {
		t.Fatalf("order %q, want %q", s, want)
	}
}

func join(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out
}
