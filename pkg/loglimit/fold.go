package loglimit

import (
	"sync"
	"time"
)

// Fold writes a summary of events that come in storms (config changes, pushes) at most once per interval.
// The first event after a quiet interval is written at once; those that follow within the interval are
// folded into one summary, written when the interval is over.
type Fold[S any] struct {
	every time.Duration
	write func(S)

	mu      sync.Mutex
	acc     S
	pending bool
	last    time.Time
	timer   *time.Timer
}

// NewFold writes each summary with write, at most once every interval.
func NewFold[S any](every time.Duration, write func(S)) *Fold[S] {
	return &Fold[S]{every: every, write: write}
}

// Add folds an event into the pending summary with add (which starts from S's zero value after each line).
func (f *Fold[S]) Add(add func(*S)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	add(&f.acc)
	f.pending = true
	if f.timer != nil {
		return
	}
	if wait := f.every - time.Since(f.last); wait > 0 {
		f.timer = time.AfterFunc(wait, f.flush)
		return
	}
	f.writeLocked()
}

func (f *Fold[S]) flush() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.timer = nil
	if f.pending {
		f.writeLocked()
	}
}

// writeLocked writes under the lock, so that lines come out in order. Called with f.mu held.
func (f *Fold[S]) writeLocked() {
	acc := f.acc
	var zero S
	f.acc, f.pending, f.last = zero, false, time.Now()
	f.write(acc)
}
