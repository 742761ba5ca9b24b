package ztunnel

import "github.com/sextantmesh/sextant/pilot/model"

// Type URLs of ztunnel's two types.
const (
	AddressType       = "type.googleapis.com/istio.workload.Address"
	AuthorizationType = "type.googleapis.com/istio.security.Authorization"
)

// Policies returns, by type URL, the rules the transport must follow when it sends ztunnel's types: ztunnel
// subscribes to everything with a first request naming nothing, and as the types hold every workload and
// policy of the mesh, only a ztunnel may have them on an authenticated stream.
func Policies() map[string]model.TypePolicy {
	return map[string]model.TypePolicy{
		AddressType:       {LegacyWildcard: true, ZtunnelOnly: true},
		AuthorizationType: {LegacyWildcard: true, ZtunnelOnly: true},
	}
}
