package file

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/store"
	"github.com/sextantmesh/sextant/pkg/shrink"
)

// DefaultNamespace is given to namespaced objects written without one, as kubectl does.
const DefaultNamespace = "default"

// DefaultMaxFileBytes is the default per-file size limit (8 MiB): far above any hand-written config, far
// below what would hurt the control plane's memory.
const DefaultMaxFileBytes = 8 << 20

// DefaultMaxTotalBytes is the default limit on all config files together (256 MiB): about a million objects,
// a few GiB of memory once parsed.
const DefaultMaxTotalBytes = 256 << 20

// Options configure a Source.
type Options struct {
	Dir   string
	Store *store.Store
	// Settle is how long the watcher waits for a burst of file events to end before reading (default 20ms).
	// A file is written in well under a millisecond by editors and tools, and replaced at once by a rename
	// or a ConfigMap swap; every millisecond of settle is added to every change's latency.
	Settle time.Duration
	Logger *slog.Logger
	// MaxFileBytes is the largest file read (default DefaultMaxFileBytes). A larger file is rejected and
	// keeps the objects it held.
	MaxFileBytes int64
	// MaxTotalBytes is the most all files read may hold together (default DefaultMaxTotalBytes). A file that
	// would take the total over it is rejected and keeps the objects it held; it is read again once others
	// shrink or go.
	MaxTotalBytes int64
	// Retry is how often a config dir that vanished or cannot be read is looked for again (default 1s).
	Retry time.Duration
}

// Source loads a directory tree into the store's file layer.
type Source struct {
	opts Options

	mu    sync.Mutex
	files map[string]*fileState // path → state
	// claims lists, per key, every document that defines it. The first is served: the one that was served
	// already while its file still defines the key, else the first by (path, index).
	claims     map[config.Key][]*claim
	claimsPeak int // see shrink.Map
	duplicates map[config.Key][]*config.Error
	// dirErrors holds directories that could not be read by the last walk that reached them.
	dirErrors map[string]*config.Error
	// rootIsDir is whether Dir was a directory when first loaded (it may name a single file).
	rootIsDir bool
	revision  uint64
	// totalBytes is the size of every file's last good read; overTotal holds files refused for MaxTotalBytes.
	totalBytes int64
	overTotal  map[string]bool
}

type fileState struct {
	hash    [32]byte
	size    int64                 // bytes of the read its objects come from
	objects map[config.Key]*claim // what the file currently provides (last good where it has errors)
	errors  []*config.Error
}

type claim struct {
	path    string
	index   int
	docHash [32]byte
	cfg     *config.Config
	// warnings are cfg's fields Sextant does not implement, logged once when the document was parsed.
	warnings []*config.Error
}

