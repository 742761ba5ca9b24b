package envoy

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/sextantmesh/sextant/pilot/model"
)

// sidecarL4Match is istiod's matchTCP / matchTLS for a sidecar: the parts of a tcp or tls match decided
// by the proxy itself (port, gateways, sourceNamespace, sourceLabels), evaluated when its listeners are
// built. destinationSubnets are left to the caller: they become prefix ranges.
func sidecarL4Match(gateways []string, sourceNS string, sourceLabels map[string]string, matchPort, port uint32, proxyNS string,
	labels map[string]string) bool {
	if matchPort != 0 && matchPort != port {
		return false
	}
	if sourceNS != "" && sourceNS != proxyNS {
		return false
	}
	for k, v := range sourceLabels {
		if lv, ok := labels[k]; !ok || lv != v {
			return false
		}
	}
	return len(gateways) == 0 || slices.Contains(gateways, model.MeshGateway)
}

// gatewayL4Match is istiod's l4SingleMatch: on a gateway a tcp or tls match is decided by its port and
// gateways alone; sourceLabels, sourceNamespace and destinationSubnets do not restrict it.
func gatewayL4Match(gateways []string, matchPort, port uint32, gateway, vsNS string) bool {
	if matchPort != 0 && matchPort != port {
		return false
	}
	if len(gateways) == 0 {
		return true
	}
	for _, g := range gateways {
		if g != model.MeshGateway && ldsGatewayName(g, vsNS) == gateway {
			return true
		}
	}
	return false
}

// ldsGatewayName turns "gw", "ns/gw" or "gw.ns.svc.cluster.local" into NAMESPACE/NAME.
func ldsGatewayName(g, ns string) string {
	if strings.Contains(g, "/") {
		return g
	}
	if name, rest, ok := strings.Cut(g, "."); ok {
		gwNS, _, _ := strings.Cut(rest, ".")
		return gwNS + "/" + name
	}
	return ns + "/" + g
}

// l4Route is a chain a VirtualService tcp or tls route asks for on a sidecar's service port.
type l4Route struct {
	dnsCache  string // chainPlan.dnsCache
	dnsFamily cluster.Cluster_DnsLookupFamily
	// subnets are the destinationSubnets it matches as prefix ranges, in place of the service's addresses
	// (nil: the service's).
	subnets []*core.CidrRange
	sni     []string
	dests   []tcpDest
}

// sidecarTCP is what a VirtualService's tcp routes make of a sidecar's TCP port.
type sidecarTCP struct {
	subnetRoutes []l4Route // the routes whose matches all name destinationSubnets, one chain each
	def          []tcpDest // the first route taking every address; nil: the service's cluster
	noDefault    bool      // a subnet route matches the service's own address block: no default chain
}

// sidecarTCPRoutes is istiod's buildSidecarOutboundTCPFilterChainOpts for the tcp routes of vss (the
// VirtualServices for the host, in order) on port, for a proxy in proxyNS with labels: in route order, one
// VirtualService after the other, a route whose applying matches all name destinationSubnets gets a chain
// on them (all its matches' subnets), and the first route with an applying match without (or with no
// match at all) takes the rest and ends the walk over all of them. ownBlock are the service's address
// blocks (istiod's destination CIDRs: a subnet route naming exactly them replaces the default).
func sidecarTCPRoutes(push *model.PushContext, vss []*model.VirtualService, proxyNS string, labels map[string]string, port uint32,
	ownBlock []string) sidecarTCP {
	var out sidecarTCP
	for _, vs := range vss {
		for _, r := range vs.Spec.Tcp {
			if len(r.Route) == 0 {
				continue
			}
			dests := l4Destinations(push, vs, proxyNS, r.Route, port)
			if len(dests) == 0 {
				continue
			}
			if len(r.Match) == 0 {
				out.def = dests
				return out
			}
			var subnets []string
			for _, m := range r.Match {
				if !sidecarL4Match(m.Gateways, m.SourceNamespace, m.SourceLabels, m.Port, port, proxyNS, labels) {
					continue
				}
				if len(m.DestinationSubnets) == 0 {
					out.def = dests
					return out
				}
				subnets = append(subnets, m.DestinationSubnets...)
			}
			if len(subnets) == 0 {
				continue
			}
			out.subnetRoutes = append(out.subnetRoutes, l4Route{subnets: subnetRanges(subnets), dests: dests})
			if len(ownBlock) > 0 && slices.Equal(slices.Sorted(slices.Values(subnets)), slices.Sorted(slices.Values(ownBlock))) {
				out.noDefault = true
			}
		}
	}
	return out
}

