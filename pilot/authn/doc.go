// Package authn answers who is calling: a workload identity (SPIFFE) proven by a client certificate the
// mesh CA issued or by a Kubernetes service-account token, never by what the caller claims.
package authn
