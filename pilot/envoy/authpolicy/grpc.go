package authpolicy

// AuthorizationPolicy and RequestAuthentication → the RBAC filters of a proxyless gRPC server, as
// istiod's grpcgen builds them:
//   - RBAC for the CUSTOM, DENY and ALLOW policies, ahead of the router. gRPC's RBAC knows ALLOW and DENY
//     only and has no ext_authz client here, so CUSTOM policies deny what their rules match (fail closed,
//     reported); AUDIT policies are reported and left out (gRPC ignores the LOG action: it has no access
//     log to mark).
//   - Header matchers gRPC refuses (":scheme", "grpc-*") would make it reject the whole listener: an ALLOW
//     rule using one is dropped (it allows nothing), a DENY rule using one denies every request.
//   - JWT conditions (request.auth.*, requestPrincipals) never match in gRPC's RBAC: a proxyless server
//     validates no token. So a RequestAuthentication on the workload denies every request that carries a
//     token where its rules look (fail closed, reported): none can be told valid. Requests without a token
//     pass, as Istio's do.

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbachttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/sextantmesh/sextant/pilot/model"
)

// Filter names must be unique within one connection manager for gRPC (it NACKs duplicates).
const (
	grpcRBACAllowFilter  = httpRBACFilter
	grpcRBACDenyFilter   = httpRBACFilter + ".DENY"
	grpcRBACCustomFilter = httpRBACFilter + ".CUSTOM"
	grpcRBACJWTFilter    = httpRBACFilter + ".JWT"
)

// GRPCFilters returns the RBAC HTTP filters of a gRPC server, in Envoy's order: CUSTOM (as DENY), DENY,
// ALLOW.
func GRPCFilters(policies model.AuthorizationPolicies, env Env) ([]*hcm.HttpFilter, []string) {
	b := newRBACBuilder(env, false)
	var out []*hcm.HttpFilter
	if r := grpcUnverifiableTokens(b, env.JWT); r != nil {
		out = append(out, httpFilter(grpcRBACJWTFilter, &rbachttp.RBAC{Rules: grpcRBACRefusable(b, r)}))
	}
	custom := &rbacpb.RBAC{Action: rbacpb.RBAC_DENY, Policies: map[string]*rbacpb.Policy{}}
	for _, g := range b.custom(policies.Custom, env) {
		if g.failure == "" { // custom() reported the others already
			b.notef("%sCUSTOM policies %v: a proxyless gRPC server cannot consult provider %q; the requests their rules match are denied",
				failClosedNote, g.policies, g.provider)
		}
		maps.Copy(custom.Policies, g.denyRules().Policies)
	}
	if len(custom.Policies) > 0 {
		out = append(out, httpFilter(grpcRBACCustomFilter, &rbachttp.RBAC{Rules: grpcRBACRefusable(b, custom)}))
	}
	if len(policies.Audit) > 0 {
		names := make([]string, 0, len(policies.Audit))
		for _, c := range policies.Audit {
			names = append(names, c.Key.NamespacedName())
		}
		b.notef("AUDIT policies %v not applied: a proxyless gRPC server ignores RBAC's LOG action (no access log to mark)", names)
	}
	for _, r := range b.local(model.AuthorizationPolicies{Deny: policies.Deny, Allow: policies.Allow}) {
		name := grpcRBACAllowFilter
		if r.Action == rbacpb.RBAC_DENY {
			name = grpcRBACDenyFilter
		}
		out = append(out, httpFilter(name, &rbachttp.RBAC{Rules: grpcRBACRefusable(b, r)}))
	}
	return out, b.notes
}