// sidecarTLSRoutes is istiod's buildSidecarOutboundTLSFilterChainOpts for the tls routes of vss (the
// VirtualServices for the host, in order) on port: a chain per applying match, on its sniHosts as written
// and its destinationSubnets. As istiod's, a match's subnets stay in force for the matches after it that
// name none, in the later VirtualServices too; an SNI already matched on the same addresses by an earlier
// chain is left out (Envoy refuses two chains of one match).
func sidecarTLSRoutes(push *model.PushContext, vss []*model.VirtualService, proxyNS string, labels map[string]string,
	port uint32) []l4Route {
	var out []l4Route
	var cidrs []string
	claimed := map[string]bool{}
	for _, vs := range vss {
		for _, r := range vs.Spec.Tls {
			if len(r.Route) == 0 {
				continue
			}
			dests := l4Destinations(push, vs, proxyNS, r.Route, port)
			if len(dests) == 0 {
				continue
			}
			for _, m := range r.Match {
				if !sidecarL4Match(m.Gateways, m.SourceNamespace, m.SourceLabels, m.Port, port, proxyNS, labels) {
					continue
				}
				if len(m.DestinationSubnets) > 0 {
					cidrs = m.DestinationSubnets
				}
				var ranges []*core.CidrRange
				if len(cidrs) > 0 {
					ranges = subnetRanges(cidrs)
				}
				at := strings.Join(cidrs, ",") + "|"
				var sni []string
				for _, h := range m.SniHosts {
					if claimed[at+h] {
						continue
					}
					claimed[at+h] = true
					sni = append(sni, h)
				}
				if len(sni) > 0 {
					out = append(out, l4Route{subnets: ranges, sni: sni, dests: dests})
				}
			}
		}
	}
	return out
}

// hasL4Routes reports whether one of vss has tcp or tls routes.
func hasL4Routes(vss []*model.VirtualService) bool {
	return slices.ContainsFunc(vss, func(vs *model.VirtualService) bool { return len(vs.Spec.Tcp) > 0 || len(vs.Spec.Tls) > 0 })
}

// subnetRanges are destinationSubnets as prefix ranges, as istiod's: an address is its /32 (/128), and a
// range on the unspecified address (0.0.0.0/N) is left out, matching every address.
func subnetRanges(subnets []string) []*core.CidrRange {
	sorted := slices.Sorted(slices.Values(subnets))
	out := make([]*core.CidrRange, 0, len(sorted))
	for _, s := range sorted {
		if c := vipCIDR(s); c != nil && c.AddressPrefix != "0.0.0.0" {
			out = append(out, c)
		}
	}
	return out
}

// rangesContain reports whether one of ranges holds address ip.
func rangesContain(ranges []*core.CidrRange, ip string) bool {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return false
	}
	for _, r := range ranges {
		if p, err := netip.ParsePrefix(r.AddressPrefix + "/" + strconv.FormatUint(uint64(r.PrefixLen.GetValue()), 10)); err == nil &&
			p.Masked().Contains(a) {
			return true
		}
	}
	return false
}

// gatewayTCPRouteDests returns the destinations of the first tcp route of vs applying on a gateway's
// server port, nil for none.
func gatewayTCPRouteDests(push *model.PushContext, vs *model.VirtualService, proxyNS, gateway string, port uint32) []tcpDest {
	if vs == nil {
		return nil
	}
	for _, r := range vs.Spec.Tcp {
		matched := len(r.Match) == 0
		for _, m := range r.Match {
			if gatewayL4Match(m.Gateways, m.Port, port, gateway, vs.Namespace) {
				matched = true
				break
			}
		}
		if matched {
			if d := l4Destinations(push, vs, proxyNS, r.Route, port); len(d) > 0 {
				return d
			}
		}
	}
	return nil
}

type sniRoute struct {
	sni       []string
	dests     []tcpDest
	dnsCache  string // chainPlan.dnsCache
	dnsFamily cluster.Cluster_DnsLookupFamily
}

// gatewaySNIRoutes returns a chain per tls route match of vs applying on a gateway's server port: its
// sniHosts as written, as istiod's (not narrowed to the server's hosts), and the route's destinations.
func gatewaySNIRoutes(push *model.PushContext, vs *model.VirtualService, proxyNS, gateway string, port uint32) []sniRoute {
	if vs == nil {
		return nil
	}
	var out []sniRoute
	for _, r := range vs.Spec.Tls {
		dests := l4Destinations(push, vs, proxyNS, r.Route, port)
		if len(r.Route) == 0 || len(dests) == 0 {
			continue
		}
		for _, m := range r.Match {
			if gatewayL4Match(m.Gateways, m.Port, port, gateway, vs.Namespace) && len(m.SniHosts) > 0 {
				out = append(out, sniRoute{sni: slices.Compact(slices.Sorted(slices.Values(m.SniHosts))), dests: dests})
			}
		}
	}
	return out
}

// l4Destinations turns route destinations into clusters. A destination without a port takes the only
// port of its service, else port. Weights matter only with several destinations; zero weights are left out.
func l4Destinations(push *model.PushContext, vs *model.VirtualService, proxyNS string,
	dests []*networking.RouteDestination, port uint32) []tcpDest {
	var out []tcpDest
	for _, d := range dests {
		dst := d.GetDestination()
		if dst.GetHost() == "" {
			continue
		}
		host := model.ResolveHost(dst.Host, vs.Namespace, push.Mesh.DomainSuffix)
		p := dst.GetPort().GetNumber()
		if p == 0 {
			p = port
			if svc := push.ServiceForHostname(proxyNS, host); svc != nil && len(svc.Ports) == 1 {
				p = svc.Ports[0].Port
			}
		}
		if len(dests) > 1 && d.Weight <= 0 {
			continue
		}
		out = append(out, tcpDest{name: OutboundClusterName(p, dst.Subset, host), weight: uint32(max(d.Weight, 1)), host: host,
			subset: dst.Subset})
	}
	return out
}
