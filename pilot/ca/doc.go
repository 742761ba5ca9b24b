// Package ca is the mesh certificate authority: its key material (Istio's cacerts layout, or a
// self-signed root), workload certificates for verified identities, and the serving certificate of 15012.
package ca
