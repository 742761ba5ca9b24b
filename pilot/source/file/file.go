package file

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/store"
)

// DefaultNamespace is given to namespaced objects written without one, as kubectl does.
const DefaultNamespace = "default"

// Options configure a Source.
type Options struct {
	Dir   string
	Store *store.Store
	// Settle is how long the watcher waits for a burst of file events to end before reading (default 20ms).
	// A file is written in well under a millisecond by editors and tools, and replaced at once by a rename
	// or a ConfigMap swap; every millisecond of settle is added to every change's latency.
	Settle time.Duration
	Logger *slog.Logger
}

// Source loads a directory tree into the store's file layer.
type Source struct {
	opts Options

	mu    sync.Mutex
	files map[string]*fileState // path → state
	// claims lists, per key, every document that defines it; the first by (path, index) wins.
	claims     map[config.Key][]*claim
	duplicates map[config.Key][]*config.Error
	revision   uint64
}

type fileState struct {
	hash    [32]byte
	objects map[config.Key]*claim // what the file currently provides (last good where it has errors)
	errors  []*config.Error
}

type claim struct {
	path    string
	index   int
	docHash [32]byte
	cfg     *config.Config
}

// New returns a source for opts.Dir. Call Load, then Run to watch.
func New(opts Options) *Source {
	if opts.Settle == 0 {
		opts.Settle = 20 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Source{opts: opts, files: map[string]*fileState{}, claims: map[config.Key][]*claim{}, duplicates: map[config.Key][]*config.Error{}}
}

// Load reads the whole tree. Bad documents are reported by Errors; only an unreadable directory fails.
func (s *Source) Load() error {
	if _, err := os.Stat(s.opts.Dir); err != nil {
		return fmt.Errorf("config dir: %w", err)
	}
	return s.rescan(s.opts.Dir)
}

// Errors returns every rejected document, sorted by file and index.
func (s *Source) Errors() []*config.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*config.Error
	for _, f := range s.files {
		out = append(out, f.errors...)
	}
	for _, errs := range s.duplicates {
		out = append(out, errs...)
	}
	slices.SortFunc(out, func(a, b *config.Error) int {
		if c := strings.Compare(a.File, b.File); c != 0 {
			return c
		}
		return a.Index - b.Index
	})
	return out
}

// isConfigFile reports whether path names a file the source reads.
func isConfigFile(path string) bool {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml", ".json":
		return !strings.HasPrefix(filepath.Base(path), ".")
	}
	return false
}

// rescan reads every config file under root and forgets files under root that are gone.
func (s *Source) rescan(root string) error {
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == root {
				return err
			}
			return nil // vanished while walking
		}
		if d.IsDir() {
			if path != root && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if isConfigFile(path) {
			seen[path] = true
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	s.mu.Lock()
	var gone []string
	prefix := strings.TrimSuffix(root, string(filepath.Separator)) + string(filepath.Separator)
	for path := range s.files {
		if (path == root || strings.HasPrefix(path, prefix)) && !seen[path] {
			gone = append(gone, path)
		}
	}
	s.mu.Unlock()
	paths := make([]string, 0, len(seen))
	for p := range seen {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range gone {
		s.removeFile(p)
	}
	for _, p := range paths {
		s.readFile(p)
	}
	return nil
}

// readFile parses one file and applies what changed.
func (s *Source) readFile(path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			s.removeFile(path)
			return
		}
		s.mu.Lock()
		st := s.stateFor(path)
		st.errors = []*config.Error{{File: path, Message: "cannot read: " + err.Error()}}
		st.hash = [32]byte{} // so the next good read is parsed and clears this error, even with the same content
		s.mu.Unlock()
		s.opts.Logger.Warn("config file unreadable; keeping what it held", "file", path, "err", err)
		return
	}
	hash := sha256.Sum256(data)
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stateFor(path)
	if st.hash == hash && st.objects != nil {
		return
	}
	st.hash = hash

	docs, splitErr := config.SplitDocuments(data)
	fresh := map[config.Key]*claim{}
	var errs []*config.Error
	if splitErr != nil {
		errs = append(errs, &config.Error{File: path, Index: len(docs), Message: "not valid YAML: " + splitErr.Error()})
	}
	// A document already served from this file, byte for byte, is not parsed again (replaceClaims keeps its
	// object): rewriting a file to change one pod of twelve costs one parse, not twelve.
	served := make(map[[32]byte]*claim, len(st.objects))
	for _, c := range st.objects {
		served[c.docHash] = c
	}
	for i, doc := range docs {
		if config.IsEmptyDocument(doc) {
			continue
		}
		docHash := sha256.Sum256(doc)
		if c := served[docHash]; c != nil {
			if prev, dup := fresh[c.cfg.Key]; dup {
				errs = append(errs, duplicateError(path, i, c.cfg, prev.index))
				continue
			}
			fresh[c.cfg.Key] = &claim{path: path, index: i, docHash: docHash, cfg: c.cfg}
			continue
		}
		cfg, err := config.Parse(doc, path, i, DefaultNamespace)
		if err != nil {
			var ce *config.Error
			if !errors.As(err, &ce) {
				ce = &config.Error{File: path, Index: i, Message: err.Error()}
			}
			errs = append(errs, ce)
			continue
		}
		if prev, dup := fresh[cfg.Key]; dup {
			errs = append(errs, duplicateError(path, i, cfg, prev.index))
			continue
		}
		fresh[cfg.Key] = &claim{path: path, index: i, docHash: docHash, cfg: cfg}
	}
	if len(errs) > 0 {
		// Keep serving what the file held before for objects its valid documents no longer define:
		// a broken document must not delete what it used to describe.
		for k, c := range st.objects {
			if _, ok := fresh[k]; !ok {
				fresh[k] = c
			}
		}
		for _, e := range errs {
			s.opts.Logger.Warn("config rejected", "error", e.Error())
		}
	}
	st.errors = errs
	s.replaceClaims(path, st, fresh)
}

