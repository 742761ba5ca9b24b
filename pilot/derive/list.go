package derive

import (
	"slices"
	"sort"
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

	owners  []O // the owner of each item
	members []O // every owner the list was built for, items or not
	reads   map[O]Reads
}

// Plan is how one output is built and derived: its declared inputs, its owners in a context, and the
// builder of one owner's items, which is also the full build's.
type Plan[C any, O comparable, I any] struct {
	Inputs *Inputs[C, O]
	// Members returns the owners in c, sorted by Compare; the slice is kept, never modified.
	Members func(c C) []O
	// Compare orders owners as Members returns them: an owner that sorts equal but is another value is an
	// updated one (removed, then added).
	Compare func(a, b O) int
	// Build appends owner's items to out and says which Readers inputs they read.
	Build func(c C, out []I, owner O) ([]I, Reads, error)
	// Name is an item's name: lists are sorted by it, and kept and rebuilt items merged by it.
	Name func(item I) string
}

// Next returns the list for c: derived from prev when the inputs that changed allow it, otherwise built
// from every owner.
func (p *Plan[C, O, I]) Next(prev *List[O, I], c C) (*List[O, I], error) {
	key := p.Inputs.Key(c)
	if prev == nil {
		return p.build(c, key, "first build")
	}
	rebuild, why := p.changes(prev, c, key)
	if why != "" {
		return p.build(c, key, why)
	}
	return p.derive(prev, c, key, rebuild)
}

// build builds the list from every owner in c.
func (p *Plan[C, O, I]) build(c C, key Key, why string) (*List[O, I], error) {
	l := &List[O, I]{Key: key, Full: why, members: p.Members(c), reads: map[O]Reads{}}
	for _, o := range l.members {
		if err := p.add(l, c, o); err != nil {
			return nil, err
		}
	}
	sort.Sort(byName[O, I]{l, p.Name})
	return l, nil
}

// add builds owner's items onto l.
func (p *Plan[C, O, I]) add(l *List[O, I], c C, o O) error {
	n := len(l.Items)
	items, reads, err := p.Build(c, l.Items, o)
	if err != nil {
		return err
	}
	l.Items = items
	for range len(l.Items) - n {
		l.owners = append(l.owners, o)
	}
	if reads != 0 {
		l.reads[o] = reads
	}
	return nil
}

// rebuild is what a derivation does: owners gone or to be built again (removed), owners to build (added),
// and every owner in the new context.
type rebuild[O comparable] struct {
	removed map[O]bool
	added   []O
	members []O
}

// again marks an owner still present to be built again.
func (r *rebuild[O]) again(o O) {
	if !r.removed[o] {
		r.removed[o] = true
		r.added = append(r.added, o)
	}
}

// changes compares the inputs of prev with key and says what to build again, or why everything must be.
func (p *Plan[C, O, I]) changes(prev *List[O, I], c C, key Key) (rebuild[O], string) {
	r := rebuild[O]{removed: map[O]bool{}, members: prev.members}
	for i, in := range p.Inputs.list {
		if prev.Key.ids[i] == key.ids[i] {
			continue
		}
		switch {
		case in.Members:
			r.members = p.Members(c)
			r.removed, r.added = p.diff(prev.members, r.members)
		case in.Readers || in.Affected != nil:
		default:
			return r, in.Name + " changed"
		}
	}
	for i, in := range p.Inputs.list {
		if prev.Key.ids[i] == key.ids[i] || in.Members {
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
	if len(r.removed)+len(r.added) > len(r.members)/2 {
		return r, "most owners changed"
	}
	return r, ""
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
			removed[old[i]] = true
			i++
		default:
			added = append(added, cur[j])
			j++
		}
	}
	return removed, added
}

// derive builds the next list from prev: the items of owners that stayed are kept, those of removed
// owners dropped and those of added ones built, merged by name as a full build sorts them.
func (p *Plan[C, O, I]) derive(prev *List[O, I], c C, key Key, r rebuild[O]) (*List[O, I], error) {
	next := &List[O, I]{Key: key, members: r.members}
	if len(r.removed) == 0 && len(r.added) == 0 {
		next.Items, next.owners, next.reads = prev.Items, prev.owners, prev.reads
		return next, nil
	}
	fresh := &List[O, I]{reads: map[O]Reads{}}
	for _, o := range r.added {
		if err := p.add(fresh, c, o); err != nil {
			return nil, err
		}
	}
	sort.Sort(byName[O, I]{fresh, p.Name})
	next.Items = make([]I, 0, len(prev.Items)+len(fresh.Items))
	next.owners = make([]O, 0, cap(next.Items))
	for i, j := 0, 0; i < len(prev.Items) || j < len(fresh.Items); {
		if i < len(prev.Items) && r.removed[prev.owners[i]] {
			i++
			continue
		}
		if j == len(fresh.Items) || i < len(prev.Items) && p.Name(prev.Items[i]) < p.Name(fresh.Items[j]) {
			next.Items, next.owners = append(next.Items, prev.Items[i]), append(next.owners, prev.owners[i])
			i++
		} else {
			next.Items, next.owners = append(next.Items, fresh.Items[j]), append(next.owners, fresh.owners[j])
			j++
		}
	}
	next.reads = make(map[O]Reads, len(prev.reads)+len(fresh.reads))
	for o, rd := range prev.reads {
		if !r.removed[o] {
			next.reads[o] = rd
		}
	}
	for o, rd := range fresh.reads {
		next.reads[o] = rd
	}
	return next, nil
}

// Owners returns the owner of each item, in the order of Items; for tests and debug views.
func (l *List[O, I]) Owners() []O { return slices.Clone(l.owners) }

// byName sorts a list's items by name together with their owners.
type byName[O comparable, I any] struct {
	l    *List[O, I]
	name func(I) string
}

func (b byName[O, I]) Len() int           { return len(b.l.Items) }
func (b byName[O, I]) Less(i, j int) bool { return b.name(b.l.Items[i]) < b.name(b.l.Items[j]) }
func (b byName[O, I]) Swap(i, j int) {
	b.l.Items[i], b.l.Items[j] = b.l.Items[j], b.l.Items[i]
	b.l.owners[i], b.l.owners[j] = b.l.owners[j], b.l.owners[i]
}
