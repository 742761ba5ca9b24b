package authpolicy

import (
	"slices"
	"strings"
)

// trustBundle is the mesh's trust domain followed by its aliases (MeshConfig.trustDomainAliases): an
// identity in any of them is the same workload, as istiod's trust domain bundle has it during a migration.
type trustBundle []string

// principals rewrites source principals ("TD/ns/NS/sa/SA") as istiod does: one whose trust domain is the
// mesh's, an alias, or "cluster.local" (which stands for the mesh's) is spelled once per trust domain of the
// bundle; "*" as trust domain, a principal of another trust domain, or one not in that form stays as it is.
func (t trustBundle) principals(in []string) []string {
	if len(t) == 0 {
		return in
	}
	var out []string
	for _, p := range in {
		parts := strings.Split(p, "/")
		if len(parts) != 5 || parts[0] == "*" {
			out = append(out, p)
			continue
		}
		td := parts[0]
		if !t.matches(td) && td != rbacDefaultTrustDomain {
			out = append(out, p)
			continue
		}
		for _, each := range t {
			spelled := p
			if !suffixMatch(each, td) {
				spelled = each + "/" + strings.Join(parts[1:], "/")
			}
			if !slices.Contains(out, spelled) {
				out = append(out, spelled)
			}
		}
	}
	return out
}

// trustDomains expands a trust domain of the bundle into all of them, first seen first.
func (t trustBundle) trustDomains(in []string) []string {
	var out []string
	add := func(v string) {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	for _, v := range in {
		if slices.Contains(t, v) {
			for _, td := range t {
				add(td)
			}
		} else {
			add(v)
		}
	}
	return out
}

// matches reports whether td names a trust domain of the bundle, either side possibly a "*" pattern
// (istiod's stringMatch).
func (t trustBundle) matches(td string) bool {
	for _, s := range t {
		if td == s || s == "*" || prefixMatch(td, s) || prefixMatch(s, td) || suffixMatch(td, s) || suffixMatch(s, td) {
			return true
		}
	}
	return false
}

// prefixMatch reports whether pattern ends in "*" and a starts with the rest of it.
func prefixMatch(a, pattern string) bool {
	rest, ok := strings.CutSuffix(pattern, "*")
	return ok && strings.HasPrefix(a, rest)
}

// suffixMatch reports whether pattern starts with "*" and a ends with the rest of it.
func suffixMatch(a, pattern string) bool {
	rest, ok := strings.CutPrefix(pattern, "*")
	return ok && strings.HasSuffix(a, rest)
}