// duplicateError reports document i of path defining the same object as document first.
func duplicateError(path string, i int, cfg *config.Config, first int) *config.Error {
	return &config.Error{File: path, Index: i, Kind: string(cfg.Kind), Namespace: cfg.Namespace, Name: cfg.Name,
		Field: "metadata.name", Message: fmt.Sprintf("duplicate of document %d in the same file; this one is ignored", first)}
}

func (s *Source) stateFor(path string) *fileState {
	st := s.files[path]
	if st == nil {
		st = &fileState{}
		s.files[path] = st
	}
	return st
}

// removeFile withdraws everything a deleted file provided.
func (s *Source) removeFile(path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.files[path]
	if st == nil {
		return
	}
	s.replaceClaims(path, st, nil)
	delete(s.files, path)
}

// replaceClaims swaps the claims of one file and updates the store for every key whose winner changed.
// Called with s.mu held.
func (s *Source) replaceClaims(path string, st *fileState, fresh map[config.Key]*claim) {
	touched := map[config.Key]bool{}
	for k := range st.objects {
		touched[k] = true
	}
	for k, c := range fresh {
		touched[k] = true
		// Unchanged document: keep the object already served so no event fires.
		if old, ok := st.objects[k]; ok && old.docHash == c.docHash {
			old.index = c.index
			fresh[k] = old
		}
	}
	st.objects = fresh
	keys := make([]config.Key, 0, len(touched))
	for k := range touched {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, config.CompareKeys)
	for _, k := range keys {
		before := s.winner(k)
		list := slices.DeleteFunc(s.claims[k], func(c *claim) bool { return c.path == path })
		if c, ok := fresh[k]; ok {
			list = append(list, c)
		}
		slices.SortFunc(list, func(a, b *claim) int {
			if c := strings.Compare(a.path, b.path); c != 0 {
				return c
			}
			return a.index - b.index
		})
		if len(list) == 0 {
			delete(s.claims, k)
		} else {
			s.claims[k] = list
		}
		s.reportDuplicates(k, list)
		after := s.winner(k)
		switch {
		case after == nil && before != nil:
			s.opts.Store.Delete(store.LayerFile, k)
		case after != nil && (before == nil || after.cfg != before.cfg):
			s.revision++
			cfg := *after.cfg
			cfg.ResourceVersion = strconv.FormatUint(s.revision, 10)
			cfg.Generation = 1
			if prev := s.opts.Store.GetLayer(store.LayerFile, k); prev != nil {
				cfg.Generation = prev.Generation + 1
			}
			after.cfg = &cfg
			s.opts.Store.Upsert(store.LayerFile, &cfg)
		}
	}
}

func (s *Source) winner(k config.Key) *claim {
	if list := s.claims[k]; len(list) > 0 {
		return list[0]
	}
	return nil
}

func (s *Source) reportDuplicates(k config.Key, list []*claim) {
	if len(list) < 2 {
		delete(s.duplicates, k)
		return
	}
	var errs []*config.Error
	for _, c := range list[1:] {
		errs = append(errs, &config.Error{File: c.path, Index: c.index, Kind: string(k.Kind), Namespace: k.Namespace, Name: k.Name,
			Message: fmt.Sprintf("duplicate object: %s document %d defines it first and wins; this one is ignored", list[0].path, list[0].index)})
	}
	s.duplicates[k] = errs
}

// Run watches the tree and applies changes until ctx is done.
func (s *Source) Run(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	if err := s.watchTree(w, s.opts.Dir); err != nil {
		return err
	}
	dirty := map[string]bool{}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	// firstDirty bounds the settle: a file rewritten more often than Settle is still read every 2×Settle
	// instead of waiting for writes to stop.
	var firstDirty time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			dirty[ev.Name] = true
			if firstDirty.IsZero() {
				firstDirty = time.Now()
			}
			if wait := min(s.opts.Settle, 2*s.opts.Settle-time.Since(firstDirty)); wait > 0 {
				timer.Reset(wait)
			} else {
				timer.Reset(0)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			s.opts.Logger.Warn("watching config dir", "err", err)
		case <-timer.C:
			firstDirty = time.Time{}
			paths := make([]string, 0, len(dirty))
			for p := range dirty {
				paths = append(paths, p)
			}
			clear(dirty)
			slices.Sort(paths)
			s.applyDirty(w, paths)
		}
	}
}

func (s *Source) applyDirty(w *fsnotify.Watcher, paths []string) {
	for _, p := range paths {
		if strings.HasPrefix(filepath.Base(p), ".") {
			// Hidden names are how Kubernetes swaps a mounted ConfigMap (..data): read everything again.
			if err := s.rescan(s.opts.Dir); err != nil {
				s.opts.Logger.Warn("rescanning config dir", "err", err)
			}
			_ = s.watchTree(w, s.opts.Dir)
			return
		}
	}
	for _, p := range paths {
		info, err := os.Stat(p)
		switch {
		case err != nil:
			// Gone: a file or a whole directory.
			_ = s.rescan(p)
		case info.IsDir():
			_ = s.watchTree(w, p)
			_ = s.rescan(p)
		case isConfigFile(p):
			s.readFile(p)
		}
	}
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
				return fmt.Errorf("watch %s: %w", path, err)
			}
		}
		return nil
	})
}

// Counts returns how many objects the source provides by kind.
func (s *Source) Counts() map[config.Kind]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[config.Kind]int{}
	for k := range s.claims {
		out[k.Kind]++
	}
	return out
}
