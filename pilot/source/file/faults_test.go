package file_test

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	securitypb "istio.io/api/security/v1beta1"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/source/file"
	"github.com/sextantmesh/sextant/pilot/store"
)

// Faults of the file system: input that vanishes, cannot be read, is not a regular file or is too large keeps
// its last good objects; only a file deleted from a readable directory (or a directory replaced by a file)
// withdraws them.

// within polls cond until it holds or d passes.
func within(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// loadWithin runs Load and fails the test if it does not return within d (a FIFO or a device must not block it).
func loadWithin(t *testing.T, f *fixture, d time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f.src.Load() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
	case <-time.After(d):
		t.Fatalf("Load did not return within %s", d)
	}
}

// errorFor returns the first reported error about path, or nil.
func errorFor(f *fixture, path string) *config.Error {
	for _, e := range f.src.Errors() {
		if e.File == path {
			return e
		}
	}
	return nil
}

func TestConfigDirRemovedKeepsObjectsAndRecovers(t *testing.T) {
	f := newFixture(t)
	write(t, f.dir, "a.yaml", svcDoc("", "cart", 80))
	write(t, f.dir, "sub/b.yaml", svcDoc("", "inventory", 80))
	f.load(t)
	f.run(t)
	waitWatching(t, f)
	before := f.events.total()

	// The directory vanishes at once, as an unmounted volume does, and is then deleted where it went:
	// os.RemoveAll in place deletes the files first, and a watcher that looks in between rightly withdraws a
	// file deleted from a directory that is still there.
	gone := f.dir + ".gone"
	if err := os.Rename(f.dir, gone); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(gone); err != nil {
		t.Fatal(err)
	}
	within(t, waitFor, "the vanished directory reported", func() bool { return errorFor(f, f.dir) != nil })
	time.Sleep(100 * time.Millisecond) // several settle periods: anything the watcher would withdraw is gone by now
	for _, k := range []config.Key{svcKey("default", "cart"), svcKey("default", "inventory"), svcKey("default", "canary")} {
		if f.get(k) == nil {
			t.Errorf("%v withdrawn when the directory vanished", k)
		}
	}
	if n := f.events.total() - before; n != 0 {
		t.Errorf("%d events after the directory vanished, want none", n)
	}
	if e := errorFor(f, f.dir); !strings.Contains(e.Message, "keeping") {
		t.Errorf("error does not say the objects are kept: %q", e.Message)
	}

	// The directory comes back (a new inode, so it must be watched again) without canary.yaml: what it holds
	// now is served, and the file it no longer holds is deleted.
	write(t, f.dir, "a.yaml", svcDoc("", "cart", 81))
	write(t, f.dir, "sub/b.yaml", svcDoc("", "inventory", 81))
	within(t, waitFor, "the recreated directory", func() bool {
		return portOf(f.get(svcKey("default", "cart"))) == 81 && portOf(f.get(svcKey("default", "inventory"))) == 81 &&
			f.get(svcKey("default", "canary")) == nil && len(f.src.Errors()) == 0
	})
	write(t, f.dir, "a.yaml", svcDoc("", "cart", 82))
	within(t, waitFor, "an edit in the recreated directory", func() bool { return portOf(f.get(svcKey("default", "cart"))) == 82 })
	write(t, f.dir, "sub/b.yaml", svcDoc("", "inventory", 82))
	within(t, waitFor, "an edit in a recreated subdirectory", func() bool { return portOf(f.get(svcKey("default", "inventory"))) == 82 })
}

