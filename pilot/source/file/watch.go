package file

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// pass is one round of reading the tree or part of it.
type pass struct {
	// async queues reads to the readers (the watcher); otherwise each file is read and applied in turn (Load).
	async bool
	// settled holds the files quiet for SecuritySettle, whose security objects a removal may withdraw.
	settled map[string]bool
	// deferred collects the files holding security objects whose removal waits for them to be quiet.
	deferred []string
	// hold holds the security files being written in place: read once quiet, not by a rescan meanwhile.
	hold map[string]bool
}

// notes carries what the readers hand back to the watcher: files gone or changing while read, which the
// watcher looks at again as if an event named them, and whether a file shrank while others wait for room.
type notes struct {
	mu         sync.Mutex
	paths      map[string]bool // path → changing while read (an in-place write)
	retryTotal bool
	signal     chan struct{}
}

func (s *Source) note(path string, wrote bool) {
	s.notes.mu.Lock()
	if s.notes.paths == nil {
		s.notes.paths = map[string]bool{}
	}
	s.notes.paths[path] = s.notes.paths[path] || wrote
	s.notes.mu.Unlock()
	s.signalNotes()
}

func (s *Source) noteRetryTotal() {
	s.notes.mu.Lock()
	s.notes.retryTotal = true
	s.notes.mu.Unlock()
	s.signalNotes()
}

func (s *Source) signalNotes() {
	select {
	case s.notes.signal <- struct{}{}:
	default:
	}
}

// change is a path the watcher will look at once its events settle.
type change struct {
	first, due time.Time
	// quiet is a security file written in place: read once no event came for SecuritySettle.
	quiet bool
	// removal is a security file found gone: withdrawn once quiet and once the reads in flight are applied.
	removal bool
}

// watcher is Run's state, used by its goroutine only.
type watcher struct {
	s       *Source
	w       *fsnotify.Watcher
	pending map[string]*change
	timer   *time.Timer
}

// Run watches the tree and applies changes until ctx is done.
func (s *Source) Run(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	defer s.reads.stop()
	if err := s.watchTree(w, s.opts.Dir); err != nil {
		return err
	}
	wt := &watcher{s: s, w: w, pending: map[string]*change{}, timer: time.NewTimer(time.Hour)}
	wt.timer.Stop()
	// What changed between Load and the watch has no event: look once more now that changes are seen.
	// Files whose bytes did not change cost a read and a hash.
	if err := wt.rescan(s.opts.Dir, nil); err != nil {
		s.opts.Logger.Warn("rescanning config dir", "err", err)
	}
	s.signalNotes() // reads refused for the total during Load wait for room
	// retry ticks while the config dir itself is lost: its watch went with it, so only looking again
	// notices that it is back.
	var retry *time.Ticker
	var retryC <-chan time.Time
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			wt.event(ev.Name, ev.Op.Has(fsnotify.Write))
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			s.opts.Logger.Warn("watching config dir", "err", err)
		case <-wt.timer.C:
			wt.fire()
		case <-s.notes.signal:
			wt.takeNotes()
		case <-retryC:
			if info, err := os.Stat(s.opts.Dir); err == nil && info.IsDir() {
				if err := s.watchTree(w, s.opts.Dir); err != nil {
					s.opts.Logger.Warn("watching config dir", "err", err)
				}
				if err := wt.rescan(s.opts.Dir, nil); err == nil {
					s.opts.Logger.Info("config dir readable again", "dir", s.opts.Dir)
				}
			}
		}
		switch lost := s.rootLost(); {
		case lost && retry == nil:
			retry = time.NewTicker(s.opts.Retry)
			retryC = retry.C
		case !lost && retry != nil:
			retry.Stop()
			retry, retryC = nil, nil
		}
	}
}

// event schedules a look at path. A file is looked at Settle after its last event, and at most 2×Settle after
// its first, so that one rewritten more often than Settle is still read; a security file written in place
// only once it has been quiet for SecuritySettle, as it may be half written.
func (wt *watcher) event(path string, wrote bool) {
	now := time.Now()
	c := wt.pending[path]
	if c == nil {
		c = &change{first: now}
		wt.pending[path] = c
	}
	if wrote && !c.quiet && wt.s.holdsSecurity(path) {
		c.quiet = true
	}
	if c.quiet || c.removal {
		c.due = now.Add(wt.s.opts.SecuritySettle)
	} else {
		c.due = now.Add(min(wt.s.opts.Settle, 2*wt.s.opts.Settle-now.Sub(c.first)))
	}
	wt.arm()
}

// arm sets the timer for the earliest change due.
func (wt *watcher) arm() {
	var next time.Time
	for _, c := range wt.pending {
		if next.IsZero() || c.due.Before(next) {
			next = c.due
		}
	}
	wt.timer.Stop()
	if !next.IsZero() {
		wt.timer.Reset(max(0, time.Until(next)))
	}
}

