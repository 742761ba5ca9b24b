package derive

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// service is a toy owner: a name and a version, replaced (a new pointer) when it changes.
type service struct {
	name    string
	version int
	ns      string
	ports   int
	inline  bool // its items read the endpoints
	routed  bool // its items read the scope: how many services it has
	alias   string
	// solo: its coming or going changes what others build (Plan.Derivable says no).
	solo bool
}

// world is a toy snapshot: the services of a scope and three more inputs.
type world struct {
	services  []*service // sorted by name
	rules     *int       // any change rebuilds everything
	endpoints *int       // read by inline services only
	policy    *policy    // per namespace
	builds    *int       // counts owner builds
}

type policy struct{ modes map[string]int }

var toyInputs = Declare(
	Input[world, *service]{Name: "scope", Of: func(w world) any { return &w.services[0] }, Members: true, Readers: true},
	Input[world, *service]{Name: "rules", Of: func(w world) any { return w.rules }},
	Input[world, *service]{Name: "endpoints", Of: func(w world) any { return w.endpoints }, Readers: true},
	Input[world, *service]{Name: "policy", Of: func(w world) any { return w.policy }, Affected: policyChanges},
)

// policyChanges touches the services of namespaces whose mode changed; a change of the "" namespace (the
// mesh-wide mode) touches everything.
func policyChanges(w world, prev any, owners []*service) ([]*service, bool) {
	old := prev.(*policy)
	if old.modes[""] != w.policy.modes[""] {
		return nil, true
	}
	var out []*service
	for _, s := range owners {
		if old.modes[s.ns] != w.policy.modes[s.ns] {
			out = append(out, s)
		}
	}
	return out, false
}

func toyPlan(in *Inputs[world, *service]) *Plan[world, *service, string] {
	return &Plan[world, *service, string]{
		Inputs:  in,
		Members: func(w world) []*service { return w.services[1:] },
		Compare: func(a, b *service) int { return strings.Compare(a.name, b.name) },
		Build: func(w world, out []string, s *service, b *Building) ([]string, error) {
			*w.builds++
			alias := ""
			if s.alias != "" && len(b.Claim([]string{s.alias})) == 1 {
				alias = " alias=" + s.alias
			}
			for p := range s.ports {
				item := fmt.Sprintf("%s:%d v%d rules=%d mode=%d", s.name, p, s.version, *w.rules, w.policy.modes[s.ns]+w.policy.modes[""])
				if s.inline {
					item += fmt.Sprintf(" eps=%d", *w.endpoints)
				}
				if s.routed {
					item += fmt.Sprintf(" of=%d", len(w.services)-1)
				}
				out = append(out, item+alias)
			}
			if s.inline {
				b.Read(in.Read("endpoints"))
			}
			if s.routed {
				b.Read(in.Read("scope"))
			}
			return out, nil
		},
		Derivable: func(_ world, s *service) bool { return !s.solo },
		Name:      func(item string) string { return item[:strings.IndexByte(item, ' ')] },
	}
}

// newWorld has n services over six namespaces; w.services[0] is a sentinel whose address is the scope's
// identity, so a new slice is a new scope.
func newWorld(n int) world {
	w := world{rules: new(int), endpoints: new(int), policy: &policy{modes: map[string]int{}}, builds: new(int)}
	w.services = []*service{nil}
	for i := range n {
		w.services = append(w.services, &service{
			name: fmt.Sprintf("svc-%03d", i), ns: fmt.Sprintf("ns-%d", i%6), ports: 1 + i%3, inline: i%5 == 0,
			routed: i%7 == 3,
		})
	}
	return w
}

func (w world) withServices(services []*service) world {
	w.services = append([]*service{nil}, services...)
	return w
}

func TestFirstBuildThenUnchangedSharesTheList(t *testing.T) {
	p := toyPlan(toyInputs)
	w := newWorld(10)
	first, err := p.Next(nil, w)
	if err != nil || first.Full != "first build" {
		t.Fatalf("first: %v %q", err, first.Full)
	}
	builds := *w.builds
	next, err := p.Next(first, w)
	if err != nil || next.Full != "" || *w.builds != builds {
		t.Fatalf("unchanged inputs: full %q, %d builds", next.Full, *w.builds-builds)
	}
	if &next.Items[0] != &first.Items[0] {
		t.Error("an unchanged list is copied, not shared")
	}
}

func TestAnInputDeclaredPlainRebuildsEverything(t *testing.T) {
	p := toyPlan(toyInputs)
	w := newWorld(10)
	first, _ := p.Next(nil, w)
	w.rules = new(int)
	*w.rules = 1
	next, _ := p.Next(first, w)
	if next.Full != "rules changed" {
		t.Errorf("full = %q, want the rules named", next.Full)
	}
}

