package config

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"unicode"

	networking "istio.io/api/networking/v1alpha3"
	networkingv1beta1 "istio.io/api/networking/v1beta1"
	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// FieldError is a validation failure at one field, written as a path like "spec.http[0].route[1].weight".
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return "field " + e.Field + ": " + e.Message }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// Validate checks the semantic rules a proxy relies on, beyond what decoding already enforced.
// It returns the first problem found, as a *FieldError.
func Validate(c *Config) error {
	if err := validateExportTo(c); err != nil {
		return err
	}
	switch s := c.Spec.(type) {
	case *corev1.Service:
		return validateService(s)
	case *discoveryv1.EndpointSlice:
		return validateEndpointSlice(s)
	case *corev1.Pod, *corev1.Node, *corev1.Namespace:
		return nil
	case *corev1.Secret:
		// Its content is checked where a credentialName refers to it: a Secret no one serves may hold anything.
		return nil
	case *networking.ServiceEntry:
		return validateServiceEntry(s)
	case *networking.WorkloadEntry:
		return validateWorkloadEntry("spec", s)
	case *networking.DestinationRule:
		return validateDestinationRule(s)
	case *networking.VirtualService:
		return validateVirtualService(s)
	case *networking.Gateway:
		return validateGateway(s)
	case *networking.Sidecar:
		return validateSidecar(s)
	case *security.AuthorizationPolicy:
		return validateAuthorizationPolicy(s)
	case *security.PeerAuthentication:
		return validatePeerAuthentication(s)
	case *security.RequestAuthentication:
		return validateRequestAuthentication(s)
	case *networkingv1beta1.ProxyConfig:
		return validateProxyConfig(s)
	case *networking.WorkloadGroup:
		return validateWorkloadGroup(s)
	case *networkingv1.Ingress:
		return validateIngress(s)
	case *networkingv1.IngressClass:
		return validateIngressClass(s)
	case *FetchedKeySet:
		return nil // made by Sextant's fetcher, which validates the key set it stores
	}
	return fmt.Errorf("no validation for %T", c.Spec)
}

func validPort(n int64) bool { return n >= 1 && n <= 65535 }

// validateExportTo applies Istio's rules for spec.exportTo of a VirtualService, DestinationRule or
// ServiceEntry, which its admission webhook enforces: each entry once ("." counts as the object's own
// namespace), "." or "*" or a namespace name, "*" alone, "~" (exported to no one) for a ServiceEntry only
// and alone, and a DestinationRule with a workloadSelector exported to its own namespace only.
func validateExportTo(c *Config) error {
	var exportTo []string
	serviceEntry, selector := false, false
	switch s := c.Spec.(type) {
	case *networking.VirtualService:
		exportTo = s.ExportTo
	case *networking.DestinationRule:
		exportTo, selector = s.ExportTo, s.WorkloadSelector != nil
	case *networking.ServiceEntry:
		exportTo, serviceEntry = s.ExportTo, true
	default:
		return nil
	}
	seen := map[string]bool{}
	for i, e := range exportTo {
		f := fmt.Sprintf("spec.exportTo[%d]", i)
		key := e
		if e == "." {
			key = c.Namespace
		}
		if seen[key] {
			if key != e {
				return fieldErr(f, "duplicate entry: . and the object's namespace %s", c.Namespace)
			}
			return fieldErr(f, "duplicate entry %q", e)
		}
		seen[key] = true
		switch e {
		case ".", "*":
		case "~":
			if !serviceEntry {
				return fieldErr(f, "~ (exported to no one) is allowed for a ServiceEntry only")
			}
		default:
			if errs := validation.IsDNS1123Label(e); len(errs) > 0 {
				return fieldErr(f, "%q is not \".\", \"*\" or a namespace name: %s", e, strings.Join(errs, "; "))
			}
		}
	}
	if selector && len(exportTo) > 0 {
		if !seen[c.Namespace] {
			return fieldErr("spec.exportTo", "a DestinationRule with a workloadSelector cannot be exported beyond its own namespace %s", c.Namespace)
		}
		if len(seen) > 1 {
			return fieldErr("spec.exportTo", "a DestinationRule with a workloadSelector cannot have more than one entry")
		}
	}
	if len(exportTo) > 1 && (seen["*"] || seen["~"]) {
		return fieldErr("spec.exportTo", "\"*\" (everyone) and \"~\" (no one) cannot be combined with other entries")
	}
	return nil
}

func validateService(s *corev1.Service) error {
	names := map[string]bool{}
	for i, p := range s.Spec.Ports {
		f := fmt.Sprintf("spec.ports[%d]", i)
		if !validPort(int64(p.Port)) {
			return fieldErr(f+".port", "%d is not a valid port (1-65535)", p.Port)
		}
		if len(s.Spec.Ports) > 1 && p.Name == "" {
			return fieldErr(f+".name", "required when a Service has more than one port")
		}
		if names[p.Name] {
			return fieldErr(f+".name", "duplicate port name %q", p.Name)
		}
		names[p.Name] = true
		switch p.Protocol {
		case "", corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
		default:
			return fieldErr(f+".protocol", "unsupported protocol %q (want TCP, UDP or SCTP)", p.Protocol)
		}
	}
	if ip := s.Spec.ClusterIP; ip != "" && ip != corev1.ClusterIPNone {
		if _, err := netip.ParseAddr(ip); err != nil {
			return fieldErr("spec.clusterIP", "%q is not an IP address", ip)
		}
	}
	return nil
}

