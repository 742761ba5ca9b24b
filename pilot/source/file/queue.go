package file

import "sync"

// readers is how many files the watcher reads and parses at once: a few slow files (large, or on a slow
// disk) leave the others readers to go on with.
const readers = 4

// readQueue runs the watcher's reads off the loop that sees the events, a few at a time. A path is queued
// once: a change to a file being read queues it again, to be read once the read in flight is applied, so an
// older read is never applied over a newer one.
type readQueue struct {
	src     *Source
	mu      sync.Mutex
	queue   []string
	jobs    map[string]*readJob // queued or being read
	workers int
	stopped bool
	wg      sync.WaitGroup
}

type readJob struct{ running, again bool }

func newReadQueue(s *Source) *readQueue {
	return &readQueue{src: s, jobs: map[string]*readJob{}}
}

// start queues a read of path.
func (q *readQueue) start(path string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopped {
		return
	}
	if j := q.jobs[path]; j != nil {
		j.again = j.again || j.running
		return
	}
	q.jobs[path] = &readJob{}
	q.queue = append(q.queue, path)
	if q.workers < readers {
		q.workers++
		q.wg.Add(1)
		go q.work()
	}
}

// work reads queued paths until there are none.
func (q *readQueue) work() {
	defer q.wg.Done()
	p := &pass{async: true}
	for {
		q.mu.Lock()
		if len(q.queue) == 0 || q.stopped {
			q.workers--
			q.mu.Unlock()
			return
		}
		path := q.queue[0]
		q.queue = q.queue[1:]
		if len(q.queue) == 0 {
			q.queue = nil
		}
		j := q.jobs[path]
		j.running = true
		q.mu.Unlock()

		_ = q.src.readOnce(path, p)

		q.mu.Lock()
		if j.again && !q.stopped {
			j.running, j.again = false, false
			q.queue = append(q.queue, path)
		} else {
			delete(q.jobs, path)
		}
		q.mu.Unlock()
	}
}

// busy reports whether a read is queued or in flight.
func (q *readQueue) busy() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.jobs) > 0
}

// pending reports whether a read of path is queued or in flight.
func (q *readQueue) pending(path string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.jobs[path] != nil
}

// stop drops what is queued and waits for the reads in flight.
func (q *readQueue) stop() {
	q.mu.Lock()
	q.stopped = true
	q.queue = nil
	clear(q.jobs)
	q.mu.Unlock()
	q.wg.Wait()
}