func TestReadersAloneAreRebuilt(t *testing.T) {
	p := toyPlan(toyInputs)
	w := newWorld(20)
	first, _ := p.Next(nil, w)
	builds := *w.builds
	w.endpoints = new(int)
	*w.endpoints = 7
	next, _ := p.Next(first, w)
	if next.Full != "" {
		t.Fatalf("an endpoints change built everything: %q", next.Full)
	}
	if got := *w.builds - builds; got != 4 { // svc-000, 005, 010, 015
		t.Errorf("%d owners built again, want the 4 that read the endpoints", got)
	}
	assertSameAsFull(t, p, next, w)
}

func TestAffectedOwnersAreRebuiltAndAllMeansFull(t *testing.T) {
	p := toyPlan(toyInputs)
	w := newWorld(60)
	first, _ := p.Next(nil, w)
	w.policy = &policy{modes: map[string]int{"ns-1": 1}}
	builds := *w.builds
	next, _ := p.Next(first, w)
	if next.Full != "" || *w.builds-builds != 10 {
		t.Fatalf("a namespace's policy: full %q, %d built again, want that namespace's 10", next.Full, *w.builds-builds)
	}
	assertSameAsFull(t, p, next, w)
	w.policy = &policy{modes: map[string]int{"ns-1": 1, "": 2}}
	if next, _ = p.Next(next, w); next.Full != "policy changed everywhere" {
		t.Errorf("the mesh-wide mode: full = %q", next.Full)
	}
}

func TestMostOwnersChangedIsAFullBuild(t *testing.T) {
	p := toyPlan(toyInputs)
	w := newWorld(10)
	first, _ := p.Next(nil, w)
	w = w.withServices(w.services[1:4])
	if next, _ := p.Next(first, w); next.Full != "most owners changed" {
		t.Errorf("full = %q", next.Full)
	}
}

// TestDerivedEqualsFull walks random changes of every input and compares each derived list with a full
// build of the same world, item by item and owner by owner.
func TestDerivedEqualsFull(t *testing.T) {
	for _, at := range []int{settleClaimsAt, 2} {
		t.Run(fmt.Sprintf("claims settled at %d", at), func(t *testing.T) {
			defer func(n int) { settleClaimsAt = n }(settleClaimsAt)
			settleClaimsAt = at
			testDerivedEqualsFull(t)
		})
	}
}

func testDerivedEqualsFull(t *testing.T) {
	p := toyPlan(toyInputs)
	r := rand.New(rand.NewPCG(1, 2))
	w := newWorld(40)
	l, _ := p.Next(nil, w)
	derived, reasons := 0, map[string]int{}
	for step := range 500 {
		w = mutate(r, w, step)
		next, err := p.Next(l, w)
		if err != nil {
			t.Fatal(err)
		}
		if next.Full == "" {
			derived++
		}
		reasons[next.Full]++
		assertSameAsFull(t, p, next, w)
		if t.Failed() {
			t.Fatalf("step %d", step)
		}
		l = next
	}
	if derived < 250 {
		t.Errorf("only %d of 500 steps derived: the walk does not exercise derivation; full builds: %v", derived, reasons)
	}
	for _, why := range []string{"claimed by an owner that came", "an owner that came needs", "cannot be derived from"} {
		if !slices.ContainsFunc(slices.Collect(maps.Keys(reasons)), func(r string) bool { return strings.Contains(r, why) }) {
			t.Errorf("no full build because %q: the walk does not exercise it; %v", why, reasons)
		}
	}
}

func mutate(r *rand.Rand, w world, step int) world {
	switch r.IntN(6) {
	case 0: // add a service
		s := &service{name: fmt.Sprintf("new-%04d", step), ns: fmt.Sprintf("ns-%d", r.IntN(6)), ports: 1 + r.IntN(3), inline: r.IntN(2) == 0}
		randomTraits(r, s)
		cur := slices.Clone(w.services[1:])
		i, _ := slices.BinarySearchFunc(cur, s.name, func(a *service, n string) int { return strings.Compare(a.name, n) })
		return w.withServices(slices.Insert(cur, i, s))
	case 1: // remove one
		cur := slices.Clone(w.services[1:])
		if len(cur) > 10 {
			i := r.IntN(len(cur))
			cur = slices.Delete(cur, i, i+1)
		}
		return w.withServices(cur)
	case 2: // update one
		cur := slices.Clone(w.services[1:])
		i := r.IntN(len(cur))
		s := *cur[i]
		s.version++
		s.ports = 1 + r.IntN(3)
		randomTraits(r, &s)
		cur[i] = &s
		return w.withServices(cur)
	case 3:
		w.endpoints = new(int)
		*w.endpoints = step
	case 4:
		modes := map[string]int{}
		for k, v := range w.policy.modes {
			modes[k] = v
		}
		modes[fmt.Sprintf("ns-%d", r.IntN(6))] = step
		if r.IntN(10) == 0 {
			modes[""] = step
		}
		w.policy = &policy{modes: modes}
	case 5:
		if r.IntN(5) == 0 {
			w.rules = new(int)
			*w.rules = step
		}
	}
	return w
}

// randomTraits gives a service, now and then, a name other services may claim too, a dependency on the
// scope, or a coming and going that only a full build may handle.
func randomTraits(r *rand.Rand, s *service) {
	s.alias, s.routed, s.solo = "", r.IntN(8) == 0, r.IntN(40) == 0
	if r.IntN(5) == 0 {
		s.alias = fmt.Sprintf("alias-%d", r.IntN(60))
	}
}

