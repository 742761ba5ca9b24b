package envoymodel

import (
	"sort"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	rbachttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	rbacnet "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// The dynamic metadata keys of source/extensions/filters/common/rbac/utility.h.
const (
	ShadowEffectivePolicyID = "shadow_effective_policy_id"
	ShadowEngineResult      = "shadow_engine_result"
	AccessLogHint           = "access_log_hint"
	CommonNamespace         = "envoy.common"
	HTTPRBACNamespace       = "envoy.filters.http.rbac"
	NetworkRBACNamespace    = "envoy.filters.network.rbac"
)

// rbacInput is what the matchers read: the connection, the headers (empty for the network filter) and
// the metadata.
type rbacInput struct {
	s       *stream
	headers *headerMap
}

// engineAction is RoleBasedAccessControlEngineImpl::handleAction: the first policy in name order that
// matches is the effective one; ALLOW allows on a match, DENY on none, LOG always allows and, when
// enforced, records whether to log.
func (in rbacInput) engineAction(r *rbacpb.RBAC, shadow bool) (allowed bool, effective string, err error) {
	names := make([]string, 0, len(r.GetPolicies()))
	for n := range r.GetPolicies() {
		names = append(names, n)
	}
	sort.Strings(names)
	matched := false
	for _, n := range names {
		ok, err := in.policy(r.GetPolicies()[n])
		if err != nil {
			return false, "", err
		}
		if ok {
			matched, effective = true, n
			break
		}
	}
	switch r.GetAction() {
	case rbacpb.RBAC_ALLOW:
		return matched, effective, nil
	case rbacpb.RBAC_DENY:
		return !matched, effective, nil
	case rbacpb.RBAC_LOG:
		if !shadow {
			in.s.setMetadata(CommonNamespace, map[string]*structpb.Value{AccessLogHint: structpb.NewBoolValue(matched)})
		}
		return true, effective, nil
	}
	return false, "", notModelled("RBAC action %v", r.GetAction())
}

func (in rbacInput) policy(p *rbacpb.Policy) (bool, error) {
	if p.GetCondition() != nil || p.GetCheckedCondition() != nil {
		return false, notModelled("RBAC policy condition (CEL)")
	}
	perm, err := in.anyPermission(p.GetPermissions())
	if err != nil || !perm {
		return false, err
	}
	return in.anyPrincipal(p.GetPrincipals())
}

func (in rbacInput) anyPermission(ps []*rbacpb.Permission) (bool, error) {
	for _, p := range ps {
		if ok, err := in.permission(p); err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

func (in rbacInput) anyPrincipal(ps []*rbacpb.Principal) (bool, error) {
	for _, p := range ps {
		if ok, err := in.principal(p); err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

func (in rbacInput) permission(p *rbacpb.Permission) (bool, error) {
	s := in.s
	switch r := p.GetRule().(type) {
	case *rbacpb.Permission_AndRules:
		for _, q := range r.AndRules.GetRules() {
			if ok, err := in.permission(q); err != nil || !ok {
				return false, err
			}
		}
		return true, nil
	case *rbacpb.Permission_OrRules:
		return in.anyPermission(r.OrRules.GetRules())
	case *rbacpb.Permission_Any:
		return true, nil
	case *rbacpb.Permission_NotRule:
		ok, err := in.permission(r.NotRule)
		return !ok, err
	case *rbacpb.Permission_Header:
		return matchHeader(r.Header, in.headers)
	case *rbacpb.Permission_UrlPath:
		return matchPath(r.UrlPath, in.headers)
	case *rbacpb.Permission_DestinationIp:
		return inRange(r.DestinationIp, s.local.Addr()), nil
	case *rbacpb.Permission_DestinationPort:
		return uint32(s.local.Port()) == r.DestinationPort, nil
	case *rbacpb.Permission_DestinationPortRange:
		port := int32(s.local.Port())
		return r.DestinationPortRange.GetStart() <= port && port < r.DestinationPortRange.GetEnd(), nil
	case *rbacpb.Permission_Metadata:
		return matchMetadata(r.Metadata, s.res.Metadata)
	case *rbacpb.Permission_SourcedMetadata:
		return in.sourcedMetadata(r.SourcedMetadata)
	case *rbacpb.Permission_RequestedServerName:
		return matchString(r.RequestedServerName, s.sni)
	}
	return false, notModelled("RBAC permission %T", p.GetRule())
}

func (in rbacInput) principal(p *rbacpb.Principal) (bool, error) {
	s := in.s
	switch id := p.GetIdentifier().(type) {
	case *rbacpb.Principal_AndIds:
		for _, q := range id.AndIds.GetIds() {
			if ok, err := in.principal(q); err != nil || !ok {
				return false, err
			}
		}
		return true, nil
	case *rbacpb.Principal_OrIds:
		return in.anyPrincipal(id.OrIds.GetIds())
	case *rbacpb.Principal_Any:
		return true, nil
	case *rbacpb.Principal_NotId:
		ok, err := in.principal(id.NotId)
		return !ok, err
	case *rbacpb.Principal_Authenticated_:
		return in.authenticated(id.Authenticated)
	case *rbacpb.Principal_SourceIp:
		return inRange(id.SourceIp, s.remote.Addr()), nil
	case *rbacpb.Principal_DirectRemoteIp:
		return inRange(id.DirectRemoteIp, s.remote.Addr()), nil
	case *rbacpb.Principal_RemoteIp:
		return inRange(id.RemoteIp, s.downRem), nil
	case *rbacpb.Principal_Header:
		return matchHeader(id.Header, in.headers)
	case *rbacpb.Principal_UrlPath:
		return matchPath(id.UrlPath, in.headers)
	case *rbacpb.Principal_Metadata:
		return matchMetadata(id.Metadata, s.res.Metadata)
	case *rbacpb.Principal_SourcedMetadata:
		return in.sourcedMetadata(id.SourcedMetadata)
	case *rbacpb.Principal_FilterState:
		// No modelled filter writes filter state, and FilterStateMatcher answers false for a missing key.
		if id.FilterState.GetStringMatch() == nil {
			return false, notModelled("filter_state matcher %T", id.FilterState.GetMatcher())
		}
		return false, nil
	}
	return false, notModelled("RBAC principal %T", p.GetIdentifier())
}

// authenticated is AuthenticatedMatcher: only over TLS with a client certificate; the URI SANs, then the
// DNS SANs, then the subject.
func (in rbacInput) authenticated(a *rbacpb.Principal_Authenticated) (bool, error) {
	t := in.s.tls
	if t == nil || t.Client == nil {
		return false, nil
	}
	m := a.GetPrincipalName()
	if m == nil {
		return true, nil
	}
	for _, v := range append(append([]string{}, t.Client.URISANs...), t.Client.DNSSANs...) {
		if ok, err := matchString(m, v); err != nil || ok {
			return ok, err
		}
	}
	return matchString(m, t.Client.Subject)
}

func (in rbacInput) sourcedMetadata(m *rbacpb.SourcedMetadata) (bool, error) {
	switch m.GetMetadataSource() {
	case rbacpb.MetadataSource_DYNAMIC:
		return matchMetadata(m.GetMetadataMatcher(), in.s.res.Metadata)
	case rbacpb.MetadataSource_ROUTE:
		if in.s.route == nil {
			return false, nil
		}
		return matchMetadata(m.GetMetadataMatcher(), routeMetadata(in.s.route.GetMetadata()))
	}
	return false, notModelled("metadata source %v", m.GetMetadataSource())
}

func routeMetadata(md *core.Metadata) map[string]*structpb.Struct {
	return md.GetFilterMetadata()
}

// httpRBAC is the HTTP RBAC filter's decodeHeaders: the shadow engine first (metadata only), then the
// enforced one, which answers 403 when it denies.
func (s *stream) httpRBAC(name string, cfg *rbachttp.RBAC) (cont bool, err error) {
	if cfg.GetMatcher() != nil || cfg.GetShadowMatcher() != nil {
		return false, notModelled("RBAC filter %s: matcher trees", name)
	}
	in := rbacInput{s: s, headers: s.headers}
	if sh := cfg.GetShadowRules(); sh != nil {
		allowed, id, err := in.engineAction(sh, true)
		if err != nil {
			return false, err
		}
		result := "allowed"
		if !allowed {
			result = "denied"
		}
		fields := map[string]*structpb.Value{cfg.GetShadowRulesStatPrefix() + ShadowEngineResult: structpb.NewStringValue(result)}
		if id != "" {
			fields[cfg.GetShadowRulesStatPrefix()+ShadowEffectivePolicyID] = structpb.NewStringValue(id)
		}
		s.setMetadata(HTTPRBACNamespace, fields)
		s.tracef("%s shadow: %s (policy %q)", name, result, id)
	}
	if r := cfg.GetRules(); r != nil {
		allowed, id, err := in.engineAction(r, false)
		if err != nil {
			return false, err
		}
		s.tracef("%s %v: allowed=%v (policy %q)", name, r.GetAction(), allowed, id)
		if !allowed {
			s.localReply(name, 403, "RBAC: access denied")
			return false, nil
		}
	}
	return true, nil
}

// networkRBAC is the network RBAC filter on a new connection: no headers; a denial closes it.
func (s *stream) networkRBAC(name string, cfg *rbacnet.RBAC) (cont bool, err error) {
	if cfg.GetMatcher() != nil || cfg.GetShadowMatcher() != nil {
		return false, notModelled("network RBAC filter %s: matcher trees", name)
	}
	if cfg.GetDelayDeny() != nil {
		return false, notModelled("network RBAC filter %s: delay_deny", name)
	}
	in := rbacInput{s: s, headers: newHeaderMap()}
	if sh := cfg.GetShadowRules(); sh != nil {
		allowed, id, err := in.engineAction(sh, true)
		if err != nil {
			return false, err
		}
		result := "allowed"
		if !allowed {
			result = "denied"
		}
		fields := map[string]*structpb.Value{cfg.GetShadowRulesStatPrefix() + ShadowEngineResult: structpb.NewStringValue(result)}
		if id != "" {
			fields[cfg.GetShadowRulesStatPrefix()+ShadowEffectivePolicyID] = structpb.NewStringValue(id)
		}
		s.setMetadata(NetworkRBACNamespace, fields)
	}
	if r := cfg.GetRules(); r != nil {
		allowed, id, err := in.engineAction(r, false)
		if err != nil {
			return false, err
		}
		s.tracef("%s %v: allowed=%v (policy %q)", name, r.GetAction(), allowed, id)
		if !allowed {
			s.closeConn(name, "RBAC: access denied")
			return false, nil
		}
	}
	return true, nil
}
