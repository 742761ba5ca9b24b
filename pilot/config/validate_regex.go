package config

import (
	"fmt"
	"maps"
	"regexp/syntax"
	"slices"

	networking "istio.io/api/networking/v1alpha3"
)

// maxRegexLen is istiod's bound on a regex: Envoy refuses RE2 programs over its max_program_size, which Go
// cannot measure, and a program is always larger than its source.
const maxRegexLen = 1024

// validateRegex checks re (field f) as Envoy's RE2 compiles it, with istiod's rule: Go's regexp/syntax
// parses RE2 syntax and refuses what RE2 refuses (lookarounds, backreferences, repeat counts over 1000). A
// regex Envoy cannot compile would get the whole route configuration refused, or its route left out.
func validateRegex(f, re string) error {
	if re == "" {
		return fieldErr(f, "empty: a regex must not be empty")
	}
	if len(re) > maxRegexLen {
		return fieldErr(f, "%d characters: a regex may have at most %d", len(re), maxRegexLen)
	}
	if _, err := syntax.Parse(re, syntax.Perl); err != nil {
		return fieldErr(f, "%q is not an RE2 regex: %v", re, err)
	}
	return nil
}

// validateStringMatchRegex checks the regex of a StringMatch (field f), if it holds one.
func validateStringMatchRegex(f string, m *networking.StringMatch) error {
	if re, ok := m.GetMatchType().(*networking.StringMatch_Regex); ok {
		return validateRegex(f+".regex", re.Regex)
	}
	return nil
}

// validateHTTPMatch checks the string matches of an HTTP route's match (field f) as istiod does: uri as
// before, and every regex of scheme, method, authority, headers, queryParams and withoutHeaders.
func validateHTTPMatch(f string, m *networking.HTTPMatchRequest) error {
	if m.Uri != nil && m.Uri.MatchType == nil {
		return fieldErr(f+".uri", "one of exact, prefix or regex is required")
	}
	for _, sm := range []struct {
		field string
		match *networking.StringMatch
	}{{"uri", m.Uri}, {"scheme", m.Scheme}, {"method", m.Method}, {"authority", m.Authority}} {
		if err := validateStringMatchRegex(f+"."+sm.field, sm.match); err != nil {
			return err
		}
	}
	for _, byName := range []struct {
		field   string
		matches map[string]*networking.StringMatch
	}{{"headers", m.Headers}, {"queryParams", m.QueryParams}, {"withoutHeaders", m.WithoutHeaders}} {
		for _, name := range slices.Sorted(maps.Keys(byName.matches)) {
			sm := byName.matches[name]
			// As istiod: a withoutHeaders regex "*" is no regex, it asks that the header be absent.
			if byName.field == "withoutHeaders" && sm.GetRegex() == "*" {
				continue
			}
			if err := validateStringMatchRegex(fmt.Sprintf("%s.%s[%s]", f, byName.field, name), sm); err != nil {
				return err
			}
		}
	}
	return nil
}

// validateHTTPRewrite applies istiod's rules to an HTTP route's rewrite (field f): uri or uriRegexRewrite,
// not both, or an authority; a uriRegexRewrite needs a match that compiles and a rewrite.
func validateHTTPRewrite(f string, rw *networking.HTTPRewrite) error {
	if rw == nil {
		return nil
	}
	if rw.Uri != "" && rw.UriRegexRewrite != nil {
		return fieldErr(f+".uriRegexRewrite", "cannot be combined with uri")
	}
	if rw.Uri == "" && rw.UriRegexRewrite == nil && rw.Authority == "" {
		return fieldErr(f, "one of uri, uriRegexRewrite or authority is required")
	}
	rr := rw.UriRegexRewrite
	if rr == nil {
		return nil
	}
	if rr.Rewrite == "" {
		return fieldErr(f+".uriRegexRewrite.rewrite", "required")
	}
	return validateRegex(f+".uriRegexRewrite.match", rr.Match)
}