// fire looks at every change due.
func (wt *watcher) fire() {
	now := time.Now()
	var paths []string
	quiet := map[string]bool{}
	for p, c := range wt.pending {
		if c.due.After(now) {
			continue
		}
		paths = append(paths, p)
		quiet[p] = c.quiet || c.removal
		delete(wt.pending, p)
	}
	slices.Sort(paths)
	wt.apply(paths, quiet)
	wt.arm()
}

// takeNotes looks again at what the readers handed back.
func (wt *watcher) takeNotes() {
	s := wt.s
	s.notes.mu.Lock()
	paths, retryTotal := s.notes.paths, s.notes.retryTotal
	s.notes.paths, s.notes.retryTotal = nil, false
	s.notes.mu.Unlock()
	for p, wrote := range paths {
		wt.event(p, wrote)
	}
	if retryTotal {
		s.retryOverTotal(&pass{async: true, hold: wt.held()})
	}
}

// apply looks at paths; quiet says which were quiet for SecuritySettle.
func (wt *watcher) apply(paths []string, quiet map[string]bool) {
	s := wt.s
	// The config dir can go without an event naming it (an unmounted volume's watch ends silently).
	if _, err := os.Stat(s.opts.Dir); err != nil {
		paths = append(paths, s.opts.Dir)
	}
	var deferred []string
	for _, p := range paths {
		if p == s.opts.Dir || strings.HasPrefix(filepath.Base(p), ".") {
			// Hidden names are how Kubernetes swaps a mounted ConfigMap (..data), and an event on the config dir
			// itself is its removal or move: read everything again.
			_ = s.watchTree(wt.w, s.opts.Dir)
			if err := wt.rescan(s.opts.Dir, quiet); err != nil {
				s.opts.Logger.Warn("rescanning config dir", "err", err)
			}
			s.retryOverTotal(&pass{async: true, hold: wt.held()})
			return
		}
	}
	for _, p := range paths {
		if info, err := os.Stat(p); err == nil && info.IsDir() {
			_ = s.watchTree(wt.w, p)
		}
		// A path that is gone, a new directory, a file, or a directory replaced by a file: rescan sorts out
		// which, and what it held.
		pa := &pass{async: true, hold: wt.held()}
		_ = s.rescan(p, pa)
		deferred = append(deferred, pa.deferred...)
	}
	wt.removeSettled(deferred, quiet)
	s.retryOverTotal(&pass{async: true, hold: wt.held()})
}

// rescan reads root again and schedules the removals it deferred.
func (wt *watcher) rescan(root string, quiet map[string]bool) error {
	pa := &pass{async: true, hold: wt.held()}
	err := wt.s.rescan(root, pa)
	wt.removeSettled(pa.deferred, quiet)
	return err
}

// removeSettled withdraws the security files found gone that were quiet, once the reads in flight and the
// changes about to be read are applied: a file moved to another name is read there before it goes from here,
// so its objects are never absent. The others are looked at again once quiet.
func (wt *watcher) removeSettled(deferred []string, quiet map[string]bool) {
	now := time.Now()
	for _, p := range deferred {
		c := &change{first: now, due: now.Add(wt.s.opts.SecuritySettle), removal: true}
		if quiet[p] {
			if !wt.busy() {
				_ = wt.s.rescan(p, &pass{async: true, settled: map[string]bool{p: true}})
				continue
			}
			c.due = now.Add(wt.s.opts.Settle)
		}
		if old := wt.pending[p]; old == nil || old.due.Before(c.due) {
			wt.pending[p] = c
		}
	}
	wt.arm()
}

// busy reports whether a read is in flight or a change other than a deferred removal is about to be read.
func (wt *watcher) busy() bool {
	if wt.s.reads.busy() {
		return true
	}
	for _, c := range wt.pending {
		if !c.removal {
			return true
		}
	}
	return false
}

// held returns the security files waiting to be quiet after an in-place write.
func (wt *watcher) held() map[string]bool {
	out := map[string]bool{}
	for p, c := range wt.pending {
		if c.quiet {
			out[p] = true
		}
	}
	return out
}

// holdsSecurity reports whether path, or a file under it, holds security objects.
func (s *Source) holdsSecurity(path string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.files[path]; st != nil {
		return st.security
	}
	for p, st := range s.files {
		if st.security && under(p, path) {
			return true
		}
	}
	return false
}

func (s *Source) watchTree(w *fsnotify.Watcher, root string) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() {
			if path != root && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			if err := w.Add(path); err != nil {
				if path == s.opts.Dir {
					return fmt.Errorf("watch %s: %w", path, err)
				}
				// One directory that cannot be watched must not leave the rest of the tree unwatched.
				s.opts.Logger.Warn("cannot watch config subdirectory; its changes are seen at the next rescan", "dir", path, "err", err)
			}
		}
		return nil
	})
}
