package model

import (
	"slices"
	"strings"
	"time"

	networking "istio.io/api/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
)

// Protocol is the application protocol of a port, as Istio infers it.
type Protocol string

const (
	ProtocolHTTP   Protocol = "HTTP"
	ProtocolHTTP2  Protocol = "HTTP2"
	ProtocolGRPC   Protocol = "GRPC"
	ProtocolHTTPS  Protocol = "HTTPS"
	ProtocolTLS    Protocol = "TLS"
	ProtocolTCP    Protocol = "TCP"
	ProtocolUDP    Protocol = "UDP"
	ProtocolMongo  Protocol = "Mongo"
	ProtocolRedis  Protocol = "Redis"
	ProtocolMySQL  Protocol = "MySQL"
	ProtocolUnset  Protocol = "UnsupportedProtocol"
	protocolPrefix          = "-"
)

// ParseProtocol maps a protocol name (case-insensitive) to a Protocol; unknown names are ProtocolUnset.
func ParseProtocol(s string) Protocol {
	switch strings.ToLower(s) {
	case "http", "http1", "http/1.1":
		return ProtocolHTTP
	case "http2", "h2c", "kubernetes.io/h2c":
		return ProtocolHTTP2
	case "grpc", "grpc-web":
		return ProtocolGRPC
	case "https":
		return ProtocolHTTPS
	case "tls":
		return ProtocolTLS
	case "tcp":
		return ProtocolTCP
	case "udp":
		return ProtocolUDP
	case "mongo":
		return ProtocolMongo
	case "redis":
		return ProtocolRedis
	case "mysql":
		return ProtocolMySQL
	}
	return ProtocolUnset
}

// IsHTTP reports whether the port carries HTTP (1 or 2, including gRPC).
func (p Protocol) IsHTTP() bool {
	return p == ProtocolHTTP || p == ProtocolHTTP2 || p == ProtocolGRPC
}

// Port is one port of a service.
type Port struct {
	Name     string
	Port     uint32
	Protocol Protocol
	// TargetPort is the workload port when given as a number (0 when named or the same as Port).
	TargetPort uint32
	// TargetPortName is the container port name a Kubernetes Service targets, if any.
	TargetPortName string
}

// Resolution says how a client finds a service's endpoints.
type Resolution int

const (
	ClientSideLB    Resolution = iota // endpoints known to the control plane (EDS)
	DNSLB                             // proxies resolve hostnames, using every address (STRICT_DNS)
	Passthrough                       // original destination (headless, resolution NONE)
	DNSRoundRobinLB                   // proxies resolve the hostname, one address at a time (LOGICAL_DNS)
	DynamicDNS                        // proxies resolve each request's host (SNI or Host header) under a wildcard hostname
	// Alias: a Kubernetes ExternalName Service, another name of the host it names (AliasFor). As istiod,
	// sidecars get no cluster, listener or virtual host of its own; the named service's virtual hosts
	// answer its names too.
	Alias
)

func (r Resolution) String() string {
	return [...]string{"ClientSideLB", "DNS", "Passthrough", "DNSRoundRobin", "DynamicDNS", "Alias"}[r]
}

// ByDNS reports whether proxies resolve the service's hostnames themselves.
func (r Resolution) ByDNS() bool { return r == DNSLB || r == DNSRoundRobinLB }

// Service is one hostname in one namespace, from a Kubernetes Service or a ServiceEntry host.
type Service struct {
	Hostname  string
	Name      string // Kubernetes Service name, or the ServiceEntry name
	Namespace string
	Source    config.Key
	Addresses []string
	Ports     []*Port // sorted by port number
	// Resolution and MeshExternal follow the ServiceEntry (Kubernetes Services are mesh-internal, EDS,
	// or Passthrough when headless).
	Resolution   Resolution
	MeshExternal bool
	// AliasFor is the host an ExternalName Service (Resolution Alias) names, as written (istiod matches it
	// against hostnames as is: "api.example.org." names no ServiceEntry host).
	AliasFor string
	// NodeLocal: a Kubernetes Service with internalTrafficPolicy Local; a proxy reaches only the endpoints
	// on its own node (the node metadata NODE_NAME), as istiod's EDS.
	NodeLocal bool
	// TrafficDistribution is the Service's trafficDistribution, else its annotation
	// networking.istio.io/traffic-distribution, as istiod reads them: PreferSameZone (PreferClose too),
	// PreferSameNode, or "" for none. Sidecars then get the closest endpoints first.
	TrafficDistribution string
	// Aliases are the hostnames of the ExternalName Services that name this one (directly or through
	// another alias), sorted by namespace then hostname. Only the copies a proxy's scope makes carry them.
	Aliases []string
	// ExportTo lists the namespaces the service is visible in; "*" means everywhere.
	ExportTo []string
	// Selector selects the workloads (pods, WorkloadEntries) behind the service in its namespace.
	Selector map[string]string
	// ServiceAccounts are identities the service declares besides its endpoints': a ServiceEntry's
	// subjectAltNames, a Kubernetes Service's alpha.istio.io/canonical-serviceaccounts and
	// alpha.istio.io/kubernetes-serviceaccounts annotations (as SPIFFE URIs).
	ServiceAccounts   []string
	Labels            map[string]string
	Annotations       map[string]string
	CreationTimestamp time.Time
	// inline endpoints of a ServiceEntry.
	inlineEndpoints []*networking.WorkloadEntry
	key             string
}

