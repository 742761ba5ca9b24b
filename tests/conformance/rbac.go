package conformance

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// rbacFields records one RBAC filter's rules (and its shadow rules) under prefix: per action, each policy
// as the set of its principals and the set of its permissions, each matcher normalised (nested and/or
// flattened, one-element and/or unwrapped, "any" absorbed, children sorted), names dropped. A field per
// policy (the policy's text in the field's name) makes a missing or extra policy one difference naming it.
// Rules without policies under ALLOW deny everything; a filter without rules allows everything and adds
// nothing. n counts the filters of each action already seen, so a second ALLOW filter (which must also
// allow) stays apart from the first.
func rbacFields(f Fields, prefix string, rules, shadow *rbacpb.RBAC, shadowPrefix string, n map[string]int) {
	add := func(kind string, r *rbacpb.RBAC) {
		if r == nil {
			return
		}
		name := kind + r.GetAction().String()
		if i := n[name]; i > 0 {
			name += "#" + strconv.Itoa(i)
		}
		n[kind+r.GetAction().String()]++
		p := prefix + name
		f[p] = strconv.Itoa(len(r.GetPolicies())) + " policies"
		for _, pol := range r.GetPolicies() {
			f[p+"{"+policyText(pol)+"}"] = "yes"
		}
	}
	add("rbac.", rules)
	add("rbac.shadow.", shadow)
	if shadow != nil && shadowPrefix != "" {
		f[prefix+"rbac.shadow.stat_prefix"] = shadowPrefix
	}
}

// policyText is a policy as "from PRINCIPALS to PERMISSIONS", each list read as Envoy does (any of them).
func policyText(p *rbacpb.Policy) string {
	var ids, perms []string
	for _, id := range p.GetPrincipals() {
		ids = append(ids, principalText(id))
	}
	for _, r := range p.GetPermissions() {
		perms = append(perms, permissionText(r))
	}
	s := "from " + combine("or", ids) + " to " + combine("or", perms)
	if p.GetCondition() != nil || p.GetCheckedCondition() != nil {
		s += " if condition"
	}
	return s
}

// combine writes an and/or of normalised terms: nested terms of the same operator are flattened, "any" is
// absorbed (and) or absorbing (or), duplicates and order vanish, and a single term stands for itself.
func combine(op string, terms []string) string {
	set := map[string]bool{}
	var add func(t string)
	add = func(t string) {
		if inner, ok := strings.CutPrefix(t, op+"("); ok && strings.HasSuffix(inner, ")") && balanced(inner[:len(inner)-1]) {
			for _, s := range splitTop(inner[:len(inner)-1]) {
				add(s)
			}
			return
		}
		set[t] = true
	}
	for _, t := range terms {
		add(t)
	}
	if op == "or" && set["any"] {
		return "any"
	}
	if op == "and" && len(set) > 1 {
		delete(set, "any")
	}
	out := make([]string, 0, len(set))
	for t := range set {
		out = append(out, t)
	}
	sort.Strings(out)
	switch len(out) {
	case 0:
		if op == "and" {
			return "any"
		}
		return "none"
	case 1:
		return out[0]
	}
	return op + "(" + strings.Join(out, ", ") + ")"
}

// balanced reports whether s's parentheses pair up, so "or(a), or(b)" is not read as one or(...).
func balanced(s string) bool {
	depth := 0
	for _, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
			if depth < 0 {
				return false
			}
		}
	}
	return depth == 0
}

// splitTop splits "a, f(b, c), d" at the commas outside parentheses.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 && i+1 < len(s) && s[i+1] == ' ' {
				out = append(out, s[start:i])
				start = i + 2
				i++
			}
		}
	}
	return append(out, s[start:])
}

