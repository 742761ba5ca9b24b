// Package envoy generates Envoy configuration (CDS, EDS, LDS, RDS) for sidecars, gateways and proxyless
// gRPC clients from a PushContext: pure functions of (snapshot, proxy, subscription), shared output cached.
package envoy
