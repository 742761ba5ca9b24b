package envoymodel

import (
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// headerMap holds request headers by lower-case name, values in arrival order.
type headerMap struct {
	names  []string
	values map[string][]string
}

func newHeaderMap() *headerMap { return &headerMap{values: map[string][]string{}} }

func (h *headerMap) add(name, value string) {
	name = strings.ToLower(name)
	if _, ok := h.values[name]; !ok {
		h.names = append(h.names, name)
	}
	h.values[name] = append(h.values[name], value)
}

func (h *headerMap) set(name, value string) {
	name = strings.ToLower(name)
	if _, ok := h.values[name]; !ok {
		h.names = append(h.names, name)
	}
	h.values[name] = []string{value}
}

func (h *headerMap) del(name string) {
	name = strings.ToLower(name)
	delete(h.values, name)
	for i, n := range h.names {
		if n == name {
			h.names = append(h.names[:i], h.names[i+1:]...)
			break
		}
	}
}

// get is getAllOfHeaderAsString: the values joined with ","; false when the header is absent.
func (h *headerMap) get(name string) (string, bool) {
	v, ok := h.values[strings.ToLower(name)]
	if !ok || len(v) == 0 {
		return "", false
	}
	return strings.Join(v, ","), true
}

func (h *headerMap) first(name string) string {
	v := h.values[strings.ToLower(name)]
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// compileRegex compiles an RE2 pattern for full-string matching, as Envoy's safe_regex does.
func compileRegex(m *matcher.RegexMatcher) (*regexp.Regexp, error) {
	if m.GetGoogleRe2() != nil && m.GetGoogleRe2().GetMaxProgramSize() != nil {
		return nil, notModelled("regex max_program_size")
	}
	re, err := regexp.Compile("^(?:" + m.GetRegex() + ")$")
	if err != nil {
		return nil, err
	}
	return re, nil
}

// matchString is StringMatcherImpl::match.
func matchString(m *matcher.StringMatcher, v string) (bool, error) {
	ic := m.GetIgnoreCase()
	switch p := m.GetMatchPattern().(type) {
	case *matcher.StringMatcher_Exact:
		if ic {
			return strings.EqualFold(v, p.Exact), nil
		}
		return v == p.Exact, nil
	case *matcher.StringMatcher_Prefix:
		if ic {
			return strings.HasPrefix(strings.ToLower(v), strings.ToLower(p.Prefix)), nil
		}
		return strings.HasPrefix(v, p.Prefix), nil
	case *matcher.StringMatcher_Suffix:
		if ic {
			return strings.HasSuffix(strings.ToLower(v), strings.ToLower(p.Suffix)), nil
		}
		return strings.HasSuffix(v, p.Suffix), nil
	case *matcher.StringMatcher_Contains:
		if ic {
			return strings.Contains(strings.ToLower(v), strings.ToLower(p.Contains)), nil
		}
		return strings.Contains(v, p.Contains), nil
	case *matcher.StringMatcher_SafeRegex:
		if ic {
			return false, notModelled("ignore_case with safe_regex (Envoy rejects it)")
		}
		re, err := compileRegex(p.SafeRegex)
		if err != nil {
			return false, err
		}
		return re.MatchString(v), nil
	}
	return false, notModelled("string matcher %T", m.GetMatchPattern())
}

// matchHeader is HeaderUtility::matchHeaders for one route.HeaderMatcher.
func matchHeader(m *route.HeaderMatcher, h *headerMap) (bool, error) {
	value, present := h.get(m.GetName())
	if pm, ok := m.GetHeaderMatchSpecifier().(*route.HeaderMatcher_PresentMatch); ok {
		return (present == pm.PresentMatch) != m.GetInvertMatch(), nil
	}
	if m.GetHeaderMatchSpecifier() == nil {
		// No specifier: a presence match.
		return present != m.GetInvertMatch(), nil
	}
	if !present {
		if !m.GetTreatMissingHeaderAsEmpty() {
			return false, nil
		}
		value = ""
	}
	var match bool
	switch s := m.GetHeaderMatchSpecifier().(type) {
	case *route.HeaderMatcher_ExactMatch:
		match = s.ExactMatch == "" || value == s.ExactMatch
	case *route.HeaderMatcher_PrefixMatch:
		match = strings.HasPrefix(value, s.PrefixMatch)
	case *route.HeaderMatcher_SuffixMatch:
		match = strings.HasSuffix(value, s.SuffixMatch)
	case *route.HeaderMatcher_ContainsMatch:
		match = strings.Contains(value, s.ContainsMatch)
	case *route.HeaderMatcher_SafeRegexMatch:
		re, err := compileRegex(s.SafeRegexMatch)
		if err != nil {
			return false, err
		}
		match = re.MatchString(value)
	case *route.HeaderMatcher_RangeMatch:
		n, err := strconv.ParseInt(value, 10, 64)
		match = err == nil && n >= s.RangeMatch.GetStart() && n < s.RangeMatch.GetEnd()
	case *route.HeaderMatcher_StringMatch:
		var err error
		if match, err = matchString(s.StringMatch, value); err != nil {
			return false, err
		}
	default:
		return false, notModelled("header matcher %T", s)
	}
	return match != m.GetInvertMatch(), nil
}

// metadataValue follows the path into a namespace's struct; nil when any step is missing.
func metadataValue(md map[string]*structpb.Struct, filter string, path []*matcher.MetadataMatcher_PathSegment) (*structpb.Value, error) {
	st := md[filter]
	if st == nil {
		return nil, nil
	}
	var v *structpb.Value
	for i, seg := range path {
		key := seg.GetKey()
		if i == 0 {
			v = st.GetFields()[key]
		} else {
			if v.GetStructValue() == nil {
				return nil, nil
			}
			v = v.GetStructValue().GetFields()[key]
		}
		if v == nil {
			return nil, nil
		}
	}
	return v, nil
}

// matchMetadata is Matchers::MetadataMatcher::match over the dynamic metadata.
func matchMetadata(m *matcher.MetadataMatcher, md map[string]*structpb.Struct) (bool, error) {
	if len(m.GetPath()) == 0 {
		return false, notModelled("metadata matcher without a path")
	}
	v, err := metadataValue(md, m.GetFilter(), m.GetPath())
	if err != nil {
		return false, err
	}
	ok, err := matchValue(m.GetValue(), v)
	if err != nil {
		return false, err
	}
	return ok != m.GetInvert(), nil
}

// matchValue is ValueMatcher: each kind matches only a value of its type; a missing value (nil) matches
// nothing but a present_match false... which Envoy's PresentMatcher also answers false for.
func matchValue(m *matcher.ValueMatcher, v *structpb.Value) (bool, error) {
	switch p := m.GetMatchPattern().(type) {
	case *matcher.ValueMatcher_NullMatch_:
		_, ok := v.GetKind().(*structpb.Value_NullValue)
		return ok, nil
	case *matcher.ValueMatcher_DoubleMatch:
		n, ok := v.GetKind().(*structpb.Value_NumberValue)
		if !ok {
			return false, nil
		}
		switch d := p.DoubleMatch.GetMatchPattern().(type) {
		case *matcher.DoubleMatcher_Exact:
			return n.NumberValue == d.Exact, nil
		case *matcher.DoubleMatcher_Range:
			return d.Range.GetStart() <= n.NumberValue && n.NumberValue < d.Range.GetEnd(), nil
		}
		return false, notModelled("double matcher %T", p.DoubleMatch.GetMatchPattern())
	case *matcher.ValueMatcher_StringMatch:
		s, ok := v.GetKind().(*structpb.Value_StringValue)
		if !ok {
			return false, nil
		}
		return matchString(p.StringMatch, s.StringValue)
	case *matcher.ValueMatcher_BoolMatch:
		b, ok := v.GetKind().(*structpb.Value_BoolValue)
		return ok && b.BoolValue == p.BoolMatch, nil
	case *matcher.ValueMatcher_PresentMatch:
		return p.PresentMatch && v != nil && v.GetKind() != nil, nil
	case *matcher.ValueMatcher_ListMatch:
		l, ok := v.GetKind().(*structpb.Value_ListValue)
		if !ok {
			return false, nil
		}
		one := p.ListMatch.GetOneOf()
		if one == nil {
			return false, notModelled("list matcher without one_of")
		}
		for _, e := range l.ListValue.GetValues() {
			if ok, err := matchValue(one, e); err != nil || ok {
				return ok, err
			}
		}
		return false, nil
	case *matcher.ValueMatcher_OrMatch:
		for _, o := range p.OrMatch.GetValueMatchers() {
			if ok, err := matchValue(o, v); err != nil || ok {
				return ok, err
			}
		}
		return false, nil
	}
	return false, notModelled("value matcher %T", m.GetMatchPattern())
}

// matchPath is PathMatcher: the :path without its query and fragment.
func matchPath(m *matcher.PathMatcher, h *headerMap) (bool, error) {
	p, ok := h.get(":path")
	if !ok {
		return false, nil
	}
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	if m.GetPath() == nil {
		return false, notModelled("path matcher %T", m.GetRule())
	}
	return matchString(m.GetPath(), p)
}

// inRange checks a CIDR range; false when the family differs or the range is malformed.
func inRange(r *core.CidrRange, ip netip.Addr) bool {
	_, ok := cidrContains(r, ip)
	return ok
}
