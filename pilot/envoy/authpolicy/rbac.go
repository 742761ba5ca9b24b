package authpolicy

// AuthorizationPolicy → Envoy RBAC, as istiod translates it (pilot/pkg/security/authz):
//
//   - Each rule of a policy is one RBAC policy named "ns[NS]-policy[NAME]-rule[INDEX]". Its principals are
//     one per `from` (all of a from's fields ANDed, the values of one field ORed, not-values negated), its
//     permissions one per `to`; `when` conditions are ANDed into every principal (source keys, headers,
//     request.auth.*) or every permission (destination keys, SNI). No from (or no to) matches anything.
//   - AUDIT policies make a LOG filter (Envoy marks what matches for the access log, denies nothing), DENY
//     policies a DENY filter, ALLOW policies an ALLOW filter, in that order (istiod's). An ALLOW filter is
//     emitted whenever an ALLOW policy applies, even one without rules: such a policy allows nothing.
//     AUDIT rules are translated as DENY rules are: what cannot be expressed is dropped, so they log more.
//   - CUSTOM policies become ext_authz filters ahead of these (extauthz.go).
//   - TCP filters keep only what L4 can check. A value that cannot be expressed (an HTTP-only field such as
//     methods, paths, hosts, requestPrincipals, request.headers, or an invalid value) makes an ALLOW rule
//     drop out entirely (it allows nothing), and is dropped alone from a DENY rule (which then denies more).
//     Unknown `when` keys are treated the same way on HTTP too.
//   - principals match the peer certificate's URI SAN: "spiffe://" + value, "*" as ".+", a leading "*" as
//     a regex suffix, a trailing "*" as a prefix; a principal in trust domain "cluster.local" means the mesh
//     trust domain. namespaces match the SAN regex "spiffe://.*/ns/NS/.*" ("*" in NS matches anything);
//     serviceAccounts "NS/SA" the SAN suffix "/ns/NS/sa/SA"; trustDomains the SAN prefix "spiffe://TD/".
//   - requestPrincipals and request.auth.* conditions match the payload the jwt_authn filter (jwt.go) puts
//     in its dynamic metadata, "envoy.filters.http.jwt_authn" → "payload" → claim, as istiod's do:
//     requestPrincipals and request.auth.principal "ISS/SUB" (split at the last "/") match the claims iss
//     and sub, "*" any, "*x" and "x*" on the issuer or subject side as istiod reads them;
//     request.auth.audiences the claim aud, request.auth.presenter azp, request.auth.claims[a][b] the
//     nested claim a.b; each of these matches a string claim or any element of a list claim. A request
//     without a valid token has no such metadata: they never match it.

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extauthzhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	rbachttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	extauthznet "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/ext_authz/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rbacnet "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	security "istio.io/api/security/v1beta1"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/model"
)

const (
	httpRBACFilter = "envoy.filters.http.rbac"
	tcpRBACFilter  = "envoy.filters.network.rbac"
	// rbacDefaultTrustDomain in a principal stands for the mesh's trust domain (istiod's rule).
	rbacDefaultTrustDomain = "cluster.local"
)

var (
	errHTTPOnly    = errors.New("HTTP-only, not checkable on a TCP connection")
	errUnsupported = errors.New("not supported")
)

// HTTPFilters returns the authorization HTTP filters for the policies, in istiod's order: CUSTOM (RBAC
// shadow rules and ext_authz per provider, or a DENY RBAC filter when the provider cannot be used), the
// JWT filter of the RequestAuthentications (env.JWT), then RBAC for AUDIT, DENY, ALLOW; none when no
// policy applies. The notes say what could not be translated.
func HTTPFilters(policies model.AuthorizationPolicies, env Env) ([]*hcm.HttpFilter, []string) {
	b := newRBACBuilder(env, false)
	var out []*hcm.HttpFilter
	for _, g := range b.custom(policies.Custom, env) {
		if g.failure != "" {
			out = append(out, httpFilter(httpRBACFilter, &rbachttp.RBAC{Rules: g.denyRules()}))
			continue
		}
		ext := proto.Clone(g.ext.http).(*extauthzhttp.ExtAuthz)
		ext.FilterEnabledMetadata = extAuthzEnabled(httpRBACFilter, g.provider)
		out = append(out,
			httpFilter(httpRBACFilter, &rbachttp.RBAC{ShadowRules: g.shadowRules(), ShadowRulesStatPrefix: extAuthzShadowPrefix}),
			httpFilter(httpExtAuthzFilter, ext))
	}
	if env.JWT != nil {
		jwt, notes := env.JWT.filter()
		out = append(out, jwt)
		b.notes = append(b.notes, notes...)
	}
	for _, r := range b.local(policies) {
		out = append(out, httpFilter(httpRBACFilter, &rbachttp.RBAC{Rules: r}))
	}
	return out, b.notes
}

