package file

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"

	"github.com/sextantmesh/sextant/pilot/config"
)

// errNotRegular and errTooLarge reject what is not a regular file of at most MaxFileBytes; errUnstable is a
// file that changed while it was read, whose bytes may be half of one write and half of another.
var (
	errNotRegular = errors.New("not a regular file")
	errTooLarge   = errors.New("too large")
	errUnstable   = errors.New("changed while it was read")
)

// syncReadTries is how often Load reads a file that keeps changing before reporting it.
const syncReadTries = 4

// readBounded reads a regular file of at most MaxFileBytes, and only accepts the read if the file was the same
// (inode, size, mtime) before and after it. Anything else is refused before it is read: a FIFO would block the
// watcher (and shutdown) forever, and /dev/zero would fill memory.
func (s *Source) readBounded(path string) ([]byte, fs.FileInfo, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("%w (%s)", errNotRegular, fileType(info.Mode()))
	}
	max := s.opts.MaxFileBytes
	if info.Size() > max {
		return nil, nil, fmt.Errorf("%w: %d bytes, over the limit of %d bytes", errTooLarge, info.Size(), max)
	}
	// O_NONBLOCK: the file may have been swapped for a FIFO since the Stat, and opening one must not wait for a
	// writer; the Stat of the open file then refuses it.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	opened, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !opened.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("%w (%s)", errNotRegular, fileType(opened.Mode()))
	}
	// Sized from the stat: growing a buffer by doubling would allocate twice a large file's size.
	buf := bytes.NewBuffer(make([]byte, 0, min(opened.Size(), max)+bytes.MinRead))
	if _, err := buf.ReadFrom(io.LimitReader(f, max+1)); err != nil {
		return nil, nil, err
	}
	data := buf.Bytes()
	if int64(len(data)) > max {
		return nil, nil, fmt.Errorf("%w: over the limit of %d bytes", errTooLarge, max)
	}
	after, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	now, err := os.Stat(path)
	if err != nil || !sameFile(info, opened) || !sameFile(opened, after) || !sameFile(after, now) || int64(len(data)) != after.Size() {
		return nil, nil, errUnstable
	}
	return data, after, nil
}

// fileID is the device and inode of a file: a file written in place keeps it, one replaced by a rename does not.
type fileID struct{ dev, ino uint64 }

func idOf(info fs.FileInfo) fileID {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return fileID{dev: uint64(st.Dev), ino: st.Ino}
	}
	return fileID{}
}

// writtenInPlaceRecently reports whether info is the file last read (id) written less than settle ago: it may
// be half written. A modification time in the future says nothing, and does not hold the file back.
func writtenInPlaceRecently(id fileID, info fs.FileInfo, settle time.Duration) bool {
	age := time.Since(info.ModTime())
	return id != (fileID{}) && idOf(info) == id && age >= 0 && age < settle
}

// sameFile reports whether a and b describe the same file with the same content as far as stat tells.
func sameFile(a, b fs.FileInfo) bool {
	if a.Size() != b.Size() || !a.ModTime().Equal(b.ModTime()) {
		return false
	}
	as, aok := a.Sys().(*syscall.Stat_t)
	bs, bok := b.Sys().(*syscall.Stat_t)
	return !aok || !bok || (as.Ino == bs.Ino && as.Dev == bs.Dev)
}

// readFile reads path and applies what changed: at once when p is synchronous (Load), else queued to the
// readers so that one slow file never holds up another.
func (s *Source) readFile(path string, p *pass) {
	if p.async {
		s.reads.start(path)
		return
	}
	for try := 1; ; try++ {
		if err := s.readOnce(path, p); !errors.Is(err, errUnstable) {
			return
		}
		if try == syncReadTries {
			s.keep(path, "cannot read: the file kept changing while it was read; keeping the last good objects", false)
			return
		}
		time.Sleep(time.Duration(try) * 5 * time.Millisecond)
	}
}

// readOnce reads, parses and applies one file. A file gone or changing while read is handed back to the
// watcher when p is asynchronous; it returns errUnstable for Load to read it again.
func (s *Source) readOnce(path string, p *pass) error {
	s.mu.Lock()
	ticket := s.nextTicket()
	st := s.files[path]
	var known [32]byte
	var served map[[32]byte]claim
	var security bool
	var id fileID
	if st != nil && st.objects != nil {
		known, security, id = st.hash, st.security, st.id
		// Copies: the applied claims change under s.mu while this parse runs without it.
		served = make(map[[32]byte]claim, len(st.objects))
		for _, c := range st.objects {
			served[c.docHash] = *c
		}
	}
	s.mu.Unlock()

	data, info, err := s.readBounded(path)
	switch {
	case err == nil:
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		if p.async {
			s.note(path, false)
		} else {
			s.missing(path, p)
		}
		return nil
	case errors.Is(err, errUnstable):
		if p.async {
			s.note(path, true)
		}
		return err
	default:
		s.keepRead(path, ticket, "cannot read: "+err.Error()+"; keeping the last good objects", errors.Is(err, errNotRegular))
		return nil
	}
	hash := sha256.Sum256(data)
	if served != nil && hash == known {
		return nil
	}
	if p.async && security && writtenInPlaceRecently(id, info, s.opts.SecuritySettle) {
		// A security file changed in place, read by a rescan rather than once quiet: it may be half a DENY.
		// The watcher reads it once it has been quiet for SecuritySettle.
		s.note(path, true)
		return nil
	}
	if n := countDocuments(data, s.opts.MaxFileDocuments); n > s.opts.MaxFileDocuments {
		s.keepRead(path, ticket, fmt.Sprintf("cannot read: over %d documents, the limit of %d documents per file; keeping the last good objects",
			s.opts.MaxFileDocuments, s.opts.MaxFileDocuments), false)
		return nil
	}
	r := s.parse(path, data, hash, served)
	r.id = idOf(info)
	s.apply(path, ticket, r)
	return nil
}