func validateEndpointSlice(s *discoveryv1.EndpointSlice) error {
	switch s.AddressType {
	case discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6, discoveryv1.AddressTypeFQDN:
	case "":
		return fieldErr("addressType", "required (IPv4, IPv6 or FQDN)")
	default:
		return fieldErr("addressType", "unsupported %q (want IPv4, IPv6 or FQDN)", s.AddressType)
	}
	for i, ep := range s.Endpoints {
		if len(ep.Addresses) == 0 {
			return fieldErr(fmt.Sprintf("endpoints[%d].addresses", i), "at least one address is required")
		}
		if s.AddressType != discoveryv1.AddressTypeFQDN {
			for j, a := range ep.Addresses {
				if _, err := netip.ParseAddr(a); err != nil {
					return fieldErr(fmt.Sprintf("endpoints[%d].addresses[%d]", i, j), "%q is not an IP address", a)
				}
			}
		}
	}
	return nil
}

func validateServiceEntry(s *networking.ServiceEntry) error {
	if len(s.Hosts) == 0 {
		return fieldErr("spec.hosts", "at least one host is required")
	}
	for i, h := range s.Hosts {
		if h == "" || h == "*" {
			return fieldErr(fmt.Sprintf("spec.hosts[%d]", i), "%q is not a valid host", h)
		}
	}
	names := map[string]bool{}
	for i, p := range s.Ports {
		f := fmt.Sprintf("spec.ports[%d]", i)
		if !validPort(int64(p.Number)) {
			return fieldErr(f+".number", "%d is not a valid port (1-65535)", p.Number)
		}
		if p.TargetPort != 0 && !validPort(int64(p.TargetPort)) {
			return fieldErr(f+".targetPort", "%d is not a valid port (1-65535)", p.TargetPort)
		}
		if p.Name == "" {
			return fieldErr(f+".name", "required")
		}
		if names[p.Name] {
			return fieldErr(f+".name", "duplicate port name %q", p.Name)
		}
		names[p.Name] = true
	}
	for i, a := range s.Addresses {
		if _, err := netip.ParsePrefix(a); err != nil {
			if _, err := netip.ParseAddr(a); err != nil {
				return fieldErr(fmt.Sprintf("spec.addresses[%d]", i), "%q is not an IP address or CIDR", a)
			}
		}
	}
	if len(s.Endpoints) > 0 && s.WorkloadSelector != nil {
		return fieldErr("spec.workloadSelector", "cannot be set together with spec.endpoints")
	}
	if s.Resolution == networking.ServiceEntry_DYNAMIC_DNS {
		if err := validateDynamicDNS(s); err != nil {
			return err
		}
	}
	if s.Resolution == networking.ServiceEntry_NONE && len(s.Endpoints) > 0 {
		// As Istio's validation: connections go to the address dialled, so there is nothing to list; a
		// workloadSelector names the workloads whose addresses sidecars listen on.
		return fieldErr("spec.endpoints", "cannot be set with resolution NONE (the default): connections go to the address dialled")
	}
	if s.Resolution == networking.ServiceEntry_DNS_ROUND_ROBIN && len(s.Endpoints) > 1 {
		// As Istio's validation: the proxy uses one address at a time (an Envoy LOGICAL_DNS cluster).
		return fieldErr("spec.endpoints", "resolution DNS_ROUND_ROBIN takes at most one endpoint, not %d", len(s.Endpoints))
	}
	for i, ep := range s.Endpoints {
		f := fmt.Sprintf("spec.endpoints[%d]", i)
		if s.Resolution == networking.ServiceEntry_STATIC && ep.Address != "" {
			if _, err := netip.ParseAddr(ep.Address); err != nil && !strings.HasPrefix(ep.Address, "unix://") {
				return fieldErr(f+".address", "%q is not an IP address (resolution STATIC)", ep.Address)
			}
		}
		if err := validateWorkloadEntry(f, ep); err != nil {
			return err
		}
		for name := range ep.Ports {
			if !names[name] {
				return fieldErr(f+".ports."+name, "no port named %q in spec.ports", name)
			}
		}
	}
	return nil
}

// validateDynamicDNS checks what istiod's validation requires of resolution DYNAMIC_DNS: the proxy resolves
// each request's host under a wildcard, so there are no addresses or endpoints to give, and only protocols
// that name the host (HTTP's Host header, TLS's SNI) can be carried.
func validateDynamicDNS(s *networking.ServiceEntry) error {
	for i, h := range s.Hosts {
		if !strings.HasPrefix(h, "*") {
			return fieldErr(fmt.Sprintf("spec.hosts[%d]", i), "%q: resolution DYNAMIC_DNS needs a wildcard host", h)
		}
	}
	if len(s.Addresses) > 0 {
		return fieldErr("spec.addresses", "cannot be set with resolution DYNAMIC_DNS: the hosts alone name the destinations")
	}
	if len(s.Endpoints) > 0 {
		return fieldErr("spec.endpoints", "cannot be set with resolution DYNAMIC_DNS: the proxy resolves each request's host")
	}
	if s.WorkloadSelector != nil {
		return fieldErr("spec.workloadSelector", "cannot be set with resolution DYNAMIC_DNS: the proxy resolves each request's host")
	}
	for i, p := range s.Ports {
		switch strings.ToUpper(p.Protocol) {
		case "HTTP", "HTTP2", "GRPC", "TLS":
		default:
			return fieldErr(fmt.Sprintf("spec.ports[%d].protocol", i),
				"%q: resolution DYNAMIC_DNS carries only HTTP, HTTP2, GRPC and TLS", p.Protocol)
		}
	}
	return nil
}