// New returns a source for opts.Dir. Call Load, then Run to watch.
func New(opts Options) *Source {
	if opts.Settle == 0 {
		opts.Settle = 20 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxFileBytes <= 0 {
		opts.MaxFileBytes = DefaultMaxFileBytes
	}
	if opts.Retry <= 0 {
		opts.Retry = time.Second
	}
	if opts.MaxTotalBytes <= 0 {
		opts.MaxTotalBytes = DefaultMaxTotalBytes
	}
	return &Source{opts: opts, files: map[string]*fileState{}, claims: map[config.Key][]*claim{},
		duplicates: map[config.Key][]*config.Error{}, dirErrors: map[string]*config.Error{}, overTotal: map[string]bool{}}
}

// Load reads the whole tree. Bad documents are reported by Errors; only an unreadable directory fails.
func (s *Source) Load() error {
	info, err := os.Stat(s.opts.Dir)
	if err != nil {
		return fmt.Errorf("config dir: %w", err)
	}
	if info.IsDir() {
		// Once a directory, always expected to be one: a file in its place later is a fault, not the config.
		s.mu.Lock()
		s.rootIsDir = true
		s.mu.Unlock()
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
	for _, e := range s.dirErrors {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b *config.Error) int {
		if c := strings.Compare(a.File, b.File); c != 0 {
			return c
		}
		return a.Index - b.Index
	})
	return out
}

// Warnings returns the fields of served objects that Sextant accepts but does not implement, sorted by file,
// index and field. Each was logged once, when its document was parsed.
func (s *Source) Warnings() []*config.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*config.Error
	for _, f := range s.files {
		for _, c := range f.objects {
			out = append(out, c.warnings...)
		}
	}
	slices.SortFunc(out, func(a, b *config.Error) int {
		if c := strings.Compare(a.File, b.File); c != 0 {
			return c
		}
		if a.Index != b.Index {
			return a.Index - b.Index
		}
		return strings.Compare(a.Field, b.Field)
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

// rescan reads every config file under root and withdraws the files under root that were deleted. A root
// that cannot be walked (vanished, unreadable, or the config dir replaced by a file) keeps everything under it
// and is reported; a directory under root that cannot be read keeps what it held.
func (s *Source) rescan(root string) error {
	seen := map[string]bool{}
	var blocked []string // directories under root the walk could not read
	walkErr := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == root {
				return err
			}
			if !errors.Is(err, fs.ErrNotExist) {
				blocked = append(blocked, path)
			}
			return nil // a directory that vanished while walking is handled like any missing file below
		}
		if d.IsDir() {
			if path != root && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		// Every other entry with a config name is read, symlinks and special files included, so that one
		// that is not a regular file is reported rather than silently ignored.
		if isConfigFile(path) {
			seen[path] = true
		}
		return nil
	})
	s.mu.Lock()
	rootIsDir := s.rootIsDir
	s.mu.Unlock()
	if walkErr == nil && root == s.opts.Dir && rootIsDir {
		if info, err := os.Stat(root); err == nil && !info.IsDir() {
			walkErr = fmt.Errorf("%s is not a directory", root)
		}
	}
	s.mu.Lock()
	for dir := range s.dirErrors {
		if under(dir, root) {
			delete(s.dirErrors, dir)
		}
	}
	var known []string
	for path := range s.files {
		if under(path, root) && !seen[path] {
			known = append(known, path)
		}
	}
	s.mu.Unlock()
	slices.Sort(known)

	// Below the config dir, a root that is gone (or whose parent is now a file) is sorted out file by file.
	if walkErr != nil && (root == s.opts.Dir || !(errors.Is(walkErr, fs.ErrNotExist) || errors.Is(walkErr, syscall.ENOTDIR))) {
		what, state := "config directory", "unreadable ("+walkErr.Error()+")"
		if root != s.opts.Dir {
			what = "directory"
		}
		if errors.Is(walkErr, fs.ErrNotExist) {
			state = "vanished"
		}
		msg := fmt.Sprintf("%s %s %s; keeping the last good objects of every file under it", what, root, state)
		s.setDirError(root, msg)
		// Logged once for the directory above, not once per file.
		s.mu.Lock()
		for _, p := range known {
			s.markUnreadable(s.stateFor(p), p, "cannot read: "+msg)
		}
		s.mu.Unlock()
		return walkErr
	}
	for _, dir := range blocked {
		s.setDirError(dir, "directory "+dir+" unreadable; keeping the last good objects of every file under it")
	}
	for _, p := range known {
		if i := slices.IndexFunc(blocked, func(dir string) bool { return under(p, dir) }); i >= 0 {
			s.keep(p, "cannot read: directory "+blocked[i]+" unreadable; keeping the last good objects", false)
			continue
		}
		s.missing(p)
	}
	paths := make([]string, 0, len(seen))
	for p := range seen {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		s.readFile(p)
	}
	return nil
}

// under reports whether path is root or inside it.
func under(path, root string) bool {
	return path == root || strings.HasPrefix(path, strings.TrimSuffix(root, string(filepath.Separator))+string(filepath.Separator))
}

func (s *Source) setDirError(dir, msg string) {
	s.mu.Lock()
	s.dirErrors[dir] = &config.Error{File: dir, Message: msg}
	s.mu.Unlock()
	s.opts.Logger.Warn("config directory lost; keeping what it held", "dir", dir, "err", msg)
}

// rootLost reports whether the config dir itself could not be walked the last time it was.
func (s *Source) rootLost() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dirErrors[s.opts.Dir] != nil
}

