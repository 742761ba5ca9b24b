package authpolicy

// RequestAuthentication → Envoy's jwt_authn filter, as istiod builds it (pilot/pkg/security/authn):
//
//   - One envoy.filters.http.jwt_authn filter per proxy, on the sidecar's inbound HTTP connection managers
//     and on every connection manager of a gateway, after the CUSTOM (ext_authz) filters and before the
//     RBAC filters (istiod's order). Outbound connection managers get none.
//   - Every rule of the RequestAuthentications applying to the proxy (model.RequestAuthentications) is one
//     provider "origins-N", rules sorted by issuer: issuer, audiences, token locations (fromHeaders,
//     fromParams, fromCookies; none means Envoy's default, the Authorization bearer and the
//     access_token parameter), forward (forwardOriginalToken), forward_payload_header
//     (outputPayloadToHeader), claim_to_headers (outputClaimToHeaders), and the payload in the dynamic
//     metadata "envoy.filters.http.jwt_authn" under "payload", with scope, permission and the rule's
//     spaceDelimitedClaims split into lists. Gateways clear the route cache after it, as istiod's do.
//   - The requirement: a token that is present must be valid for some provider (else 401); a request with
//     no token passes to authorization, where requestPrincipals and request.auth.* never match. One
//     provider: {provider OR allow_missing}; several: OR of each provider alone and the AND of every
//     {provider OR allow_missing} (providers may share a token location). A rule with presence REQUIRED
//     drops its allow_missing and the OR of single providers, so its token must be there: a token of an
//     OPTIONAL rule sharing its location then fails (denying more, never less).
//   - Keys: the rule's inline jwks, else the key set Sextant fetched for its jwksUri or its issuer's OpenID
//     discovery (pilot/jwks), inlined as local_jwks: Envoy never fetches. With no key set (never fetched,
//     or every fetch failed) the provider gets a key set nobody holds the private key of, so every token
//     of that issuer is rejected, as istiod does: fail closed, reported as a note.
//   - RBAC (rbac.go) matches requestPrincipals and request.auth.* on that metadata, as istiod does, so the
//     upstream filter is enough: istiod's istio_authn filter is not needed.

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	jwtauthn "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/emptypb"
	security "istio.io/api/security/v1beta1"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/model"
)

const (
	jwtAuthnFilter = "envoy.filters.http.jwt_authn"
	// jwtPayloadKey is where, in the filter's dynamic metadata, a verified token's payload is put.
	jwtPayloadKey = "payload"
)

// jwtDefaultSpaceDelimitedClaims are always split into lists in the metadata, as istiod does.
var jwtDefaultSpaceDelimitedClaims = []string{"permission", "scope"}

// UnmatchableJWKS holds a public key whose private key was discarded when it was made: no token
// verifies against it. A provider whose keys cannot be had uses it, so its tokens are rejected.
const UnmatchableJWKS = `{"keys":[{"kty":"RSA","alg":"RS256","use":"sig","kid":"sextant-no-key-set","e":"AQAB",` +
	`"n":"zHwSpYYsrn0DYO9rIRAYUN59BhccFVwkVuerVymGL_jYaF4HZURe4VNJku6xoLPHXZBH1ZGx7A4rrlKWkZEb6A4ByaHuj5NnbaNT` +
	`C-m9i0T1p_wtZa1YfU3KjXPsrPHTXoiO-t_hH3m--0mU4b9YGqFG9kU8NqMDJm9RnDTqh9hiCckBz8sv2GHPLzLmqYnQQVvcrJD7KAktrN2RCw` +
	`2F6Y9HbTNcpO2Mva0QsiYcgl_w5MzcWBRFze_qpi6kgGnRy-_fu4t0GBefC-ZLwXTgEWATC8jlUn2jNVuEwfRVOCMv5fSf1Yswss3SdXuAjDWF` +
	`WN1zjRokU0jo-eY83L9Hlw"}]}`

// JWTAuthn is what a proxy's JWT filter is built from: its rules with their key sets resolved against the
// snapshot. Resolving is cheap; the filter is built only when the listener is (not found in the cache).
type JWTAuthn struct {
	rules           []jwtRule
	clearRouteCache bool
	// key spells out all of the above, for listener cache keys.
	key string
}

type jwtRule struct {
	rule   *security.JWTRule
	source config.Key
	index  int // in the source's jwtRules
	jwks   string
	// problem says why the keys are missing (jwks is then empty) or why the latest refresh failed.
	problem string
}

// NewJWTAuthn resolves the rules of the RequestAuthentications applying to a workload; nil when none
// applies. gateway is set for router proxies, which clear the route cache after the filter.
func NewJWTAuthn(push *model.PushContext, ns string, labels map[string]string, gateway bool) *JWTAuthn {
	ras := push.RequestAuthentications(ns, labels)
	if len(ras) == 0 {
		return nil
	}
	j := &JWTAuthn{clearRouteCache: gateway}
	var key strings.Builder
	fmt.Fprintf(&key, "jwt|%t|", gateway)
	for _, c := range ras {
		key.WriteString(c.Key.String() + "@" + c.ResourceVersion + ",")
		for i, r := range c.Spec.(*security.RequestAuthentication).GetJwtRules() {
			keys, ok, problem := push.JWKS(r)
			if !ok {
				keys = ""
			}
			j.rules = append(j.rules, jwtRule{rule: r, source: c.Key, index: i, jwks: keys, problem: problem})
			h := fnv.New64a()
			h.Write([]byte(keys))
			fmt.Fprintf(&key, "%d:%x:%s,", i, h.Sum64(), problem)
		}
	}
	if len(j.rules) == 0 {
		return nil // policies without rules validate nothing: no filter, as istiod
	}
	// Sorted by issuer for a stable provider order (istiod's); stable so equal issuers keep policy order.
	slices.SortStableFunc(j.rules, func(a, b jwtRule) int { return strings.Compare(a.rule.GetIssuer(), b.rule.GetIssuer()) })
	j.key = key.String()
	return j
}

