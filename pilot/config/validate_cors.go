package config

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"time"

	networking "istio.io/api/networking/v1alpha3"
)

// corsMethods are the methods istiod accepts in allowMethods ("*" allows any).
var corsMethods = []string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace, "*",
}

// corsHeaderName is an RFC 7230 token, the rule istiod applies to allowHeaders and exposeHeaders.
var corsHeaderName = regexp.MustCompile("^[!#$%&'*+\\-.^_`|~A-Za-z0-9]+$")

// validateCORSPolicy applies istiod's rules to an HTTP route's corsPolicy (field f), so that Envoy is never
// sent a policy it rejects or reads otherwise than written.
func validateCORSPolicy(f string, p *networking.CorsPolicy) error {
	if p == nil {
		return nil
	}
	for i, o := range p.AllowOrigins {
		of := fmt.Sprintf("%s.allowOrigins[%d]", f, i)
		switch v := o.GetMatchType().(type) {
		case *networking.StringMatch_Exact:
			if v.Exact == "" {
				return fieldErr(of+".exact", "empty: an origin must not be empty")
			}
		case *networking.StringMatch_Prefix:
			if v.Prefix == "" {
				return fieldErr(of+".prefix", "empty: an origin must not be empty")
			}
		case *networking.StringMatch_Regex:
			if v.Regex == "" {
				return fieldErr(of+".regex", "empty: an origin must not be empty")
			}
			if err := validateRegex(of+".regex", v.Regex); err != nil {
				return err
			}
		default:
			return fieldErr(of, "one of exact, prefix or regex is required")
		}
	}
	for i, m := range p.AllowMethods {
		if !slices.Contains(corsMethods, m) {
			return fieldErr(fmt.Sprintf("%s.allowMethods[%d]", f, i), "%q is not a supported HTTP method", m)
		}
	}
	for _, list := range []struct {
		name  string
		names []string
	}{{"allowHeaders", p.AllowHeaders}, {"exposeHeaders", p.ExposeHeaders}} {
		for i, h := range list.names {
			if h != "*" && !corsHeaderName.MatchString(h) {
				return fieldErr(fmt.Sprintf("%s.%s[%d]", f, list.name, i), "%q is not a valid header name", h)
			}
		}
	}
	if p.MaxAge != nil {
		d := p.MaxAge.AsDuration()
		switch {
		case d < time.Millisecond:
			return fieldErr(f+".maxAge", "%v: must be at least 1ms", d)
		case p.MaxAge.GetNanos() > 0:
			return fieldErr(f+".maxAge", "%v: only whole seconds are supported (Access-Control-Max-Age counts seconds)", d)
		}
	}
	return nil
}