// Tests run as root, which reads files whatever their mode, so unreadable is made by replacing the file with
// a directory of the same name.
func TestUnreadableFileKeepsObjects(t *testing.T) {
	f := newFixture(t)
	p := write(t, f.dir, "a.yaml", svcDoc("", "cart", 80))
	f.load(t)
	cart := f.get(svcKey("default", "cart"))
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
	f.load(t)
	if f.get(svcKey("default", "cart")) != cart {
		t.Error("a file replaced by a directory lost its objects")
	}
	if e := errorFor(f, p); e == nil {
		t.Fatalf("no error about %s:%s", p, errorsString(f.src.Errors()))
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	write(t, f.dir, "a.yaml", svcDoc("", "cart", 80))
	f.load(t)
	if errs := f.src.Errors(); len(errs) != 0 {
		t.Errorf("Errors after the file is back:%s", errorsString(errs))
	}
	if f.get(svcKey("default", "cart")) != cart || f.events.total() != 1 {
		t.Errorf("object changed: %d events", f.events.total())
	}
}

func TestFIFO(t *testing.T) {
	f := newFixture(t)
	a := write(t, f.dir, "a.yaml", svcDoc("", "cart", 80))
	pipe := filepath.Join(f.dir, "pipe.yaml")
	if err := syscall.Mkfifo(pipe, 0o644); err != nil {
		t.Fatal(err)
	}
	loadWithin(t, f, 2*time.Second)
	if f.get(svcKey("default", "cart")) == nil {
		t.Fatal("the regular file beside the FIFO did not load")
	}
	if e := errorFor(f, pipe); e == nil || !strings.Contains(e.Message, "not a regular file") {
		t.Fatalf("FIFO not reported:%s", errorsString(f.src.Errors()))
	}
	f.run(t) // its cleanup fails the test if Run does not return within 2s of being stopped
	waitWatching(t, f)
	write(t, f.dir, "a.yaml", svcDoc("", "cart", 81))
	within(t, waitFor, "an edit beside the FIFO", func() bool { return portOf(f.get(svcKey("default", "cart"))) == 81 })

	// A file atomically replaced by a FIFO keeps its objects.
	tmp := filepath.Join(f.dir, "a.yaml.tmp")
	if err := syscall.Mkfifo(tmp, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, a); err != nil {
		t.Fatal(err)
	}
	within(t, waitFor, "the replaced file reported", func() bool { return errorFor(f, a) != nil })
	if portOf(f.get(svcKey("default", "cart"))) != 81 {
		t.Error("a file replaced by a FIFO lost its objects")
	}
	write(t, f.dir, "b.yaml", svcDoc("", "later", 80))
	within(t, waitFor, "a new file after the FIFO", func() bool { return f.get(svcKey("default", "later")) != nil })
}

func TestSymlinkToDevice(t *testing.T) {
	f := newFixture(t)
	write(t, f.dir, "a.yaml", svcDoc("", "cart", 80))
	zero := filepath.Join(f.dir, "zero.yaml")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	loadWithin(t, f, 2*time.Second)
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("Load took %s", d)
	}
	if f.get(svcKey("default", "cart")) == nil {
		t.Error("the regular file did not load")
	}
	if e := errorFor(f, zero); e == nil || !strings.Contains(e.Message, "not a regular file") {
		t.Fatalf("symlink to /dev/zero not reported:%s", errorsString(f.src.Errors()))
	}
}

func TestOversizedFile(t *testing.T) {
	f := newFixture(t)
	p := write(t, f.dir, "a.yaml", svcDoc("", "cart", 80))
	f.load(t)
	cart := f.get(svcKey("default", "cart"))
	// Just over the default limit of 8 MiB: a valid document behind a long comment.
	pad := "#" + strings.Repeat("x", 1<<20) + "\n"
	big := strings.Repeat(pad, 8) + svcDoc("", "cart", 81)
	write(t, f.dir, "a.yaml", big)
	big2 := write(t, f.dir, "new.yaml", strings.Repeat(pad, 8)+svcDoc("", "other", 80))
	f.load(t)
	if f.get(svcKey("default", "cart")) != cart {
		t.Error("an oversized file replaced its last good objects")
	}
	if f.get(svcKey("default", "other")) != nil {
		t.Error("an oversized new file was loaded")
	}
	for _, path := range []string{p, big2} {
		if e := errorFor(f, path); e == nil || !strings.Contains(e.Message, "8388608") {
			t.Errorf("%s not reported with the limit:%s", path, errorsString(f.src.Errors()))
		}
	}
}

