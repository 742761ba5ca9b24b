// Package mesh reads the mesh-wide settings (root namespace, trust domain, cluster domain suffix)
// from the mesh config file users already keep for Istio.
package mesh
