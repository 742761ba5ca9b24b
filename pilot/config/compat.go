package config

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	networking "istio.io/api/networking/v1alpha3"
	networkingv1beta1 "istio.io/api/networking/v1beta1"
	security "istio.io/api/security/v1beta1"
)

// FieldStatus says what Sextant does with one field of an Istio kind.
type FieldStatus string

const (
	// Honoured: read by the generators and served as istiod serves it.
	Honoured FieldStatus = "honoured"
	// Partly: honoured, except the values the note names, which are warned.
	Partly FieldStatus = "partly"
	// Warned: accepted, not implemented; Warnings names the field when it is set.
	Warned FieldStatus = "warned"
	// Rejected: Validate refuses an object that sets it.
	Rejected FieldStatus = "rejected"
)

// CompatField names one field of an Istio message: the message's full protobuf name and the field's
// protobuf name.
type CompatField struct {
	Message protoreflect.FullName
	Field   protoreflect.Name
}

// CompatEntry is the status of a field that is not plainly honoured, with a line a user can read.
type CompatEntry struct {
	Status FieldStatus
	// Values are, for Partly, the enum values that are warned; for Warned, the value that sets it off
	// (an enum value's name) when not every non-zero value does.
	Values []string
	// ReadBy names the function of this package, called by the generators, that reads a Honoured field
	// the generators do not read themselves.
	ReadBy string
	Note   string
}

// CompatKind is an Istio kind Sextant reads and the message of its spec.
type CompatKind struct {
	Kind Kind
	Spec protoreflect.MessageDescriptor
}

// CompatKinds returns the Istio kinds Sextant reads, in the order of the compatibility page.
func CompatKinds() []CompatKind {
	spec := func(m proto.Message) protoreflect.MessageDescriptor { return m.ProtoReflect().Descriptor() }
	return []CompatKind{
		{VirtualService, spec(&networking.VirtualService{})},
		{DestinationRule, spec(&networking.DestinationRule{})},
		{Gateway, spec(&networking.Gateway{})},
		{Sidecar, spec(&networking.Sidecar{})},
		{ServiceEntry, spec(&networking.ServiceEntry{})},
		{WorkloadEntry, spec(&networking.WorkloadEntry{})},
		{AuthorizationPolicy, spec(&security.AuthorizationPolicy{})},
		{PeerAuthentication, spec(&security.PeerAuthentication{})},
		{RequestAuthentication, spec(&security.RequestAuthentication{})},
		{ProxyConfig, spec(&networkingv1beta1.ProxyConfig{})},
		{WorkloadGroup, spec(&networking.WorkloadGroup{})},
	}
}

const (
	networkingPkg = "istio.networking.v1alpha3."
	securityPkg   = "istio.security.v1beta1."
	typePkg       = "istio.type.v1beta1."
	// proxyConfigPkg holds the ProxyConfig kind, apart from the other networking kinds.
	proxyConfigPkg = "istio.networking.v1beta1."
)

