package derive

import "maps"

// claimSet is the set of names a list's owners hold (Building.Claim): a set shared with the lists it was
// derived from, with the changes since on top, so deriving a list for one new owner does not copy
// thousands of names. A claimSet is not changed once its list is returned.
type claimSet struct {
	base            map[string]bool // shared, read only
	added, released map[string]bool
}

// shared returns c with its changes folded into a new shared set: what a full build's list keeps.
func (c claimSet) shared() claimSet {
	if len(c.base) == 0 && len(c.released) == 0 {
		return claimSet{base: c.added}
	}
	base := maps.Clone(c.base)
	for n := range c.released {
		delete(base, n)
	}
	maps.Copy(base, c.added)
	return claimSet{base: base}
}

func (c *claimSet) has(n string) bool { return c.added[n] || c.base[n] && !c.released[n] }

// edit returns a copy whose changes do not show in c.
func (c claimSet) edit() claimSet {
	return claimSet{base: c.base, added: maps.Clone(c.added), released: maps.Clone(c.released)}
}

// claim holds n, which c does not hold.
func (c *claimSet) claim(n string) {
	if c.base[n] {
		delete(c.released, n) // released since the shared set was made
		return
	}
	if c.added == nil {
		c.added = map[string]bool{}
	}
	c.added[n] = true
}

func (c *claimSet) release(names []string) {
	for _, n := range names {
		if c.added[n] {
			delete(c.added, n)
		} else if c.base[n] {
			if c.released == nil {
				c.released = map[string]bool{}
			}
			c.released[n] = true
		}
	}
}

// settleClaimsAt is how many changes a claimSet carries on top of its shared set.
var settleClaimsAt = 256

// settle folds the changes into a new shared set once they are many, rebuilding it from the list's claims.
func (c *claimSet) settle(claims [][]string) {
	if len(c.added)+len(c.released) < settleClaimsAt {
		return
	}
	base := map[string]bool{}
	for _, names := range claims {
		for _, n := range names {
			base[n] = true
		}
	}
	*c = claimSet{base: base}
}
