package xds

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"

	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pkg/nameset"
)

// pushOrder orders two watched types for a push: by their policies' Order, unordered types (0) last, then
// by type URL.
func pushOrder(a, b *watch) int {
	oa, ob := a.policy.Order, b.policy.Order
	switch {
	case oa != 0 && ob != 0 && oa != ob:
		return cmp.Compare(oa, ob)
	case oa != 0 && ob == 0:
		return -1
	case oa == 0 && ob != 0:
		return 1
	}
	return strings.Compare(a.TypeURL, b.TypeURL)
}

// watch is a connection's subscription to one type URL: what generators see of it, and the transport's own
// state.
type watch struct {
	model.WatchedResource

	// legacy is true while the wildcard comes from an empty first request rather than "*".
	legacy bool
	// sent is what the client has (delta only).
	sent sentSet
	// nacked is the nonce last NACKed, so a repeated NACK of the same response is logged and counted once.
	nacked string
	// gen and counters are the type's generator and counters, set by Connection.watch (a type is watched
	// only when a generator serves it): every snapshot asks every watch of every connection whether it
	// concerns it, and looking them up by type URL each time made distributing a snapshot 5.5 % of the
	// server's CPU under endpoint churn from a cluster, 3.6 % without (docs/benchmarks.md).
	gen      model.Generator
	counters *typeCounters
	// policy is the type's policy (the zero policy for a type without one), set by Connection.watch.
	policy *model.TypePolicy
}

// resourceVersion returns r's version, hashing the bytes when the generator left it empty.
func resourceVersion(r *model.Resource) string {
	if r.Version != "" {
		return r.Version
	}
	if r.Any == nil {
		return ""
	}
	sum := sha256.Sum256(r.Any.Value)
	return hex.EncodeToString(sum[:12])
}

// sentSet is what a delta client has, name → version, in one of three forms:
//   - after a full state sent whole and sorted by name, that list itself with the changes since on top. The
//     list is shared with the generators' caches and costs a pointer per resource where a map costs an
//     entry: with 300 sidecars the maps were 40% of the heap. Incremental changes (a pod to 200 ztunnels)
//     go on top rather than copying the list into a map; once they are many, it becomes a map;
//   - for a subscription to named resources (EDS), a version per position in the subscription's shared,
//     sorted names: a slice per client rather than a map, looked up through the shared set's index;
//   - otherwise a map.
type sentSet struct {
	m    map[string]string // when list and keys are nil
	list model.Resources   // sorted by name
	over map[string]string // changes on top of list: the version, "" for removed
	n    int               // the size, while list or keys is used
	keys *nameset.Set      // the names vers follows
	vers []string          // vers[i] is the version of keys.Sorted()[i], "" if the client does not have it
}

// byPosition starts an empty set that follows the names of a subscription.
func byPosition(keys *nameset.Set) sentSet {
	return sentSet{keys: keys, vers: make([]string, keys.Len())}
}

func (s *sentSet) get(name string) (string, bool) {
	switch {
	case s.keys != nil:
		if i, ok := s.keys.Position(name); ok && s.vers[i] != "" {
			return s.vers[i], true
		}
		return "", false
	case s.list == nil:
		v, ok := s.m[name]
		return v, ok
	}
	if v, ok := s.over[name]; ok {
		return v, v != ""
	}
	if i, ok := slices.BinarySearchFunc(s.list, name, compareName); ok {
		return resourceVersion(s.list[i]), true
	}
	return "", false
}

func (s *sentSet) inList(name string) bool {
	_, ok := slices.BinarySearchFunc(s.list, name, compareName)
	return ok
}

func compareName(r *model.Resource, name string) int { return strings.Compare(r.Name, name) }

func (s *sentSet) len() int {
	if s.list == nil && s.keys == nil {
		return len(s.m)
	}
	return s.n
}

// names calls yield for every name.
func (s *sentSet) names(yield func(string)) {
	switch {
	case s.keys != nil:
		for i, n := range s.keys.Sorted() {
			if s.vers[i] != "" {
				yield(n)
			}
		}
		return
	case s.list == nil:
		for n := range s.m {
			yield(n)
		}
		return
	}
	for _, r := range s.list {
		if v, ok := s.over[r.Name]; !ok || v != "" {
			yield(r.Name)
		}
	}
	for n, v := range s.over {
		if v != "" && !s.inList(n) {
			yield(n)
		}
	}
}

func (s *sentSet) set(name, version string) {
	if s.keys != nil {
		if i, ok := s.keys.Position(name); ok && version != "" {
			if s.vers[i] == "" {
				s.n++
			}
			s.vers[i] = version
			return
		}
		s.toMap() // a name outside the subscription (it became a wildcard)
	}
	if s.list == nil {
		if s.m == nil {
			s.m = map[string]string{}
		}
		s.m[name] = version
		return
	}
	if _, had := s.get(name); !had {
		s.n++
	}
	s.overlay(name, version)
}

func (s *sentSet) del(name string) {
	switch {
	case s.keys != nil:
		if i, ok := s.keys.Position(name); ok && s.vers[i] != "" {
			s.vers[i] = ""
			s.n--
		}
		return
	case s.list == nil:
		delete(s.m, name)
		return
	}
	if _, had := s.get(name); had {
		s.n--
		s.overlay(name, "")
	}
}

// follow moves a set kept by position to the subscription's new names. A name outside them (still sent
// while no longer subscribed) turns it into a map.
func (s *sentSet) follow(keys *nameset.Set) {
	if s.keys == nil || s.keys == keys {
		return
	}
	next := byPosition(keys)
	if remap := s.keys.RemapTo(keys); remap != nil && s.allKept(remap) {
		for i, v := range s.vers {
			if v != "" {
				next.vers[remap[i]] = v
			}
		}
		next.n = s.n
		*s = next
		return
	}
	s.names(func(n string) {
		v, _ := s.get(n)
		next.set(n, v)
	})
	*s = next
}

// allKept reports whether every name the client has is in the set remap leads to.
func (s *sentSet) allKept(remap []int32) bool {
	for i, v := range s.vers {
		if v != "" && remap[i] < 0 {
			return false
		}
	}
	return true
}

func (s *sentSet) toMap() {
	m := make(map[string]string, s.len())
	s.names(func(n string) { m[n], _ = s.get(n) })
	*s = sentSet{m: m}
}

func (s *sentSet) overlay(name, version string) {
	if s.over == nil {
		s.over = map[string]string{}
	}
	s.over[name] = version
	if len(s.over) > 16+len(s.list)/4 {
		s.toMap()
	}
}

// whole records that the client now has exactly res, which the caller found sorted by name, each name once.
func (s *sentSet) whole(res model.Resources) {
	if res == nil {
		res = model.Resources{}
	}
	*s = sentSet{list: res, n: len(res)}
}

// wholeList is the list the client has, each resource as is, when nothing changed on top of it; else nil.
func (s *sentSet) wholeList() model.Resources {
	if len(s.over) > 0 {
		return nil
	}
	return s.list
}
