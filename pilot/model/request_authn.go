package model

import (
	"slices"

	security "istio.io/api/security/v1beta1"

	"github.com/sextantmesh/sextant/pilot/config"
)

// requestAuthnIndex holds the RequestAuthentications by namespace and the key sets fetched for their
// jwksUri (or their issuers' OpenID discovery): both are what a proxy's JWT filter is built from, so they
// are one index, rebuilt when either changes.
type requestAuthnIndex struct {
	byNamespace map[string][]*config.Config // oldest first
	fetched     map[config.Key]*config.FetchedKeySet
}

func buildRequestAuthn(reader ConfigReader) *requestAuthnIndex {
	idx := &requestAuthnIndex{byNamespace: buildNamespaced(reader, config.RequestAuthentication).byNamespace,
		fetched: map[config.Key]*config.FetchedKeySet{}}
	for _, c := range reader.ListUnsorted(config.FetchedJWKS) {
		if ks, ok := c.Spec.(*config.FetchedKeySet); ok {
			idx.fetched[c.Key] = ks
		}
	}
	return idx
}

// RequestAuthentications returns the RequestAuthentications applying to a workload in ns with labels, the
// root namespace's (mesh-wide) first, then its own namespace's, each oldest first. They attach as
// AuthorizationPolicies do (istiod's WorkloadPolicyMatcher): by selector, or by targetRefs to the Gateway
// API Gateway whose pods carry its gateway-name label; never to a sidecar through targetRefs.
func (ps *PushContext) RequestAuthentications(ns string, labels map[string]string) []*config.Config {
	var out []*config.Config
	namespaces := [2]string{ps.Mesh.RootNamespace, ns} // an array: no allocation on every LDS request
	count := 2
	if ns == ps.Mesh.RootNamespace {
		count = 1
	}
	for _, n := range namespaces[:count] {
		for _, c := range ps.requestAuthn.byNamespace[n] {
			if policyAttaches(c.Namespace, c.Spec.(*security.RequestAuthentication), ns, labels) {
				out = append(out, c)
			}
		}
	}
	return out
}

// RequestAuthenticationsInNamespace returns every RequestAuthentication defined in ns, oldest first.
func (ps *PushContext) RequestAuthenticationsInNamespace(ns string) []*config.Config {
	return slices.Clone(ps.requestAuthn.byNamespace[ns])
}

// JWKS returns the key set a JWT rule verifies tokens with: its inline jwks, else the one fetched for its
// jwksUri (or its issuer's OpenID discovery), the last good one if a later fetch failed. ok is false when
// there is none (never fetched, or every fetch failed); problem then says why, and the rule must reject
// every token. problem also reports a failing refresh while a last good set is still in use.
func (ps *PushContext) JWKS(rule *security.JWTRule) (jwks string, ok bool, problem string) {
	if rule.GetJwks() != "" {
		return rule.GetJwks(), true, ""
	}
	ks := ps.requestAuthn.fetched[config.FetchedJWKSKey(rule.GetIssuer(), rule.GetJwksUri())]
	switch {
	case ks == nil:
		return "", false, "no key set fetched yet"
	case ks.JWKS == "":
		return "", false, ks.Error
	}
	return ks.JWKS, true, ks.Error
}

// RequestAuthnID identifies the RequestAuthentication index and the key sets fetched for it.
func (ps *PushContext) RequestAuthnID() any { return ps.requestAuthn }