// TCPFilters returns the authorization network filters for the policies, with only what L4 can check.
func TCPFilters(policies model.AuthorizationPolicies, env Env) ([]*listener.Filter, []string) {
	b := newRBACBuilder(env, true)
	var out []*listener.Filter
	for _, g := range b.custom(policies.Custom, env) {
		if g.failure != "" {
			out = append(out, networkFilter(tcpRBACFilter, &rbacnet.RBAC{Rules: g.denyRules(), StatPrefix: "tcp."}))
			continue
		}
		ext := proto.Clone(g.ext.tcp).(*extauthznet.ExtAuthz)
		ext.FilterEnabledMetadata = extAuthzEnabled(tcpRBACFilter, g.provider)
		out = append(out,
			networkFilter(tcpRBACFilter, &rbacnet.RBAC{ShadowRules: g.shadowRules(), StatPrefix: "tcp.",
				ShadowRulesStatPrefix: extAuthzShadowPrefix}),
			networkFilter(tcpExtAuthzFilter, ext))
	}
	for _, r := range b.local(policies) {
		out = append(out, networkFilter(tcpRBACFilter, &rbacnet.RBAC{Rules: r, StatPrefix: "tcp."}))
	}
	return out, b.notes
}

// local translates the AUDIT, DENY and ALLOW policies into one rule set each, in filter order. An AUDIT or
// DENY set without a translated rule is left out: it would match nothing.
func (b *rbacBuilder) local(policies model.AuthorizationPolicies) []*rbacpb.RBAC {
	var rules []*rbacpb.RBAC
	for _, a := range []struct {
		cfgs   []*config.Config
		action rbacpb.RBAC_Action
	}{{policies.Audit, rbacpb.RBAC_LOG}, {policies.Deny, rbacpb.RBAC_DENY}} {
		if len(a.cfgs) > 0 {
			if p := b.policies(a.cfgs, a.action); len(p) > 0 {
				rules = append(rules, &rbacpb.RBAC{Action: a.action, Policies: p})
			}
		}
	}
	if len(policies.Allow) > 0 {
		rules = append(rules, &rbacpb.RBAC{Action: rbacpb.RBAC_ALLOW, Policies: b.policies(policies.Allow, rbacpb.RBAC_ALLOW)})
	}
	return rules
}

// LogNotes logs the notes of one proxy's policies: those saying traffic is denied because a policy
// could not be honoured as warnings, the rest at debug level.
func LogNotes(notes []string, attrs ...any) {
	for _, n := range notes {
		if strings.Contains(n, failClosedNote) {
			slog.Warn("authorization policy fails closed", append(attrs, "reason", n)...)
		} else {
			slog.Debug("authorization policy translated with a change", append(attrs, "note", n)...)
		}
	}
}

// DescribePolicies spells out which policies (and which versions) apply, per action: a cache key for what
// is built from them.
func DescribePolicies(p model.AuthorizationPolicies) string {
	var b strings.Builder
	for _, group := range [][]*config.Config{p.Allow, p.Deny, p.Audit, p.Custom} {
		b.WriteString("|")
		for _, c := range group {
			b.WriteString(c.Key.String() + "@" + c.ResourceVersion + ",")
		}
	}
	return b.String()
}

type rbacBuilder struct {
	trustDomain string
	// bundle is the trust domain and its aliases, which source principals and trust domains are spelled in.
	bundle trustBundle
	forTCP bool
	notes  []string
	// rule names the rule being translated, for notes.
	rule string
}

func newRBACBuilder(env Env, forTCP bool) *rbacBuilder {
	return &rbacBuilder{trustDomain: env.TrustDomain, bundle: env.TrustDomains(), forTCP: forTCP}
}

