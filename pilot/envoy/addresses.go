package envoy

import (
	"net/netip"
	"strings"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/model"
)

// A proxy's own addresses follow its IP family, as istiod's under its defaults (no ISTIO_DUAL_STACK): a
// proxy whose addresses are all IPv6 listens on [::] and ::1 and binds its connections to its own workload
// to ::6; any other (IPv4, dual-stack, or without addresses) on 0.0.0.0, 127.0.0.1 and 127.0.0.6. The
// family is dnsLookupFamily's: V6_ONLY for an IPv6-only proxy, V4_ONLY otherwise.

// wildcardIP is the unspecified address of the proxy's family.
func wildcardIP(family cluster.Cluster_DnsLookupFamily) string {
	if family == cluster.Cluster_V6_ONLY {
		return "::"
	}
	return "0.0.0.0"
}

// loopbackIP is the loopback address of the proxy's family.
func loopbackIP(family cluster.Cluster_DnsLookupFamily) string {
	if family == cluster.Cluster_V6_ONLY {
		return "::1"
	}
	return "127.0.0.1"
}

// inboundSourceIP is the source address of a sidecar's connections to its own workload, which Istio's
// iptables rules let pass unredirected: 127.0.0.6, or ::6 for an IPv6-only proxy.
func inboundSourceIP(family cluster.Cluster_DnsLookupFamily) string {
	if family == cluster.Cluster_V6_ONLY {
		return "::6"
	}
	return "127.0.0.6"
}

// isUnspecifiedIP reports whether ip is 0.0.0.0 or [::]: a listener there takes its port's connections to
// any address of that family that no listener of its own takes.
func isUnspecifiedIP(ip string) bool { return ip == "0.0.0.0" || ip == "::" }

// ipMode is istiod's IP mode of a proxy: the families of its addresses.
type ipMode uint8

const (
	ipv4Only  ipMode = iota // every address IPv4, or none
	ipv6Only                // every address IPv6
	dualStack               // both
)

// ipModeOf is the IP mode of a proxy with addresses ips (IPv4-mapped IPv6 addresses count as IPv6, as in
// istiod).
func ipModeOf(ips []string) ipMode {
	v4, v6 := false, false
	for _, ip := range ips {
		if a, err := netip.ParseAddr(ip); err == nil {
			v4 = v4 || a.Is4()
			v6 = v6 || !a.Is4()
		}
	}
	switch {
	case v4 && v6:
		return dualStack
	case v6:
		return ipv6Only
	}
	return ipv4Only
}

// family is the proxy's family for DNS and for its own addresses: IPv6 for an IPv6-only proxy, else IPv4.
func (m ipMode) family() cluster.Cluster_DnsLookupFamily {
	if m == ipv6Only {
		return cluster.Cluster_V6_ONLY
	}
	return cluster.Cluster_V4_ONLY
}

// variant tells apart cached configuration that depends on the IP mode; "" for IPv4, the usual one.
func (m ipMode) variant() string {
	switch m {
	case ipv6Only:
		return "\x00ipv6"
	case dualStack:
		return "\x00dual"
	}
	return ""
}

// serviceVIPs are svc's addresses a proxy of mode m reaches it on: a Kubernetes Service's kubeVIPs, a
// ServiceEntry's every address (istiod builds a service per address, whatever its family).
func serviceVIPs(svc *model.Service, m ipMode) []string {
	if svc.Source.Kind != config.Service {
		return svc.Addresses
	}
	return kubeVIPs(svc.Addresses, m)
}

// kubeVIPs are the ClusterIPs of a Kubernetes Service a proxy of mode m reaches it on, as istiod's
// GetAllAddressesForProxy under its defaults (FilterAddressesByIPFamily): those of the proxy's family, and
// for a dual-stack proxy those of the family of the first; none when the Service has none of the proxy's
// family. (A ServiceEntry's addresses are not filtered.)
func kubeVIPs(addrs []string, m ipMode) []string {
	if len(addrs) == 0 {
		return addrs
	}
	wantV4 := m == ipv4Only
	if m == dualStack {
		wantV4 = addrIs4(addrs[0])
	}
	n := 0
	for _, a := range addrs {
		if addrIs4(a) == wantV4 {
			n++
		}
	}
	if n == len(addrs) {
		return addrs // nearly always (one family): no copy
	}
	out := make([]string, 0, n)
	for _, a := range addrs {
		if addrIs4(a) == wantV4 {
			out = append(out, a)
		}
	}
	return out
}

// addrIs4 reports whether a, an address or a CIDR block, is IPv4.
func addrIs4(a string) bool {
	if strings.Contains(a, "/") {
		p, err := netip.ParsePrefix(a)
		return err == nil && p.Addr().Is4()
	}
	ip, err := netip.ParseAddr(a) // no error value built for an address
	return err == nil && ip.Is4()
}
