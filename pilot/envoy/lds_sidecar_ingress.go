package envoy

import (
	"cmp"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/sextantmesh/sextant/pilot/model"
)

// A Sidecar's ingress listeners, as istiod reads them (pilot/pkg/networking/core/listener_inbound.go
// buildInboundChainConfigs, cluster.go buildInboundClustersFromSidecar): when a Sidecar with ingress
// listeners applies to a proxy, its inbound ports are those listeners' ports, and the target ports of the
// services selecting the workload get no chain and no cluster of their own (istiod's
// PILOT_ALLOW_SIDECAR_SERVICE_INBOUND_LISTENER_MERGE is off by default). Each port's protocol is the
// listener's; its cluster inbound|PORT|| sends to the defaultEndpoint, whatever the mesh's inbound traffic
// policy:
//   - unset, or ":PORT": the connection's original destination (ORIGINAL_DST);
//   - 127.0.0.1:PORT (or [::1]:PORT): the loopback address of the proxy's IP family, STATIC;
//   - 0.0.0.0:PORT (or [::]:PORT): the proxy's first IPv4 (IPv6) address, else the loopback, STATIC;
//   - unix://PATH: that socket, STATIC.
//
// Every cluster but a loopback one binds its connections to 127.0.0.6, which iptables lets pass.

// unixAddressPrefix marks a Unix domain socket address, as Istio spells it.
const unixAddressPrefix = "unix://"

// sidecarIngressPorts returns the inbound ports of a proxy (with addresses ips) under sidecar, whose ingress
// listeners are set, sorted by port; the first listener of a port keeps it (istiod's conflict rule). targets
// are the workload's service ports: a service reaching an ingress port lends its cluster its
// DestinationRule's connection pool (for the ingress port's number), as istiod's findOrCreateService.
// captureNone is for a proxy without capture, on which a listener of the default capture mode binds its
// port (istiod's getBindToPort).
func sidecarIngressPorts(sidecar *networking.Sidecar, ips []string, targets []inboundPort, captureNone bool) []inboundPort {
	seen := map[uint32]bool{}
	var out []inboundPort
	for _, in := range sidecar.Ingress {
		n := in.GetPort().GetNumber()
		if n == 0 || seen[n] {
			continue
		}
		seen[n] = true
		p := inboundPort{port: n, protocol: model.ParseProtocol(in.GetPort().GetProtocol()), ingress: true, bind: in.GetBind(),
			bound: in.GetCaptureMode() == networking.CaptureMode_NONE || captureNone && in.GetCaptureMode() == networking.CaptureMode_DEFAULT}
		var ok bool
		p.endpoint, p.endpointPort, ok = ingressEndpoint(in.GetDefaultEndpoint(), ips)
		p.skipCluster = !ok
		p.pool = cmp.Or(in.GetConnectionPool(), sidecar.GetInboundConnectionPool())
		if i := slices.IndexFunc(targets, func(t inboundPort) bool { return t.port == n }); i >= 0 {
			p.svc, p.svcPort = targets[i].svc, n
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b inboundPort) int { return cmp.Compare(a.port, b.port) })
	return out
}

// withInboundPool gives the clusters of ports (a workload's service ports) the Sidecar's
// inboundConnectionPool, as istiod does for every inbound cluster.
func withInboundPool(ports []inboundPort, pool *networking.ConnectionPoolSettings) {
	for i := range ports {
		ports[i].pool = pool
	}
}

// ingressEndpoint resolves an ingress listener's defaultEndpoint for a proxy with addresses ips, as istiod:
// the address ("" for the original destination) and port its cluster sends to; ok is false when it cannot
// be read (validation refuses such values), and istiod then builds no cluster.
func ingressEndpoint(defaultEndpoint string, ips []string) (addr string, port uint32, ok bool) {
	if defaultEndpoint == "" {
		return "", 0, true
	}
	if strings.HasPrefix(defaultEndpoint, unixAddressPrefix) {
		return defaultEndpoint, 0, true
	}
	host, portText, err := net.SplitHostPort(defaultEndpoint)
	if err != nil || portText == "" {
		return "", 0, false
	}
	n, err := strconv.Atoi(portText)
	if err != nil || n < 0 || n > 65535 {
		return "", 0, false
	}
	var v4, v6 string
	for _, ip := range ips {
		a, err := netip.ParseAddr(ip)
		switch {
		case err != nil:
		case a.Is4() && v4 == "":
			v4 = ip
		case a.Is6() && !a.Is4In6() && v6 == "":
			v6 = ip
		}
	}
	// istiod's loopback addresses follow the proxy's IP family: IPv4 (also without addresses), IPv6, or both.
	v6Only := v6 != "" && v4 == ""
	switch host {
	case "0.0.0.0":
		addr = cmp.Or(v4, "127.0.0.1")
	case "::":
		addr = cmp.Or(v6, "::1")
	case "127.0.0.1":
		addr = "127.0.0.1"
		if v6Only {
			addr = "::1"
		}
	case "::1":
		addr = "::1"
		if v6 == "" {
			addr = "127.0.0.1"
		}
	}
	return addr, uint32(n), true
}