// missing handles a known file that is not where it was. Only an explicit deletion withdraws its objects: the
// file is gone from a directory that is still readable, or its directory was replaced by a file. A file that
// is still there but not readable as config, or whose directory vanished or cannot be read, keeps them.
func (s *Source) missing(path string) {
	s.mu.Lock()
	_, ok := s.files[path]
	s.mu.Unlock()
	if !ok {
		// A symlink to nothing may hold config once its target is there (a volume being swapped): say so.
		if info, err := os.Lstat(path); err == nil && info.Mode()&fs.ModeSymlink != 0 {
			s.keep(path, "cannot read: a symlink to nothing", false)
		}
		return
	}
	if info, err := os.Lstat(path); err == nil {
		if info.Mode().IsRegular() {
			// There after all, where the walk does not go (a directory swapped for a symlink to one).
			s.readFile(path)
			return
		}
		what := fileType(info.Mode())
		if info.Mode()&fs.ModeSymlink != 0 {
			what = "a symlink to nothing"
		}
		s.keep(path, fmt.Sprintf("cannot read: not a regular file (%s); keeping the last good objects", what), false)
		return
	}
	dir := filepath.Dir(path)
	info, err := os.Stat(dir)
	switch {
	case err == nil && !info.IsDir(), errors.Is(err, syscall.ENOTDIR):
		s.removeFile(path)
	case err == nil:
		d, err := os.Open(dir)
		if err != nil {
			s.keep(path, "cannot read: directory "+dir+" unreadable ("+err.Error()+"); keeping the last good objects", false)
			return
		}
		d.Close()
		s.removeFile(path)
	case errors.Is(err, fs.ErrNotExist):
		s.keep(path, "cannot read: directory "+dir+" vanished; keeping the last good objects until it is back", false)
	default:
		s.keep(path, "cannot read: directory "+dir+" unreadable ("+err.Error()+"); keeping the last good objects", false)
	}
}

// keep records why a file cannot be read and leaves what it provides in place. notConfig says the path is
// not a regular file (a FIFO, socket or device), which cannot hold config: nothing is missing for it.
func (s *Source) keep(path, msg string, notConfig bool) {
	s.mu.Lock()
	s.markUnreadable(s.stateFor(path), path, msg)
	s.files[path].errors[0].NotConfig = notConfig
	s.mu.Unlock()
	s.opts.Logger.Warn("config file unreadable; keeping what it held", "file", path, "err", msg)
}

// markUnreadable records msg as the file's only error. Called with s.mu held.
func (s *Source) markUnreadable(st *fileState, path, msg string) {
	st.errors = []*config.Error{{File: path, Message: msg}}
	st.hash = [32]byte{} // so the next good read is parsed and clears this error, even with the same content
}

func fileType(m fs.FileMode) string {
	switch t := m.Type(); {
	case t&fs.ModeDir != 0:
		return "a directory"
	case t&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case t&fs.ModeSocket != 0:
		return "a socket"
	case t&fs.ModeDevice != 0:
		return "a device"
	case t&fs.ModeSymlink != 0:
		return "a symlink"
	default:
		return m.Type().String()
	}
}

// errNotRegular and errTooLarge reject what is not a regular file of at most MaxFileBytes.
var errNotRegular, errTooLarge = errors.New("not a regular file"), errors.New("too large")

// readBounded reads a regular file of at most MaxFileBytes. Anything else is refused before it is read: a
// FIFO would block the watcher (and shutdown) forever, and /dev/zero would fill memory.
func (s *Source) readBounded(path string) ([]byte, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%w (%s)", errNotRegular, fileType(info.Mode()))
	}
	max := s.opts.MaxFileBytes
	if info.Size() > max {
		return nil, fmt.Errorf("%w: %d bytes, over the limit of %d bytes", errTooLarge, info.Size(), max)
	}
	// O_NONBLOCK: the file may have been swapped for a FIFO since the Stat, and opening one must not wait for a
	// writer; the Stat of the open file then refuses it.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if info, err = f.Stat(); err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%w (%s)", errNotRegular, fileType(info.Mode()))
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%w: over the limit of %d bytes", errTooLarge, max)
	}
	return data, nil
}

// readFile parses one file and applies what changed.
func (s *Source) readFile(path string) {
	data, err := s.readBounded(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			s.missing(path)
			return
		}
		s.keep(path, "cannot read: "+err.Error()+"; keeping the last good objects", errors.Is(err, errNotRegular))
		return
	}
	hash := sha256.Sum256(data)
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stateFor(path)
	if st.hash == hash && st.objects != nil {
		return
	}
	size := int64(len(data))
	if total := s.totalBytes - st.size + size; total > s.opts.MaxTotalBytes {
		s.overTotal[path] = true
		msg := fmt.Sprintf("cannot read: the config files would hold %d bytes together, over the limit of %d bytes; keeping the last good objects", total, s.opts.MaxTotalBytes)
		s.markUnreadable(st, path, msg)
		s.opts.Logger.Warn("config file refused; keeping what it held", "file", path, "err", msg)
		return
	}
	delete(s.overTotal, path)
	s.totalBytes += size - st.size
	st.hash, st.size = hash, size

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
				if prev.docHash == docHash {
					errs = append(errs, duplicateError(path, i, c.cfg, prev.index))
					continue
				}
				// The served document keeps the object against a new one added above it in the same file.
				errs = append(errs, duplicateError(path, prev.index, prev.cfg, i))
			}
			fresh[c.cfg.Key] = &claim{path: path, index: i, docHash: docHash, cfg: c.cfg, warnings: reindex(c.warnings, i)}
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
		warnings := config.ObjectWarnings(cfg, path, i)
		for _, w := range warnings {
			s.opts.Logger.Warn("config field not implemented", "warning", w.Error())
		}
		fresh[cfg.Key] = &claim{path: path, index: i, docHash: docHash, cfg: cfg, warnings: warnings}
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

