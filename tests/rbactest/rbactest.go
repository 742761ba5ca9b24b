// Package rbactest evaluates Envoy RBAC rules against one request or connection, for the tests of the
// filters Sextant's generators build: the matchers those filters use, each as Envoy reads it.
package rbactest

import (
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"

	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// Where the jwt_authn filter leaves a verified token's payload: its filter's dynamic metadata, under the
// key Sextant configures as payload_in_metadata.
const (
	jwtAuthnFilter = "envoy.filters.http.jwt_authn"
	jwtPayloadKey  = "payload"
)

// Request is a connection or request as the RBAC filters see it.
type Request struct {
	Principal string // peer URI SAN; empty for plaintext
	IP        string
	Port      uint32
	Method    string
	Path      string
	Host      string
	Headers   map[string]string
	// JWT is the payload of the token the jwt_authn filter verified, as it leaves it in its dynamic
	// metadata (nil: no valid token, no metadata).
	JWT map[string]any
}

// Allowed evaluates the filters in order as Envoy does: a DENY filter denies what matches one of its
// policies, an ALLOW filter denies what matches none, a LOG filter denies nothing.
func Allowed(t testing.TB, filters []*rbacpb.RBAC, r Request) bool {
	t.Helper()
	for _, f := range filters {
		if f.Action == rbacpb.RBAC_LOG {
			continue
		}
		matched := false
		for _, p := range f.Policies {
			if slices.ContainsFunc(p.Permissions, func(x *rbacpb.Permission) bool { return Permits(t, x, r) }) &&
				slices.ContainsFunc(p.Principals, func(x *rbacpb.Principal) bool { return identifies(t, x, r) }) {
				matched = true
			}
		}
		if matched == (f.Action == rbacpb.RBAC_DENY) {
			return false
		}
	}
	return true
}

// Permits reports whether the permission matches the request.
func Permits(t testing.TB, p *rbacpb.Permission, r Request) bool {
	switch x := p.Rule.(type) {
	case *rbacpb.Permission_Any:
		return true
	case *rbacpb.Permission_AndRules:
		for _, s := range x.AndRules.Rules {
			if !Permits(t, s, r) {
				return false
			}
		}
		return true
	case *rbacpb.Permission_OrRules:
		return slices.ContainsFunc(x.OrRules.Rules, func(s *rbacpb.Permission) bool { return Permits(t, s, r) })
	case *rbacpb.Permission_NotRule:
		return !Permits(t, x.NotRule, r)
	case *rbacpb.Permission_Header:
		return headerMatches(t, x.Header, r)
	case *rbacpb.Permission_UrlPath:
		return r.Path != "" && stringMatches(t, x.UrlPath.GetPath(), r.Path)
	case *rbacpb.Permission_DestinationPort:
		return x.DestinationPort == r.Port
	}
	t.Fatalf("evaluator: unsupported permission %v", p)
	return false
}

func identifies(t testing.TB, p *rbacpb.Principal, r Request) bool {
	switch x := p.Identifier.(type) {
	case *rbacpb.Principal_Any:
		return true
	case *rbacpb.Principal_AndIds:
		for _, s := range x.AndIds.Ids {
			if !identifies(t, s, r) {
				return false
			}
		}
		return true
	case *rbacpb.Principal_OrIds:
		return slices.ContainsFunc(x.OrIds.Ids, func(s *rbacpb.Principal) bool { return identifies(t, s, r) })
	case *rbacpb.Principal_NotId:
		return !identifies(t, x.NotId, r)
	case *rbacpb.Principal_Authenticated_:
		return r.Principal != "" && stringMatches(t, x.Authenticated.PrincipalName, r.Principal)
	case *rbacpb.Principal_DirectRemoteIp:
		return cidrContains(t, x.DirectRemoteIp.AddressPrefix, x.DirectRemoteIp.PrefixLen.GetValue(), r.IP)
	case *rbacpb.Principal_RemoteIp:
		return cidrContains(t, x.RemoteIp.AddressPrefix, x.RemoteIp.PrefixLen.GetValue(), r.IP)
	case *rbacpb.Principal_Header:
		return headerMatches(t, x.Header, r)
	case *rbacpb.Principal_Metadata:
		return jwtMetadataMatches(t, x.Metadata, r.JWT)
	}
	t.Fatalf("evaluator: unsupported principal %v", p)
	return false
}

func cidrContains(t testing.TB, addr string, bits uint32, ip string) bool {
	p, err := netip.ParseAddr(addr)
	if err != nil {
		t.Fatal(err)
	}
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return false
	}
	return netip.PrefixFrom(p, int(bits)).Masked().Contains(a)
}

