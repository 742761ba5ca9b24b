package conformance

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// AllowEntry is one accepted difference: "case / proxy / key / field: reason". A part may hold globs ("*" any
// text, "?" one character), so one line can cover a default shared by every cluster; "field == ISTIOD ->
// SEXTANT" also pins both values, globs allowed (or "field == ISTIOD" istiod's alone), so such a line covers
// that one default and not another difference of the same field.
type AllowEntry struct {
	Line                    int
	Case, Proxy, Key, Field string
	// Istiod and Sextant, when pinned, are the values the two sides must have for the entry to match.
	Istiod, Sextant             string
	PinnedIstiod, PinnedSextant bool
	Reason                      string
	// Used is set once the entry has matched a difference.
	Used bool
}

// Allowlist holds the accepted differences, in file order.
type Allowlist struct {
	Entries []*AllowEntry
}

// LoadAllowlist reads the file; blank lines and lines starting with # are skipped. Every entry needs a reason.
func LoadAllowlist(file string) (*Allowlist, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	a := &Allowlist{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		e, err := parseAllowEntry(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", file, n, err)
		}
		e.Line = n
		a.Entries = append(a.Entries, e)
	}
	return a, sc.Err()
}

func parseAllowEntry(line string) (*AllowEntry, error) {
	id, reason, ok := strings.Cut(line, ": ")
	if !ok || strings.TrimSpace(reason) == "" {
		return nil, fmt.Errorf("want 'case / proxy / key / field: reason', got %q", line)
	}
	parts := strings.Split(id, " / ")
	if len(parts) != 4 {
		return nil, fmt.Errorf("want four parts 'case / proxy / key / field' before the reason, got %q", id)
	}
	e := &AllowEntry{Case: parts[0], Proxy: parts[1], Key: parts[2], Field: parts[3], Reason: strings.TrimSpace(reason)}
	if field, values, ok := strings.Cut(e.Field, " == "); ok {
		e.Field, e.Istiod, e.PinnedIstiod = field, values, true
		if ist, sx, ok := strings.Cut(values, " -> "); ok {
			e.Istiod, e.Sextant, e.PinnedSextant = ist, sx, true
		}
	}
	return e, nil
}

// Allows reports whether an entry covers d, and marks every entry that does as used.
func (a *Allowlist) Allows(d Difference) bool {
	allowed := false
	for _, e := range a.Entries {
		if e.matches(d) {
			e.Used = true
			allowed = true
		}
	}
	return allowed
}

func (e *AllowEntry) matches(d Difference) bool {
	return glob(e.Case, d.Case) && glob(e.Proxy, d.Proxy) && glob(e.Key, d.Key.String()) && glob(e.Field, d.Field) &&
		(!e.PinnedIstiod || glob(e.Istiod, d.Istiod)) && (!e.PinnedSextant || glob(e.Sextant, d.Sextant))
}

// glob matches s against pattern, where "*" is any text (slashes too: values hold URIs) and "?" one
// character; everything else, brackets included, is literal.
func glob(pattern, s string) bool {
	re := "^" + strings.ReplaceAll(strings.ReplaceAll(regexp.QuoteMeta(pattern), `\*`, ".*"), `\?`, ".") + "$"
	return regexp.MustCompile(re).MatchString(s)
}

// Stale lists the entries that matched no difference: a fixed difference must leave the list. ran reports
// whether a case ran; an entry whose case is a pattern is judged only when allRan (every case ran).
func (a *Allowlist) Stale(ran func(caseName string) bool, allRan bool) []*AllowEntry {
	var out []*AllowEntry
	for _, e := range a.Entries {
		if e.Used {
			continue
		}
		if strings.ContainsAny(e.Case, "*?[") {
			if !allRan {
				continue
			}
		} else if !ran(e.Case) {
			continue
		}
		out = append(out, e)
	}
	return out
}
