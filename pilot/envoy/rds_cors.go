package envoy

// VirtualService corsPolicy → the CORS filter's per-route policy, as istiod's TranslateCORSPolicy.

import (
	"strconv"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	corsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	envoytype "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// translateCORS builds the route's CORS policy. Validation has rejected empty origins and regexes RE2
// refuses, so every origin translates. Unmatched preflights are forwarded to the service unless the policy
// says IGNORE (Envoy's behaviour before 1.30, which istiod keeps as the default).
func translateCORS(in *networking.CorsPolicy) *corsv3.CorsPolicy {
	if in == nil {
		return nil
	}
	out := &corsv3.CorsPolicy{
		ForwardNotMatchingPreflights: wrapperspb.Bool(in.UnmatchedPreflights != networking.CorsPolicy_IGNORE),
		FilterEnabled: &core.RuntimeFractionalPercent{DefaultValue: &envoytype.FractionalPercent{
			Numerator: 100, Denominator: envoytype.FractionalPercent_HUNDRED}},
		AllowCredentials: in.AllowCredentials,
		AllowHeaders:     strings.Join(in.AllowHeaders, ","),
		AllowMethods:     strings.Join(in.AllowMethods, ","),
		ExposeHeaders:    strings.Join(in.ExposeHeaders, ","),
	}
	if in.AllowOrigins != nil {
		for _, o := range in.AllowOrigins {
			if m, ok := routeStringMatcher(o); ok {
				out.AllowOriginStringMatch = append(out.AllowOriginStringMatch, m)
			}
		}
	} else {
		for _, o := range in.AllowOrigin { //nolint:staticcheck // deprecated, still honoured as exact origins
			out.AllowOriginStringMatch = append(out.AllowOriginStringMatch,
				&matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: o}})
		}
	}
	if in.MaxAge != nil {
		out.MaxAge = strconv.FormatInt(in.MaxAge.GetSeconds(), 10)
	}
	return out
}
