package derive

import (
	"slices"
	"sort"
	"strings"
)

// List is an output built owner by owner (the clusters of each service of a scope), sorted by item name, with
// what it was built from: the next snapshot's list is derived from it.
type List[O comparable, I any] struct {
	// Items is the output, sorted by name. Shared with later lists and with every proxy: never modified.
	Items []I
	// Key is the identity of every declared input the list was built from.
	Key Key
	// Full names why the list was built from every owner ("first build", or the input that asked for it);
	// empty when it was derived from the previous list.
	Full string
	// Taint, when set, says why the next list cannot be derived from this one (Building.Taint, or a
	// contested claim).
	Taint string

	owners  []O        // the owner of each item
	claims  [][]string // what the owner of each item claimed, on its first item; nil while nothing is
	members []O        // every owner the list was built for, items or not
	reads   map[O]Reads
	held    claimSet
}

// Plan is how one output is built and derived: its declared inputs, its owners in a context, and the
// builder of one owner's items, which is also the full build's.
type Plan[C any, O comparable, I any] struct {
	Inputs *Inputs[C, O]
	// Members returns the owners in c, sorted by Compare; the slice is kept, never modified. A full build
	// builds them in this order, which decides who gets a contested claim.
	Members func(c C) []O
	// Compare orders owners as Members returns them: an owner that sorts equal but is another value is an
	// updated one (removed, then added).
	Compare func(a, b O) int
	// Build appends owner's items to out; b takes what else the build tells the list.
	Build func(c C, out []I, owner O, b *Building) ([]I, error)
	// Name is an item's name: lists are sorted by it, and kept and rebuilt items merged by it.
	Name func(item I) string
	// Derivable, when set, says whether an owner may come or go by derivation; one that may not (its
	// coming changes what other owners build) makes the change a full build.
	Derivable func(c C, owner O) bool
}

// Building is what one owner's build tells the list besides its items.
type Building struct {
	reads     Reads
	held      *claimSet
	claimed   []string
	prior     []string // what the owner held before this rebuild: its own, not contested
	contested string   // a name asked for that another owner holds
	taint     string
}

// Read records that the items read the Readers inputs r.
func (b *Building) Read(r Reads) { b.reads |= r }

// Claim asks for names that one owner of the list at most may hold (the domains of a virtual host) and
// returns those it gets: in a full build, those no earlier owner holds; the list is then tainted if some
// were held, since only a full build settles who holds them. A derivation stops at a held name and builds
// the list in full instead; an owner built again keeps what it held without giving it up first.
func (b *Building) Claim(names []string) []string {
	got := names
	for i, n := range names {
		// Names are few per owner (a virtual host's domains): linear scans beat a set.
		dup := slices.Contains(names[:i], n) || slices.Contains(b.claimed, n)
		mine := slices.Contains(b.prior, n)
		if !dup && (mine || !b.held.has(n)) {
			if !mine {
				b.held.claim(n)
			}
			if len(got) < len(names) {
				got = append(got, n)
			}
			continue
		}
		if b.contested == "" {
			b.contested = n
		}
		if len(got) == len(names) {
			got = slices.Clone(names[:i])
		}
	}
	if b.claimed == nil {
		b.claimed = got
	} else {
		b.claimed = append(slices.Clip(b.claimed), got...)
	}
	return got
}

// releaseUnclaimed releases what the owner held before its rebuild and no longer claims.
func (b *Building) releaseUnclaimed() {
	for _, n := range b.prior {
		if !slices.Contains(b.claimed, n) {
			b.held.release([]string{n})
		}
	}
}

// Taint says the items depend on something the declaration does not cover: the list is not derived from,
// and a derivation that meets it builds the list in full.
func (b *Building) Taint(why string) {
	if b.taint == "" {
		b.taint = why
	}
}

// Next returns the list for c: derived from prev when the inputs that changed allow it, otherwise built
// from every owner.
func (p *Plan[C, O, I]) Next(prev *List[O, I], c C) (*List[O, I], error) {
	key := p.Inputs.Key(c)
	if prev == nil {
		return p.build(c, key, "first build")
	}
	if prev.Taint != "" {
		return p.build(c, key, "the previous list cannot be derived from: "+prev.Taint)
	}
	rebuild, why := p.changes(prev, c, key)
	if why != "" {
		return p.build(c, key, why)
	}
	next, why, err := p.derive(prev, c, key, rebuild)
	if why != "" {
		return p.build(c, key, why)
	}
	return next, err
}