func validateWorkloadEntry(prefix string, w *networking.WorkloadEntry) error {
	if w.Address == "" && w.Network == "" {
		return fieldErr(prefix+".address", "required unless network is set")
	}
	for name, p := range w.Ports {
		if !validPort(int64(p)) {
			return fieldErr(prefix+".ports."+name, "%d is not a valid port (1-65535)", p)
		}
	}
	return nil
}

func validateDestinationRule(s *networking.DestinationRule) error {
	if s.Host == "" {
		return fieldErr("spec.host", "required")
	}
	seen := map[string]bool{}
	for i, ss := range s.Subsets {
		f := fmt.Sprintf("spec.subsets[%d]", i)
		if ss.Name == "" {
			return fieldErr(f+".name", "required")
		}
		if seen[ss.Name] {
			return fieldErr(f+".name", "duplicate subset %q", ss.Name)
		}
		seen[ss.Name] = true
	}
	if err := validateTrafficPolicy("spec.trafficPolicy", s.TrafficPolicy); err != nil {
		return err
	}
	for i, ss := range s.Subsets {
		if err := validateTrafficPolicy(fmt.Sprintf("spec.subsets[%d].trafficPolicy", i), ss.TrafficPolicy); err != nil {
			return err
		}
	}
	return nil
}

func validateTrafficPolicy(f string, tp *networking.TrafficPolicy) error {
	if tp == nil {
		return nil
	}
	if tp.Tunnel != nil {
		// Sending the traffic straight to its destination would bypass the proxy the rule names.
		return fieldErr(f+".tunnel", "not implemented, so refused: Sextant cannot send this traffic through a %s tunnel to %s",
			tp.Tunnel.Protocol, tp.Tunnel.TargetHost)
	}
	if err := validateClientTLS(f+".tls", tp.Tls); err != nil {
		return err
	}
	if od := tp.OutlierDetection; od != nil && od.MaxEjectionPercent < 0 || od != nil && od.MaxEjectionPercent > 100 {
		return fieldErr(f+".outlierDetection.maxEjectionPercent", "%d is not a percentage", od.MaxEjectionPercent)
	}
	if err := ValidateLocalityLbSetting(f+".loadBalancer.localityLbSetting", tp.GetLoadBalancer().GetLocalityLbSetting()); err != nil {
		return err
	}
	for i, pl := range tp.PortLevelSettings {
		if pl.Port == nil || !validPort(int64(pl.Port.Number)) {
			return fieldErr(fmt.Sprintf("%s.portLevelSettings[%d].port", f, i), "a port number (1-65535) is required")
		}
		lb := pl.GetLoadBalancer().GetLocalityLbSetting()
		if err := ValidateLocalityLbSetting(fmt.Sprintf("%s.portLevelSettings[%d].loadBalancer.localityLbSetting", f, i), lb); err != nil {
			return err
		}
		if err := validateClientTLS(fmt.Sprintf("%s.portLevelSettings[%d].tls", f, i), pl.Tls); err != nil {
			return err
		}
	}
	return nil
}

func validateClientTLS(f string, tls *networking.ClientTLSSettings) error {
	if tls == nil {
		return nil
	}
	if tls.Mode == networking.ClientTLSSettings_MUTUAL && tls.CredentialName == "" && (tls.ClientCertificate == "" || tls.PrivateKey == "") {
		return fieldErr(f, "MUTUAL needs credentialName or clientCertificate and privateKey")
	}
	if tls.CaCertCredentialName != "" {
		// Ignoring it would check the server's certificate against the system roots, not the CA named.
		return fieldErr(f+".caCertCredentialName", "not implemented: put the CA in the Secret of credentialName (ca.crt) or in caCertificates")
	}
	return nil
}

func validateDestination(f string, d *networking.Destination) error {
	if d == nil {
		return fieldErr(f, "required")
	}
	if d.Host == "" {
		return fieldErr(f+".host", "required")
	}
	if d.Port != nil && d.Port.Number != 0 && !validPort(int64(d.Port.Number)) {
		return fieldErr(f+".port.number", "%d is not a valid port (1-65535)", d.Port.Number)
	}
	return nil
}