// compatTable lists every field of the Istio kinds that is not plainly honoured. A Warned or Rejected
// message field covers its whole subtree. Every field not listed is honoured. compat_test.go checks each
// line against the code: honoured fields are read by the generators, warned ones warn, rejected ones fail.
var compatTable = map[CompatField]CompatEntry{
	// VirtualService
	{networkingPkg + "VirtualService", "export_to"}: {Status: Honoured,
		Note: "entries istiod's validation refuses (~, a duplicate, * among others, not a namespace name) are rejected; also orders, as " +
			"istiod: for a sidecar, and for a gateway by its pods' namespace, the VirtualServices exported to that namespace alone come first, " +
			"then those exported to it by name, then those exported everywhere (each oldest first); the first for a host takes its HTTP routes; a " +
			"gateway sees none not exported to its pods' namespace"},
	{networkingPkg + "VirtualService", "tcp"}: {Status: Honoured,
		Note: "a sidecar takes the tcp routes of every VirtualService for the host, one after the other in istiod's order (those exported to " +
			"the proxy's namespace alone, then by name, then everywhere; each oldest first): the first route taking every address ends the walk; " +
			"a gateway server the first applying route of the VirtualServices bound to it"},
	{networkingPkg + "VirtualService", "tls"}: {Status: Honoured,
		Note: "a sidecar takes the tls matches of every VirtualService for the host, one after the other in istiod's order (as tcp routes), as " +
			"istiod: a server name an earlier one matched on the same addresses stays the earlier one's, and the service's own chain is built " +
			"only when none applies; on a gateway server, likewise over the VirtualServices bound to it (a match naming a server name already " +
			"taken is left out whole)"},
	{networkingPkg + "L4MatchAttributes", "source_labels"}: {Status: Honoured,
		Note: "per sidecar, as istiod: a match whose labels the proxy lacks is left out of its listeners; on a gateway it does not restrict " +
			"the match, as istiod"},
	{networkingPkg + "L4MatchAttributes", "destination_subnets"}: {Status: Honoured,
		Note: "the route's chain matches them as prefix ranges, as istiod's; on a gateway they do not restrict the match, as istiod"},
	{networkingPkg + "L4MatchAttributes", "source_subnet"}: {Status: Warned,
		Note: "the match does not test the source address"},
	{networkingPkg + "TLSMatchAttributes", "source_labels"}: {Status: Honoured,
		Note: "per sidecar, as istiod: a match whose labels the proxy lacks is left out of its listeners; on a gateway it does not restrict " +
			"the match, as istiod"},
	{networkingPkg + "TLSMatchAttributes", "destination_subnets"}: {Status: Honoured,
		Note: "the chain matches them as prefix ranges, as istiod's (and, as istiod's, so do the later matches that name none, in the later " +
			"VirtualServices for the host too); on a gateway they do not restrict the match, as istiod"},
	{networkingPkg + "L4MatchAttributes", "source_namespace"}: {Status: Honoured,
		Note: "per sidecar; on a gateway it does not restrict the match, as istiod"},
	{networkingPkg + "TLSMatchAttributes", "source_namespace"}: {Status: Honoured,
		Note: "per sidecar; on a gateway it does not restrict the match, as istiod"},
	{networkingPkg + "TLSMatchAttributes", "sni_hosts"}: {Status: Honoured,
		Note: "matched as written, as istiod's: a short name is not completed to the service's hostname"},
	{networkingPkg + "HTTPFaultInjection.Delay", "exponential_delay"}: {Status: Warned,
		Note: "not implemented (istiod neither): no delay is injected"},
	{networkingPkg + "HTTPFaultInjection.Abort", "http2_error"}: {Status: Warned,
		Note: "not implemented (istiod neither): no abort is injected"},

	// DestinationRule
	{networkingPkg + "LoadBalancerSettings", "backend_utilization"}: {Status: Warned,
		Note: "not implemented (istiod neither): the default load balancing policy applies"},
	{networkingPkg + "OutlierDetection", "consecutive_errors"}: {Status: Warned,
		Note: "deprecated and ignored, as istiod ignores it: use consecutive5xxErrors or consecutiveGatewayErrors"},
	{networkingPkg + "OutlierDetection", "outlier_detection_http_error_codes"}: {Status: Warned,
		Note: "every 5xx response counts as an error, not only these codes"},
	{networkingPkg + "OutlierDetection", "failure_percentage_threshold"}: {Status: Warned,
		Note: "not implemented (istiod neither): failure-percentage ejection stays off"},
	{networkingPkg + "ClientTLSSettings", "ca_cert_credential_name"}: {Status: Rejected,
		Note: "ignoring it would check the server's certificate against the system roots: put the CA in the Secret of credentialName (ca.crt) " +
			"or in caCertificates"},
	{networkingPkg + "TrafficPolicy", "tunnel"}: {Status: Rejected,
		Note: "not implemented: sending the traffic straight to its destination would bypass the tunnel proxy"},
	{networkingPkg + "TrafficPolicy", "retry_budget"}: {Status: Warned,
		Note: "concurrent retries are limited by connectionPool.http.maxRetries only"},

	// Gateway
	{networkingPkg + "ServerTLSSettings", "mode"}: {Status: Honoured,
		Note: "AUTO_PASSTHROUGH forwards mTLS by its server name (outbound_.PORT_.SUBSET_.HOST) to SNI-DNAT clusters, as istiod; like " +
			"istiod's, those chains carry no AuthorizationPolicy (the destination's sidecar enforces), and a policy applying to such a gateway's " +
			"pods is warned"},
	{networkingPkg + "ServerTLSSettings", "min_protocol_version"}: {Status: Partly, Values: []string{"TLSV1_0", "TLSV1_1"},
		Note: "TLSV1_0 and TLSV1_1 without cipherSuites are warned: Envoy's default ciphers do not support them"},
	{networkingPkg + "ServerTLSSettings", "cipher_suites"}: {Status: Partly,
		Note: "names Envoy does not know, and repeats, are warned and left out, as istiod leaves them out"},
	{networkingPkg + "Port", "target_port"}: {Status: Rejected,
		Note: "refused, as istiod refuses it: the gateway listens on the targetPort of the Service port the server names"},
	{networkingPkg + "SidecarPort", "target_port"}: {Status: Rejected, Note: "refused, as istiod refuses it"},
	{networkingPkg + "Server", "default_endpoint"}: {Status: Warned,
		Note: "ignored, as istiod ignores it on a Gateway: the server forwards as its routes say"},

	// Sidecar
	{networkingPkg + "Sidecar", "ingress"}: {Status: Honoured,
		Note: "its ports replace those of the Services selecting the workload, on the inbound listener and its clusters, as istiod's"},
	{networkingPkg + "IstioIngressListener", "capture_mode"}: {Status: Honoured,
		Note: "IPTABLES takes the port's traffic on the inbound capture listener; NONE binds a listener of its own on the port, as istiod's; " +
			"DEFAULT is IPTABLES, or NONE on a proxy without capture (INTERCEPTION_MODE NONE)"},
	{networkingPkg + "IstioIngressListener", "bind"}: {Status: Honoured,
		Note: "the address a bound port's listener takes (else the pod's address), as istiod's; under capture it names the port's chains only, " +
			"and the port is matched on any address"},
	{networkingPkg + "IstioEgressListener", "hosts"}: {Status: Honoured,
		Note: "select the services and, as istiod, the VirtualServices (by their namespace and hosts) the proxy routes by: HTTP routes, tcp " +
			"and tls routes alike, each egress listener by its own hosts; the services those VirtualServices route or mirror to get clusters and " +
			"endpoints too, on the ports routed to"},
	{networkingPkg + "DestinationRule", "export_to"}: {Status: Honoured,
		Note: "entries istiod's validation refuses (~, a duplicate, * among others, not a namespace name, beyond the rule's own namespace with " +
			"a workloadSelector) are rejected"},
	{networkingPkg + "ServiceEntry", "hosts"}: {Status: Honoured,
		Note: "a host that several ServiceEntries of one namespace name is served as the oldest entry defines it, and each other entry is " +
			"warned (istiod merges their ports)"},
	{networkingPkg + "ServiceEntry", "export_to"}: {Status: Honoured,
		Note: "~ (seen by the entry's own workloads only) must stand alone; a duplicate, * among others, or not a namespace name is rejected, " +
			"as istiod's validation"},
	{networkingPkg + "IstioIngressListener", "tls"}: {Status: Warned,
		Note: "ignored, as istiod ignores it unless ENABLE_TLS_ON_SIDECAR_INGRESS is set; what istiod's validation refuses (credentialName, " +
			"ISTIO_MUTUAL, ...) is refused"},
	{networkingPkg + "IstioEgressListener", "port"}: {Status: Honoured,
		Note: "number 0 (a unix domain socket) and protocol HTTP_PROXY are rejected: not implemented"},
	{networkingPkg + "IstioEgressListener", "bind"}: {Status: Honoured,
		Note: "unix:// (a unix domain socket) is rejected: not implemented. captureMode NONE without a bind binds to 127.0.0.1"},
	{networkingPkg + "OutboundTrafficPolicy", "egress_proxy"}: {Status: Warned,
		Note: "traffic to unknown destinations is refused (BlackHoleCluster) rather than sent to the egress proxy"},

	// AuthorizationPolicy, RequestAuthentication
	{securityPkg + "AuthorizationPolicy", "targetRef"}: {Status: Partly,
		Note: "only a Gateway API Gateway is served; a Service, ServiceEntry or GatewayClass is a waypoint's target and gets nothing"},
	{securityPkg + "AuthorizationPolicy", "targetRefs"}: {Status: Partly,
		Note: "only a Gateway API Gateway is served; a Service, ServiceEntry or GatewayClass is a waypoint's target and gets nothing"},
	{securityPkg + "RequestAuthentication", "targetRef"}: {Status: Partly,
		Note: "only a Gateway API Gateway is served; a Service, ServiceEntry or GatewayClass is a waypoint's target and gets nothing"},
	{securityPkg + "RequestAuthentication", "targetRefs"}: {Status: Partly,
		Note: "only a Gateway API Gateway is served; a Service, ServiceEntry or GatewayClass is a waypoint's target and gets nothing"},
	{typePkg + "PolicyTargetReference", "group"}: {Status: Honoured, ReadBy: "IsGatewayTargetRef"},
	{typePkg + "PolicyTargetReference", "kind"}:  {Status: Honoured, ReadBy: "IsGatewayTargetRef"},

	// ProxyConfig: istiod reads the kind in its sidecar injector only; its xDS output follows what the agent
	// sends (node metadata PROXY_CONFIG), which Sextant reads: gatewayTopology shapes a gateway's listeners.
	{proxyConfigPkg + "ProxyConfig", "selector"}: {Status: Warned,
		Note: "agent-side: picks the pods the sidecar injector applies the object to; Sextant runs no injector"},
	{proxyConfigPkg + "ProxyConfig", "concurrency"}: {Status: Warned,
		Note: "agent-side: the proxy's worker threads, set by the injector when it creates the pod"},
	{proxyConfigPkg + "ProxyConfig", "environment_variables"}: {Status: Warned,
		Note: "agent-side: set on the proxy container by the injector; the node metadata the agent then sends is read from the node"},
	{proxyConfigPkg + "ProxyConfig", "image"}: {Status: Warned,
		Note: "agent-side: the proxy image the injector picks"},

	// WorkloadGroup: the template of the WorkloadEntries pilot/autoregister writes when a VM's agent connects.
	{networkingPkg + "WorkloadGroup", "probe"}: {Status: Warned,
		Note: "agent-side: the VM's agent runs the probe from its own config (istioctl x workload entry configure writes it there); " +
			"istiod does not read it either"},
}

