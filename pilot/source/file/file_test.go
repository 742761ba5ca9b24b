package file_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/source/file"
	"github.com/sextantmesh/sextant/pilot/store"
)

// Documents used across the tests.

func svcDoc(ns, name string, port int) string {
	meta := "  name: " + name + "\n"
	if ns != "" {
		meta += "  namespace: " + ns + "\n"
	}
	return fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata:\n%sspec:\n  ports:\n  - name: http\n    port: %d\n", meta, port)
}

func vsDoc(ns, name, host string) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: %s
  namespace: %s
spec:
  hosts: [%s]
  http:
  - route:
    - destination: {host: %s}
`, name, ns, host, host)
}

func svcKey(ns, name string) config.Key {
	return config.Key{Kind: config.Service, Namespace: ns, Name: name}
}

func vsKey(ns, name string) config.Key {
	return config.Key{Kind: config.VirtualService, Namespace: ns, Name: name}
}

func join(docs ...string) string { return strings.Join(docs, "---\n") }

func write(t *testing.T, dir, rel, content string) string {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// replace writes rel atomically, through a rename, so the watcher sees the old content or the new one.
// Written in place, the file is first truncated: a watcher slowed by load between that and the write reads
// it empty and withdraws its objects for a moment, which a test counting events or generations would see.
func replace(t *testing.T, dir, rel, content string) {
	t.Helper()
	tmp := write(t, dir, rel+".tmp", content) // not a config name: the watcher ignores it
	if err := os.Rename(tmp, filepath.Join(dir, filepath.FromSlash(rel))); err != nil {
		t.Fatal(err)
	}
}

// portOf is the first port of a Service, or -1 when there is none.
func portOf(c *config.Config) int32 {
	if c == nil {
		return -1
	}
	return c.Spec.(*corev1.Service).Spec.Ports[0].Port
}

func port(t *testing.T, c *config.Config) int32 {
	t.Helper()
	if c == nil {
		t.Fatal("no object")
	}
	return c.Spec.(*corev1.Service).Spec.Ports[0].Port
}

// counter counts store events per key.
type counter struct {
	mu     sync.Mutex
	events map[config.Key][]store.EventType
}

func (c *counter) handle(e store.Event) {
	c.mu.Lock()
	c.events[e.Key()] = append(c.events[e.Key()], e.Type)
	c.mu.Unlock()
}

func (c *counter) of(k config.Key) []store.EventType {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]store.EventType(nil), c.events[k]...)
}

func (c *counter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, evs := range c.events {
		n += len(evs)
	}
	return n
}

type fixture struct {
	dir    string
	store  *store.Store
	src    *file.Source
	events *counter
	// rewrites numbers the contents rewriteUntilSeen writes.
	rewrites int
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{dir: t.TempDir(), store: store.New(), events: &counter{events: map[config.Key][]store.EventType{}}}
	f.store.AddHandler(f.events.handle)
	f.src = file.New(file.Options{Dir: f.dir, Store: f.store, Settle: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	return f
}

func (f *fixture) load(t *testing.T) {
	t.Helper()
	if err := f.src.Load(); err != nil {
		t.Fatalf("Load: %v", err)
	}
}

// run starts the watcher and stops it when the test ends. Call waitWatching before relying on it.
func (f *fixture) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.src.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(2 * time.Second):
			t.Error("Run did not return after its context was cancelled")
		}
	})
}

func (f *fixture) get(k config.Key) *config.Config { return f.store.Get(k) }

// waitFor bounds the waits for the watcher. It is a safety net, not what the tests measure: generous, since
// -race on a loaded two-core machine is slow.
const waitFor = 10 * time.Second

// eventually polls cond until it holds or waitFor passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func errorsString(errs []*config.Error) string {
	var b strings.Builder
	for _, e := range errs {
		b.WriteString("\n  " + e.Error())
	}
	return b.String()
}

func TestLoadTree(t *testing.T) {
	f := newFixture(t)
	a := write(t, f.dir, "a.yaml", `# Services of the shop.
---
`+svcDoc("", "cart", 80)+`---
---
# a comment-only document
---