func validateVirtualService(s *networking.VirtualService) error {
	// Without hosts it is a delegate: its http routes are merged into the routes of roots that name it.
	delegate := len(s.Hosts) == 0
	if delegate {
		switch {
		case len(s.Gateways) > 0:
			return fieldErr("spec.gateways", "a delegate VirtualService (no hosts) must not name gateways: it takes its root's")
		case len(s.Tcp) > 0:
			return fieldErr("spec.tcp", "a delegate VirtualService (no hosts) can only have http routes")
		case len(s.Tls) > 0:
			return fieldErr("spec.tls", "a delegate VirtualService (no hosts) can only have http routes")
		}
	}
	if len(s.Http) == 0 && len(s.Tcp) == 0 && len(s.Tls) == 0 {
		return fieldErr("spec.http", "at least one of http, tcp or tls routes is required")
	}
	for i, r := range s.Http {
		f := fmt.Sprintf("spec.http[%d]", i)
		if r.Delegate != nil {
			switch {
			case delegate:
				return fieldErr(f+".delegate", "a delegate VirtualService (no hosts) cannot delegate again")
			case r.Delegate.Name == "":
				return fieldErr(f+".delegate.name", "required")
			case len(r.Route) > 0:
				return fieldErr(f+".route", "cannot be combined with delegate: the delegate's routes say where requests go")
			case r.Redirect != nil:
				return fieldErr(f+".redirect", "cannot be combined with delegate")
			}
		} else if len(r.Route) == 0 && r.Redirect == nil && r.DirectResponse == nil {
			return fieldErr(f+".route", "a route, redirect or directResponse is required")
		}
		if r.Redirect != nil && len(r.Route) > 0 {
			return fieldErr(f+".redirect", "cannot be combined with route")
		}
		for j, m := range r.Match {
			if err := validateHTTPMatch(fmt.Sprintf("%s.match[%d]", f, j), m); err != nil {
				return err
			}
		}
		if err := validateHTTPRewrite(f+".rewrite", r.Rewrite); err != nil {
			return err
		}
		for j, d := range r.Route {
			df := fmt.Sprintf("%s.route[%d]", f, j)
			if err := validateDestination(df+".destination", d.Destination); err != nil {
				return err
			}
			if d.Weight < 0 || d.Weight > 100 {
				return fieldErr(df+".weight", "%d is not between 0 and 100", d.Weight)
			}
		}
		if r.Mirror != nil {
			if err := validateDestination(f+".mirror", r.Mirror); err != nil {
				return err
			}
		}
		if err := validateCORSPolicy(f+".corsPolicy", r.CorsPolicy); err != nil {
			return err
		}
		if fault := r.Fault; fault != nil && fault.Abort != nil {
			if code := fault.Abort.GetHttpStatus(); code != 0 && (code < 200 || code > 599) {
				return fieldErr(f+".fault.abort.httpStatus", "%d is not an HTTP status", code)
			}
		}
	}
	for i, r := range s.Tcp {
		for j, d := range r.Route {
			if err := validateDestination(fmt.Sprintf("spec.tcp[%d].route[%d].destination", i, j), d.Destination); err != nil {
				return err
			}
		}
	}
	for i, r := range s.Tls {
		if len(r.Match) == 0 {
			return fieldErr(fmt.Sprintf("spec.tls[%d].match", i), "at least one match (sniHosts) is required")
		}
		for j, d := range r.Route {
			if err := validateDestination(fmt.Sprintf("spec.tls[%d].route[%d].destination", i, j), d.Destination); err != nil {
				return err
			}
		}
	}
	return nil
}

func validateGateway(s *networking.Gateway) error {
	if len(s.Servers) == 0 {
		return fieldErr("spec.servers", "at least one server is required")
	}
	for i, srv := range s.Servers {
		f := fmt.Sprintf("spec.servers[%d]", i)
		if srv.Port != nil && srv.Port.TargetPort != 0 {
			// Refused as istiod refuses it: the listener port comes from the Service port the server names.
			return fieldErr(f+".port.targetPort",
				"has no effect on a Gateway: the gateway listens on the targetPort of the Service port numbered %d", srv.Port.Number)
		}
		if srv.Port == nil || !validPort(int64(srv.Port.Number)) {
			return fieldErr(f+".port.number", "a port number (1-65535) is required")
		}
		if srv.Port.Protocol == "" {
			return fieldErr(f+".port.protocol", "required")
		}
		if len(srv.Hosts) == 0 {
			return fieldErr(f+".hosts", "at least one host is required")
		}
		if tls := srv.Tls; tls != nil {
			switch tls.Mode {
			case networking.ServerTLSSettings_SIMPLE, networking.ServerTLSSettings_MUTUAL:
				if tls.CredentialName == "" && len(tls.CredentialNames) == 0 && len(tls.TlsCertificates) == 0 &&
					(tls.ServerCertificate == "" || tls.PrivateKey == "") {
					return fieldErr(f+".tls.credentialName",
						"required for mode %s (or credentialNames, tlsCertificates, or serverCertificate and privateKey)", tls.Mode)
				}
				for j, c := range tls.TlsCertificates {
					if c.ServerCertificate == "" || c.PrivateKey == "" {
						return fieldErr(fmt.Sprintf("%s.tls.tlsCertificates[%d]", f, j), "serverCertificate and privateKey are required")
					}
				}
			}
		}
	}
	return nil
}

// egressProtocols are the protocol names istiod takes on a Sidecar's egress port ("" is sniffed).
var egressProtocols = map[string]bool{"": true, "tcp": true, "udp": true, "grpc": true, "grpc-web": true, "http": true, "http2": true,
	"https": true, "tls": true, "mongo": true, "redis": true, "mysql": true}