// held lists the names a list holds, sorted.
func held(l *List[*service, string]) []string {
	var out []string
	for n := range l.held.base {
		if !l.held.released[n] {
			out = append(out, n)
		}
	}
	for n := range l.held.added {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func assertSameAsFull(t *testing.T, p *Plan[world, *service, string], got *List[*service, string], w world) {
	t.Helper()
	want, err := p.build(w, p.Inputs.Key(w), "check")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Items, want.Items) {
		t.Errorf("derived items differ from a full build:\n got %q\nwant %q", got.Items, want.Items)
	}
	if !slices.Equal(got.owners, want.owners) || !slices.Equal(got.members, want.members) {
		t.Error("derived owners or members differ from a full build")
	}
	if len(got.reads) != len(want.reads) {
		t.Errorf("derived reads %d owners, a full build %d", len(got.reads), len(want.reads))
	}
	if !slices.Equal(held(got), held(want)) || (got.Taint == "") != (want.Taint == "") {
		t.Errorf("derived claims %v (taint %q), a full build's %v (taint %q)", held(got), got.Taint, held(want), want.Taint)
	}
}

// TestOneMoreInputChangesKeyAndGate: declaring one more input is the whole change an output needs for its
// cache key and its derivation to follow that input.
func TestOneMoreInputChangesKeyAndGate(t *testing.T) {
	extra := new(int)
	more := toyInputs.With(Input[world, *service]{Name: "extra", Of: func(world) any { return extra }})
	p := toyPlan(more)
	w := newWorld(10)
	before := more.Key(w)
	first, _ := p.Next(nil, w)
	extra = new(int)
	after := more.Key(w)
	if before == after || !slices.Equal(more.Changed(before, after), []string{"extra"}) {
		t.Errorf("the key does not follow the new input: changed %v", more.Changed(before, after))
	}
	if next, _ := p.Next(first, w); next.Full != "extra changed" {
		t.Errorf("the derivation does not follow the new input: full = %q", next.Full)
	}
	if toyInputs.Key(w) != toyInputs.Key(w) {
		t.Error("the original declaration's key is not stable")
	}
}

// An owner that Derivable refuses makes its coming and its going a full build, naming why.
func TestAnUnderivableOwnerComingOrGoingIsAFullBuild(t *testing.T) {
	p := toyPlan(toyInputs)
	w := newWorld(20)
	first, _ := p.Next(nil, w)
	solo := &service{name: "svc-0105", ns: "ns-1", ports: 1, solo: true}
	with := w.withServices(append(slices.Clone(w.services[1:]), solo))
	next, _ := p.Next(first, with)
	if next.Full != "an owner that came needs a full build" {
		t.Errorf("came: full = %q", next.Full)
	}
	if back, _ := p.Next(next, w); back.Full != "an owner that went needs a full build" {
		t.Errorf("went: full = %q", back.Full)
	}
}

// A name two owners claim goes to the first in a full build, and taints the list: only another full build
// settles who holds it once the first goes. A derivation whose new owner claims a held name builds in full.
func TestContestedClaimsAreSettledByFullBuilds(t *testing.T) {
	p := toyPlan(toyInputs)
	w := newWorld(20)
	w.services[2] = &service{name: "svc-001", ns: "ns-1", ports: 1, alias: "shared"}
	first, _ := p.Next(nil, w)
	came := &service{name: "svc-0105", ns: "ns-1", ports: 1, alias: "shared"}
	w2 := w.withServices(append(slices.Clone(w.services[1:]), came))
	next, _ := p.Next(first, w2)
	if next.Full != `"shared" claimed by an owner that came` {
		t.Fatalf("full = %q", next.Full)
	}
	if next.Taint == "" || !slices.Contains(next.Items, "svc-001:0 v0 rules=0 mode=0 alias=shared") {
		t.Fatalf("the first owner holds the name and the list is tainted: taint %q, items %q", next.Taint, next.Items)
	}
	w3 := w2.withServices(slices.DeleteFunc(slices.Clone(w2.services[1:]), func(s *service) bool { return s.name == "svc-001" }))
	last, _ := p.Next(next, w3)
	if !strings.HasPrefix(last.Full, "the previous list cannot be derived from") {
		t.Fatalf("after a tainted list: full = %q", last.Full)
	}
	if !slices.Contains(last.Items, "svc-0105:0 v0 rules=0 mode=0 alias=shared") {
		t.Errorf("the name did not pass to the remaining owner: %q", last.Items)
	}
}

// A name an owner asks for twice is held once; the second ask is contested like another owner's.
func TestAClaimRepeatedByOneOwnerIsContested(t *testing.T) {
	b := &Building{held: &claimSet{}}
	if got := b.Claim([]string{"a", "b", "a"}); !slices.Equal(got, []string{"a", "b"}) || b.contested != "a" {
		t.Errorf("got %v, contested %q", got, b.contested)
	}
}