func (b *rbacBuilder) notef(format string, args ...any) {
	filter := "http"
	if b.forTCP {
		filter = "tcp"
	}
	b.notes = append(b.notes, filter+": "+fmt.Sprintf(format, args...))
}

func (b *rbacBuilder) policies(cfgs []*config.Config, action rbacpb.RBAC_Action) map[string]*rbacpb.Policy {
	out := map[string]*rbacpb.Policy{}
	for _, c := range cfgs {
		spec := c.Spec.(*security.AuthorizationPolicy)
		for i, rule := range spec.Rules {
			name := fmt.Sprintf("ns[%s]-policy[%s]-rule[%d]", c.Namespace, c.Name, i)
			b.rule = c.Key.NamespacedName() + " rule " + strconv.Itoa(i)
			p, err := b.translateRule(rule, action)
			if err != nil {
				b.notef("%s (ALLOW) skipped, it allows nothing: %v", b.rule, err)
				continue
			}
			out[name] = p
		}
	}
	return out
}

// attribute is one field of a rule (or one `when` condition) with the function translating a value.
type rbacAttribute[T any] struct {
	key               string
	values, notValues []string
	gen               func(string) (T, error)
}

func (b *rbacBuilder) translateRule(r *security.Rule, action rbacpb.RBAC_Action) (*rbacpb.Policy, error) {
	var basePrincipal []rbacAttribute[*rbacpb.Principal]
	var basePermission []rbacAttribute[*rbacpb.Permission]
	for _, w := range r.GetWhen() {
		if pr, ok := b.principalGen(w.Key); ok {
			basePrincipal = append(basePrincipal, rbacAttribute[*rbacpb.Principal]{w.Key, w.Values, w.NotValues, pr})
		} else if pe, ok := b.permissionGen(w.Key); ok {
			basePermission = append(basePermission, rbacAttribute[*rbacpb.Permission]{w.Key, w.Values, w.NotValues, pe})
		} else if action == rbacpb.RBAC_ALLOW {
			return nil, fmt.Errorf("when key %q: %w", w.Key, errUnsupported)
		} else {
			b.notef("%s: when key %q not supported, condition dropped (the rule denies more)", b.rule, w.Key)
		}
	}

	policy := &rbacpb.Policy{}
	froms := r.GetFrom()
	if len(froms) == 0 {
		froms = []*security.Rule_From{{}}
	}
	for _, from := range froms {
		s := from.GetSource()
		attrs := []rbacAttribute[*rbacpb.Principal]{
			{"principals", b.bundle.principals(s.GetPrincipals()), b.bundle.principals(s.GetNotPrincipals()), b.srcPrincipal},
			{"requestPrincipals", s.GetRequestPrincipals(), s.GetNotRequestPrincipals(), b.requestPrincipal},
			{"namespaces", s.GetNamespaces(), s.GetNotNamespaces(), b.srcNamespace},
			{"serviceAccounts", s.GetServiceAccounts(), s.GetNotServiceAccounts(), b.srcServiceAccount},
			{"trustDomains", b.bundle.trustDomains(s.GetTrustDomains()), b.bundle.trustDomains(s.GetNotTrustDomains()), b.srcTrustDomain},
			{"remoteIpBlocks", s.GetRemoteIpBlocks(), s.GetNotRemoteIpBlocks(), rbacRemoteIP},
			{"ipBlocks", s.GetIpBlocks(), s.GetNotIpBlocks(), rbacDirectRemoteIP},
		}
		p, err := translateAttributes(b, append(attrs, basePrincipal...), action, rbacPrincipalOr, rbacPrincipalNot,
			rbacPrincipalAnd, rbacPrincipalAny)
		if err != nil {
			return nil, err
		}
		policy.Principals = append(policy.Principals, p)
	}
	tos := r.GetTo()
	if len(tos) == 0 {
		tos = []*security.Rule_To{{}}
	}
	for _, to := range tos {
		o := to.GetOperation()
		attrs := []rbacAttribute[*rbacpb.Permission]{
			{"hosts", o.GetHosts(), o.GetNotHosts(), b.host},
			{"methods", o.GetMethods(), o.GetNotMethods(), b.method},
			{"paths", o.GetPaths(), o.GetNotPaths(), b.path},
			{"ports", o.GetPorts(), o.GetNotPorts(), rbacDestinationPort},
		}
		p, err := translateAttributes(b, append(attrs, basePermission...), action, rbacPermissionOr, rbacPermissionNot,
			rbacPermissionAnd, rbacPermissionAny)
		if err != nil {
			return nil, err
		}
		policy.Permissions = append(policy.Permissions, p)
	}
	return policy, nil
}