func validateSidecar(s *networking.Sidecar) error {
	ports := map[uint32]bool{}
	for i, eg := range s.Egress {
		f := fmt.Sprintf("spec.egress[%d]", i)
		if eg == nil {
			return fieldErr(f, "an egress listener may not be null")
		}
		if eg.Port != nil && eg.Port.TargetPort != 0 {
			return fieldErr(f+".port.targetPort", "has no effect on a Sidecar egress listener (istiod refuses it too)")
		}
		if len(eg.Hosts) == 0 {
			return fieldErr(f+".hosts", "at least one host is required")
		}
		// As istiod: one catch-all (no port), the last; each port once.
		if eg.Port == nil && i != len(s.Egress)-1 {
			return fieldErr(f+".port", "required: only the last egress listener may leave out the port (the catch-all)")
		}
		if strings.HasPrefix(eg.Bind, "unix://") || eg.Port != nil && eg.Port.Number == 0 {
			// Refused rather than ignored: its clients would find no socket at all.
			return fieldErr(f+".bind", "unix domain socket listeners (port 0, bind unix://) are not implemented")
		}
		if eg.Bind != "" {
			if _, err := netip.ParseAddr(eg.Bind); err != nil {
				return fieldErr(f+".bind", "%q must be an IP address", eg.Bind)
			}
		}
		if eg.Port != nil {
			if !validPort(int64(eg.Port.Number)) {
				return fieldErr(f+".port.number", "%d is not a port number (1-65535)", eg.Port.Number)
			}
			if ports[eg.Port.Number] {
				return fieldErr(f+".port.number", "port %d is already an earlier egress listener's", eg.Port.Number)
			}
			ports[eg.Port.Number] = true
			proto := strings.ToLower(eg.Port.Protocol)
			if proto == "http_proxy" {
				return fieldErr(f+".port.protocol", "HTTP_PROXY (an HTTP proxy listener for every host) is not implemented")
			}
			if !egressProtocols[proto] {
				return fieldErr(f+".port.protocol", "unsupported protocol %q", eg.Port.Protocol)
			}
		}
		for j, h := range eg.Hosts {
			if ns, host, ok := strings.Cut(h, "/"); !ok || ns == "" || host == "" {
				return fieldErr(fmt.Sprintf("spec.egress[%d].hosts[%d]", i, j), "%q must be NAMESPACE/HOST (namespace may be * or .)", h)
			}
		}
	}
	seen := map[uint32]bool{}
	for i, in := range s.Ingress {
		if err := validateSidecarIngress(fmt.Sprintf("spec.ingress[%d]", i), in, seen); err != nil {
			return err
		}
	}
	return nil
}

// sidecarOwnPorts are the ports of the sidecar itself (admin, capture, HBONE, agent, health, DNS,
// Prometheus); an ingress listener on one would take the sidecar's own traffic.
var sidecarOwnPorts = map[uint32]bool{15000: true, 15001: true, 15004: true, 15006: true, 15008: true, 15020: true, 15021: true,
	15053: true, 15090: true}

// ingressProtocols are the protocol names istiod reads on a Sidecar ingress port (its protocol.Parse), with
// whether Sextant serves them.
var ingressProtocols = map[string]bool{"tcp": true, "grpc": true, "grpc-web": true, "http": true, "http2": true, "https": true,
	"tls": true, "mongo": true, "redis": true, "mysql": true, "udp": false, "http_proxy": false}

// validateSidecarIngress checks an ingress listener as istiod's validation does, and refuses what Sextant
// does not serve as istiod would.
func validateSidecarIngress(f string, in *networking.IstioIngressListener, seen map[uint32]bool) error {
	if in.Port != nil && in.Port.TargetPort != 0 {
		return fieldErr(f+".port.targetPort",
			"has no effect on a Sidecar ingress listener (istiod refuses it too): defaultEndpoint names where traffic goes")
	}
	if in.Port == nil || !validPort(int64(in.Port.Number)) {
		return fieldErr(f+".port.number", "a port number (1-65535) is required")
	}
	n := in.Port.Number
	if seen[n] {
		return fieldErr(f+".port.number", "port %d has another ingress listener already", n)
	}
	seen[n] = true
	if sidecarOwnPorts[n] {
		return fieldErr(f+".port.number", "port %d is one of the sidecar's own ports", n)
	}
	if p := in.Port.Protocol; p != "" {
		served, known := ingressProtocols[strings.ToLower(p)]
		switch {
		case !known:
			return fieldErr(f+".port.protocol", "unsupported protocol %q", p)
		case !served:
			return fieldErr(f+".port.protocol", "%s is not implemented on an inbound port", p)
		}
	}
	if in.Bind != "" {
		if _, err := netip.ParseAddr(in.Bind); err != nil {
			return fieldErr(f+".bind", "%q is not an IP address", in.Bind)
		}
	}
	if err := validateDefaultEndpoint(f+".defaultEndpoint", in.DefaultEndpoint); err != nil {
		return err
	}
	if tls := in.Tls; tls != nil {
		// What istiod's validation refuses on a Sidecar ingress listener's tls.
		switch {
		case tls.CredentialName != "" || len(tls.CredentialNames) > 0:
			return fieldErr(f+".tls.credentialName", "not supported on a Sidecar (istiod refuses it too): use serverCertificate and privateKey")
		case len(tls.TlsCertificates) > 0:
			return fieldErr(f+".tls.tlsCertificates", "not supported on a Sidecar (istiod refuses it too)")
		case len(tls.SubjectAltNames) > 0:
			return fieldErr(f+".tls.subjectAltNames", "not supported on a Sidecar (istiod refuses it too)")
		case tls.HttpsRedirect:
			return fieldErr(f+".tls.httpsRedirect", "not supported on a Sidecar (istiod refuses it too)")
		case tls.Mode == networking.ServerTLSSettings_ISTIO_MUTUAL || tls.Mode == networking.ServerTLSSettings_AUTO_PASSTHROUGH:
			return fieldErr(f+".tls.mode", "%s cannot be set on a Sidecar ingress listener", tls.Mode)
		}
		if p := strings.ToLower(in.Port.Protocol); p != "https" && p != "tls" {
			return fieldErr(f+".tls", "TLS settings need an HTTPS or TLS port, not %q", in.Port.Protocol)
		}
	}
	return nil
}