// countDocuments counts the documents of data up to limit+1, without parsing them: every line that starts
// with "---" opens a document (or is an error the split reports).
func countDocuments(data []byte, limit int) int {
	n := 1
	if bytes.HasPrefix(data, []byte("---")) {
		n = 0 // the first line opens the first document
	}
	sep := []byte("\n---")
	for rest := data; n <= limit; n++ {
		i := bytes.Index(rest, sep)
		if i < 0 {
			return n
		}
		rest = rest[i+len(sep):]
	}
	return n
}

// parsed is one read of a file, parsed without the lock.
type parsed struct {
	id      fileID
	hash    [32]byte
	size    int64
	objects map[config.Key]*claim
	errs    []*config.Error
}

// parse splits and parses data. A document already served from this file, byte for byte, is not parsed again
// (replaceClaims keeps its object): rewriting a file to change one pod of twelve costs one parse, not twelve.
func (s *Source) parse(path string, data []byte, hash [32]byte, served map[[32]byte]claim) *parsed {
	docs, splitErr := config.SplitDocuments(data)
	fresh := map[config.Key]*claim{}
	var errs, warnings []*config.Error
	if splitErr != nil {
		errs = append(errs, &config.Error{File: path, Index: len(docs), Message: "not valid YAML: " + splitErr.Error()})
	}
	for i, doc := range docs {
		if config.IsEmptyDocument(doc) {
			continue
		}
		docHash := sha256.Sum256(doc)
		if c, ok := served[docHash]; ok {
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
		w := config.ObjectWarnings(cfg, path, i)
		warnings = append(warnings, w...)
		fresh[cfg.Key] = &claim{path: path, index: i, docHash: docHash, cfg: cfg, warnings: w}
	}
	s.logCapped("config field not implemented", "warning", path, warnings)
	s.logCapped("config rejected", "error", path, errs)
	errs = capReported(path, errs)
	return &parsed{hash: hash, size: int64(len(data)), objects: fresh, errs: errs}
}

// apply makes one parsed read what the file provides, unless the file's state changed since the read began
// (a newer read applied, or the file withdrawn or reported): an older read never replaces a newer state.
func (s *Source) apply(path string, ticket uint64, r *parsed) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.current(path, ticket) {
		return
	}
	st := s.stateFor(path)
	if st.hash == r.hash && st.objects != nil {
		st.id = r.id // the same bytes may come in another file, renamed over this one
		return
	}
	if total := s.totalBytes - st.size + r.size; total > s.opts.MaxTotalBytes {
		s.overTotal[path] = true
		msg := fmt.Sprintf(
			"cannot read: the config files would hold %d bytes together, over the limit of %d bytes; keeping the last good objects",
			total, s.opts.MaxTotalBytes)
		if s.markUnreadable(st, path, msg) {
			s.opts.Logger.Warn("config file refused; keeping what it held", "file", path, "err", msg)
		}
		return
	}
	delete(s.overTotal, path)
	if r.size < st.size && len(s.overTotal) > 0 {
		s.noteRetryTotal()
	}
	s.totalBytes += r.size - st.size
	st.hash, st.size, st.id = r.hash, r.size, r.id
	if len(r.errs) > 0 {
		// Keep serving what the file held before for objects its valid documents no longer define:
		// a broken document must not delete what it used to describe.
		for k, c := range st.objects {
			if _, ok := r.objects[k]; !ok {
				r.objects[k] = c
			}
		}
	}
	st.errors = r.errs
	s.replaceClaims(path, st, r.objects)
}

// keepRead is keep for a read that began at ticket: dropped if the file's state changed since.
func (s *Source) keepRead(path string, ticket uint64, msg string, notConfig bool) {
	s.mu.Lock()
	if !s.current(path, ticket) {
		s.mu.Unlock()
		return
	}
	news := s.keepLocked(path, msg, notConfig)
	s.mu.Unlock()
	if news {
		s.opts.Logger.Warn("config file unreadable; keeping what it held", "file", path, "err", msg)
	}
}

// nextTicket numbers a read or a change of a file's state. Called with s.mu held.
func (s *Source) nextTicket() uint64 {
	s.clock++
	return s.clock
}

// current reports whether a read that began at ticket is newer than the file's state, and if so makes it the
// file's state. Called with s.mu held.
func (s *Source) current(path string, ticket uint64) bool {
	if ticket < s.stamps[path] {
		return false
	}
	s.stamps[path] = ticket
	return true
}

// stamp marks a change of path's state made outside a read: reads that began before it are dropped.
// Called with s.mu held.
func (s *Source) stamp(path string) {
	s.stamps[path] = s.nextTicket()
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