---
`+svcDoc("shop", "checkout", 8080)+`---
`)
	write(t, f.dir, "routes/b.yml", vsDoc("shop", "checkout", "checkout"))
	write(t, f.dir, "routes/deeper/still/c.json", `{
  "apiVersion": "v1",
  "kind": "Service",
  "metadata": {"name": "payments", "namespace": "shop"},
  "spec": {"ports": [{"name": "grpc", "port": 9090}]}
}
`)
	write(t, f.dir, "UPPER.YAML", svcDoc("shop", "upper", 81))
	// Not read: hidden files and directories, other extensions.
	write(t, f.dir, ".hidden.yaml", svcDoc("shop", "hidden-file", 80))
	write(t, f.dir, ".git/config.yaml", svcDoc("shop", "hidden-dir", 80))
	write(t, f.dir, "routes/.cache/x.yaml", svcDoc("shop", "hidden-nested", 80))
	write(t, f.dir, "..data/y.yaml", svcDoc("shop", "configmap-swap", 80))
	write(t, f.dir, "notes.txt", svcDoc("shop", "txt", 80))
	write(t, f.dir, "a.yaml.bak", svcDoc("shop", "bak", 80))
	write(t, f.dir, "README.md", "# not config\n")

	f.load(t)
	if errs := f.src.Errors(); len(errs) != 0 {
		t.Fatalf("Errors:%s", errorsString(errs))
	}
	want := []string{"default/cart", "shop/checkout", "shop/payments", "shop/upper"}
	var got []string
	for _, c := range f.store.List(config.Service) {
		got = append(got, c.NamespacedName())
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Services = %v, want %v", got, want)
	}
	if f.get(vsKey("shop", "checkout")) == nil {
		t.Error("VirtualService from routes/b.yml missing")
	}
	if c := f.get(svcKey("shop", "payments")); port(t, c) != 9090 {
		t.Errorf("payments port %d", port(t, c))
	}
	if counts := f.src.Counts(); counts[config.Service] != 4 || counts[config.VirtualService] != 1 || len(counts) != 2 {
		t.Errorf("Counts = %v", counts)
	}

	// Every object is in the file layer, with a revision, generation 1 and where it came from.
	cart := f.store.GetLayer(store.LayerFile, svcKey("default", "cart"))
	if cart == nil {
		t.Fatal("cart not in the file layer")
	}
	if cart.Generation != 1 || cart.ResourceVersion == "" {
		t.Errorf("cart generation %d rv %q", cart.Generation, cart.ResourceVersion)
	}
	// Document positions count every document, empty and comment-only ones included.
	if cart.Source != "file:"+a+"#1" {
		t.Errorf("cart Source = %q, want document 1", cart.Source)
	}
	if c := f.get(svcKey("shop", "checkout")); c.Source != "file:"+a+"#5" {
		t.Errorf("checkout Source = %q, want document 5", c.Source)
	}
	rvs := map[string]bool{}
	for _, c := range f.store.List(config.Service) {
		if rvs[c.ResourceVersion] {
			t.Errorf("resource version %s used twice", c.ResourceVersion)
		}
		rvs[c.ResourceVersion] = true
	}

	// Loading again without changes changes nothing.
	before := f.events.total()
	f.load(t)
	if n := f.events.total(); n != before {
		t.Errorf("reload without changes fired %d events", n-before)
	}
}

func TestLoadMissingDir(t *testing.T) {
	src := file.New(file.Options{Dir: filepath.Join(t.TempDir(), "nope"), Store: store.New(), Logger: slog.New(slog.DiscardHandler)})
	if err := src.Load(); err == nil {
		t.Fatal("Load of a missing directory succeeded")
	}
}

func TestBrokenMiddleDocument(t *testing.T) {
	tests := []struct {
		name   string
		broken string
		kind   string
		objNS  string
		obj    string
		field  string // substring
		msg    string // substring
	}{
		{
			name:   "wrong type",
			broken: "apiVersion: v1\nkind: Service\nmetadata:\n  name: bad\nspec:\n  ports:\n  - port: eighty\n",
			kind:   "Service", objNS: "default", obj: "bad", field: "port", msg: "cannot unmarshal",
		},
		{
			name: "invalid VirtualService",
			broken: "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: bad\n  namespace: shop\nspec:\n  hosts: [a]\n" +
				"  http:\n  - route:\n    - destination: {subset: v1}\n",
			kind: "VirtualService", objNS: "shop", obj: "bad", field: "spec.http[0].route[0].destination.host", msg: "required",
		},
		{
			name:   "not YAML",
			broken: "apiVersion: v1\nkind: Service\nmetadata: {name: [bad\n",
			msg:    "not valid YAML",
		},
		{
			name:   "unknown kind",
			broken: "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: bad\n",
			kind:   "Deployment", obj: "bad", field: "kind", msg: "unknown kind",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			p := write(t, f.dir, "mixed.yaml", join(svcDoc("", "first", 80), tc.broken, svcDoc("", "third", 82)))
			f.load(t)
			if f.get(svcKey("default", "first")) == nil || f.get(svcKey("default", "third")) == nil {
				t.Errorf("the valid documents around the broken one did not load")
			}
			if n := f.store.Count(config.Service) + f.store.Count(config.VirtualService); n != 2 {
				t.Errorf("%d objects loaded, want 2", n)
			}
			errs := f.src.Errors()
			if len(errs) != 1 {
				t.Fatalf("Errors:%s\nwant exactly one", errorsString(errs))
			}
			e := errs[0]
			if e.File != p || e.Index != 1 {
				t.Errorf("error at %s#%d, want %s#1", e.File, e.Index, p)
			}
			if e.Kind != tc.kind || e.Namespace != tc.objNS || e.Name != tc.obj {
				t.Errorf("error names %q %q/%q, want %q %q/%q", e.Kind, e.Namespace, e.Name, tc.kind, tc.objNS, tc.obj)
			}
			if !strings.Contains(e.Field, tc.field) {
				t.Errorf("Field = %q, want it to mention %q", e.Field, tc.field)
			}
			if !strings.Contains(e.Message, tc.msg) {
				t.Errorf("Message = %q, want it to contain %q", e.Message, tc.msg)
			}
		})
	}
}

func TestErrorsSorted(t *testing.T) {
	f := newFixture(t)
	bad := "apiVersion: v1\nkind: Service\nmetadata:\n  name: Bad_Name\n"
	write(t, f.dir, "b.yaml", join(bad, svcDoc("", "ok-b", 80), bad))
	write(t, f.dir, "a/z.yaml", join(svcDoc("", "ok-a", 80), bad))
	f.load(t)
	var got []string
	for _, e := range f.src.Errors() {
		rel, _ := filepath.Rel(f.dir, e.File)
		got = append(got, fmt.Sprintf("%s#%d", filepath.ToSlash(rel), e.Index))
	}
	if want := []string{"a/z.yaml#1", "b.yaml#0", "b.yaml#2"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Errors at %v, want %v", got, want)
	}
}

func TestValidFileBecomesInvalid(t *testing.T) {
	f := newFixture(t)
	p := write(t, f.dir, "mesh.yaml", join(svcDoc("shop", "cart", 80), vsDoc("shop", "cart", "cart")))
	f.load(t)
	cart0, vs0 := f.get(svcKey("shop", "cart")), f.get(vsKey("shop", "cart"))
	if cart0 == nil || vs0 == nil {
		t.Fatal("initial load")
	}

	// The VirtualService document breaks; the Service is unchanged.
	write(t, f.dir, "mesh.yaml", join(svcDoc("shop", "cart", 80),
		"apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: cart\n  namespace: shop\nspec:\n  hosts: cart\n"))
	f.load(t)
	if got := f.get(vsKey("shop", "cart")); got != vs0 || got.ResourceVersion != vs0.ResourceVersion {
		t.Errorf("the broken document's last good object was replaced: %v", got)
	}
	if got := f.get(svcKey("shop", "cart")); got != cart0 {
		t.Errorf("the untouched Service changed: rv %s -> %s", cart0.ResourceVersion, got.ResourceVersion)
	}
	errs := f.src.Errors()
	if len(errs) != 1 || errs[0].File != p || errs[0].Index != 1 || errs[0].Kind != "VirtualService" || errs[0].Name != "cart" ||
		errs[0].Field != "spec.hosts" {
		t.Fatalf("Errors:%s", errorsString(errs))
	}
	if n := f.events.total(); n != 2 {
		t.Errorf("%d events, want only the 2 adds", n)
	}

	// The whole file becomes garbage: everything it held stays.
	write(t, f.dir, "mesh.yaml", "{{{ this is not yaml\n")
	f.load(t)
	if f.get(svcKey("shop", "cart")) != cart0 || f.get(vsKey("shop", "cart")) != vs0 {
		t.Error("objects of an unparseable file were dropped")
	}
	if errs := f.src.Errors(); len(errs) != 1 || errs[0].File != p {
		t.Errorf("Errors:%s", errorsString(errs))
	}
	if n := f.events.total(); n != 2 {
		t.Errorf("%d events, want still 2", n)
	}

	// Fixed, with changes: both objects update, the error goes.
	write(t, f.dir, "mesh.yaml", join(svcDoc("shop", "cart", 81), vsDoc("shop", "cart", "cart.shop.svc.cluster.local")))
	f.load(t)
	if errs := f.src.Errors(); len(errs) != 0 {
		t.Errorf("Errors after the fix:%s", errorsString(errs))
	}
	cart1, vs1 := f.get(svcKey("shop", "cart")), f.get(vsKey("shop", "cart"))
	if port(t, cart1) != 81 || cart1.ResourceVersion == cart0.ResourceVersion || cart1.Generation != 2 {
		t.Errorf("cart after the fix: port %d rv %s gen %d", port(t, cart1), cart1.ResourceVersion, cart1.Generation)
	}
	if h := vs1.Spec.(*networking.VirtualService).Hosts[0]; h != "cart.shop.svc.cluster.local" || vs1.ResourceVersion == vs0.ResourceVersion {
		t.Errorf("VirtualService after the fix: host %s rv %s", h, vs1.ResourceVersion)
	}
	if got := f.events.of(svcKey("shop", "cart")); fmt.Sprint(got) != "[add update]" {
		t.Errorf("cart events %v", got)
	}

	// A valid file that drops a document deletes its object.
	write(t, f.dir, "mesh.yaml", svcDoc("shop", "cart", 81))
	f.load(t)
	if f.get(vsKey("shop", "cart")) != nil {
		t.Error("VirtualService removed from a valid file is still served")
	}
	if f.get(svcKey("shop", "cart")) != cart1 {
		t.Error("unchanged Service was replaced")
	}
	if got := f.events.of(vsKey("shop", "cart")); fmt.Sprint(got) != "[add update delete]" {
		t.Errorf("VirtualService events %v", got)
	}

	// Deleting a broken file withdraws its last good objects and its errors.
	write(t, f.dir, "mesh.yaml", "kind: [\n")
	f.load(t)
	if len(f.src.Errors()) != 1 || f.get(svcKey("shop", "cart")) != cart1 {
		t.Fatalf("broken again: Errors:%s", errorsString(f.src.Errors()))
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	f.load(t)
	if f.get(svcKey("shop", "cart")) != nil || len(f.src.Errors()) != 0 || len(f.src.Counts()) != 0 {
		t.Errorf("after deleting the broken file: cart %v, Errors:%s, Counts %v", f.get(svcKey("shop", "cart")),
			errorsString(f.src.Errors()), f.src.Counts())
	}
}

// A file whose read fails keeps its objects and is reported until it reads again. The failure is a symlink
// that points at itself (ELOOP on open), not a file mode: the tests run as root, which reads any mode.
func TestUnreadableFile(t *testing.T) {
	f := newFixture(t)
	p := write(t, f.dir, "a.yaml", svcDoc("", "cart", 80))
	f.load(t)
	cart := f.get(svcKey("default", "cart"))
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a.yaml", p); err != nil {
		t.Fatal(err)
	}
	f.load(t)
	if errs := f.src.Errors(); len(errs) != 1 || errs[0].File != p || !strings.Contains(errs[0].Message, "cannot read") {
		t.Fatalf("Errors:%s", errorsString(errs))
	}
	if f.get(svcKey("default", "cart")) != cart {
		t.Error("an unreadable file lost its objects")
	}
	// Readable again with the same content: the error goes, nothing else happens.
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	write(t, f.dir, "a.yaml", svcDoc("", "cart", 80))
	f.load(t)
	if errs := f.src.Errors(); len(errs) != 0 {
		t.Errorf("Errors after the file is readable again:%s", errorsString(errs))
	}
	if f.get(svcKey("default", "cart")) != cart || f.events.total() != 1 {
		t.Errorf("object changed: %d events", f.events.total())
	}
}

func TestDuplicates(t *testing.T) {
	f := newFixture(t)
	key := svcKey("shop", "cart")
	// Written in the opposite order of the winner rule, which must not matter.
	late := write(t, f.dir, "m/z.yaml", svcDoc("shop", "cart", 82))
	win := write(t, f.dir, "m/a.yaml", join(svcDoc("shop", "other", 70), svcDoc("shop", "cart", 80), svcDoc("shop", "cart", 81)))
	f.load(t)

	if got := port(t, f.get(key)); got != 80 {
		t.Errorf("winner has port %d, want 80 (m/a.yaml document 1)", got)
	}
	errs := f.src.Errors()
	var at []string
	for _, e := range errs {
		at = append(at, fmt.Sprintf("%s#%d", filepath.Base(e.File), e.Index))
		if e.Kind != "Service" || e.Namespace != "shop" || e.Name != "cart" {
			t.Errorf("duplicate error names %s %s/%s", e.Kind, e.Namespace, e.Name)
		}
	}
	if fmt.Sprint(at) != "[a.yaml#2 z.yaml#0]" {
		t.Fatalf("Errors:%s\nwant a.yaml#2 (same file) and z.yaml#0 (other file)", errorsString(errs))
	}
	if !strings.Contains(errs[1].Message, win) || !strings.Contains(errs[1].Message, "document 1") {
		t.Errorf("the loser's message does not name the winner: %q", errs[1].Message)
	}
	if errs[1].File != late {
		t.Errorf("loser file %s", errs[1].File)
	}
	if n := f.src.Counts()[config.Service]; n != 2 {
		t.Errorf("Counts[Service] = %d, want 2 (cart counted once)", n)
	}

	// Deleting the winner's file promotes the other.
	if err := os.Remove(win); err != nil {
		t.Fatal(err)
	}
	f.load(t)
	c := f.get(key)
	if port(t, c) != 82 || c.Source != "file:"+late+"#0" {
		t.Errorf("after the winner went: port %d from %s", port(t, c), c.Source)
	}
	if errs := f.src.Errors(); len(errs) != 0 {
		t.Errorf("Errors after the winner went:%s", errorsString(errs))
	}
	if f.get(svcKey("shop", "other")) != nil {
		t.Error("object of the deleted file still served")
	}
	if got := f.events.of(key); fmt.Sprint(got) != "[add update]" {
		t.Errorf("events %v, want add then update", got)
	}

	// A new file earlier by path does not take over: the object served stays, the new document is reported.
	first := write(t, f.dir, "0.yaml", svcDoc("shop", "cart", 83))
	f.load(t)
	if port(t, f.get(key)) != 82 {
		t.Errorf("0.yaml, added later, took over")
	}
	if errs := f.src.Errors(); len(errs) != 1 || errs[0].File != first || !strings.Contains(errs[0].Message, late) {
		t.Errorf("Errors:%s", errorsString(errs))
	}
	// Changing the loser changes nothing visible.
	before := f.events.total()
	write(t, f.dir, "0.yaml", svcDoc("shop", "cart", 84))
	f.load(t)
	if f.events.total() != before || port(t, f.get(key)) != 82 {
		t.Error("a change to the losing document leaked into the store")
	}
	// Removing the winner reveals the loser's latest content.
	if err := os.Remove(late); err != nil {
		t.Fatal(err)
	}
	f.load(t)
	if port(t, f.get(key)) != 84 {
		t.Errorf("port %d, want 84", port(t, f.get(key)))
	}
}

func TestGeneration(t *testing.T) {
	f := newFixture(t)
	p := write(t, f.dir, "a.yaml", join(svcDoc("", "cart", 80), svcDoc("", "shop", 90)))
	f.load(t)
	cart, shop := svcKey("default", "cart"), svcKey("default", "shop")
	if g := f.get(cart).Generation; g != 1 {
		t.Fatalf("generation %d, want 1", g)
	}

	write(t, f.dir, "a.yaml", join(svcDoc("", "cart", 81), svcDoc("", "shop", 90)))
	f.load(t)
	if g := f.get(cart).Generation; g != 2 {
		t.Errorf("generation after a change %d, want 2", g)
	}
	// The other document of the file did not change: no event, same object.
	if got := f.events.of(shop); fmt.Sprint(got) != "[add]" {
		t.Errorf("events of the untouched document: %v", got)
	}

	// Same bytes rewritten, and a touch: nothing happens.
	rv := f.get(cart).ResourceVersion
	before := f.events.total()
	write(t, f.dir, "a.yaml", join(svcDoc("", "cart", 81), svcDoc("", "shop", 90)))
	now := time.Now().Add(time.Minute)
	if err := os.Chtimes(p, now, now); err != nil {
		t.Fatal(err)
	}
	f.load(t)
	if c := f.get(cart); c.Generation != 2 || c.ResourceVersion != rv {
		t.Errorf("identical content bumped generation %d rv %s -> %s", c.Generation, rv, c.ResourceVersion)
	}
	if n := f.events.total() - before; n != 0 {
		t.Errorf("identical content fired %d events", n)
	}

	// Moving a document within its file without changing it fires nothing either.
	write(t, f.dir, "a.yaml", join(svcDoc("", "shop", 90), svcDoc("", "cart", 81)))
	f.load(t)
	if n := f.events.total() - before; n != 0 {
		t.Errorf("reordering documents fired %d events", n)
	}

	write(t, f.dir, "a.yaml", join(svcDoc("", "shop", 90), svcDoc("", "cart", 82)))
	f.load(t)
	if g := f.get(cart).Generation; g != 3 {
		t.Errorf("generation after another change %d, want 3", g)
	}
	if got := f.events.of(cart); fmt.Sprint(got) != "[add update update]" {
		t.Errorf("cart events %v", got)
	}
}

func TestWatch(t *testing.T) {
	f := newFixture(t)
	outside := t.TempDir() // where a directory goes when it vanishes; removed only after the watcher stops
	write(t, f.dir, "a.yaml", svcDoc("", "cart", 80))
	write(t, f.dir, "sub/b.yaml", svcDoc("", "inventory", 80))
	f.load(t)

	f.run(t)

	waitWatching(t, f)

	t.Run("edit", func(t *testing.T) {
		write(t, f.dir, "a.yaml", svcDoc("", "cart", 81))
		eventually(t, "the edit", func() bool { return portOf(f.get(svcKey("default", "cart"))) == 81 })
	})
	t.Run("new file", func(t *testing.T) {
		write(t, f.dir, "sub/c.yml", vsDoc("default", "cart", "cart"))
		eventually(t, "the new file", func() bool { return f.get(vsKey("default", "cart")) != nil })
	})
	t.Run("delete file", func(t *testing.T) {
		if err := os.Remove(filepath.Join(f.dir, "sub", "c.yml")); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the deletion", func() bool { return f.get(vsKey("default", "cart")) == nil })
	})
	t.Run("new subdirectory", func(t *testing.T) {
		write(t, f.dir, "sub/new/deeper/d.json",
			`{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "payments"}, "spec": {"ports": [{"port": 90}]}}`)
		eventually(t, "the file in a new subdirectory", func() bool { return f.get(svcKey("default", "payments")) != nil })
		// The new directory is watched from now on.
		write(t, f.dir, "sub/new/deeper/d.json",
			`{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "payments"}, "spec": {"ports": [{"port": 91}]}}`)
		eventually(t, "an edit in the new subdirectory", func() bool { return portOf(f.get(svcKey("default", "payments"))) == 91 })
	})
	t.Run("broken edit keeps the last good object", func(t *testing.T) {
		last := f.get(svcKey("default", "cart"))
		replace(t, f.dir, "a.yaml", "apiVersion: v1\nkind: Service\nmetadata:\n  name: cart\nspec:\n  ports:\n  - port: eighty\n")
		eventually(t, "the error", func() bool { return len(f.src.Errors()) == 1 })
		if f.get(svcKey("default", "cart")) != last {
			t.Error("last good object replaced")
		}
		write(t, f.dir, "a.yaml", svcDoc("", "cart", 82))
		eventually(t, "the fix", func() bool {
			return len(f.src.Errors()) == 0 && portOf(f.get(svcKey("default", "cart"))) == 82
		})
	})
	t.Run("hidden file", func(t *testing.T) {
		write(t, f.dir, ".editor-swap.yaml", svcDoc("", "hidden", 80))
		write(t, f.dir, "sub/barrier.yaml", svcDoc("", "barrier", 80))
		eventually(t, "the barrier", func() bool { return f.get(svcKey("default", "barrier")) != nil })
		if f.get(svcKey("default", "hidden")) != nil {
			t.Error("hidden file loaded")
		}
	})
	t.Run("remove directory", func(t *testing.T) {
		// A directory that vanishes keeps what it held, reported, until it is back. It vanishes at once, as an
		// unmounted volume does: os.RemoveAll deletes the files first, and a watcher that looks in between
		// rightly withdraws a file deleted from a directory that is still there.
		if err := os.Rename(filepath.Join(f.dir, "sub"), filepath.Join(outside, "sub")); err != nil {
			t.Fatal(err)
		}
		b := filepath.Join(f.dir, "sub", "b.yaml")
		eventually(t, "the vanished directory reported", func() bool {
			for _, e := range f.src.Errors() {
				if e.File == b && strings.Contains(e.Message, "vanished") {
					return true
				}
			}
			return false
		})
		if f.get(svcKey("default", "inventory")) == nil || f.get(svcKey("default", "payments")) == nil ||
			f.get(svcKey("default", "barrier")) == nil {
			t.Error("objects of the vanished directory withdrawn")
		}
		if f.get(svcKey("default", "cart")) == nil {
			t.Error("object outside the removed directory went")
		}
	})
	t.Run("recreate directory", func(t *testing.T) {
		// Back and readable: it holds b.yaml only, so barrier.yaml is deleted. sub/new/deeper is still missing,
		// so what it held stays, reported, until it is back too.
		write(t, f.dir, "sub/b.yaml", svcDoc("", "inventory", 85))
		eventually(t, "the recreated directory", func() bool {
			c := f.get(svcKey("default", "inventory"))
			return c != nil && port(t, c) == 85 && f.get(svcKey("default", "barrier")) == nil
		})
		if f.get(svcKey("default", "payments")) == nil {
			t.Error("the objects of a directory still missing were withdrawn")
		}
		write(t, f.dir, "sub/new/deeper/other.yaml", svcDoc("", "other", 80))
		eventually(t, "the deeper directory back", func() bool {
			return f.get(svcKey("default", "payments")) == nil && f.get(svcKey("default", "other")) != nil && len(f.src.Errors()) == 0
		})
	})
	t.Run("atomic replace", func(t *testing.T) {
		tmp := write(t, f.dir, "a.yaml.tmp", svcDoc("", "cart", 83))
		if err := os.Rename(tmp, filepath.Join(f.dir, "a.yaml")); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the replaced file", func() bool { return portOf(f.get(svcKey("default", "cart"))) == 83 })
	})
	t.Run("configmap swap", func(t *testing.T) {
		// The layout kubelet gives a mounted ConfigMap: visible names are symlinks through ..data, which is
		// swapped atomically to a new hidden directory.
		write(t, f.dir, "..v1/mesh.yaml", svcDoc("", "from-configmap", 1))
		if err := os.Symlink("..v1", filepath.Join(f.dir, "..data")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", "mesh.yaml"), filepath.Join(f.dir, "mesh.yaml")); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the ConfigMap file", func() bool { return portOf(f.get(svcKey("default", "from-configmap"))) == 1 })
		write(t, f.dir, "..v2/mesh.yaml", svcDoc("", "from-configmap", 2))
		if err := os.Symlink("..v2", filepath.Join(f.dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(f.dir, "..data_tmp"), filepath.Join(f.dir, "..data")); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the ConfigMap swap", func() bool { return portOf(f.get(svcKey("default", "from-configmap"))) == 2 })
		if c := f.get(svcKey("default", "from-configmap")); c.Generation != 2 {
			t.Errorf("generation %d, want 2", c.Generation)
		}
	})
	t.Run("rename away", func(t *testing.T) {
		if err := os.Rename(filepath.Join(f.dir, "sub", "b.yaml"), filepath.Join(f.dir, "sub", "b.yaml.disabled")); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the rename", func() bool { return f.get(svcKey("default", "inventory")) == nil })
	})
}

// waitWatching returns once Run is watching: Run has no ready signal, so rewrite a canary until it is picked up.
func waitWatching(t *testing.T, f *fixture) {
	t.Helper()
	rewriteUntilSeen(t, f, "canary.yaml", "canary")
}

// rewriteUntilSeen writes Service name with a new port into rel until the store shows it.
func rewriteUntilSeen(t *testing.T, f *fixture, rel, name string) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		f.rewrites++
		p := 1000 + f.rewrites
		write(t, f.dir, rel, svcDoc("", name, p))
		if eventuallyShort(func() bool { return portOf(f.get(svcKey("default", name))) == int32(p) }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the watcher never applied %s", rel)
		}
	}
}

// eventuallyShort polls cond for up to 200 ms and reports whether it held.
func eventuallyShort(cond func() bool) bool {
	deadline := time.Now().Add(200 * time.Millisecond)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

func TestWatchGeneration(t *testing.T) {
	f := newFixture(t)
	p := write(t, f.dir, "a.yaml", svcDoc("", "cart", 80))
	write(t, f.dir, "z.yaml", svcDoc("", "barrier", 1))
	f.load(t)
	f.run(t)

	// barrier rewrites z.yaml, which sorts after a.yaml, and waits until it is applied: anything the watcher
	// was going to do about a.yaml has been done by then.
	barrier := func() { t.Helper(); rewriteUntilSeen(t, f, "z.yaml", "barrier") }
	barrier() // the watcher is running

	cart := svcKey("default", "cart")
	replace(t, f.dir, "a.yaml", svcDoc("", "cart", 81))
	eventually(t, "the change", func() bool { return portOf(f.get(cart)) == 81 })
	if g := f.get(cart).Generation; g != 2 {
		t.Errorf("generation %d, want 2", g)
	}

	rv := f.get(cart).ResourceVersion
	replace(t, f.dir, "a.yaml", svcDoc("", "cart", 81))
	now := time.Now().Add(time.Hour)
	if err := os.Chtimes(p, now, now); err != nil {
		t.Fatal(err)
	}
	barrier()
	if c := f.get(cart); c.Generation != 2 || c.ResourceVersion != rv {
		t.Errorf("a touch changed the object: generation %d rv %s -> %s", c.Generation, rv, c.ResourceVersion)
	}
	if got := f.events.of(cart); fmt.Sprint(got) != "[add update]" {
		t.Errorf("events %v, want add update", got)
	}

	replace(t, f.dir, "a.yaml", svcDoc("", "cart", 82))
	eventually(t, "the second change", func() bool { return portOf(f.get(cart)) == 82 })
	if g := f.get(cart).Generation; g != 3 {
		t.Errorf("generation %d, want 3", g)
	}
}

// Rewriting a file with one document changed updates that object only; the others stay the objects already
// served. A copy of an already served document is still a duplicate.
func TestRewriteKeepsUnchangedDocuments(t *testing.T) {
	f := newFixture(t)
	write(t, f.dir, "a.yaml", join(svcDoc("shop", "cart", 80), svcDoc("shop", "pay", 90), vsDoc("shop", "cart", "cart")))
	f.load(t)
	cart, vs := f.get(svcKey("shop", "cart")), f.get(vsKey("shop", "cart"))
	before := f.events.total()

	write(t, f.dir, "a.yaml", join(svcDoc("shop", "cart", 80), svcDoc("shop", "pay", 91), vsDoc("shop", "cart", "cart")))
	f.load(t)
	if got := f.events.total() - before; got != 1 || port(t, f.get(svcKey("shop", "pay"))) != 91 {
		t.Fatalf("%d events, pay on port %d; want one update to 91", got, port(t, f.get(svcKey("shop", "pay"))))
	}
	if f.get(svcKey("shop", "cart")) != cart || f.get(vsKey("shop", "cart")) != vs {
		t.Error("unchanged documents were replaced")
	}

	write(t, f.dir, "a.yaml", join(svcDoc("shop", "cart", 80), svcDoc("shop", "cart", 80), vsDoc("shop", "cart", "cart")))
	f.load(t)
	errs := f.src.Errors()
	if len(errs) != 1 || errs[0].Index != 1 || errs[0].Name != "cart" || !strings.Contains(errs[0].Message, "duplicate of document 0") {
		t.Fatalf("Errors:%s\nwant document 1 a duplicate of document 0", errorsString(errs))
	}
	// A file with an error keeps serving what its documents no longer define.
	if f.get(svcKey("shop", "cart")) != cart || port(t, f.get(svcKey("shop", "pay"))) != 91 {
		t.Error("after the rewrite with a duplicate: cart replaced or pay gone")
	}
}

// Durations in Go's form ("1m", "500ms"), which istiod and the CRD schema accept, load from files too.
func TestGoDurationsLoad(t *testing.T) {
	f := newFixture(t)
	write(t, f.dir, "dr.yaml", `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: shop}