// validateDefaultEndpoint checks an ingress listener's defaultEndpoint: 127.0.0.1:PORT, 0.0.0.0:PORT,
// [::1]:PORT, [::]:PORT, :PORT or unix://PATH (an absolute path, or an abstract socket @NAME), as istiod.
func validateDefaultEndpoint(f, ep string) error {
	if ep == "" {
		return nil
	}
	if path, ok := strings.CutPrefix(ep, "unix://"); ok {
		if path == "" || !strings.HasPrefix(path, "@") && (!strings.HasPrefix(path, "/") || strings.HasSuffix(path, "/")) {
			return fieldErr(f, "%q is not an absolute path to a socket", path)
		}
		return nil
	}
	host, port, err := net.SplitHostPort(ep)
	if err != nil {
		return fieldErr(f, "%q is not HOST:PORT: %v", ep, err)
	}
	switch host {
	case "", "127.0.0.1", "0.0.0.0", "::1", "::":
	default:
		return fieldErr(f, "must be 127.0.0.1:PORT, 0.0.0.0:PORT, [::1]:PORT, [::]:PORT or unix://PATH, not %q", ep)
	}
	if n, err := strconv.Atoi(port); err != nil || !validPort(int64(n)) {
		return fieldErr(f, "port %q is not a port number (1-65535)", port)
	}
	return nil
}

func validatePeerAuthentication(s *security.PeerAuthentication) error {
	if len(s.PortLevelMtls) > 0 && (s.Selector == nil || len(s.Selector.MatchLabels) == 0) {
		return fieldErr("spec.portLevelMtls", "needs a workload selector")
	}
	for p := range s.PortLevelMtls {
		if !validPort(int64(p)) {
			return fieldErr(fmt.Sprintf("spec.portLevelMtls[%d]", p), "not a valid port")
		}
	}
	return nil
}

// Policy target kinds istiod accepts in a targetRef, as group/kind (the core group written "").
const (
	GatewayAPIGroup = "gateway.networking.k8s.io"
	// GatewayNameLabel is the label Gateway API puts on a gateway's pods: the name of their Gateway.
	GatewayNameLabel = "gateway.networking.k8s.io/gateway-name"
)

var targetRefKinds = []string{"/Service", "networking.istio.io/ServiceEntry", GatewayAPIGroup + "/Gateway",
	GatewayAPIGroup + "/GatewayClass"}

// targetRefGroupKind is group/kind with the core group as "" (istiod reads "core" and "" alike).
func targetRefGroupKind(r *typev1beta1.PolicyTargetReference) string {
	g := r.GetGroup()
	if g == "core" {
		g = ""
	}
	return g + "/" + r.GetKind()
}

// IsGatewayTargetRef reports whether r names a Gateway API Gateway, the one target Sextant serves.
func IsGatewayTargetRef(r *typev1beta1.PolicyTargetReference) bool {
	return targetRefGroupKind(r) == GatewayAPIGroup+"/Gateway"
}

// TargetRefs returns a policy's targetRefs, or its single legacy targetRef (istiod's GetTargetRefs).
func TargetRefs(single *typev1beta1.PolicyTargetReference, list []*typev1beta1.PolicyTargetReference) []*typev1beta1.PolicyTargetReference {
	if len(list) == 0 && single != nil {
		return []*typev1beta1.PolicyTargetReference{single}
	}
	return list
}

