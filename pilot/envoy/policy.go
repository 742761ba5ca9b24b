package envoy

import (
	"strings"

	"github.com/sextantmesh/sextant/pilot/model"
)

// Type URLs of the resources the Envoy generators serve (ByTypeURL).
const (
	ClusterType  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	EndpointType = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	ListenerType = "type.googleapis.com/envoy.config.listener.v3.Listener"
	RouteType    = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	// VirtualHostType is VHDS: virtual hosts named ROUTE_CONFIG/NAME, delivered apart from their route
	// configuration so one changed host does not re-send the whole table (delta xDS only).
	VirtualHostType = "type.googleapis.com/envoy.config.route.v3.VirtualHost"
	SecretType      = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
)

// Policies returns, by type URL, the rules of Envoy's xDS client that the transport must follow when it
// sends these types. SDS has none.
func Policies() map[string]model.TypePolicy {
	return map[string]model.TypePolicy{
		// Make-before-break: clusters exist before their load assignments fill them, listeners before the
		// routes they name. Clusters and load assignments that a push removes go after the listeners and
		// routes that stopped naming them.
		ClusterType:  {Order: 1, LegacyWildcard: true, RemoveLast: true, FollowUp: EndpointType, FollowUpOf: assignmentOfCluster},
		EndpointType: {Order: 2, RemoveLast: true},
		ListenerType: {Order: 3, LegacyWildcard: true},
		RouteType:    {Order: 4},
		// VHDS over ADS subscribes with no names and keeps the virtual hosts whose ROUTE_CONFIG/ prefix it
		// has a route configuration for.
		VirtualHostType: {Order: 5, LegacyWildcard: true, Parent: RouteType, ParentOf: RouteConfigOfVirtualHost},
	}
}

// assignmentOfCluster names a cluster's load assignment: Sextant's clusters name theirs after themselves
// (eds_cluster_config.service_name).
func assignmentOfCluster(cluster string) string { return cluster }

// RouteConfigOfVirtualHost returns ROUTE_CONFIG of a VHDS resource name ROUTE_CONFIG/NAME: Envoy files a
// virtual host under the text before the last "/".
func RouteConfigOfVirtualHost(name string) string {
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		return name[:i]
	}
	return ""
}
