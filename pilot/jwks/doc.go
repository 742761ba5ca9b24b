// Package jwks fetches the key sets RequestAuthentication rules name (jwksUri, or the issuer's OpenID
// discovery) and keeps them in the config store as FetchedJWKS objects, outside the generators.
package jwks
