package envoy

import (
	"strconv"
	"strings"
)

// Cluster names, as istiod names them so existing tooling and habits fit.
const (
	BlackHoleCluster          = "BlackHoleCluster"
	PassthroughCluster        = "PassthroughCluster"
	InboundPassthroughCluster = "InboundPassthroughCluster"
)

// Direction of a cluster.
const (
	Outbound = "outbound"
	Inbound  = "inbound"
)

// OutboundClusterName is outbound|PORT|SUBSET|HOST.
func OutboundClusterName(port uint32, subset, host string) string {
	return Outbound + "|" + strconv.FormatUint(uint64(port), 10) + "|" + subset + "|" + host
}

// InboundClusterName is inbound|PORT|| for the workload port PORT.
func InboundClusterName(port uint32) string {
	return Inbound + "|" + strconv.FormatUint(uint64(port), 10) + "||"
}

// ClusterName is a parsed cluster name.
type ClusterName struct {
	Direction string
	Port      uint32
	Subset    string
	Host      string
}

// ParseClusterName splits DIRECTION|PORT|SUBSET|HOST.
func ParseClusterName(name string) (ClusterName, bool) {
	parts := strings.Split(name, "|")
	if len(parts) != 4 {
		return ClusterName{}, false
	}
	port, err := strconv.ParseUint(parts[1], 10, 32)
	if err != nil || (parts[0] != Outbound && parts[0] != Inbound) {
		return ClusterName{}, false
	}
	return ClusterName{Direction: parts[0], Port: uint32(port), Subset: parts[2], Host: parts[3]}, true
}