// CompatStatus returns the status of field f, and whether the table lists it.
func CompatStatus(f protoreflect.FieldDescriptor) (CompatEntry, bool) {
	key := CompatField{f.ContainingMessage().FullName(), f.Name()}
	e, ok := compatTable[key]
	if !ok {
		e, ok = meshCompatTable[key]
	}
	if !ok {
		return CompatEntry{Status: Honoured}, false
	}
	return e, true
}

// CompatRow is one field of a kind as the compatibility page lists it.
type CompatRow struct {
	Path  string // JSON path, lists and maps written [], e.g. spec.http[].corsPolicy
	Field protoreflect.FieldDescriptor
	Entry CompatEntry
	// CoveredBy is the path of the warned or rejected message field above this one, if any, and
	// CoveredStatus its status.
	CoveredBy     string
	CoveredStatus FieldStatus
	chain         []protoreflect.FieldDescriptor // from the spec message down to Field
}

// CompatRows walks a kind's spec message in declaration order, one row per field. Messages of the
// google.protobuf package are values, not walked.
func CompatRows(spec protoreflect.MessageDescriptor) []CompatRow {
	return compatRowsUnder("spec", spec)
}

// compatRowsUnder walks m with paths under prefix (none: the message is the file's top level).
func compatRowsUnder(prefix string, m protoreflect.MessageDescriptor) []CompatRow {
	var rows []CompatRow
	var walk func(prefix string, chain []protoreflect.FieldDescriptor, m protoreflect.MessageDescriptor, covered CompatRow,
		seen map[protoreflect.FullName]bool)
	walk = func(prefix string, chain []protoreflect.FieldDescriptor, m protoreflect.MessageDescriptor, covered CompatRow,
		seen map[protoreflect.FullName]bool) {
		if seen[m.FullName()] {
			return
		}
		seen[m.FullName()] = true
		defer delete(seen, m.FullName())
		fields := m.Fields()
		for i := range fields.Len() {
			f := fields.Get(i)
			path := f.JSONName()
			if prefix != "" {
				path = prefix + "." + path
			}
			value := f.Message()
			if f.IsMap() {
				value = f.MapValue().Message()
			}
			if f.IsList() || f.IsMap() && value != nil {
				path += "[]"
			}
			e, _ := CompatStatus(f)
			rows = append(rows, CompatRow{Path: path, Field: f, Entry: e, CoveredBy: covered.CoveredBy, CoveredStatus: covered.CoveredStatus,
				chain: append(chain[:len(chain):len(chain)], f)})
			if value == nil || strings.HasPrefix(string(value.FullName()), "google.protobuf.") {
				continue
			}
			below := covered
			if below.CoveredBy == "" && (e.Status == Warned || e.Status == Rejected) {
				below = CompatRow{CoveredBy: path, CoveredStatus: e.Status}
			}
			walk(path, append(chain[:len(chain):len(chain)], f), value, below, seen)
		}
	}
	walk(prefix, nil, m, CompatRow{}, map[protoreflect.FullName]bool{})
	return rows
}