// build builds the list from every owner in c.
func (p *Plan[C, O, I]) build(c C, key Key, why string) (*List[O, I], error) {
	l := &List[O, I]{Key: key, Full: why, members: p.Members(c), reads: map[O]Reads{}}
	b := &Building{} // one for every owner: a Building per owner was an allocation per owner per build
	for _, o := range l.members {
		*b = Building{held: &l.held}
		if err := p.add(l, c, o, b); err != nil {
			return nil, err
		}
		if l.Taint == "" {
			l.Taint = b.taint
		}
		if l.Taint == "" && b.contested != "" {
			l.Taint = "\"" + b.contested + "\" is claimed by two owners"
		}
	}
	l.held = l.held.shared()
	sort.Sort(byName[O, I]{l, p.Name})
	return l, nil
}

// add builds owner's items onto l.
func (p *Plan[C, O, I]) add(l *List[O, I], c C, o O, b *Building) error {
	n := len(l.Items)
	items, err := p.Build(c, l.Items, o, b)
	if err != nil {
		return err
	}
	l.Items = items
	for i := range len(l.Items) - n {
		l.owners = append(l.owners, o)
		if i == 0 && len(b.claimed) > 0 && l.claims == nil {
			l.claims = make([][]string, n, cap(l.owners))
		}
		if l.claims != nil {
			var claimed []string
			if i == 0 {
				claimed = b.claimed
			}
			l.claims = append(l.claims, claimed)
		}
	}
	if n == len(l.Items) && len(b.claimed) > 0 {
		// Nowhere to keep them: held until the next full build, which only makes later claims of those
		// names build in full.
		l.Taint = "an owner without items holds claims"
	}
	if b.reads != 0 {
		l.reads[o] = b.reads
	}
	return nil
}

// rebuild is what a derivation does: owners gone or to be built again (removed: true for an owner that
// stays and is built again), owners to build (added), and every owner in the new context.
type rebuild[O comparable] struct {
	removed map[O]bool
	added   []O
	members []O
}

// changed counts the owners that went, came or are built again, each once.
func (r *rebuild[O]) changed() int {
	n := len(r.removed)
	for _, o := range r.added {
		if _, again := r.removed[o]; !again {
			n++
		}
	}
	return n
}

// again marks an owner still present to be built again.
func (r *rebuild[O]) again(o O) {
	if _, ok := r.removed[o]; !ok {
		r.removed[o] = true
		r.added = append(r.added, o)
	}
}

// changes compares the inputs of prev with key and says what to build again, or why everything must be.
func (p *Plan[C, O, I]) changes(prev *List[O, I], c C, key Key) (rebuild[O], string) {
	r := rebuild[O]{removed: map[O]bool{}, members: prev.members}
	membersChanged := false
	for i, in := range p.Inputs.list {
		if prev.Key.ids[i] == key.ids[i] {
			continue
		}
		switch {
		case in.Members:
			r.members = p.Members(c)
			r.removed, r.added = p.diff(prev.members, r.members)
			membersChanged = len(r.removed)+len(r.added) > 0
			if why := p.underivable(c, r); why != "" {
				return r, why
			}
		case in.Readers || in.Affected != nil:
		default:
			return r, in.Name + " changed"
		}
	}
	for i, in := range p.Inputs.list {
		if prev.Key.ids[i] == key.ids[i] || in.Members && !(in.Readers && membersChanged) {
			continue
		}
		if in.Affected != nil {
			touched, all := in.Affected(c, prev.Key.ids[i], prev.members)
			if all {
				return r, in.Name + " changed everywhere"
			}
			for _, o := range touched {
				r.again(o)
			}
		}
		if in.Readers {
			bit := Reads(1) << i
			for _, o := range prev.members {
				if prev.reads[o]&bit != 0 {
					r.again(o)
				}
			}
		}
	}
	if r.changed() > len(r.members)/2 {
		return r, "most owners changed"
	}
	return r, ""
}

