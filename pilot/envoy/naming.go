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
	var buf [256]byte
	return string(appendOutboundClusterName(buf[:0], port, subset, host))
}

// appendOutboundClusterName appends OutboundClusterName(port, subset, host) to b.
func appendOutboundClusterName(b []byte, port uint32, subset, host string) []byte {
	b = append(b, Outbound...)
	b = append(b, '|')
	b = strconv.AppendUint(b, uint64(port), 10)
	b = append(b, '|')
	b = append(b, subset...)
	b = append(b, '|')
	return append(b, host...)
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
	// Cut rather than Split: EDS parses every watched name on each push, and the slices were garbage.
	direction, rest, ok1 := strings.Cut(name, "|")
	portText, rest, ok2 := strings.Cut(rest, "|")
	subset, host, ok3 := strings.Cut(rest, "|")
	if !ok1 || !ok2 || !ok3 || strings.Contains(host, "|") {
		return ClusterName{}, false
	}
	port, err := strconv.ParseUint(portText, 10, 32)
	if err != nil || (direction != Outbound && direction != Inbound) {
		return ClusterName{}, false
	}
	return ClusterName{Direction: direction, Port: uint32(port), Subset: subset, Host: host}, true
}

// SNIDNATClusterName is outbound_.PORT_.SUBSET_.HOST: Istio's mTLS server name for a destination, which a
// gateway's AUTO_PASSTHROUGH server reads from the client's TLS handshake to pick the cluster of that name.
func SNIDNATClusterName(port uint32, subset, host string) string {
	var buf [256]byte
	return string(appendSNIDNATClusterName(buf[:0], port, subset, host))
}

// appendSNIDNATClusterName appends SNIDNATClusterName(port, subset, host) to b.
func appendSNIDNATClusterName(b []byte, port uint32, subset, host string) []byte {
	b = append(b, Outbound+"_."...)
	b = strconv.AppendUint(b, uint64(port), 10)
	b = append(b, "_."...)
	b = append(b, subset...)
	b = append(b, "_."...)
	return append(b, host...)
}

// ParseSNIDNATClusterName splits outbound_.PORT_.SUBSET_.HOST, as istiod's ParseSubsetKey does for that form.
func ParseSNIDNATClusterName(name string) (ClusterName, bool) {
	rest, ok := strings.CutPrefix(name, Outbound+"_.")
	if !ok {
		return ClusterName{}, false
	}
	portText, rest, ok1 := strings.Cut(rest, "_.")
	subset, host, ok2 := strings.Cut(rest, "_.")
	if !ok1 || !ok2 || host == "" || strings.Contains(host, "_.") {
		return ClusterName{}, false
	}
	port, err := strconv.ParseUint(portText, 10, 32)
	if err != nil {
		return ClusterName{}, false
	}
	return ClusterName{Direction: Outbound, Port: uint32(port), Subset: subset, Host: host}, true
}