// translateAttributes ANDs the attributes: the values of one ORed, its not-values ORed and negated.
// A value that cannot be translated fails an ALLOW rule and is dropped from a DENY rule.
func translateAttributes[T any](b *rbacBuilder, attrs []rbacAttribute[T], action rbacpb.RBAC_Action,
	or func([]T) T, not func(T) T, and func([]T) T, anyOf func() T) (T, error) {
	var all []T
	for _, a := range attrs {
		for _, negate := range []bool{false, true} {
			values := a.values
			if negate {
				values = a.notValues
			}
			var matched []T
			label := a.key
			if negate {
				label += " (not)"
			}
			for _, v := range values {
				m, err := a.gen(v)
				if err != nil {
					if action == rbacpb.RBAC_ALLOW {
						var zero T
						return zero, fmt.Errorf("%s %q: %w", label, v, err)
					}
					b.notef("%s: %s %q dropped (the rule denies more): %v", b.rule, label, v, err)
					continue
				}
				matched = append(matched, m)
			}
			if len(matched) == 0 {
				continue
			}
			if negate {
				all = append(all, not(or(matched)))
			} else {
				all = append(all, or(matched))
			}
		}
	}
	if len(all) == 0 {
		all = append(all, anyOf())
	}
	return and(all), nil
}

// principalGen returns the generator for a `when` key checked against the source.
func (b *rbacBuilder) principalGen(key string) (func(string) (*rbacpb.Principal, error), bool) {
	switch key {
	case "source.ip":
		return rbacDirectRemoteIP, true
	case "remote.ip":
		return rbacRemoteIP, true
	case "source.namespace":
		return b.srcNamespace, true
	case "source.principal":
		return b.srcPrincipal, true
	case "source.serviceAccount":
		return b.srcServiceAccount, true
	case "request.auth.principal":
		return b.requestPrincipal, true
	case "request.auth.audiences":
		return b.jwtClaim([]string{"aud"}), true
	case "request.auth.presenter":
		return b.jwtClaim([]string{"azp"}), true
	}
	if claims, ok := jwtClaimKey(key); ok {
		return b.jwtClaim(claims), true
	}
	if name, ok := headerKey(key); ok {
		return func(v string) (*rbacpb.Principal, error) {
			if b.forTCP {
				return nil, errHTTPOnly
			}
			return &rbacpb.Principal{Identifier: &rbacpb.Principal_Header{Header: rbacHeaderMatcher(name, v, false)}}, nil
		}, true
	}
	return nil, false
}

// permissionGen returns the generator for a `when` key checked against the destination.
func (b *rbacBuilder) permissionGen(key string) (func(string) (*rbacpb.Permission, error), bool) {
	switch key {
	case "destination.port":
		return rbacDestinationPort, true
	case "destination.ip":
		return func(v string) (*rbacpb.Permission, error) {
			c, err := rbacCIDR(v)
			if err != nil {
				return nil, err
			}
			return &rbacpb.Permission{Rule: &rbacpb.Permission_DestinationIp{DestinationIp: c}}, nil
		}, true
	case "connection.sni":
		return func(v string) (*rbacpb.Permission, error) {
			return &rbacpb.Permission{Rule: &rbacpb.Permission_RequestedServerName{RequestedServerName: rbacStringMatcher(v, "")}}, nil
		}, true
	}
	return nil, false
}

func headerKey(key string) (string, bool) {
	name, ok := strings.CutPrefix(key, "request.headers[")
	if !ok || !strings.HasSuffix(name, "]") || len(name) < 2 {
		return "", false
	}
	return strings.TrimSuffix(name, "]"), true
}

func (b *rbacBuilder) srcPrincipal(v string) (*rbacpb.Principal, error) {
	return rbacAuthenticated(rbacStringMatcher(b.meshTrustDomain(v), "spiffe://")), nil
}