func TestSubdirectoryReplacedByFile(t *testing.T) {
	f := newFixture(t)
	write(t, f.dir, "a.yaml", svcDoc("", "cart", 80))
	write(t, f.dir, "sub/b.yaml", svcDoc("", "inventory", 80))
	write(t, f.dir, "sub/deeper/c.yaml", svcDoc("", "payments", 80))
	f.load(t)
	f.run(t)
	waitWatching(t, f)
	if err := os.RemoveAll(filepath.Join(f.dir, "sub")); err != nil {
		t.Fatal(err)
	}
	write(t, f.dir, "sub", "not a directory any more\n")
	within(t, waitFor, "the replaced directory's objects withdrawn", func() bool {
		return f.get(svcKey("default", "inventory")) == nil && f.get(svcKey("default", "payments")) == nil
	})
	if f.get(svcKey("default", "cart")) == nil {
		t.Error("an object outside the replaced directory went too")
	}
	if errs := f.src.Errors(); len(errs) != 0 {
		t.Errorf("Errors:%s", errorsString(errs))
	}
}

func authzDoc(name, action string) string {
	return "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata:\n  name: " + name +
		"\n  namespace: shop\nspec:\n  action: " + action + "\n  rules:\n  - from:\n    - source:\n        namespaces: [attacker]\n"
}

func TestDuplicateAddedLaterDoesNotWin(t *testing.T) {
	f := newFixture(t)
	key := config.Key{Kind: config.AuthorizationPolicy, Namespace: "shop", Name: "gate"}
	action := func() securitypb.AuthorizationPolicy_Action {
		c := f.get(key)
		if c == nil {
			return -1
		}
		return c.Spec.(*securitypb.AuthorizationPolicy).Action
	}
	deny := write(t, f.dir, "z.yaml", authzDoc("gate", "DENY"))
	f.load(t)
	if action() != securitypb.AuthorizationPolicy_DENY {
		t.Fatalf("action %v", action())
	}
	// A new file that sorts earlier defines the same policy: the one served stays, the new one is reported.
	allow := write(t, f.dir, "a.yaml", authzDoc("gate", "ALLOW"))
	f.load(t)
	if action() != securitypb.AuthorizationPolicy_DENY {
		t.Errorf("a duplicate added later replaced the served policy: action %v", action())
	}
	errs := f.src.Errors()
	if len(errs) != 1 || errs[0].File != allow || !strings.Contains(errs[0].Message, deny) {
		t.Fatalf("Errors:%s\nwant one, on %s, naming %s", errorsString(errs), allow, deny)
	}
	if got := f.events.of(key); len(got) != 1 || got[0] != store.EventAdd {
		t.Errorf("events %v, want the add only", got)
	}
	// Edits to the winner still apply.
	write(t, f.dir, "z.yaml", authzDoc("gate", "AUDIT"))
	f.load(t)
	if action() != securitypb.AuthorizationPolicy_AUDIT {
		t.Errorf("an edit to the served document did not apply: action %v", action())
	}
	// Once the winner goes, the duplicate takes over.
	if err := os.Remove(deny); err != nil {
		t.Fatal(err)
	}
	f.load(t)
	if action() != securitypb.AuthorizationPolicy_ALLOW || len(f.src.Errors()) != 0 {
		t.Errorf("after the winner went: action %v, Errors:%s", action(), errorsString(f.src.Errors()))
	}
}

