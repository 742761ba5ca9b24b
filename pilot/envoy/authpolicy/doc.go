// Package authpolicy translates the security policies applying to a proxy (AuthorizationPolicy,
// RequestAuthentication) into the Envoy filters that enforce them: RBAC, ext_authz and jwt_authn.
package authpolicy