func principalText(p *rbacpb.Principal) string {
	switch id := p.GetIdentifier().(type) {
	case *rbacpb.Principal_Any:
		return "any"
	case *rbacpb.Principal_AndIds:
		return combine("and", principalTexts(id.AndIds.GetIds()))
	case *rbacpb.Principal_OrIds:
		return combine("or", principalTexts(id.OrIds.GetIds()))
	case *rbacpb.Principal_NotId:
		return "not(" + principalText(id.NotId) + ")"
	case *rbacpb.Principal_Authenticated_:
		if m := id.Authenticated.GetPrincipalName(); m != nil {
			return "principal " + stringMatcher(m)
		}
		return "authenticated"
	case *rbacpb.Principal_SourceIp: //nolint:staticcheck // still honoured by Envoy, as direct_remote_ip
		return "direct_remote_ip " + cidrText(id.SourceIp)
	case *rbacpb.Principal_DirectRemoteIp:
		return "direct_remote_ip " + cidrText(id.DirectRemoteIp)
	case *rbacpb.Principal_RemoteIp:
		return "remote_ip " + cidrText(id.RemoteIp)
	case *rbacpb.Principal_Header:
		return "header " + headerMatch(id.Header)
	case *rbacpb.Principal_UrlPath:
		return "path " + pathMatcher(id.UrlPath)
	case *rbacpb.Principal_Metadata:
		return "metadata " + metadataMatcher(id.Metadata)
	case *rbacpb.Principal_FilterState:
		return "filter_state " + id.FilterState.GetKey() + "=" + stringMatcher(id.FilterState.GetStringMatch())
	case nil:
		return "none"
	}
	return fmt.Sprintf("%T", p.GetIdentifier())
}

func principalTexts(ids []*rbacpb.Principal) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		out = append(out, principalText(id))
	}
	return out
}

func permissionText(p *rbacpb.Permission) string {
	switch r := p.GetRule().(type) {
	case *rbacpb.Permission_Any:
		return "any"
	case *rbacpb.Permission_AndRules:
		return combine("and", permissionTexts(r.AndRules.GetRules()))
	case *rbacpb.Permission_OrRules:
		return combine("or", permissionTexts(r.OrRules.GetRules()))
	case *rbacpb.Permission_NotRule:
		return "not(" + permissionText(r.NotRule) + ")"
	case *rbacpb.Permission_Header:
		return "header " + headerMatch(r.Header)
	case *rbacpb.Permission_UrlPath:
		return "path " + pathMatcher(r.UrlPath)
	case *rbacpb.Permission_DestinationIp:
		return "destination_ip " + cidrText(r.DestinationIp)
	case *rbacpb.Permission_DestinationPort:
		return "destination_port " + strconv.FormatUint(uint64(r.DestinationPort), 10)
	case *rbacpb.Permission_DestinationPortRange:
		return fmt.Sprintf("destination_ports %d-%d", r.DestinationPortRange.GetStart(), r.DestinationPortRange.GetEnd())
	case *rbacpb.Permission_Metadata:
		return "metadata " + metadataMatcher(r.Metadata)
	case *rbacpb.Permission_RequestedServerName:
		return "sni " + stringMatcher(r.RequestedServerName)
	case *rbacpb.Permission_Matcher:
		return "matcher " + r.Matcher.GetName()
	case *rbacpb.Permission_UriTemplate:
		return "uri_template " + r.UriTemplate.GetName()
	case nil:
		return "none"
	}
	return fmt.Sprintf("%T", p.GetRule())
}

func permissionTexts(rules []*rbacpb.Permission) []string {
	out := make([]string, 0, len(rules))
	for _, r := range rules {
		out = append(out, permissionText(r))
	}
	return out
}

func cidrText(c *core.CidrRange) string {
	return c.GetAddressPrefix() + "/" + strconv.FormatUint(uint64(c.GetPrefixLen().GetValue()), 10)
}

func pathMatcher(m *matcher.PathMatcher) string {
	return stringMatcher(m.GetPath())
}

func metadataMatcher(m *matcher.MetadataMatcher) string {
	keys := []string{m.GetFilter()}
	for _, p := range m.GetPath() {
		keys = append(keys, p.GetKey())
	}
	s := strings.Join(keys, ".") + "=" + valueMatcher(m.GetValue())
	if m.GetInvert() {
		s = "!" + s
	}
	return s
}

func valueMatcher(v *matcher.ValueMatcher) string {
	switch m := v.GetMatchPattern().(type) {
	case *matcher.ValueMatcher_StringMatch:
		return stringMatcher(m.StringMatch)
	case *matcher.ValueMatcher_PresentMatch:
		return "present:" + strconv.FormatBool(m.PresentMatch)
	case *matcher.ValueMatcher_BoolMatch:
		return "bool:" + strconv.FormatBool(m.BoolMatch)
	case *matcher.ValueMatcher_ListMatch:
		return "list[" + valueMatcher(m.ListMatch.GetOneOf()) + "]"
	case *matcher.ValueMatcher_NullMatch_:
		return "null"
	case *matcher.ValueMatcher_DoubleMatch:
		return "double"
	case *matcher.ValueMatcher_OrMatch:
		var parts []string
		for _, x := range m.OrMatch.GetValueMatchers() {
			parts = append(parts, valueMatcher(x))
		}
		return combine("or", parts)
	}
	return "none"
}