func TestConfigDirMovedAwayAndBack(t *testing.T) {
	f := newFixture(t)
	write(t, f.dir, "a.yaml", svcDoc("", "cart", 80))
	write(t, f.dir, "sub/b.yaml", svcDoc("", "inventory", 80))
	f.load(t)
	f.run(t)
	waitWatching(t, f)
	away := f.dir + ".away"
	if err := os.Rename(f.dir, away); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(away) })
	within(t, waitFor, "the moved directory reported", func() bool { return errorFor(f, f.dir) != nil })
	// An edit where the tree went is not config any more: the watcher must not apply it, nor withdraw anything.
	write(t, away, "a.yaml", svcDoc("", "cart", 90))
	time.Sleep(100 * time.Millisecond)
	if portOf(f.get(svcKey("default", "cart"))) != 80 || f.get(svcKey("default", "inventory")) == nil {
		t.Fatalf("after the move: cart port %d, inventory %v", portOf(f.get(svcKey("default", "cart"))), f.get(svcKey("default", "inventory")))
	}
	if err := os.Rename(away, f.dir); err != nil {
		t.Fatal(err)
	}
	within(t, waitFor, "the directory moved back", func() bool {
		return portOf(f.get(svcKey("default", "cart"))) == 90 && len(f.src.Errors()) == 0
	})
	write(t, f.dir, "sub/b.yaml", svcDoc("", "inventory", 81))
	within(t, waitFor, "an edit after the move back", func() bool { return portOf(f.get(svcKey("default", "inventory"))) == 81 })
	write(t, f.dir, "a.yaml", svcDoc("", "cart", 91))
	within(t, waitFor, "an edit at the top after the move back", func() bool { return portOf(f.get(svcKey("default", "cart"))) == 91 })
}

func TestMaxFileBytesOption(t *testing.T) {
	dir := t.TempDir()
	st := store.New()
	src := file.New(file.Options{Dir: dir, Store: st, MaxFileBytes: 200, Logger: slog.New(slog.DiscardHandler)})
	p := write(t, dir, "a.yaml", svcDoc("", "cart", 80))
	if err := src.Load(); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "a.yaml", svcDoc("", "cart", 81)+"# "+strings.Repeat("x", 200)+"\n")
	if err := src.Load(); err != nil {
		t.Fatal(err)
	}
	if got := portOf(st.Get(svcKey("default", "cart"))); got != 80 {
		t.Errorf("port %d, want the last good 80", got)
	}
	if errs := src.Errors(); len(errs) != 1 || errs[0].File != p || !strings.Contains(errs[0].Message, "limit of 200 bytes") {
		t.Errorf("Errors:%s", errorsString(errs))
	}
}

func TestDuplicateAddedEarlierInSameFileDoesNotWin(t *testing.T) {
	f := newFixture(t)
	key := config.Key{Kind: config.AuthorizationPolicy, Namespace: "shop", Name: "gate"}
	p := write(t, f.dir, "a.yaml", authzDoc("gate", "DENY"))
	f.load(t)
	served := f.get(key)
	write(t, f.dir, "a.yaml", join(authzDoc("gate", "ALLOW"), authzDoc("gate", "DENY")))
	f.load(t)
	if f.get(key) != served {
		t.Errorf("a document added above the served one replaced it: action %v", f.get(key).Spec.(*securitypb.AuthorizationPolicy).Action)
	}
	errs := f.src.Errors()
	if len(errs) != 1 || errs[0].File != p || errs[0].Index != 0 || !strings.Contains(errs[0].Message, "document 1") {
		t.Fatalf("Errors:%s\nwant document 0, the new one, reported as a duplicate of document 1", errorsString(errs))
	}
	// Once the served document goes, the other takes over.
	write(t, f.dir, "a.yaml", authzDoc("gate", "ALLOW"))
	f.load(t)
	if a := f.get(key).Spec.(*securitypb.AuthorizationPolicy).Action; a != securitypb.AuthorizationPolicy_ALLOW || len(f.src.Errors()) != 0 {
		t.Errorf("action %v, Errors:%s", a, errorsString(f.src.Errors()))
	}
}