// meshTrustDomain rewrites a principal in the default trust domain to the mesh's.
func (b *rbacBuilder) meshTrustDomain(principal string) string {
	if b.trustDomain == "" || b.trustDomain == rbacDefaultTrustDomain || strings.HasPrefix(principal, "*") {
		return principal
	}
	if td, rest, ok := strings.Cut(principal, "/"); ok && td == rbacDefaultTrustDomain {
		return b.trustDomain + "/" + rest
	}
	return principal
}

func (b *rbacBuilder) srcNamespace(v string) (*rbacpb.Principal, error) {
	ns := strings.ReplaceAll(regexp.QuoteMeta(v), `\*`, ".*")
	return rbacAuthenticated(rbacRegex("spiffe://.*/ns/" + ns + "/.*")), nil
}

func (b *rbacBuilder) srcServiceAccount(v string) (*rbacpb.Principal, error) {
	ns, sa, ok := strings.Cut(v, "/")
	if !ok || ns == "" || sa == "" || strings.Contains(sa, "/") {
		return nil, fmt.Errorf("want NAMESPACE/SERVICEACCOUNT")
	}
	return rbacAuthenticated(&matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Suffix{Suffix: "/ns/" + ns + "/sa/" + sa}}), nil
}

func (b *rbacBuilder) srcTrustDomain(v string) (*rbacpb.Principal, error) {
	if v == "" || strings.Contains(v, "/") {
		return nil, fmt.Errorf("not a trust domain")
	}
	if v == rbacDefaultTrustDomain && b.trustDomain != "" {
		v = b.trustDomain
	}
	return rbacAuthenticated(&matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Prefix{Prefix: "spiffe://" + v + "/"}}), nil
}

// requestPrincipal matches "ISS/SUB" against the token's iss and sub claims, as istiod's
// requestPrincipalGenerator: split at the last "/" (issuers are URLs); "*" matches any token; "*x" is a
// suffix of the issuer (or, without "/", of the subject), "x*" a prefix of the subject (or, without "/",
// of the issuer).
func (b *rbacBuilder) requestPrincipal(v string) (*rbacpb.Principal, error) {
	if b.forTCP {
		return nil, errHTTPOnly
	}
	anyValue := rbacRegex(".+")
	idx := strings.LastIndex(v, "/")
	found := idx >= 0
	iss, sub := v, ""
	if found {
		iss, sub = v[:idx], v[idx+1:]
	}
	exact := func(s string) *matcher.StringMatcher {
		return &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: s}}
	}
	var matchIss, matchSub *matcher.StringMatcher
	switch {
	case v == "*":
		matchIss, matchSub = anyValue, anyValue
	case strings.HasPrefix(v, "*"):
		if !found {
			matchIss = anyValue
			matchSub = &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Suffix{Suffix: v[1:]}}
			break
		}
		matchIss = anyValue
		if iss != "*" {
			matchIss = &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Suffix{Suffix: iss[1:]}}
		}
		matchSub = exact(sub)
	case strings.HasSuffix(v, "*"):
		if !found {
			matchIss = &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Prefix{Prefix: v[:len(v)-1]}}
			matchSub = anyValue
			break
		}
		matchIss = exact(iss)
		matchSub = anyValue
		if sub != "*" {
			matchSub = &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Prefix{Prefix: sub[:len(sub)-1]}}
		}
	default:
		matchIss, matchSub = exact(iss), exact(sub)
	}
	claim := func(name string, m *matcher.StringMatcher) *rbacpb.Principal {
		return rbacMetadata(jwtMetadataMatcher([]string{name},
			&matcher.ValueMatcher{MatchPattern: &matcher.ValueMatcher_StringMatch{StringMatch: m}}))
	}
	return rbacPrincipalAnd([]*rbacpb.Principal{claim("iss", matchIss), claim("sub", matchSub)}), nil
}