// underivable names an owner that came or went although Derivable says it may not.
func (p *Plan[C, O, I]) underivable(c C, r rebuild[O]) string {
	if p.Derivable == nil {
		return ""
	}
	for o := range r.removed {
		if !p.Derivable(c, o) {
			return "an owner that went needs a full build"
		}
	}
	for _, o := range r.added {
		if !p.Derivable(c, o) {
			return "an owner that came needs a full build"
		}
	}
	return ""
}

// diff returns the owners of old not in cur (or replaced there) and those of cur not in old, both sorted
// by Compare.
func (p *Plan[C, O, I]) diff(old, cur []O) (removed map[O]bool, added []O) {
	removed = map[O]bool{}
	for i, j := 0, 0; i < len(old) || j < len(cur); {
		switch {
		case i < len(old) && j < len(cur) && old[i] == cur[j]:
			i, j = i+1, j+1
		case j == len(cur) || i < len(old) && p.Compare(old[i], cur[j]) <= 0:
			removed[old[i]] = false
			i++
		default:
			added = append(added, cur[j])
			j++
		}
	}
	return removed, added
}

// derive builds the next list from prev: the items of owners that stayed are kept, those of removed
// owners dropped and those of added ones built, merged by name as a full build sorts them. why is set when
// an added owner's build asked for a full one (a contested claim, a taint).
func (p *Plan[C, O, I]) derive(prev *List[O, I], c C, key Key, r rebuild[O]) (_ *List[O, I], why string, _ error) {
	next := &List[O, I]{Key: key, members: r.members, held: prev.held}
	if len(r.removed) == 0 && len(r.added) == 0 {
		next.Items, next.owners, next.claims, next.reads = prev.Items, prev.owners, prev.claims, prev.reads
		return next, "", nil
	}
	next.held = prev.held.edit()
	var prior map[O][]string // what owners built again held: theirs while they claim it again
	var againAt []int        // the items of owners built again, by index in prev
	for i, o := range prev.owners {
		again, gone := r.removed[o]
		if again {
			againAt = append(againAt, i)
		}
		switch {
		case prev.claims == nil || !gone || prev.claims[i] == nil:
		case again:
			if prior == nil {
				prior = map[O][]string{}
			}
			prior[o] = prev.claims[i]
		default:
			next.held.release(prev.claims[i])
		}
	}
	fresh := &List[O, I]{reads: map[O]Reads{}}
	var inPlace []replacement[I]
	b := &Building{}
	for _, o := range r.added {
		*b = Building{held: &next.held, prior: prior[o]}
		n := len(fresh.Items)
		if err := p.add(fresh, c, o, b); err != nil {
			return nil, "", err
		}
		if r.removed[o] {
			inPlace = p.replaceInPlace(inPlace, prev, fresh, n, againAt, o)
		}
		b.releaseUnclaimed()
		switch {
		case b.taint != "":
			return nil, b.taint, nil
		case b.contested != "":
			return nil, "\"" + b.contested + "\" claimed by an owner that came", nil
		case fresh.Taint != "":
			return nil, fresh.Taint, nil
		}
	}
	sort.Sort(byName[O, I]{fresh, p.Name})
	slices.SortFunc(inPlace, func(a, b replacement[I]) int { return a.at - b.at })
	if name := p.merge(next, prev, fresh, r.removed, inPlace); name != "" {
		return nil, "\"" + name + "\" built by an owner that came and one that stayed", nil
	}
	if sameReads(prev.reads, fresh.reads, r.removed) {
		next.reads = prev.reads // the usual case: readers built again read the same
		next.held.settle(next.claims)
		return next, "", nil
	}
	next.reads = make(map[O]Reads, len(prev.reads)+len(fresh.reads))
	for o, rd := range prev.reads {
		if _, gone := r.removed[o]; !gone {
			next.reads[o] = rd
		}
	}
	for o, rd := range fresh.reads {
		next.reads[o] = rd
	}
	next.held.settle(next.claims)
	return next, "", nil
}

// replacement is an item of an owner built again that takes the place of its previous one, of the same name.
type replacement[I any] struct {
	at     int // in prev
	item   I
	claims []string
}