func headerMatches(t testing.TB, h *route.HeaderMatcher, r Request) bool {
	var v string
	var ok bool
	switch h.Name {
	case ":method":
		v, ok = r.Method, r.Method != ""
	case ":authority":
		v, ok = r.Host, r.Host != ""
	default:
		v, ok = r.Headers[h.Name]
	}
	if !ok {
		return false
	}
	switch m := h.HeaderMatchSpecifier.(type) {
	case *route.HeaderMatcher_PresentMatch:
		return m.PresentMatch
	case *route.HeaderMatcher_StringMatch:
		return stringMatches(t, m.StringMatch, v)
	}
	t.Fatalf("evaluator: unsupported header matcher %v", h)
	return false
}

// stringMatches reports whether the string matcher matches v; a regex must match the whole of v, as in Envoy.
func stringMatches(t testing.TB, m *matcher.StringMatcher, v string) bool {
	if m.IgnoreCase {
		v = strings.ToLower(v)
	}
	lower := func(s string) string {
		if m.IgnoreCase {
			return strings.ToLower(s)
		}
		return s
	}
	switch x := m.MatchPattern.(type) {
	case *matcher.StringMatcher_Exact:
		return v == lower(x.Exact)
	case *matcher.StringMatcher_Prefix:
		return strings.HasPrefix(v, lower(x.Prefix))
	case *matcher.StringMatcher_Suffix:
		return strings.HasSuffix(v, lower(x.Suffix))
	case *matcher.StringMatcher_SafeRegex:
		return regexp.MustCompile("^(?:" + x.SafeRegex.Regex + ")$").MatchString(v) // Envoy: full match
	}
	t.Fatalf("evaluator: unsupported string matcher %v", m)
	return false
}

// jwtMetadataMatches evaluates a metadata matcher against the jwt_authn filter's metadata as Envoy does:
// the path walks the payload's objects, a string matcher matches a string value only, a list matcher a
// list with one matching element.
func jwtMetadataMatches(t testing.TB, m *matcher.MetadataMatcher, payload map[string]any) bool {
	t.Helper()
	if m.Filter != jwtAuthnFilter {
		t.Fatalf("evaluator: metadata of filter %q, which nothing sets", m.Filter)
	}
	if payload == nil {
		return false
	}
	var v any = map[string]any{jwtPayloadKey: payload}
	for _, seg := range m.Path {
		obj, ok := v.(map[string]any)
		if !ok {
			return false
		}
		if v, ok = obj[seg.GetKey()]; !ok {
			return false
		}
	}
	return jwtValueMatches(t, m.Value, v)
}

func jwtValueMatches(t testing.TB, m *matcher.ValueMatcher, v any) bool {
	t.Helper()
	switch x := m.MatchPattern.(type) {
	case *matcher.ValueMatcher_StringMatch:
		s, ok := v.(string)
		return ok && stringMatches(t, x.StringMatch, s)
	case *matcher.ValueMatcher_ListMatch:
		list, ok := v.([]any)
		return ok && slices.ContainsFunc(list, func(e any) bool { return jwtValueMatches(t, x.ListMatch.GetOneOf(), e) })
	case *matcher.ValueMatcher_OrMatch:
		return slices.ContainsFunc(x.OrMatch.ValueMatchers, func(vm *matcher.ValueMatcher) bool { return jwtValueMatches(t, vm, v) })
	}
	t.Fatalf("evaluator: unsupported value matcher %v", m)
	return false
}