// CompatPage renders docs/istio-compat.md from the Istio protos and compatTable.
func CompatPage() string {
	var b strings.Builder
	b.WriteString(`# Istio compatibility: every field Sextant reads

Generated from the Istio protos (istio.io/api) and the table in pilot/config/compat.go; a test in
pilot/config fails when this page and the code disagree (` + "`go test ./pilot/config -run TestCompatPage -update`" + `
rewrites it).

- **honoured**: read by the generators and served as istiod serves it.
- **partly**: honoured, except what the note says, which is warned.
- **warned**: accepted, not implemented; ` + "`sextant validate`" + `, the server log and ` + "`/debug/config_errors`" + ` name the
  object and the field when it is set, and say what happens instead.
- **rejected**: an object that sets it is refused, naming the field.

A field inside a warned or rejected one has the status of the outer field.
`)
	for _, k := range CompatKinds() {
		fmt.Fprintf(&b, "\n## %s\n\n`%s`\n\n", k.Kind, k.Spec.FullName())
		writeCompatRows(&b, CompatRows(k.Spec))
	}
	for _, k := range CompatK8sKinds() {
		fmt.Fprintf(&b, "\n## %s\n\n`%s` (%s)", k.Kind, k.Spec.Name(), k.APIVersion)
		if k.ReadOnly {
			b.WriteString(": the fields Sextant reads; the others are for Kubernetes' own controllers")
		}
		b.WriteString("\n\n")
		writeCompatRows(&b, CompatK8sRows(k))
	}
	fmt.Fprintf(&b, "\n## Mesh config\n\n`%s`, the file of `--mesh-config`, read over istiod's defaults (`%s`, "+
		"the proxy defaults, is `defaultConfig`). `sextant validate --mesh-config` and the server name each warned field the "+
		"file sets, by its path.\n\n", MeshConfigSpec().FullName(), "istio.mesh.v1alpha1.ProxyConfig")
	writeCompatRows(&b, CompatMeshRows())
	return b.String()
}

func writeCompatRows(b *strings.Builder, rows []CompatRow) {
	b.WriteString("| field | status | note |\n|---|---|---|\n")
	for _, r := range rows {
		status, note := r.Entry.Status, r.Entry.Note
		if r.CoveredBy != "" {
			status, note = r.CoveredStatus, "with `"+r.CoveredBy+"`"
		}
		fmt.Fprintf(b, "| `%s` | %s | %s |\n", r.Path, status, strings.ReplaceAll(note, "|", `\|`))
	}
}