// reindex returns warnings labelled with document index i: an unchanged document that moved in its file.
func reindex(warnings []*config.Error, i int) []*config.Error {
	if len(warnings) == 0 || warnings[0].Index == i {
		return warnings
	}
	out := make([]*config.Error, len(warnings))
	for j, w := range warnings {
		c := *w
		c.Index = i
		out[j] = &c
	}
	return out
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
	s.totalBytes -= st.size
	delete(s.overTotal, path)
}

// retryOverTotal reads again the files refused for MaxTotalBytes, which may fit now that others changed.
func (s *Source) retryOverTotal() {
	s.mu.Lock()
	if len(s.overTotal) == 0 {
		s.mu.Unlock()
		return
	}
	paths := make([]string, 0, len(s.overTotal))
	for p := range s.overTotal {
		paths = append(paths, p)
	}
	s.mu.Unlock()
	slices.Sort(paths)
	for _, p := range paths {
		s.readFile(p)
	}
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
			old.index, old.warnings = c.index, c.warnings
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
		// The file serving the object keeps it while it still defines it: a duplicate added later, wherever it
		// sorts, must not replace what is served (a DENY policy by an ALLOW one).
		if before != nil {
			if i := slices.IndexFunc(list, func(c *claim) bool { return c.path == before.path }); i > 0 {
				c := list[i]
				copy(list[1:i+1], list[:i])
				list[0] = c
			}
		}
		if len(list) == 0 {
			delete(s.claims, k)
			s.claims, s.claimsPeak = shrink.Map(s.claims, s.claimsPeak)
		} else {
			s.claimsPeak = max(s.claimsPeak, len(s.claims)+1)
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
			Message: fmt.Sprintf("duplicate object: %s document %d defines it and is served; this one (%s document %d) is ignored", list[0].path, list[0].index, c.path, c.index)})
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
	// What changed between Load and the watch has no event: look once more now that changes are seen.
	// Files whose bytes did not change cost a read and a hash.
	if err := s.rescan(s.opts.Dir); err != nil {
		s.opts.Logger.Warn("rescanning config dir", "err", err)
	}
	dirty := map[string]bool{}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	// firstDirty bounds the settle: a file rewritten more often than Settle is still read every 2×Settle
	// instead of waiting for writes to stop.
	var firstDirty time.Time
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
		case <-retryC:
			if info, err := os.Stat(s.opts.Dir); err == nil && info.IsDir() {
				if err := s.watchTree(w, s.opts.Dir); err != nil {
					s.opts.Logger.Warn("watching config dir", "err", err)
				}
				if err := s.rescan(s.opts.Dir); err == nil {
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

func (s *Source) applyDirty(w *fsnotify.Watcher, paths []string) {
	defer s.retryOverTotal()
	// The config dir can go without an event naming it (an unmounted volume's watch ends silently).
	if _, err := os.Stat(s.opts.Dir); err != nil {
		paths = append(paths, s.opts.Dir)
	}
	for _, p := range paths {
		if p == s.opts.Dir || strings.HasPrefix(filepath.Base(p), ".") {
			// Hidden names are how Kubernetes swaps a mounted ConfigMap (..data), and an event on the config dir
			// itself is its removal or move: read everything again.
			_ = s.watchTree(w, s.opts.Dir)
			if err := s.rescan(s.opts.Dir); err != nil {
				s.opts.Logger.Warn("rescanning config dir", "err", err)
			}
			return
		}
	}
	for _, p := range paths {
		if info, err := os.Stat(p); err == nil && info.IsDir() {
			_ = s.watchTree(w, p)
		}
		// A path that is gone, a new directory, a file, or a directory replaced by a file: rescan sorts out
		// which, and what it held.
		_ = s.rescan(p)
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