// validateTargetRefs rejects what istiod's validation rejects: a selector with targetRefs, and a targetRef
// without a name, to another namespace, or to a kind no policy can attach to.
func validateTargetRefs(sel *typev1beta1.WorkloadSelector, single *typev1beta1.PolicyTargetReference,
	list []*typev1beta1.PolicyTargetReference) error {
	set := 0
	for _, present := range []bool{sel != nil, single != nil, len(list) > 0} {
		if present {
			set++
		}
	}
	if set > 1 {
		return fieldErr("spec.targetRefs", "only one of selector, targetRef and targetRefs may be set")
	}
	check := func(f string, r *typev1beta1.PolicyTargetReference) error {
		if r.GetName() == "" {
			return fieldErr(f+".name", "required")
		}
		if r.GetNamespace() != "" {
			return fieldErr(f+".namespace", "must not be set: a policy can only target objects of its own namespace")
		}
		for _, k := range targetRefKinds {
			if targetRefGroupKind(r) == k {
				return nil
			}
		}
		return fieldErr(f+".kind", "%s/%s: want one of %s", r.GetGroup(), r.GetKind(), strings.Join(targetRefKinds, ", "))
	}
	if single != nil {
		if err := check("spec.targetRef", single); err != nil {
			return err
		}
	}
	for i, r := range list {
		if err := check(fmt.Sprintf("spec.targetRefs[%d]", i), r); err != nil {
			return err
		}
	}
	return nil
}