// replaceInPlace moves the items just built for o, an owner built again, from fresh to replacements of its
// previous items when they have the same names: the usual case, which then costs the merge no comparisons.
func (p *Plan[C, O, I]) replaceInPlace(out []replacement[I], prev, fresh *List[O, I], n int, againAt []int, o O) []replacement[I] {
	built := fresh.Items[n:]
	var at []int
	for _, i := range againAt {
		if prev.owners[i] == o {
			at = append(at, i)
		}
	}
	if len(at) != len(built) {
		return out
	}
	start := len(out)
	for k, item := range built {
		i := slices.IndexFunc(at, func(i int) bool { return p.Name(prev.Items[i]) == p.Name(item) })
		if i < 0 {
			return out[:start] // renamed: merged by name like a new owner's
		}
		out = append(out, replacement[I]{at: at[i], item: item, claims: fresh.claimsAt(n + k)})
	}
	fresh.Items, fresh.owners = fresh.Items[:n], fresh.owners[:n]
	if fresh.claims != nil {
		fresh.claims = fresh.claims[:n]
	}
	return out
}

// sameReads reports whether the reads after a derivation are prev's: every owner that read something and
// was removed was built again reading the same, and no new owner reads anything.
func sameReads[O comparable](prev, fresh map[O]Reads, removed map[O]bool) bool {
	for o, rd := range fresh {
		if prev[o] != rd {
			return false
		}
	}
	for o, again := range removed {
		if prev[o] != 0 && (!again || fresh[o] != prev[o]) {
			return false
		}
	}
	return true
}

// merge fills next with the items of prev whose owners stay and those of fresh, by name, and returns the
// name of an item both hold, which only a full build settles.
func (p *Plan[C, O, I]) merge(next, prev, fresh *List[O, I], removed map[O]bool, inPlace []replacement[I]) string {
	n := len(prev.Items) + len(fresh.Items)
	next.Items, next.owners = make([]I, 0, n), make([]O, 0, n)
	if prev.claims != nil || fresh.claims != nil {
		next.claims = make([][]string, 0, n)
	}
	for i, j := 0, 0; i < len(prev.Items) || j < len(fresh.Items); {
		// The prev side's candidate: its item, the item that replaces it, or none (its owner went).
		var kept I
		var keptClaims []string
		replaced := len(inPlace) > 0 && inPlace[0].at == i
		if i < len(prev.Items) && !replaced {
			if _, gone := removed[prev.owners[i]]; gone {
				i++
				continue
			}
		}
		if i < len(prev.Items) {
			kept, keptClaims = prev.Items[i], prev.claimsAt(i)
			if replaced {
				kept, keptClaims = inPlace[0].item, inPlace[0].claims
			}
		}
		c := 1 // prev is done: fresh's turn
		if i < len(prev.Items) {
			c = -1
			if j < len(fresh.Items) {
				c = strings.Compare(p.Name(kept), p.Name(fresh.Items[j]))
			}
		}
		switch {
		case c == 0:
			return p.Name(kept)
		case c < 0:
			next.Items, next.owners = append(next.Items, kept), append(next.owners, prev.owners[i])
			if next.claims != nil {
				next.claims = append(next.claims, keptClaims)
			}
			if replaced {
				inPlace = inPlace[1:]
			}
			i++
		default:
			next.Items, next.owners = append(next.Items, fresh.Items[j]), append(next.owners, fresh.owners[j])
			if next.claims != nil {
				next.claims = append(next.claims, fresh.claimsAt(j))
			}
			j++
		}
	}
	return ""
}

// Owners returns the owner of each item, in the order of Items; for tests and debug views.
func (l *List[O, I]) Owners() []O { return slices.Clone(l.owners) }

// byName sorts a list's items by name together with their owners and claims.
type byName[O comparable, I any] struct {
	l    *List[O, I]
	name func(I) string
}

func (b byName[O, I]) Len() int           { return len(b.l.Items) }
func (b byName[O, I]) Less(i, j int) bool { return b.name(b.l.Items[i]) < b.name(b.l.Items[j]) }
func (b byName[O, I]) Swap(i, j int) {
	b.l.Items[i], b.l.Items[j] = b.l.Items[j], b.l.Items[i]
	b.l.owners[i], b.l.owners[j] = b.l.owners[j], b.l.owners[i]
	if b.l.claims != nil {
		b.l.claims[i], b.l.claims[j] = b.l.claims[j], b.l.claims[i]
	}
}

// claimsAt returns what the owner of item i claimed on it.
func (l *List[O, I]) claimsAt(i int) []string {
	if l.claims == nil {
		return nil
	}
	return l.claims[i]
}
