package envoymodel

import jwtpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"

// jwtAuthn refuses the filter until it is modelled: a request it would see has no known fate.
func (s *stream) jwtAuthn(name string, _ *jwtpb.JwtAuthentication) (bool, error) {
	return false, notModelled("jwt_authn filter %s", name)
}