// jwtClaim matches the value of a (nested) claim, a string or any element of a list, with istiod's string
// matching ("*" any non-empty value, a leading or trailing "*" a suffix or prefix).
func (b *rbacBuilder) jwtClaim(path []string) func(string) (*rbacpb.Principal, error) {
	return func(v string) (*rbacpb.Principal, error) {
		if b.forTCP {
			return nil, errHTTPOnly
		}
		value := &matcher.ValueMatcher{MatchPattern: &matcher.ValueMatcher_StringMatch{StringMatch: rbacStringMatcher(v, "")}}
		either := &matcher.ValueMatcher{MatchPattern: &matcher.ValueMatcher_OrMatch{OrMatch: &matcher.OrMatcher{
			ValueMatchers: []*matcher.ValueMatcher{
				{MatchPattern: &matcher.ValueMatcher_ListMatch{ListMatch: &matcher.ListMatcher{
					MatchPattern: &matcher.ListMatcher_OneOf{OneOf: value}}}},
				value,
			}}}}
		return rbacMetadata(jwtMetadataMatcher(path, either)), nil
	}
}

// jwtMetadataMatcher matches the claim at path in the payload the jwt_authn filter leaves in its metadata.
func jwtMetadataMatcher(path []string, value *matcher.ValueMatcher) *matcher.MetadataMatcher {
	m := &matcher.MetadataMatcher{Filter: jwtAuthnFilter, Value: value}
	for _, k := range append([]string{jwtPayloadKey}, path...) {
		m.Path = append(m.Path, &matcher.MetadataMatcher_PathSegment{Segment: &matcher.MetadataMatcher_PathSegment_Key{Key: k}})
	}
	return m
}

func rbacMetadata(m *matcher.MetadataMatcher) *rbacpb.Principal {
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_Metadata{Metadata: m}}
}

// jwtClaimKey reads "request.auth.claims[a]" or "request.auth.claims[a][b]..." (nested claims) as istiod's
// extractNameInNestedBrackets does: a name without brackets inside, or one bracketed name taken whole.
func jwtClaimKey(key string) ([]string, bool) {
	rest, ok := strings.CutPrefix(key, "request.auth.claims")
	if !ok || !strings.HasPrefix(rest, "[") || !strings.HasSuffix(rest, "]") {
		return nil, false
	}
	var claims []string
	for s := rest; s != ""; {
		end := strings.IndexByte(s, ']')
		if s[0] != '[' || end < 0 || strings.IndexByte(s[1:end], '[') >= 0 {
			// Not a sequence of [name]: istiod takes everything between the outer brackets as one name.
			name := rest[1 : len(rest)-1]
			if name == "" {
				return nil, false
			}
			return []string{name}, true
		}
		if end == 1 {
			return nil, false // an empty claim name
		}
		claims = append(claims, s[1:end])
		s = s[end+1:]
	}
	return claims, true
}

func rbacDirectRemoteIP(v string) (*rbacpb.Principal, error) {
	c, err := rbacCIDR(v)
	if err != nil {
		return nil, err
	}
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_DirectRemoteIp{DirectRemoteIp: c}}, nil
}

func rbacRemoteIP(v string) (*rbacpb.Principal, error) {
	c, err := rbacCIDR(v)
	if err != nil {
		return nil, err
	}
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_RemoteIp{RemoteIp: c}}, nil
}

func (b *rbacBuilder) host(v string) (*rbacpb.Permission, error) {
	if b.forTCP {
		return nil, errHTTPOnly
	}
	return &rbacpb.Permission{Rule: &rbacpb.Permission_Header{Header: rbacHeaderMatcher(":authority", v, true)}}, nil
}

func (b *rbacBuilder) method(v string) (*rbacpb.Permission, error) {
	if b.forTCP {
		return nil, errHTTPOnly
	}
	return &rbacpb.Permission{Rule: &rbacpb.Permission_Header{Header: rbacHeaderMatcher(":method", v, false)}}, nil
}

func (b *rbacBuilder) path(v string) (*rbacpb.Permission, error) {
	if b.forTCP {
		return nil, errHTTPOnly
	}
	return &rbacpb.Permission{Rule: &rbacpb.Permission_UrlPath{UrlPath: &matcher.PathMatcher{
		Rule: &matcher.PathMatcher_Path{Path: rbacStringMatcher(v, "")}}}}, nil
}

func rbacDestinationPort(v string) (*rbacpb.Permission, error) {
	p, err := strconv.ParseUint(v, 10, 16)
	if err != nil || p == 0 {
		return nil, fmt.Errorf("not a port number")
	}
	return &rbacpb.Permission{Rule: &rbacpb.Permission_DestinationPort{DestinationPort: uint32(p)}}, nil
}

