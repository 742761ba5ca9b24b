package envoy

import (
	"fmt"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
)

// The layouts of a sidecar's outbound HTTP routes (Options.OutboundHTTPRoutes).
//
// By service (the default): a Kubernetes Service's HTTP ports are served on an outbound listener of its
// ClusterIP, whose route configuration "HOST:PORT" holds the service's virtual host alone, answering any
// Host, as istiod serves a port of unknown protocol. Adding or changing a service then sends each sidecar
// one listener and one small route configuration instead of its whole table for the port. The port's
// shared configuration "PORT" keeps the hosts without a ClusterIP (headless Services, ServiceEntries,
// VirtualService hosts outside the registry) for connections to addresses no service listens on.
//
// By port (istiod's): every service's virtual host in the port's shared configuration. The difference: a
// request to one service's ClusterIP naming another service's host goes to the service dialled by service,
// to the named one by port; and a request to an address that is no ClusterIP (a pod's) naming a Service's
// host passes through to that address by service, goes to the named Service by port.
const (
	RoutesByService = "service"
	RoutesByPort    = "port"
)

// ParseOutboundHTTPRoutes reads Options.OutboundHTTPRoutes: "" (by service), "service" or "port"; it
// reports whether the layout is by port.
func ParseOutboundHTTPRoutes(s string) (byPort bool, err error) {
	switch s {
	case "", RoutesByService:
		return false, nil
	case RoutesByPort:
		return true, nil
	}
	return false, fmt.Errorf("outbound HTTP routes %q: want %s or %s", s, RoutesByService, RoutesByPort)
}

// ownsHTTPListener reports whether svc's port p is served by service: an HTTP port of a Kubernetes Service
// with ClusterIPs of the proxy's family (mode), host addresses all. Only a ClusterIP is what clients reach
// by the service's DNS name; a ServiceEntry's addresses need not be (a client resolving the host's real
// address must still find its virtual host in the port's table). A ClusterIP of another family reaches no
// HTTP listener of the proxy's, and stays so; so does a port of the sidecar's own listeners (the capture
// ports, health, Prometheus), on which istiod builds no HTTP listener.
func ownsHTTPListener(m *mesh.Config, svc *model.Service, p *model.Port, mode ipMode) bool {
	if !p.Protocol.IsHTTP() || svc.Source.Kind != config.Service || wildcardReserved(m, p.Port) {
		return false
	}
	vips := serviceVIPs(svc, mode)
	for _, v := range vips {
		r := vipCIDR(v)
		if r == nil || r.PrefixLen.GetValue() < ldsHostBits(r.AddressPrefix) || isUnspecifiedIP(r.AddressPrefix) {
			return false
		}
	}
	return len(vips) > 0
}

// listenedPort reports whether svc's port p goes on listeners of the service's own addresses: any port but
// UDP (no listener) and HTTP, which the port's shared listener serves unless served by service.
func listenedPort(m *mesh.Config, svc *model.Service, p *model.Port, mode ipMode, byService bool) bool {
	switch {
	case p.Protocol == model.ProtocolUDP:
		return false
	case p.Protocol.IsHTTP():
		return byService && ownsHTTPListener(m, svc, p, mode)
	}
	return true
}

// byServiceOn reports whether services' HTTP ports on port may go by service in the scope: without egress
// listeners, or where the port's routes are those of a Sidecar's catch-all egress listener binding no
// address (a listener with a port or a bind keeps istiod's layout: it decides the addresses itself).
func (s *Scope) byServiceOn(port uint32) bool {
	if s.listeners == nil {
		return true
	}
	el := s.egressForRoute(port)
	return el != nil && el.port == 0 && el.bind == "" && !el.bindToPort
}

// ownsRoute reports whether svc's port sp has a route configuration of its own (routes by service).
func (b *routeBuilder) ownsRoute(svc *model.Service, sp *model.Port) bool {
	return b.byService && b.scope.byServiceOn(sp.Port) && ownsHTTPListener(b.push.Mesh, svc, sp, b.mode)
}