// A symlink whose target vanished (a mounted volume's data gone) keeps what it held; deleting the symlink
// itself withdraws it.
func TestSymlinkTargetVanished(t *testing.T) {
	f := newFixture(t)
	target := write(t, t.TempDir(), "a.yaml", svcDoc("", "cart", 80))
	link := filepath.Join(f.dir, "a.yaml")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	f.load(t)
	cart := f.get(svcKey("default", "cart"))
	if cart == nil {
		t.Fatal("the file behind the symlink did not load")
	}
	if err := os.Remove(target); err != nil {
		t.Fatal(err)
	}
	f.load(t)
	if f.get(svcKey("default", "cart")) != cart {
		t.Error("a symlink whose target vanished lost its objects")
	}
	if e := errorFor(f, link); e == nil || !strings.Contains(e.Message, "symlink to nothing") {
		t.Fatalf("Errors:%s", errorsString(f.src.Errors()))
	}
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	f.load(t)
	if f.get(svcKey("default", "cart")) != nil || len(f.src.Errors()) != 0 {
		t.Errorf("after deleting the symlink: cart %v, Errors:%s", f.get(svcKey("default", "cart")), errorsString(f.src.Errors()))
	}
}

func TestConfigDirReplacedByFileKeepsObjects(t *testing.T) {
	f := newFixture(t)
	write(t, f.dir, "a.yaml", svcDoc("", "cart", 80))
	f.load(t)
	cart := f.get(svcKey("default", "cart"))
	if err := os.RemoveAll(f.dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.dir, []byte(svcDoc("", "other", 80)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := f.src.Load(); err == nil {
		t.Error("Load of a config dir replaced by a file succeeded")
	}
	if f.get(svcKey("default", "cart")) != cart || f.get(svcKey("default", "other")) != nil {
		t.Errorf("after the config dir became a file: cart %v, other %v", f.get(svcKey("default", "cart")), f.get(svcKey("default", "other")))
	}
	if e := errorFor(f, f.dir); e == nil || !strings.Contains(e.Message, "not a directory") {
		t.Errorf("Errors:%s", errorsString(f.src.Errors()))
	}
}

// A change made after Load and before Run watches (the server publishes its first snapshot in between) is
// applied: the watch cannot report it, so Run looks again once it watches.
func TestChangeBetweenLoadAndRunIsApplied(t *testing.T) {
	f := newFixture(t)
	write(t, f.dir, "a.yaml", svcDoc("", "cart", 80))
	write(t, f.dir, "b.yaml", svcDoc("", "inventory", 80))
	f.load(t)
	if err := os.Remove(filepath.Join(f.dir, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	write(t, f.dir, "a.yaml", svcDoc("", "cart", 81))
	write(t, f.dir, "c.yaml", svcDoc("", "orders", 80))
	f.run(t)
	within(t, waitFor, "the changes made before the watch", func() bool {
		return portOf(f.get(svcKey("default", "cart"))) == 81 && f.get(svcKey("default", "inventory")) == nil &&
			f.get(svcKey("default", "orders")) != nil
	})
}

// Files over the total limit together: the one that would cross it is refused and keeps what it held, and is
// read once another file goes.
func TestMaxTotalBytes(t *testing.T) {
	f := newFixture(t)
	doc := svcDoc("", "cart", 80)
	limit := 2*len(doc) + 20
	f.src = file.New(file.Options{Dir: f.dir, Store: f.store, Settle: 20 * time.Millisecond, MaxTotalBytes: int64(limit),
		Logger: slog.New(slog.DiscardHandler)})
	a := write(t, f.dir, "a.yaml", doc)
	write(t, f.dir, "b.yaml", svcDoc("", "inventory", 80))
	c := write(t, f.dir, "c.yaml", svcDoc("", "orders", 80))
	f.load(t)
	if f.get(svcKey("default", "orders")) != nil || f.get(svcKey("default", "cart")) == nil || f.get(svcKey("default", "inventory")) == nil {
		t.Fatal("want a.yaml and b.yaml loaded and c.yaml, the one that crosses the limit, refused")
	}
	if e := errorFor(f, c); e == nil || !strings.Contains(e.Message, fmt.Sprintf("limit of %d bytes", limit)) {
		t.Fatalf("c.yaml not reported with the limit:%s", errorsString(f.src.Errors()))
	}
	// Run looks again once it watches, so changes made before that are seen too.
	f.run(t)
	if err := os.Remove(filepath.Join(f.dir, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	within(t, waitFor, "c.yaml read once b.yaml went", func() bool {
		return f.get(svcKey("default", "orders")) != nil && len(f.src.Errors()) == 0
	})
	// Growing a file already read past the total keeps its last good objects.
	replace(t, f.dir, "a.yaml", svcDoc("", "cart", 81)+"# "+strings.Repeat("x", 40)+"\n")
	within(t, waitFor, "a.yaml refused", func() bool { return errorFor(f, a) != nil })
	if got := portOf(f.get(svcKey("default", "cart"))); got != 80 {
		t.Errorf("cart port %d, want the last good 80", got)
	}
	if err := os.Remove(c); err != nil {
		t.Fatal(err)
	}
	within(t, waitFor, "a.yaml read once c.yaml went", func() bool {
		return portOf(f.get(svcKey("default", "cart"))) == 81 && len(f.src.Errors()) == 0
	})
}

// A symlink to nothing at startup is reported (its target may come), and withdrawn from the report when removed.
func TestDanglingSymlinkAtStartupIsReported(t *testing.T) {
	f := newFixture(t)
	write(t, f.dir, "a.yaml", svcDoc("", "cart", 80))
	link := filepath.Join(f.dir, "b.yaml")
	if err := os.Symlink(filepath.Join(f.dir, "missing", "b.yaml"), link); err != nil {
		t.Fatal(err)
	}
	f.load(t)
	if e := errorFor(f, link); e == nil || !strings.Contains(e.Message, "symlink to nothing") {
		t.Fatalf("the dangling symlink is not reported:%s", errorsString(f.src.Errors()))
	}
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	f.load(t)
	if errs := f.src.Errors(); len(errs) != 0 {
		t.Errorf("still reported after removal:%s", errorsString(errs))
	}
}

// A file rejected at startup is logged once: the watcher's first look after Load, and later rescans, find
// the same fault and say nothing more. A new fault of the same file is logged again.
func TestRejectedFileLoggedOnce(t *testing.T) {
	f := newFixture(t)
	var logs strings.Builder
	var mu sync.Mutex
	f.src = file.New(file.Options{Dir: f.dir, Store: f.store, Settle: 20 * time.Millisecond, MaxFileDocuments: 2,
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))})
	many := write(t, f.dir, "many.yaml", join(svcDoc("shop", "a", 80), svcDoc("shop", "b", 80), svcDoc("shop", "c", 80)))
	write(t, f.dir, "bad.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: bad, namespace: shop}\nspec: {ports: [{port: -1}]}\n")
	count := func(what string) int {
		mu.Lock()
		defer mu.Unlock()
		return strings.Count(logs.String(), what)
	}
	f.load(t)
	f.run(t)
	waitWatching(t, f)
	time.Sleep(100 * time.Millisecond) // the reads the first rescan queued are applied by now
	if n, m := count("config file unreadable"), count("config rejected"); n != 1 || m != 1 {
		t.Fatalf("logged the over-long file %d times and the rejected document %d times, want once each:\n%s", n, m, logs.String())
	}
	write(t, f.dir, "many.yaml", "- not\n- a map\n")
	within(t, waitFor, "the new fault of "+many+" to be logged", func() bool { return count("config rejected") == 2 })
	if n := count("config file unreadable"); n != 1 {
		t.Errorf("the over-long file logged %d times", n)
	}
}