// Key returns "namespace/hostname", the name ztunnel and the endpoint index use for the service.
func (s *Service) Key() string {
	if s.key == "" {
		return s.Namespace + "/" + s.Hostname
	}
	return s.key
}

// withKey fills in the cached key; services are built once and never modified afterwards.
func withKey(svcs []*Service) []*Service {
	for _, s := range svcs {
		s.key = s.Namespace + "/" + s.Hostname
	}
	return svcs
}

// PortByNumber returns the service port with number n.
func (s *Service) PortByNumber(n uint32) *Port {
	for _, p := range s.Ports {
		if p.Port == n {
			return p
		}
	}
	return nil
}

// ListensOnEndpoints reports whether sidecars reach svc through a listener per endpoint address, as istiod
// does: it has no address of its own and sends each connection to the address dialled (a headless Service,
// a ServiceEntry with resolution NONE and no addresses), so only its endpoints' addresses are its own. Its
// ports other than HTTP (and UDP) get those listeners.
func (s *Service) ListensOnEndpoints() bool {
	return s.Resolution == Passthrough && len(s.Addresses) == 0
}

// ListensOnEndpointPort reports whether port p of svc gets a listener per endpoint address.
func (s *Service) ListensOnEndpointPort(p *Port) bool {
	return s.ListensOnEndpoints() && !p.Protocol.IsHTTP() && p.Protocol != ProtocolUDP
}

// VisibleTo reports whether a proxy in namespace ns may see the service.
func (s *Service) VisibleTo(ns string) bool {
	return visible(s.ExportTo, ns)
}

func visible(exportTo []string, ns string) bool {
	for _, e := range exportTo {
		if e == "*" || e == ns {
			return true
		}
	}
	return false
}