spec:
  host: reviews
  trafficPolicy:
    outlierDetection: {consecutive5xxErrors: 3, interval: 1m, baseEjectionTime: 1h}
`)
	f.load(t)
	if errs := f.src.Errors(); len(errs) != 0 {
		t.Fatalf("errors: %v", errs)
	}
	c := f.store.Get(config.Key{Kind: config.DestinationRule, Namespace: "shop", Name: "reviews"})
	if c == nil {
		t.Fatal("DestinationRule not loaded")
	}
	if got := c.Spec.(*networking.DestinationRule).TrafficPolicy.OutlierDetection.BaseEjectionTime.AsDuration(); got != time.Hour {
		t.Errorf("baseEjectionTime = %v, want 1h", got)
	}
}

// A field Sextant accepts but does not implement is served without it, listed by Warnings with file, document,
// object and field, and logged once per parse of its document, not on every reload.
func TestWarnings(t *testing.T) {
	dir := t.TempDir()
	var logs strings.Builder
	var mu sync.Mutex
	st := store.New()
	src := file.New(file.Options{Dir: dir, Store: st, Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))})
	statPrefix := "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: r, namespace: shop}\nspec:\n  hosts: [r]\n" +
		"  tcp:\n  - match: [{sourceSubnet: 10.1.0.0/16}]\n    route: [{destination: {host: r}}]\n"
	p := write(t, dir, "vs.yaml", statPrefix)
	for range 2 {
		if err := src.Load(); err != nil {
			t.Fatal(err)
		}
	}
	if st.Get(vsKey("shop", "r")) == nil || len(src.Errors()) != 0 {
		t.Fatalf("VirtualService not served: %v", src.Errors())
	}
	ws := src.Warnings()
	if len(ws) != 1 || !ws[0].Warning || ws[0].File != p || ws[0].Index != 0 || ws[0].Field != "spec.tcp[0].match[0].sourceSubnet" ||
		ws[0].Kind != "VirtualService" || ws[0].Name != "r" {
		t.Fatalf("warnings = %+v", ws)
	}
	mu.Lock()
	n := strings.Count(logs.String(), "config field not implemented")
	mu.Unlock()
	if n != 1 {
		t.Errorf("logged %d times, want once:\n%s", n, logs.String())
	}

	// The same document moved down its file keeps its warning, at its new index; removing the field clears it.
	write(t, dir, "vs.yaml", join(svcDoc("shop", "r", 80), statPrefix))
	if err := src.Load(); err != nil {
		t.Fatal(err)
	}
	if ws := src.Warnings(); len(ws) != 1 || ws[0].Index != 1 {
		t.Errorf("moved document: warnings = %+v", ws)
	}
	write(t, dir, "vs.yaml", vsDoc("shop", "r", "r"))
	if err := src.Load(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	n = strings.Count(logs.String(), "config field not implemented")
	mu.Unlock()
	if n != 1 {
		t.Errorf("an unchanged document was logged again (%d lines)", n)
	}
	if ws := src.Warnings(); len(ws) != 0 {
		t.Errorf("field removed: warnings = %+v", ws)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
