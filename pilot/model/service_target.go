package model

// ServiceTarget is one port of a service that selects a workload, with the workload port it reaches.
type ServiceTarget struct {
	Service    *Service
	Port       *Port
	TargetPort uint32
}

// DisableGatewayPortTranslationLabel on a Service stops a gateway from listening on the Service's target
// ports: its Gateway servers' port numbers are then the ports the gateway binds, as in istiod.
const DisableGatewayPortTranslationLabel = "experimental.istio.io/disable-gateway-port-translation"

// ServiceTargets returns the ports of the services in ns whose selector matches labels, in the services'
// order and each service's port order, as istiod's proxy service targets: the target port is the number
// given, the port itself when none is, or the workload w's container port of that name (a port whose
// name w does not declare is left out). Within one service, ports reaching the same target port with the
// same protocol count once, the first one standing for them.
func (ps *PushContext) ServiceTargets(ns string, labels map[string]string, w *Workload) []ServiceTarget {
	var out []ServiceTarget
	for _, svc := range ps.ServicesInNamespace(ns) {
		if len(svc.Selector) == 0 || !labelsMatch(svc.Selector, labels) {
			continue
		}
		type targetKey struct {
			port     uint32
			protocol Protocol
		}
		seen := map[targetKey]bool{}
		for _, p := range svc.Ports {
			target := p.Port
			switch {
			case p.TargetPort != 0:
				target = p.TargetPort
			case p.TargetPortName != "":
				n, ok := uint32(0), false
				if w != nil {
					n, ok = w.ContainerPorts[p.TargetPortName]
				}
				if !ok {
					continue
				}
				target = n
			}
			k := targetKey{target, p.Protocol}
			if seen[k] {
				continue
			}
			seen[k] = true
			out = append(out, ServiceTarget{Service: svc, Port: p, TargetPort: target})
		}
	}
	return out
}