// normalizeExportTo resolves "." to the owner namespace; an empty list takes def, the mesh's default for
// the kind (nil: "*").
func normalizeExportTo(list []string, owner string, def []string) []string {
	if len(list) == 0 {
		list = def
	}
	if len(list) == 0 {
		return exportAll
	}
	out := make([]string, 0, len(list))
	for _, e := range list {
		e = strings.TrimSpace(e)
		switch e {
		case ".":
			out = append(out, owner)
		case "~":
			// exported nowhere
		case "":
		default:
			out = append(out, e)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

var exportAll = []string{"*"}

// ExportToAnnotation is the annotation a Kubernetes Service uses to restrict its visibility.
const ExportToAnnotation = "networking.istio.io/exportTo"

// ServiceHostname returns NAME.NAMESPACE.svc.SUFFIX.
func ServiceHostname(name, namespace, suffix string) string {
	return name + "." + namespace + ".svc." + suffix
}

// ResolveHost qualifies a short host name written in config in namespace ns, as Istio does:
// "reviews" becomes "reviews.NS.svc.SUFFIX"; names with dots and wildcards are kept.
func ResolveHost(host, ns, suffix string) string {
	if host == "" || host == "*" || strings.Contains(host, ".") {
		return host
	}
	return ServiceHostname(host, ns, suffix)
}

// servicesFromKube converts a Kubernetes Service.
func servicesFromKube(c *config.Config, m *mesh.Config) []*Service {
	ks := c.Spec.(*corev1.Service)
	if ks.Spec.Type == corev1.ServiceTypeExternalName && ks.Spec.ExternalName != "" {
		return []*Service{externalNameService(c, ks, m)}
	}
	svc := &Service{
		Hostname:          ServiceHostname(c.Name, c.Namespace, m.DomainSuffix),
		Name:              c.Name,
		Namespace:         c.Namespace,
		Source:            c.Key,
		Selector:          ks.Spec.Selector,
		Labels:            c.Labels,
		Annotations:       c.Annotations,
		CreationTimestamp: c.CreationTimestamp,
		Resolution:        ClientSideLB,
		ExportTo:          normalizeExportTo(splitList(c.Annotations[ExportToAnnotation]), c.Namespace, m.DefaultServiceExportTo),
		ServiceAccounts:   annotatedServiceAccounts(c, m),
	}
	if ks.Spec.ClusterIP == corev1.ClusterIPNone {
		svc.Resolution = Passthrough
	}
	svc.NodeLocal = ks.Spec.InternalTrafficPolicy != nil && *ks.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal
	svc.TrafficDistribution = trafficDistribution(ks.Spec.TrafficDistribution, c.Annotations[TrafficDistributionAnnotation])
	for _, ip := range ks.Spec.ClusterIPs {
		if ip != "" && ip != corev1.ClusterIPNone {
			svc.Addresses = append(svc.Addresses, ip)
		}
	}
	if len(svc.Addresses) == 0 && ks.Spec.ClusterIP != "" && ks.Spec.ClusterIP != corev1.ClusterIPNone {
		svc.Addresses = []string{ks.Spec.ClusterIP}
	}
	for _, p := range ks.Spec.Ports {
		if p.Protocol == corev1.ProtocolSCTP {
			continue
		}
		port := &Port{Name: p.Name, Port: uint32(p.Port), Protocol: kubePortProtocol(p)}
		if p.TargetPort.IntVal != 0 {
			port.TargetPort = uint32(p.TargetPort.IntVal)
		} else if p.TargetPort.StrVal != "" {
			port.TargetPortName = p.TargetPort.StrVal
		}
		svc.Ports = append(svc.Ports, port)
	}
	sortPorts(svc.Ports)
	return []*Service{svc}
}

func externalNameService(c *config.Config, ks *corev1.Service, m *mesh.Config) *Service {
	svc := &Service{
		Hostname:          ServiceHostname(c.Name, c.Namespace, m.DomainSuffix),
		Name:              c.Name,
		Namespace:         c.Namespace,
		Source:            c.Key,
		Labels:            c.Labels,
		Annotations:       c.Annotations,
		CreationTimestamp: c.CreationTimestamp,
		Resolution:        Alias,
		AliasFor:          ks.Spec.ExternalName,
		MeshExternal:      true,
		ExportTo:          normalizeExportTo(splitList(c.Annotations[ExportToAnnotation]), c.Namespace, m.DefaultServiceExportTo),
	}
	for _, p := range ks.Spec.Ports {
		svc.Ports = append(svc.Ports, &Port{Name: p.Name, Port: uint32(p.Port), Protocol: kubePortProtocol(p)})
	}
	sortPorts(svc.Ports)
	return svc
}

// TrafficDistributionAnnotation sets a Service's traffic distribution where its spec does not, as in Istio.
const TrafficDistributionAnnotation = config.TrafficDistributionAnnotation

// trafficDistribution is istiod's GetTrafficDistribution: the spec field when it names a known value,
// else the annotation (case-insensitive).
func trafficDistribution(spec *string, annotation string) string {
	if spec != nil {
		switch *spec {
		case corev1.ServiceTrafficDistributionPreferSameZone, corev1.ServiceTrafficDistributionPreferClose:
			return corev1.ServiceTrafficDistributionPreferSameZone
		case corev1.ServiceTrafficDistributionPreferSameNode:
			return corev1.ServiceTrafficDistributionPreferSameNode
		}
	}
	switch strings.ToLower(annotation) {
	case "preferclose", "prefersamezone":
		return corev1.ServiceTrafficDistributionPreferSameZone
	case "prefersamenode":
		return corev1.ServiceTrafficDistributionPreferSameNode
	}
	return ""
}

// kubePortProtocol follows Istio: appProtocol first, then the port name prefix ("http-web"), else unknown.
func kubePortProtocol(p corev1.ServicePort) Protocol {
	if p.Protocol == corev1.ProtocolUDP {
		return ProtocolUDP
	}
	if p.AppProtocol != nil {
		if proto := ParseProtocol(*p.AppProtocol); proto != ProtocolUnset {
			return proto
		}
	}
	return protocolFromPortName(p.Name)
}

func protocolFromPortName(name string) Protocol {
	prefix, _, _ := strings.Cut(name, protocolPrefix)
	return ParseProtocol(prefix)
}

// convertServices converts a Service or ServiceEntry; namespace looks up a Namespace object (nil if none).
func convertServices(c *config.Config, m *mesh.Config, namespace func(string) (*config.Config, bool)) []*Service {
	if c.Kind == config.Service {
		return withKey(servicesFromKube(c, m))
	}
	var nsLabels map[string]string
	if ns, _ := namespace(c.Namespace); ns != nil {
		nsLabels = ns.Labels
	}
	return withKey(servicesFromServiceEntry(c, m, nsLabels))
}

// servicesFromServiceEntry converts a ServiceEntry: one Service per host. nsLabels are its namespace's
// labels, which the mesh config's serviceEntryVisibility matches.
func servicesFromServiceEntry(c *config.Config, m *mesh.Config, nsLabels map[string]string) []*Service {
	se := c.Spec.(*networking.ServiceEntry)
	var ports []*Port
	for _, p := range se.Ports {
		proto := ParseProtocol(p.Protocol)
		if proto == ProtocolUnset {
			proto = protocolFromPortName(p.Name)
		}
		ports = append(ports, &Port{Name: p.Name, Port: p.Number, Protocol: proto, TargetPort: p.TargetPort})
	}
	sortPorts(ports)
	res := ClientSideLB
	switch se.Resolution {
	case networking.ServiceEntry_DNS:
		res = DNSLB
	case networking.ServiceEntry_DNS_ROUND_ROBIN:
		res = DNSRoundRobinLB
	case networking.ServiceEntry_NONE:
		res = Passthrough
	case networking.ServiceEntry_DYNAMIC_DNS:
		res = DynamicDNS
	}
	var selector map[string]string
	if se.WorkloadSelector != nil {
		selector = se.WorkloadSelector.Labels
		if selector == nil {
			selector = map[string]string{}
		}
	}
	exportTo := capServiceEntryExportTo(m, c.Namespace, nsLabels, normalizeExportTo(se.ExportTo, c.Namespace, m.DefaultServiceExportTo))
	out := make([]*Service, 0, len(se.Hosts))
	for _, h := range se.Hosts {
		out = append(out, &Service{
			Hostname:          ResolveHost(h, c.Namespace, m.DomainSuffix),
			Name:              c.Name,
			Namespace:         c.Namespace,
			Source:            c.Key,
			Addresses:         se.Addresses,
			Ports:             ports,
			Resolution:        res,
			MeshExternal:      se.Location == networking.ServiceEntry_MESH_EXTERNAL,
			ExportTo:          exportTo,
			Selector:          selector,
			Labels:            c.Labels,
			Annotations:       c.Annotations,
			CreationTimestamp: c.CreationTimestamp,
			inlineEndpoints:   se.Endpoints,
			ServiceAccounts:   se.SubjectAltNames,
		})
	}
	return out
}

func sortPorts(ps []*Port) {
	slices.SortStableFunc(ps, func(a, b *Port) int { return int(a.Port) - int(b.Port) })
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// CompareServices orders services oldest first, then by namespace and source, so that the service
// deciding what several share (a hostname, a port's listener) is deterministic.
func CompareServices(a, b *Service) int {
	if c := a.CreationTimestamp.Compare(b.CreationTimestamp); c != 0 {
		return c
	}
	if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return config.CompareKeys(a.Source, b.Source)
}

// labelsMatch reports whether labels carry every key/value of selector. An empty selector matches all.
func labelsMatch(selector, labels map[string]string) bool {
	for k, v := range selector {
		if lv, ok := labels[k]; !ok || lv != v {
			return false
		}
	}
	return true
}

// Annotations of a Kubernetes Service naming the identities of its workloads, read as istiod does.
const (
	AnnotationCanonicalServiceAccounts  = "alpha.istio.io/canonical-serviceaccounts"
	AnnotationKubernetesServiceAccounts = "alpha.istio.io/kubernetes-serviceaccounts"
)

// annotatedServiceAccounts returns the identities a Kubernetes Service's annotations declare: canonical ones
// as written, Kubernetes service account names as SPIFFE URIs of the service's namespace.
func annotatedServiceAccounts(c *config.Config, m *mesh.Config) []string {
	var out []string
	if v := c.Annotations[AnnotationCanonicalServiceAccounts]; v != "" {
		out = append(out, strings.Split(v, ",")...)
	}
	if v := c.Annotations[AnnotationKubernetesServiceAccounts]; v != "" {
		for _, sa := range strings.Split(v, ",") {
			out = append(out, SpiffeID(m.TrustDomain, c.Namespace, sa))
		}
	}
	return out
}

// SpiffeID is the identity of service account sa of namespace ns in trustDomain.
func SpiffeID(trustDomain, ns, sa string) string {
	return "spiffe://" + trustDomain + "/ns/" + ns + "/sa/" + sa
}
