package envoy

import (
	"slices"
	"strconv"
	"strings"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/xds"
)

// Scope is what one proxy can see: the services it may call (exportTo and its Sidecar's egress hosts),
// one per hostname, sorted by hostname.
type Scope struct {
	Namespace string
	Sidecar   *config.Config // nil when none applies
	Services  []*model.Service
	byHost    map[string]*model.Service
	// RegistryOnly is set when traffic to destinations outside Services must be refused (the outbound
	// traffic policy is REGISTRY_ONLY, or names an egress proxy Sextant cannot send to).
	RegistryOnly bool
	// egress are its Sidecar's egress hosts (nil without a Sidecar): they also choose the VirtualServices
	// whose hosts outside the registry get virtual hosts (hostVirtualServices).
	egress []egressHost
	// routePorts are the HTTP port numbers of Services, sorted; routePortsByName the same sorted as
	// route configuration names ("10000" before "9080"). Every sidecar push reads them.
	routePorts, routePortsByName []uint32
}

// Service returns the service the proxy sees for host, or nil.
func (s *Scope) Service(host string) *model.Service { return s.byHost[host] }

// scopeID is whom a scope is for. It is built from the services and Sidecars (and not the snapshot version),
// so endpoint-only pushes reuse scopes and everything cached against them.
type scopeID struct {
	namespace string
	sidecar   *config.Config
}

// scopeFor returns the proxy's scope. Proxies in one namespace under the same Sidecar share it.
func (g *Generators) scopeFor(proxy *xds.Proxy, push *model.PushContext) *Scope {
	sidecar := push.Sidecar(proxy.Namespace, proxy.Labels)
	id, inputs := scopeID{proxy.Namespace, sidecar}, [3]any{push.ServicesID(), push.SidecarsID(), push.Mesh}
	s, _ := g.scopes.getOrBuild(id, inputs, func() (*Scope, error) { return buildScope(push, proxy.Namespace, sidecar), nil })
	return s
}

func buildScope(push *model.PushContext, ns string, sidecar *config.Config) *Scope {
	var egress []egressHost
	if sidecar != nil {
		egressListeners := sidecar.Spec.(*networking.Sidecar).Egress
		if len(egressListeners) == 0 {
			// istiod's default: a Sidecar without egress (one that only sets an outbound traffic policy, say)
			// sees every service, as if there were none.
			egressListeners = []*networking.IstioEgressListener{{Hosts: []string{"*/*"}}}
		}
		for _, eg := range egressListeners {
			for _, h := range eg.Hosts {
				hostNS, host, _ := strings.Cut(h, "/")
				if hostNS == "." {
					hostNS = ns
				}
				egress = append(egress, egressHost{namespace: hostNS, host: host})
			}
		}
	}
	s := &Scope{Namespace: ns, Sidecar: sidecar, byHost: map[string]*model.Service{}, RegistryOnly: registryOnly(push.Mesh, sidecar),
		egress: egress}
	for _, svc := range push.AllServices() {
		if _, seen := s.byHost[svc.Hostname]; seen {
			continue
		}
		chosen := push.ServiceForHostname(ns, svc.Hostname)
		if chosen == nil {
			continue
		}
		if sidecar != nil && !egressAllows(egress, chosen) {
			continue
		}
		s.byHost[chosen.Hostname] = chosen
		s.Services = append(s.Services, chosen)
	}
	s.routePorts = httpPorts(s.Services)
	s.routePortsByName = slices.Clone(s.routePorts)
	slices.SortFunc(s.routePortsByName, func(a, b uint32) int {
		return strings.Compare(strconv.FormatUint(uint64(a), 10), strconv.FormatUint(uint64(b), 10))
	})
	return s
}

// registryOnly is the outbound traffic policy of a proxy under sidecar (nil: none): its Sidecar's, else the
// mesh's. An egress proxy is not implemented; refusing what it would have carried keeps the lock-down it is
// usually there for, where passing it through directly would bypass it.
func registryOnly(m *mesh.Config, sidecar *config.Config) bool {
	if sidecar != nil {
		if otp := sidecar.Spec.(*networking.Sidecar).GetOutboundTrafficPolicy(); otp != nil {
			return otp.GetMode() == networking.OutboundTrafficPolicy_REGISTRY_ONLY || otp.GetEgressProxy() != nil
		}
	}
	return m.OutboundTrafficPolicy.Mode == mesh.RegistryOnly
}

type egressHost struct{ namespace, host string }

// importsVirtualService reports whether the proxy's Sidecar imports vs (istiod's SelectVirtualServices): some
// host of it overlaps an egress host of its namespace or of "*". Without a Sidecar every visible one is.
func (s *Scope) importsVirtualService(vs *model.VirtualService) bool {
	if s.Sidecar == nil {
		return true
	}
	for _, e := range s.egress {
		if e.namespace != "*" && e.namespace != vs.Namespace {
			continue
		}
		for _, h := range vs.Hosts {
			if h == e.host || hostsOverlap(e.host, h) {
				return true
			}
		}
	}
	return false
}

func egressAllows(egress []egressHost, svc *model.Service) bool {
	for _, e := range egress {
		if e.namespace == "~" {
			continue
		}
		if e.namespace != "*" && e.namespace != svc.Namespace {
			continue
		}
		if model.HostMatches(e.host, svc.Hostname) {
			return true
		}
	}
	return false
}

// scopeChanges compares two scopes' services: those of old that cur does not hold, and those of cur that old
// does not hold (a changed service is in both). Both lists are sorted by hostname, one service per hostname,
// so one walk finds them.
func scopeChanges(old, cur []*model.Service) (removed map[*model.Service]bool, added []*model.Service) {
	removed = map[*model.Service]bool{}
	for i, j := 0, 0; i < len(old) || j < len(cur); {
		switch {
		case i < len(old) && j < len(cur) && old[i] == cur[j]:
			i, j = i+1, j+1
		case j == len(cur) || i < len(old) && old[i].Hostname <= cur[j].Hostname:
			removed[old[i]] = true
			i++
		default:
			added = append(added, cur[j])
			j++
		}
	}
	return removed, added
}
