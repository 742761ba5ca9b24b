package config

import (
	"fmt"
	"net/url"
	"regexp"
	"strconv"

	security "istio.io/api/security/v1beta1"
)

// validStrictHeaderName is istiod's rule for a header name a JWT claim or payload is copied into.
var validStrictHeaderName = regexp.MustCompile(`^[-_A-Za-z0-9]+$`)

// validateRequestAuthentication rejects what istiod's validation rejects (and what Envoy's jwt_authn filter
// would refuse): each rule needs an issuer or a jwksUri, an http(s) jwksUri, a key set that parses, named
// token locations and header names.
func validateRequestAuthentication(s *security.RequestAuthentication) error {
	if err := validateTargetRefs(s.GetSelector(), s.GetTargetRef(), s.GetTargetRefs()); err != nil {
		return err
	}
	for i, r := range s.JwtRules {
		f := fmt.Sprintf("spec.jwtRules[%d]", i)
		if r == nil {
			return fieldErr(f, "null")
		}
		if r.Issuer == "" && r.JwksUri == "" {
			return fieldErr(f+".issuer", "required unless jwksUri is set")
		}
		for j, a := range r.Audiences {
			if a == "" {
				return fieldErr(fmt.Sprintf("%s.audiences[%d]", f, j), "empty")
			}
		}
		if r.JwksUri != "" {
			if err := ValidateJWKSURI(r.JwksUri); err != nil {
				return fieldErr(f+".jwksUri", "%v", err)
			}
		}
		if r.Jwks != "" {
			if err := ValidateJWKS(r.Jwks); err != nil {
				return fieldErr(f+".jwks", "%v", err)
			}
		}
		for j, h := range r.FromHeaders {
			if h.GetName() == "" {
				return fieldErr(fmt.Sprintf("%s.fromHeaders[%d].name", f, j), "required")
			}
		}
		for j, p := range r.FromParams {
			if p == "" {
				return fieldErr(fmt.Sprintf("%s.fromParams[%d]", f, j), "empty")
			}
		}
		for j, c := range r.FromCookies {
			if c == "" {
				return fieldErr(fmt.Sprintf("%s.fromCookies[%d]", f, j), "empty")
			}
		}
		if h := r.OutputPayloadToHeader; h != "" && !validStrictHeaderName.MatchString(h) {
			return fieldErr(f+".outputPayloadToHeader", "%q is not a valid header name", h)
		}
		for j, ch := range r.OutputClaimToHeaders {
			cf := fmt.Sprintf("%s.outputClaimToHeaders[%d]", f, j)
			if ch.GetClaim() == "" {
				return fieldErr(cf+".claim", "required")
			}
			if !validStrictHeaderName.MatchString(ch.GetHeader()) {
				return fieldErr(cf+".header", "%q is not a valid header name", ch.GetHeader())
			}
		}
		if t := r.Timeout; t != nil && (t.CheckValid() != nil || t.AsDuration() <= 0) {
			return fieldErr(f+".timeout", "must be a positive duration")
		}
		for j, c := range r.SpaceDelimitedClaims {
			if c == "" {
				return fieldErr(fmt.Sprintf("%s.spaceDelimitedClaims[%d]", f, j), "empty")
			}
		}
	}
	return nil
}

// ValidateJWKSURI checks a jwksUri as istiod does: an http or https URL with a host.
func ValidateJWKSURI(uri string) error {
	u, err := url.Parse(uri)
	if err != nil {
		return fmt.Errorf("not a URL: %v", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("URI scheme %q is not supported (want http or https)", u.Scheme)
	}
	if u.Hostname() == "" {
		return fmt.Errorf("no host")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.ParseInt(p, 10, 64); err != nil || !validPort(n) {
			return fmt.Errorf("port %q is not a port number", p)
		}
	}
	return nil
}