// grpcUnverifiableTokens denies the requests that carry a token where a RequestAuthentication rule looks
// for one: a proxyless server has no JWT filter, so it can tell a valid token from a forged one no more
// than Istio's 401 for an invalid token requires. Requests without a token pass, as Istio's do (and
// requestPrincipals never match them). Query parameters do not exist in gRPC; cookies are the "cookie"
// header.
func grpcUnverifiableTokens(b *rbacBuilder, j *JWTAuthn) *rbacpb.RBAC {
	if j == nil {
		return nil
	}
	r := &rbacpb.RBAC{Action: rbacpb.RBAC_DENY, Policies: map[string]*rbacpb.Policy{}}
	for _, jr := range j.rules {
		var headers []string
		for _, h := range jr.rule.GetFromHeaders() {
			headers = append(headers, strings.ToLower(h.GetName()))
		}
		if len(jr.rule.GetFromCookies()) > 0 {
			headers = append(headers, "cookie")
		}
		if len(jr.rule.GetFromHeaders()) == 0 && len(jr.rule.GetFromCookies()) == 0 && len(jr.rule.GetFromParams()) == 0 {
			headers = append(headers, "authorization") // Envoy's default location; its access_token parameter has no gRPC form
		}
		var present []*rbacpb.Principal
		for _, h := range slices.Compact(slices.Sorted(slices.Values(headers))) {
			present = append(present, &rbacpb.Principal{Identifier: &rbacpb.Principal_Header{Header: rbacHeaderMatcher(h, "*", false)}})
		}
		if len(present) == 0 {
			continue
		}
		name := fmt.Sprintf("ns[%s]-requestauthentication[%s]-rule[%d]", jr.source.Namespace, jr.source.Name, jr.index)
		r.Policies[name] = &rbacpb.Policy{Permissions: []*rbacpb.Permission{rbacPermissionAny()},
			Principals: []*rbacpb.Principal{rbacPrincipalOr(present)}}
		b.notef("%sRequestAuthentication %s rule %d (issuer %q): a proxyless gRPC server cannot validate tokens; "+
			"requests carrying one in %v are denied",
			failClosedNote, jr.source.NamespacedName(), jr.index, jr.rule.GetIssuer(), headers)
	}
	if len(r.Policies) == 0 {
		return nil
	}
	return r
}

// grpcRBACRefusable rewrites the policies of r that use a header gRPC refuses in RBAC (":scheme" or a
// "grpc-" name: it would NACK the listener): an ALLOW policy is dropped (it allows nothing), a DENY policy
// denies every request.
func grpcRBACRefusable(b *rbacBuilder, r *rbacpb.RBAC) *rbacpb.RBAC {
	for name, p := range r.Policies {
		header := ""
		for _, pr := range p.Principals {
			header = cmp.Or(header, grpcRefusedPrincipalHeader(pr))
		}
		for _, pe := range p.Permissions {
			header = cmp.Or(header, grpcRefusedPermissionHeader(pe))
		}
		if header == "" {
			continue
		}
		if r.Action == rbacpb.RBAC_ALLOW {
			delete(r.Policies, name)
			b.notef("%s (ALLOW) skipped, it allows nothing: gRPC cannot match header %q", name, header)
			continue
		}
		r.Policies[name] = &rbacpb.Policy{Permissions: []*rbacpb.Permission{rbacPermissionAny()},
			Principals: []*rbacpb.Principal{rbacPrincipalAny()}}
		b.notef("%s%s (%s): gRPC cannot match header %q; the rule denies every request", failClosedNote, name, r.Action, header)
	}
	return r
}

func grpcRefusedHeader(h *route.HeaderMatcher) string {
	if n := strings.ToLower(h.GetName()); n == ":scheme" || strings.HasPrefix(n, "grpc-") {
		return h.GetName()
	}
	return ""
}

func grpcRefusedPrincipalHeader(p *rbacpb.Principal) string {
	switch id := p.GetIdentifier().(type) {
	case *rbacpb.Principal_Header:
		return grpcRefusedHeader(id.Header)
	case *rbacpb.Principal_AndIds:
		return grpcRefusedPrincipalSet(id.AndIds.GetIds())
	case *rbacpb.Principal_OrIds:
		return grpcRefusedPrincipalSet(id.OrIds.GetIds())
	case *rbacpb.Principal_NotId:
		return grpcRefusedPrincipalHeader(id.NotId)
	}
	return ""
}

func grpcRefusedPrincipalSet(ids []*rbacpb.Principal) string {
	for _, id := range ids {
		if h := grpcRefusedPrincipalHeader(id); h != "" {
			return h
		}
	}
	return ""
}

func grpcRefusedPermissionHeader(p *rbacpb.Permission) string {
	switch r := p.GetRule().(type) {
	case *rbacpb.Permission_Header:
		return grpcRefusedHeader(r.Header)
	case *rbacpb.Permission_AndRules:
		return grpcRefusedPermissionSet(r.AndRules.GetRules())
	case *rbacpb.Permission_OrRules:
		return grpcRefusedPermissionSet(r.OrRules.GetRules())
	case *rbacpb.Permission_NotRule:
		return grpcRefusedPermissionHeader(r.NotRule)
	}
	return ""
}

func grpcRefusedPermissionSet(rules []*rbacpb.Permission) string {
	for _, r := range rules {
		if h := grpcRefusedPermissionHeader(r); h != "" {
			return h
		}
	}
	return ""
}
