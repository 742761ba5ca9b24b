package file_test

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	securitypb "istio.io/api/security/v1beta1"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/source/file"
	"github.com/sextantmesh/sextant/pilot/store"
)

// A file holding security objects is read only once it is quiet after an in-place write, and withdrawn only
// once quiet after it goes: a half-written or renamed-away policy is never served in its place.

var gate = config.Key{Kind: config.AuthorizationPolicy, Namespace: "shop", Name: "gate"}

// denyDoc is a DENY policy on namespaces ns-0 … ns-(n-1): long enough that half of it is a valid policy
// with fewer namespaces (or a broken document).
func denyDoc(n int) string {
	var b strings.Builder
	b.WriteString("apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata:\n  name: gate\n  namespace: shop\nspec:\n" +
		"  action: DENY\n  rules:\n  - from:\n    - source:\n        namespaces:\n")
	for i := range n {
		fmt.Fprintf(&b, "        - ns-%d\n", i)
	}
	return b.String()
}

// denied returns how many namespaces c denies, or -1 if c is not a DENY policy.
func denied(c *config.Config) int {
	if c == nil {
		return -1
	}
	p := c.Spec.(*securitypb.AuthorizationPolicy)
	if p.Action != securitypb.AuthorizationPolicy_DENY || len(p.Rules) != 1 || len(p.Rules[0].From) != 1 {
		return -1
	}
	return len(p.Rules[0].From[0].Source.Namespaces)
}

// gateWatch records every state of the gate policy the store goes through, from its events and by sampling.
type gateWatch struct {
	mu   sync.Mutex
	seen []int // denied() of each state observed
	stop chan struct{}
	done chan struct{}
}

func watchGate(t *testing.T, f *fixture) *gateWatch {
	g := &gateWatch{stop: make(chan struct{}), done: make(chan struct{})}
	f.store.AddHandler(func(e store.Event) {
		if e.Key() == gate {
			g.record(denied(e.New))
		}
	})
	go func() {
		defer close(g.done)
		for {
			select {
			case <-g.stop:
				return
			case <-time.After(time.Millisecond):
				g.record(denied(f.get(gate)))
			}
		}
	}()
	t.Cleanup(g.close)
	return g
}

func (g *gateWatch) record(n int) {
	g.mu.Lock()
	if len(g.seen) == 0 || g.seen[len(g.seen)-1] != n {
		g.seen = append(g.seen, n)
	}
	g.mu.Unlock()
}

func (g *gateWatch) close() {
	select {
	case <-g.stop:
	default:
		close(g.stop)
		<-g.done
	}
}

// states returns the distinct successive states observed.
func (g *gateWatch) states() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]int(nil), g.seen...)
}

// A policy rewritten in place, half of it first, then the rest after a pause shorter than the security
// settle, is served whole before and whole after: never truncated, never withdrawn.
func TestTruncatedWriteOfDenyIsNeverServed(t *testing.T) {
	f := newFixture(t)
	p := write(t, f.dir, "deny.yaml", denyDoc(40))
	f.load(t)
	f.run(t)
	waitWatching(t, f)
	g := watchGate(t, f)

	for round, n := range []int{41, 42, 43} {
		content := denyDoc(n)
		w, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			t.Fatal(err)
		}
		half := len(content) / 2
		if round == 1 {
			half = strings.Index(content, "  rules:") // the policy without rules: a DENY of nothing
		}
		if _, err := w.WriteString(content[:half]); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		if _, err := w.WriteString(content[half:]); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		within(t, waitFor, fmt.Sprintf("the policy with %d namespaces", n), func() bool { return denied(f.get(gate)) == n })
	}
	g.close()
	if got := g.states(); fmt.Sprint(got) != "[40 41 42 43]" {
		t.Errorf("states of the DENY policy (namespaces denied, -1 for none or not DENY): %v, want [40 41 42 43]", got)
	}
	if errs := f.src.Errors(); len(errs) != 0 {
		t.Errorf("Errors:%s", errorsString(errs))
	}
}

