package file

import (
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
	"syscall"
	"time"

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

// DefaultMaxFileDocuments is the default limit on the documents of one file: far above hand-written config
// (and the few hundred a generated mesh puts in one file), far below a file that would stall the watcher.
const DefaultMaxFileDocuments = 10_000

// DefaultSecuritySettle is how long a file holding security objects must be quiet before an in-place write
// is read or its removal takes effect (see Options.SecuritySettle).
const DefaultSecuritySettle = time.Second

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
	// MaxFileDocuments is the most documents one file may hold (default DefaultMaxFileDocuments). A file with
	// more is rejected, before any is parsed, and keeps the objects it held.
	MaxFileDocuments int
	// SecuritySettle is how long the watcher waits for a file holding AuthorizationPolicy, PeerAuthentication
	// or RequestAuthentication objects to be quiet (no event on it) before it reads an in-place write of it,
	// which may be half done, and before its removal or rename away withdraws them, which may be half of a
	// move (default DefaultSecuritySettle). A file replaced by a rename is read at once, as is any file that
	// holds none: adding a policy need not wait. Load does not wait.
	SecuritySettle time.Duration
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
	// clock numbers reads and changes of files' states; stamps holds, per path, the latest applied, so that a
	// read that began before a change of its file's state is dropped.
	clock  uint64
	stamps map[string]uint64
	reads  *readQueue
	notes  notes
}

type fileState struct {
	id      fileID // of the read its objects come from
	hash    [32]byte
	size    int64                 // bytes of the read its objects come from
	objects map[config.Key]*claim // what the file currently provides (last good where it has errors)
	errors  []*config.Error
	// security is whether objects holds a security kind: changes to the file then wait for it to be quiet.
	security bool
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
	if opts.MaxFileDocuments <= 0 {
		opts.MaxFileDocuments = DefaultMaxFileDocuments
	}
	if opts.SecuritySettle <= 0 {
		opts.SecuritySettle = DefaultSecuritySettle
	}
	s := &Source{opts: opts, files: map[string]*fileState{}, claims: map[config.Key][]*claim{},
		duplicates: map[config.Key][]*config.Error{}, dirErrors: map[string]*config.Error{}, overTotal: map[string]bool{},
		stamps: map[string]uint64{}, notes: notes{signal: make(chan struct{}, 1)}}
	s.reads = newReadQueue(s)
	return s
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
	return s.rescan(s.opts.Dir, &pass{})
}

// Errors returns every rejected document, sorted by file and index; past the first few of a file, the rest are
// counted in one entry.
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
// index and field; past the first few of a file, the rest are counted in one entry. Each was logged once,
// when its document was parsed.
func (s *Source) Warnings() []*config.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*config.Error
	for path, f := range s.files {
		var ws []*config.Error
		for _, c := range f.objects {
			ws = append(ws, c.warnings...)
		}
		slices.SortFunc(ws, func(a, b *config.Error) int {
			if a.Index != b.Index {
				return a.Index - b.Index
			}
			return strings.Compare(a.Field, b.Field)
		})
		out = append(out, capReported(path, ws)...)
	}
	slices.SortStableFunc(out, func(a, b *config.Error) int { return strings.Compare(a.File, b.File) })
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
func (s *Source) rescan(root string, p *pass) error {
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
		for _, path := range known {
			s.stamp(path)
			s.markUnreadable(s.stateFor(path), path, "cannot read: "+msg)
		}
		s.mu.Unlock()
		return walkErr
	}
	for _, dir := range blocked {
		s.setDirError(dir, "directory "+dir+" unreadable; keeping the last good objects of every file under it")
	}
	for _, path := range known {
		if i := slices.IndexFunc(blocked, func(dir string) bool { return under(path, dir) }); i >= 0 {
			s.keep(path, "cannot read: directory "+blocked[i]+" unreadable; keeping the last good objects", false)
			continue
		}
		s.missing(path, p)
	}
	paths := make([]string, 0, len(seen))
	for path := range seen {
		if !p.hold[path] {
			paths = append(paths, path)
		}
	}
	slices.Sort(paths)
	for _, path := range paths {
		s.readFile(path, p)
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
func (s *Source) missing(path string, p *pass) {
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
			s.readFile(path, p)
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
		s.removeFile(path, p)
	case err == nil:
		d, err := os.Open(dir)
		if err != nil {
			s.keep(path, "cannot read: directory "+dir+" unreadable ("+err.Error()+"); keeping the last good objects", false)
			return
		}
		d.Close()
		s.removeFile(path, p)
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
	s.stamp(path)
	news := s.keepLocked(path, msg, notConfig)
	s.mu.Unlock()
	if news {
		s.opts.Logger.Warn("config file unreadable; keeping what it held", "file", path, "err", msg)
	}
}

// keepLocked is keep without the log; it reports whether the fault is news (see markUnreadable). Called
// with s.mu held.
func (s *Source) keepLocked(path, msg string, notConfig bool) bool {
	news := s.markUnreadable(s.stateFor(path), path, msg)
	s.files[path].errors[0].NotConfig = notConfig
	return news
}

// markUnreadable records msg as the file's only error and reports whether that is news, to be logged: a file
// read again with the same fault (by the watcher's first look after Load, or a rescan) was logged already.
// Called with s.mu held.
func (s *Source) markUnreadable(st *fileState, path, msg string) bool {
	news := len(st.errors) != 1 || st.errors[0].Message != msg
	st.errors = []*config.Error{{File: path, Message: msg}}
	st.hash = [32]byte{} // so the next good read is parsed and clears this error, even with the same content
	return news
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

func (s *Source) stateFor(path string) *fileState {
	st := s.files[path]
	if st == nil {
		st = &fileState{}
		s.files[path] = st
	}
	return st
}

// removeFile withdraws everything a deleted file provided. The watcher defers the removal of a file holding
// security objects until it has been quiet (p.settled): it may be half of a move, or of a rename storm.
func (s *Source) removeFile(path string, p *pass) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.files[path]
	if st == nil {
		return
	}
	if p.async && st.security && !p.settled[path] {
		p.deferred = append(p.deferred, path)
		return
	}
	s.stamp(path)
	if !s.reads.pending(path) {
		delete(s.stamps, path) // no read of it in flight to drop
	}
	s.replaceClaims(path, st, nil)
	delete(s.files, path)
	s.totalBytes -= st.size
	delete(s.overTotal, path)
}

// retryOverTotal reads again the files refused for MaxTotalBytes, which may fit now that others changed.
func (s *Source) retryOverTotal(pa *pass) {
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
		s.readFile(p, pa)
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
	st.security = false
	for k := range fresh {
		st.security = st.security || securityKinds[k.Kind]
	}
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
			Message: fmt.Sprintf("duplicate object: %s document %d defines it and is served; this one (%s document %d) is ignored", list[0].path,
				list[0].index, c.path, c.index)})
	}
	s.duplicates[k] = errs
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
