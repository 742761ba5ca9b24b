package config

import (
	"maps"
	"reflect"
	"slices"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// CompatK8sKind is a Kubernetes kind Sextant reads whose spec is a Go type of k8s.io/api, not an Istio
// message: its fields are walked by their json tags.
type CompatK8sKind struct {
	Kind Kind
	Spec reflect.Type
	// APIVersion is the kind's group and version, as the page names it.
	APIVersion string
	// ReadOnly: the kind has many fields for other controllers; only those its table lists are rows.
	ReadOnly bool
}

// CompatK8sKinds returns the Kubernetes kinds the compatibility page lists, after the Istio kinds.
func CompatK8sKinds() []CompatK8sKind {
	return []CompatK8sKind{
		{Kind: Service, Spec: reflect.TypeFor[corev1.ServiceSpec](), APIVersion: "v1", ReadOnly: true},
		{Kind: Ingress, Spec: reflect.TypeFor[networkingv1.IngressSpec](), APIVersion: "networking.k8s.io/v1"},
		{Kind: IngressClass, Spec: reflect.TypeFor[networkingv1.IngressClassSpec](), APIVersion: "networking.k8s.io/v1"},
	}
}

// k8sCompatAnnotations are the annotations of the Kubernetes kinds Sextant reads, each a row after the spec's.
var k8sCompatAnnotations = map[Kind]map[string]CompatEntry{
	Service: {
		"networking.istio.io/traffic-distribution": {Status: Honoured, Note: "as spec.trafficDistribution, which takes " +
			"precedence (values case-insensitive); another value is warned (PreferNetwork is read by ztunnel alone); " +
			"on a Namespace, warned, not implemented"},
		"networking.istio.io/exportTo": {Status: Honoured, Note: "the namespaces that see the Service (. its own, ~ none)"},
	},
}

// k8sCompatTable lists, by kind and path (lists written []), the fields of the Kubernetes kinds that are
// not plainly honoured, or whose effect needs a word. Every field not listed is honoured (of a ReadOnly kind, not a row).
var k8sCompatTable = map[Kind]map[string]CompatEntry{
	Service: {
		"spec.ports[]":             {Status: Honoured, Note: "SCTP ports are left out, as istiod leaves them out"},
		"spec.ports[].name":        {Status: Honoured, Note: "the protocol from its prefix (http-, grpc-, tcp-, ...) without appProtocol"},
		"spec.ports[].protocol":    {Status: Honoured, Note: "a UDP port is UDP whatever its name"},
		"spec.ports[].appProtocol": {Status: Honoured, Note: "the port's protocol, before its name's prefix"},
		"spec.ports[].port":        {Status: Honoured, Note: "the port clients call"},
		"spec.ports[].targetPort":  {Status: Honoured, Note: "the endpoints' port, a number or a container port name"},
		"spec.selector":            {Status: Honoured, Note: "the pods and WorkloadEntries behind the Service"},
		"spec.clusterIP":           {Status: Honoured, Note: "None makes the Service headless: connections go to the address dialled"},
		"spec.clusterIPs[]":        {Status: Honoured, Note: "every address of a dual-stack Service"},
		"spec.type": {Status: Honoured, Note: "ExternalName makes the Service an alias of spec.externalName, as istiod: " +
			"no cluster, listener or route of its own, the named service's routes answer the alias's names and a route " +
			"to the alias uses the named service's cluster; other types are served to sidecars as ClusterIP Services"},
		"spec.externalName": {Status: Honoured, Note: "the host an ExternalName Service aliases, matched as written"},
		"spec.internalTrafficPolicy": {Status: Honoured, Note: "Local: each sidecar gets only the endpoints on its own node " +
			"(node metadata NODE_NAME), as istiod's EDS"},
		"spec.trafficDistribution": {Status: Honoured, Note: "PreferClose (PreferSameZone) and PreferSameNode: sidecars get " +
			"failover priorities by network, region, zone (and node), as istiod, unless a DestinationRule sets " +
			"localityLbSetting; ztunnel gets the same preference"},
	},
	Ingress: {
		"spec.ingressClassName": {Status: Honoured, Note: "an Ingress is served when its kubernetes.io/ingress.class annotation " +
			"is the mesh config's ingressClass, else when this names an IngressClass of istio.io/ingress-controller, else when " +
			"ingressControllerMode is DEFAULT, as istiod decides"},
		"spec.defaultBackend": {Status: Warned, Note: "ignored, as istiod ignores it: route the hosts with a VirtualService instead"},
		"spec.tls[]": {Status: Partly, Note: "each entry with a secretName is a 443 server (SIMPLE, the secret as credentialName) " +
			"on the Gateway made of the Ingress; an entry without one is warned and ignored, as istiod ignores it"},
		"spec.rules[]": {Status: Partly, Note: "the rules of every Ingress for one host make one VirtualService, oldest Ingress " +
			"first, paths longest first, as istiod's; a rule without http is warned and ignored, as istiod ignores it"},
		"spec.rules[].http.paths[].pathType": {Status: Honoured, Note: "Prefix matches whole path elements; " +
			"ImplementationSpecific reads the path as istiod does (a trailing /* or .* is a prefix, else exact)"},
		"spec.rules[].http.paths[].backend.service.port.name": {Status: Honoured, Note: "resolved on the Service; " +
			"a name the Service lacks leaves the path out, as istiod does, and is warned"},
		"spec.rules[].http.paths[].backend.resource": {Status: Warned, Note: "ignored, as istiod ignores it: only " +
			"service backends are routed; the path is left out"},
	},
	IngressClass: {
		"spec.controller": {Status: Honoured, Note: "the Ingresses of a class whose controller is istio.io/ingress-controller are served"},
		"spec.parameters": {Status: Warned, Note: "ignored, as istiod ignores it: the mesh config's ingress fields configure " +
			"the conversion"},
	},
}

// CompatK8sRows walks a Kubernetes kind's spec type by json tags, one row per field.
func CompatK8sRows(k CompatK8sKind) []CompatRow {
	var rows []CompatRow
	var walk func(prefix string, t reflect.Type, covered CompatRow)
	walk = func(prefix string, t reflect.Type, covered CompatRow) {
		for i := range t.NumField() {
			sf := t.Field(i)
			name, opts, _ := strings.Cut(sf.Tag.Get("json"), ",")
			if opts == "inline" || sf.Anonymous {
				walk(prefix, sf.Type, covered)
				continue
			}
			if name == "" || name == "-" {
				continue
			}
			ft := sf.Type
			path := prefix + "." + name
			for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
				if ft.Kind() == reflect.Slice {
					path += "[]"
				}
				ft = ft.Elem()
			}
			e, ok := k8sCompatTable[k.Kind][path]
			if !ok {
				e = CompatEntry{Status: Honoured}
			}
			if ok || !k.ReadOnly {
				rows = append(rows, CompatRow{Path: path, Entry: e, CoveredBy: covered.CoveredBy, CoveredStatus: covered.CoveredStatus})
			}
			if ft.Kind() != reflect.Struct {
				continue
			}
			below := covered
			if below.CoveredBy == "" && (e.Status == Warned || e.Status == Rejected) {
				below = CompatRow{CoveredBy: path, CoveredStatus: e.Status}
			}
			walk(path, ft, below)
		}
	}
	walk("spec", k.Spec, CompatRow{})
	annotations := k8sCompatAnnotations[k.Kind]
	for _, name := range slices.Sorted(maps.Keys(annotations)) {
		rows = append(rows, CompatRow{Path: "metadata.annotations[" + name + "]", Entry: annotations[name]})
	}
	return rows
}

// meshIngressGroups are the mesh config's fields for Kubernetes Ingress, honoured, with what they do.
var meshIngressGroups = []meshCompatGroup{
	{meshMsg, []protoreflect.Name{"ingress_class"}, CompatEntry{Status: Honoured,
		Note: "an Ingress whose kubernetes.io/ingress.class annotation is this is served (default istio)"}},
	{meshMsg, []protoreflect.Name{"ingress_controller_mode"}, CompatEntry{Status: Honoured,
		Note: "OFF serves no Ingress; STRICT (the default) those of ingressClass or of an IngressClass of " +
			"istio.io/ingress-controller; DEFAULT those that name no class too; UNSPECIFIED none, as istiod"}},
	{meshMsg, []protoreflect.Name{"ingress_service", "ingress_selector"}, CompatEntry{Status: Honoured,
		Note: "the Gateway made of an Ingress selects the pods labelled istio: ingressSelector, else istio: ingressService " +
			"unless it is the default istio-ingressgateway, else istio: ingressgateway, as istiod"}},
}