// Warnings lists what c holds that is accepted (Validate passed) but that Sextant does not honour as
// written, each naming the field and saying what happens instead. An object with warnings still loads.
func Warnings(c *Config) []*FieldError {
	var out []*FieldError
	warn := func(field, format string, args ...any) {
		out = append(out, &FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	// A policy's targetRefs to anything but a Gateway API Gateway name a waypoint's traffic.
	waypointTargets := func(single *typev1beta1.PolicyTargetReference, list []*typev1beta1.PolicyTargetReference) {
		field := "spec.targetRefs"
		if len(list) == 0 {
			field = "spec.targetRef"
		}
		for i, r := range TargetRefs(single, list) {
			f := field
			if field == "spec.targetRefs" {
				f = fmt.Sprintf("%s[%d]", field, i)
			}
			if !IsGatewayTargetRef(r) {
				warn(f, "%s %s is enforced by a waypoint, and Sextant serves none: this target gets nothing from the policy, and no sidecar does",
					targetRefGroupKind(r), r.GetName())
			}
		}
	}
	switch s := c.Spec.(type) {
	case *security.AuthorizationPolicy:
		waypointTargets(s.GetTargetRef(), s.GetTargetRefs())
	case *security.RequestAuthentication:
		waypointTargets(s.GetTargetRef(), s.GetTargetRefs())
	case *networking.VirtualService:
		for i, r := range s.Http {
			f := fmt.Sprintf("spec.http[%d].fault", i)
			// Like istiod, an unsupported delay or abort type injects nothing.
			if r.GetFault().GetDelay().GetExponentialDelay() != nil {
				warn(f+".delay.exponentialDelay", "not implemented (istiod neither): no delay is injected")
			}
			if r.GetFault().GetAbort().GetHttp2Error() != "" {
				warn(f+".abort.http2Error", "not implemented (istiod neither): no abort is injected")
			}
		}
		for i, r := range s.Tcp {
			for j, m := range r.Match {
				if m.SourceSubnet != "" {
					warn(fmt.Sprintf("spec.tcp[%d].match[%d].sourceSubnet", i, j), "not implemented: the match does not test the source address")
				}
			}
		}
	case *corev1.Service:
		if v := c.Annotations[TrafficDistributionAnnotation]; v != "" && !knownTrafficDistribution(strings.ToLower(v)) {
			warn("metadata.annotations["+TrafficDistributionAnnotation+"]",
				"%q is not PreferClose, PreferSameZone or PreferSameNode: sidecars get no locality preference, as from istiod", v)
		}
	case *corev1.Namespace:
		if c.Annotations[TrafficDistributionAnnotation] != "" {
			warn("metadata.annotations["+TrafficDistributionAnnotation+"]",
				"not implemented on a Namespace: set it (or spec.trafficDistribution) on each Service; istiod applies it to the "+
					"namespace's Services that set none")
		}
	case *networking.DestinationRule:
		destinationRuleWarnings(s, warn)
	case *networkingv1beta1.ProxyConfig:
		proxyConfigWarnings(s, warn)
	case *networking.WorkloadGroup:
		workloadGroupWarnings(s, warn)
	case *networkingv1.Ingress:
		ingressWarnings(s, warn)
	case *networkingv1.IngressClass:
		ingressClassWarnings(s, warn)
	case *networking.Gateway:
		for i, srv := range s.Servers {
			if srv.DefaultEndpoint != "" {
				warn(fmt.Sprintf("spec.servers[%d].defaultEndpoint", i),
					"ignored, as istiod ignores it on a Gateway: the server forwards as its routes say")
			}
			tls := srv.GetTls()
			if tls == nil {
				continue
			}
			f := fmt.Sprintf("spec.servers[%d].tls", i)
			if tls.Mode == networking.ServerTLSSettings_SIMPLE && len(tls.SubjectAltNames) > 0 {
				warn(f+".subjectAltNames", "mode SIMPLE asks for no client certificate, so no names are checked")
			}
			if bad := invalidCipherSuites(tls.CipherSuites); len(bad) > 0 {
				warn(f+".cipherSuites", "ignored, as istiod ignores them (Envoy would refuse the listener): %s", strings.Join(bad, ", "))
			}
			if (tls.MinProtocolVersion == networking.ServerTLSSettings_TLSV1_0 || tls.MinProtocolVersion == networking.ServerTLSSettings_TLSV1_1) &&
				len(tls.CipherSuites) == 0 {
				warn(f+".minProtocolVersion", "TLS versions below 1.2 need cipherSuites that support them: Envoy's default ciphers do not")
			}
		}
	case *networking.Sidecar:
		for i, in := range s.Ingress {
			if in.Tls != nil {
				warn(fmt.Sprintf("spec.ingress[%d].tls", i),
					"ignored, as istiod ignores it unless ENABLE_TLS_ON_SIDECAR_INGRESS is set: the port's chains are those of its protocol and mTLS mode")
			}
		}
		if s.GetOutboundTrafficPolicy().GetEgressProxy() != nil {
			warn("spec.outboundTrafficPolicy.egressProxy",
				"not implemented: traffic to unknown destinations is refused (BlackHoleCluster) rather than sent to the egress proxy")
		}
	}
	return out
}

// validCipherSuites are the names Envoy's BoringSSL takes in a Gateway's cipherSuites, as istiod lists them.
var validCipherSuites = map[string]bool{
	"ECDHE-ECDSA-AES128-GCM-SHA256": true, "ECDHE-RSA-AES128-GCM-SHA256": true,
	"ECDHE-ECDSA-AES256-GCM-SHA384": true, "ECDHE-RSA-AES256-GCM-SHA384": true,
	"ECDHE-ECDSA-CHACHA20-POLY1305": true, "ECDHE-RSA-CHACHA20-POLY1305": true,
	"ECDHE-ECDSA-AES128-SHA": true, "ECDHE-RSA-AES128-SHA": true, "ECDHE-ECDSA-AES256-SHA": true, "ECDHE-RSA-AES256-SHA": true,
	"AES128-GCM-SHA256": true, "AES256-GCM-SHA384": true, "AES128-SHA": true, "AES256-SHA": true, "DES-CBC3-SHA": true,
}

// ValidCipherSuite reports whether a Gateway may name cs: a known suite, ALL, or an OpenSSL-style
// expression (starting with - + ! or [), which istiod passes through unparsed.
func ValidCipherSuite(cs string) bool {
	if cs == "" || cs == "ALL" {
		return true
	}
	if c := rune(cs[0]); !unicode.IsLetter(c) && !unicode.IsNumber(c) {
		return true
	}
	return validCipherSuites[cs]
}

// CipherSuites is what a server's cipherSuites become, as istiod filters them: the valid ones, each once.
func CipherSuites(suites []string) []string {
	var out []string
	for _, cs := range suites {
		if ValidCipherSuite(cs) && !slices.Contains(out, cs) {
			out = append(out, cs)
		}
	}
	return out
}

func invalidCipherSuites(suites []string) []string {
	var bad []string
	for i, cs := range suites {
		if !ValidCipherSuite(cs) || slices.Contains(suites[:i], cs) {
			bad = append(bad, cs)
		}
	}
	return bad
}

// destinationRuleWarnings reports the traffic policy fields Sextant does not implement, at every level
// (the rule, its subsets, and their port-level settings).
func destinationRuleWarnings(s *networking.DestinationRule, warn func(field, format string, args ...any)) {
	balancing := func(f string, lb *networking.LoadBalancerSettings, od *networking.OutlierDetection) {
		if lb.GetBackendUtilization() != nil {
			warn(f+".loadBalancer.backendUtilization", "not implemented (istiod neither): the default load balancing policy applies")
		}
		if od == nil {
			return
		}
		if od.ConsecutiveErrors != 0 { //nolint:staticcheck // read only to report it
			warn(f+".outlierDetection.consecutiveErrors",
				"deprecated and ignored, as istiod ignores it: use consecutive5xxErrors or consecutiveGatewayErrors")
		}
		if len(od.OutlierDetectionHttpErrorCodes) > 0 {
			warn(f+".outlierDetection.outlierDetectionHttpErrorCodes",
				"not implemented: every 5xx response counts as an error, not only these codes")
		}
		if od.FailurePercentageThreshold != nil {
			warn(f+".outlierDetection.failurePercentageThreshold", "not implemented (istiod neither): failure-percentage ejection stays off")
		}
	}
	policy := func(f string, tp *networking.TrafficPolicy) {
		if tp == nil {
			return
		}
		balancing(f, tp.LoadBalancer, tp.OutlierDetection)
		for i, pl := range tp.PortLevelSettings {
			balancing(fmt.Sprintf("%s.portLevelSettings[%d]", f, i), pl.LoadBalancer, pl.OutlierDetection)
		}
		if tp.RetryBudget != nil {
			warn(f+".retryBudget", "not implemented: concurrent retries are limited by connectionPool.http.maxRetries only")
		}
	}
	policy("spec.trafficPolicy", s.TrafficPolicy)
	for i, ss := range s.Subsets {
		policy(fmt.Sprintf("spec.subsets[%d].trafficPolicy", i), ss.TrafficPolicy)
	}
}

// TrafficDistributionAnnotation sets a Service's traffic distribution where its spec does not, as in Istio.
const TrafficDistributionAnnotation = "networking.istio.io/traffic-distribution"

// knownTrafficDistribution reports whether v, lower case, is a traffic distribution sidecars honour.
func knownTrafficDistribution(v string) bool {
	return v == "preferclose" || v == "prefersamezone" || v == "prefersamenode"
}