// cidrRange reads "10.0.0.0/8" or a single address (a /32 or /128).
func rbacCIDR(v string) (*core.CidrRange, error) {
	if p, err := netip.ParsePrefix(v); err == nil {
		return &core.CidrRange{AddressPrefix: p.Addr().String(), PrefixLen: wrapperspb.UInt32(uint32(p.Bits()))}, nil
	}
	a, err := netip.ParseAddr(v)
	if err != nil {
		return nil, fmt.Errorf("not an IP address or CIDR block")
	}
	return &core.CidrRange{AddressPrefix: a.String(), PrefixLen: wrapperspb.UInt32(uint32(a.BitLen()))}, nil
}

// stringMatcher is istiod's StringMatcherWithPrefix: "*" matches any non-empty value, "*x" values ending in
// x, "x*" values starting with x, anything else exactly; prefix is prepended to what is matched.
func rbacStringMatcher(v, prefix string) *matcher.StringMatcher {
	switch {
	case v == "*":
		return rbacRegex(".+")
	case strings.HasPrefix(v, "*"):
		if prefix == "" {
			return &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Suffix{Suffix: v[1:]}}
		}
		return rbacRegex(regexp.QuoteMeta(prefix) + ".*" + regexp.QuoteMeta(v[1:]))
	case strings.HasSuffix(v, "*"):
		return &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Prefix{Prefix: prefix + v[:len(v)-1]}}
	}
	return &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: prefix + v}}
}

func rbacRegex(re string) *matcher.StringMatcher {
	return &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: re}}}
}

// headerMatcher is istiod's: "*" means present, a leading or trailing "*" a suffix or prefix match.
func rbacHeaderMatcher(name, v string, ignoreCase bool) *route.HeaderMatcher {
	if v == "*" {
		return &route.HeaderMatcher{Name: name, HeaderMatchSpecifier: &route.HeaderMatcher_PresentMatch{PresentMatch: true}}
	}
	sm := &matcher.StringMatcher{IgnoreCase: ignoreCase}
	switch {
	case strings.HasPrefix(v, "*"):
		sm.MatchPattern = &matcher.StringMatcher_Suffix{Suffix: v[1:]}
	case strings.HasSuffix(v, "*"):
		sm.MatchPattern = &matcher.StringMatcher_Prefix{Prefix: v[:len(v)-1]}
	default:
		sm.MatchPattern = &matcher.StringMatcher_Exact{Exact: v}
	}
	return &route.HeaderMatcher{Name: name, HeaderMatchSpecifier: &route.HeaderMatcher_StringMatch{StringMatch: sm}}
}

func rbacAuthenticated(m *matcher.StringMatcher) *rbacpb.Principal {
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_Authenticated_{Authenticated: &rbacpb.Principal_Authenticated{PrincipalName: m}}}
}

func rbacPrincipalOr(ids []*rbacpb.Principal) *rbacpb.Principal {
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_OrIds{OrIds: &rbacpb.Principal_Set{Ids: ids}}}
}

func rbacPrincipalAnd(ids []*rbacpb.Principal) *rbacpb.Principal {
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_AndIds{AndIds: &rbacpb.Principal_Set{Ids: ids}}}
}

func rbacPrincipalNot(id *rbacpb.Principal) *rbacpb.Principal {
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_NotId{NotId: id}}
}

func rbacPrincipalAny() *rbacpb.Principal {
	return &rbacpb.Principal{Identifier: &rbacpb.Principal_Any{Any: true}}
}

func rbacPermissionOr(rules []*rbacpb.Permission) *rbacpb.Permission {
	return &rbacpb.Permission{Rule: &rbacpb.Permission_OrRules{OrRules: &rbacpb.Permission_Set{Rules: rules}}}
}

func rbacPermissionAnd(rules []*rbacpb.Permission) *rbacpb.Permission {
	return &rbacpb.Permission{Rule: &rbacpb.Permission_AndRules{AndRules: &rbacpb.Permission_Set{Rules: rules}}}
}

func rbacPermissionNot(rule *rbacpb.Permission) *rbacpb.Permission {
	return &rbacpb.Permission{Rule: &rbacpb.Permission_NotRule{NotRule: rule}}
}

func rbacPermissionAny() *rbacpb.Permission {
	return &rbacpb.Permission{Rule: &rbacpb.Permission_Any{Any: true}}
}