// A DENY policy half written in place between Load and Run is met by the watcher's first rescan, which has no
// event to go by: it is not read until it has been quiet for the security settle, so the half is never served.
func TestHalfWrittenDenyIsNotReadByTheFirstRescan(t *testing.T) {
	f := newFixture(t)
	p := write(t, f.dir, "deny.yaml", denyDoc(40))
	f.load(t)
	content := denyDoc(41)
	w, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.WriteString(content[:len(content)/2]); err != nil {
		t.Fatal(err)
	}
	g := watchGate(t, f)
	f.run(t)
	waitWatching(t, f) // the first rescan has read every file by now
	time.Sleep(100 * time.Millisecond)
	if _, err := w.WriteString(content[len(content)/2:]); err != nil {
		t.Fatal(err)
	}
	within(t, waitFor, "the whole policy with 41 namespaces", func() bool { return denied(f.get(gate)) == 41 })
	g.close()
	if got := g.states(); fmt.Sprint(got) != "[40 41]" {
		t.Errorf("states of the DENY policy: %v, want [40 41]", got)
	}
}

// Renamed away and back, to another config name and back, or replaced by renames, fifty times with short
// pauses: the DENY policy is never withdrawn. Deleted for good, it is withdrawn once quiet.
func TestRenameStormNeverWithdrawsDeny(t *testing.T) {
	if testing.Short() {
		t.Skip("fifty renames of a DENY policy with random pauses, then the security settle: -short")
	}
	f := newFixture(t)
	write(t, f.dir, "deny.yaml", denyDoc(40))
	f.load(t)
	f.run(t)
	waitWatching(t, f)
	g := watchGate(t, f)

	// Pauses around the settle of 20 ms: a watcher that withdraws what is gone when it looks sees it gone.
	rng := rand.New(rand.NewPCG(1, 2))
	pause := func() { time.Sleep(time.Duration(rng.IntN(60)) * time.Millisecond) }
	mv := func(from, to string) {
		t.Helper()
		if err := os.Rename(filepath.Join(f.dir, from), filepath.Join(f.dir, to)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 50 {
		switch i % 3 {
		case 0: // away to a name that is not config, and back
			mv("deny.yaml", "deny.yaml.off")
			pause()
			mv("deny.yaml.off", "deny.yaml")
		case 1: // to another config file, and back
			mv("deny.yaml", "moved.yaml")
			pause()
			mv("moved.yaml", "deny.yaml")
		case 2: // replaced by a rename
			write(t, f.dir, "deny.yaml.tmp", denyDoc(40))
			mv("deny.yaml.tmp", "deny.yaml")
		}
		pause()
	}
	within(t, waitFor, "the storm settled", func() bool { return len(f.src.Errors()) == 0 && f.src.Counts()[config.AuthorizationPolicy] == 1 })
	time.Sleep(1500 * time.Millisecond) // past the security settle: any withdrawal due has happened
	if got := g.states(); fmt.Sprint(got) != "[40]" {
		t.Fatalf("states of the DENY policy during the storm: %v, want [40] throughout", got)
	}

	// Moved for good to another name: served from there, never absent.
	mv("deny.yaml", "moved.yaml")
	within(t, waitFor, "the policy served from its new name", func() bool {
		c := f.get(gate)
		return c != nil && strings.Contains(c.Source, "moved.yaml")
	})
	if got := g.states(); fmt.Sprint(got) != "[40]" {
		t.Fatalf("states of the DENY policy during the move: %v, want [40] throughout", got)
	}

	// Deleted: still served while the directory may be in the middle of a move, withdrawn once quiet.
	if err := os.Remove(filepath.Join(f.dir, "moved.yaml")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if denied(f.get(gate)) != 40 {
		t.Error("the DENY policy withdrawn before its file was quiet")
	}
	within(t, waitFor, "the deleted policy withdrawn", func() bool { return f.get(gate) == nil })
}

// A policy file edited by an atomic rename is read at once, without the security settle.
func TestSecurityReplaceByRenameIsNotDelayed(t *testing.T) {
	f := newFixture(t)
	f.src = file.New(file.Options{Dir: f.dir, Store: f.store, Settle: 20 * time.Millisecond, SecuritySettle: 5 * time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	write(t, f.dir, "deny.yaml", denyDoc(40))
	f.load(t)
	f.run(t)
	waitWatching(t, f)
	start := time.Now()
	replace(t, f.dir, "deny.yaml", denyDoc(41))
	within(t, waitFor, "the replaced policy", func() bool { return denied(f.get(gate)) == 41 })
	if d := time.Since(start); d > 2500*time.Millisecond {
		t.Errorf("a policy replaced by a rename took %s to apply, as long as the security settle", d)
	}
}
