package xds

import (
	"slices"
	"sync"

	"github.com/sextantmesh/sextant/pilot/model"
)

// pushQueue holds at most one pending push per connection. Pushes for a connection already waiting are
// merged into its entry, which keeps its place; a connection being pushed to is not handed out again until
// Done, and what arrived meanwhile is queued afresh behind everyone else.
//
// Connections wait in one FIFO per namespace and the queue takes from the namespaces round-robin. A
// namespace with heavy churn thus gets its fair share of workers and no more: a proxy in a quiet namespace
// waits for at most one push per busy namespace, not for the whole backlog.
type pushQueue struct {
	mu      sync.Mutex
	cond    *sync.Cond
	closed  bool
	entries map[*Connection]*queueEntry
	byNS    map[string]*fifo
	ring    []string // namespaces with queued connections, in round-robin order
	next    int      // index in ring served next
	queued  int      // connections waiting (not in flight)
}

type queueEntry struct {
	req      *model.PushRequest // pending, merged; nil when nothing is pending
	waiting  bool               // in a namespace FIFO
	inFlight bool
}

type fifo struct {
	items []*Connection
	head  int
}

func (f *fifo) push(c *Connection) { f.items = append(f.items, c) }

func (f *fifo) pop() *Connection {
	c := f.items[f.head]
	f.items[f.head] = nil
	f.head++
	if f.head > 32 && f.head*2 > len(f.items) { // reclaim the consumed front
		f.items = slices.Clone(f.items[f.head:])
		f.head = 0
	}
	return c
}

func (f *fifo) empty() bool { return f.head == len(f.items) }

func newPushQueue() *pushQueue {
	q := &pushQueue{entries: map[*Connection]*queueEntry{}, byNS: map[string]*fifo{}}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// Enqueue adds req for c, merging it with a push already pending.
func (q *pushQueue) Enqueue(c *Connection, req *model.PushRequest) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || c.dequeued {
		return
	}
	e := q.entries[c]
	if e == nil {
		e = &queueEntry{}
		q.entries[c] = e
	}
	e.req = e.req.Merge(req)
	if !e.waiting && !e.inFlight {
		q.add(c, e)
	}
}

func (q *pushQueue) add(c *Connection, e *queueEntry) {
	ns := c.proxy.Namespace
	f := q.byNS[ns]
	if f == nil {
		f = &fifo{}
		q.byNS[ns] = f
		q.ring = append(q.ring, ns)
	}
	f.push(c)
	e.waiting = true
	q.queued++
	q.cond.Signal()
}

// Dequeue blocks until a connection has a pending push and returns it with the merged request, marking it in
// flight. It returns nil after Close.
func (q *pushQueue) Dequeue() (*Connection, *model.PushRequest) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		for q.queued == 0 && !q.closed {
			q.cond.Wait()
		}
		if q.closed {
			return nil, nil
		}
		if q.next >= len(q.ring) {
			q.next = 0
		}
		ns := q.ring[q.next]
		f := q.byNS[ns]
		var c *Connection
		var e *queueEntry
		for !f.empty() && e == nil {
			c = f.pop()
			if e = q.entries[c]; e != nil && !e.waiting {
				e = nil // removed while waiting; its slot is stale
			}
		}
		if f.empty() {
			delete(q.byNS, ns)
			q.ring = slices.Delete(q.ring, q.next, q.next+1) // next now points at the following namespace
		} else {
			q.next++
		}
		if e == nil {
			continue
		}
		req := e.req
		e.req, e.waiting, e.inFlight = nil, false, true
		q.queued--
		return c, req
	}
}

// Done marks c's push finished; a push that arrived meanwhile is queued at the back.
func (q *pushQueue) Done(c *Connection) {
	q.mu.Lock()
	defer q.mu.Unlock()
	e := q.entries[c]
	if e == nil {
		return
	}
	e.inFlight = false
	if e.req != nil && !q.closed && !c.dequeued {
		q.add(c, e)
		return
	}
	delete(q.entries, c)
}

// Remove forgets c; it is never queued again.
func (q *pushQueue) Remove(c *Connection) {
	q.mu.Lock()
	defer q.mu.Unlock()
	c.dequeued = true
	if e := q.entries[c]; e != nil {
		if e.waiting {
			q.queued-- // the stale FIFO slot is skipped by Dequeue
		}
		delete(q.entries, c)
	}
}

// Len returns the number of connections waiting for a push.
func (q *pushQueue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.queued
}

// Drained reports whether no connection is waiting for a push or being pushed to.
func (q *pushQueue) Drained() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.entries) == 0
}

// Close wakes every Dequeue; they return nil.
func (q *pushQueue) Close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.cond.Broadcast()
}
