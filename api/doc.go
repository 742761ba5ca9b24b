// Package api holds the protobuf schemas Sextant must match on the wire with ztunnel
// (workload/ for istio.workload, security/ for istio.security) and their generated Go code.
package api