func (j *JWTAuthn) describe() string {
	if j == nil {
		return ""
	}
	return j.key
}

// filter builds the jwt_authn filter, and notes on rules whose keys are missing or stale.
func (j *JWTAuthn) filter() (*hcm.HttpFilter, []string) {
	var notes []string
	providers := map[string]*jwtauthn.JwtProvider{}
	var inner, singles []*jwtauthn.JwtRequirement
	required := false
	for i, r := range j.rules {
		name := fmt.Sprintf("origins-%d", i)
		field := fmt.Sprintf("RequestAuthentication %s spec.jwtRules[%d]", r.source.NamespacedName(), r.index)
		jwks := r.jwks
		if jwks == "" {
			jwks = UnmatchableJWKS
			notes = append(notes, fmt.Sprintf("http: %s%s: no key set for %s (%s): every token of issuer %q is rejected",
				failClosedNote, field, jwksOrigin(r.rule), r.problem, r.rule.GetIssuer()))
		} else if r.problem != "" {
			notes = append(notes, fmt.Sprintf("http: %s: refreshing the key set from %s failed (%s): the last good key set is in use",
				field, jwksOrigin(r.rule), r.problem))
		}
		providers[name] = jwtProvider(r.rule, jwks, j.clearRouteCache)
		self := jwtRequireProvider(name)
		singles = append(singles, self)
		if r.rule.GetPresence() == security.JWTRule_REQUIRED {
			required = true
			inner = append(inner, self)
			continue
		}
		inner = append(inner, &jwtauthn.JwtRequirement{RequiresType: &jwtauthn.JwtRequirement_RequiresAny{
			RequiresAny: &jwtauthn.JwtRequirementOrList{Requirements: []*jwtauthn.JwtRequirement{
				self, {RequiresType: &jwtauthn.JwtRequirement_AllowMissing{AllowMissing: &emptypb.Empty{}}}}}}})
	}
	var requires *jwtauthn.JwtRequirement
	switch {
	case len(inner) == 1:
		requires = inner[0]
	case required:
		requires = jwtRequireAll(inner)
	default:
		requires = &jwtauthn.JwtRequirement{RequiresType: &jwtauthn.JwtRequirement_RequiresAny{
			RequiresAny: &jwtauthn.JwtRequirementOrList{Requirements: append(singles, jwtRequireAll(inner))}}}
	}
	cfg := &jwtauthn.JwtAuthentication{
		Providers: providers,
		Rules: []*jwtauthn.RequirementRule{{
			Match:           &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
			RequirementType: &jwtauthn.RequirementRule_Requires{Requires: requires},
		}},
		BypassCorsPreflight: true,
	}
	return httpFilter(jwtAuthnFilter, cfg), notes
}

func jwtRequireProvider(name string) *jwtauthn.JwtRequirement {
	return &jwtauthn.JwtRequirement{RequiresType: &jwtauthn.JwtRequirement_ProviderName{ProviderName: name}}
}

func jwtRequireAll(reqs []*jwtauthn.JwtRequirement) *jwtauthn.JwtRequirement {
	return &jwtauthn.JwtRequirement{RequiresType: &jwtauthn.JwtRequirement_RequiresAll{
		RequiresAll: &jwtauthn.JwtRequirementAndList{Requirements: reqs}}}
}

func jwksOrigin(r *security.JWTRule) string {
	if r.GetJwksUri() != "" {
		return "jwksUri " + r.GetJwksUri()
	}
	return "the OpenID discovery of issuer " + r.GetIssuer()
}

func jwtProvider(r *security.JWTRule, jwks string, clearRouteCache bool) *jwtauthn.JwtProvider {
	p := &jwtauthn.JwtProvider{
		Issuer:               r.GetIssuer(),
		Audiences:            r.GetAudiences(),
		Forward:              r.GetForwardOriginalToken(),
		ForwardPayloadHeader: r.GetOutputPayloadToHeader(),
		FromParams:           r.GetFromParams(),
		FromCookies:          r.GetFromCookies(),
		PayloadInMetadata:    jwtPayloadKey,
		NormalizePayloadInMetadata: &jwtauthn.JwtProvider_NormalizePayload{
			SpaceDelimitedClaims: jwtSpaceDelimitedClaims(r.GetSpaceDelimitedClaims()),
		},
		ClearRouteCache: clearRouteCache,
		JwksSourceSpecifier: &jwtauthn.JwtProvider_LocalJwks{LocalJwks: &core.DataSource{
			Specifier: &core.DataSource_InlineString{InlineString: jwks}}},
	}
	for _, h := range r.GetFromHeaders() {
		p.FromHeaders = append(p.FromHeaders, &jwtauthn.JwtHeader{Name: h.GetName(), ValuePrefix: h.GetPrefix()})
	}
	for _, ch := range r.GetOutputClaimToHeaders() {
		p.ClaimToHeaders = append(p.ClaimToHeaders, &jwtauthn.JwtClaimToHeader{HeaderName: ch.GetHeader(), ClaimName: ch.GetClaim()})
	}
	return p
}

// jwtSpaceDelimitedClaims is the rule's list with scope and permission added, sorted and without repeats.
func jwtSpaceDelimitedClaims(extra []string) []string {
	out := append(slices.Clone(jwtDefaultSpaceDelimitedClaims), extra...)
	slices.Sort(out)
	return slices.Compact(out)
}
