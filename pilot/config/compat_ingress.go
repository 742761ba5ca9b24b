package config

import (
	"reflect"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
	networkingv1 "k8s.io/api/networking/v1"
)

// CompatK8sKind is a Kubernetes kind Sextant reads whose spec is a Go type of k8s.io/api, not an Istio
// message: its fields are walked by their json tags.
type CompatK8sKind struct {
	Kind Kind
	Spec reflect.Type
}

// CompatK8sKinds returns the Kubernetes kinds the compatibility page lists, after the Istio kinds.
func CompatK8sKinds() []CompatK8sKind {
	return []CompatK8sKind{
		{Ingress, reflect.TypeFor[networkingv1.IngressSpec]()},
		{IngressClass, reflect.TypeFor[networkingv1.IngressClassSpec]()},
	}
}

// k8sCompatTable lists, by kind and path (lists written []), the fields of the Kubernetes kinds that are
// not plainly honoured, or whose effect needs a word. Every field not listed is honoured.
var k8sCompatTable = map[Kind]map[string]CompatEntry{
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
			rows = append(rows, CompatRow{Path: path, Entry: e, CoveredBy: covered.CoveredBy, CoveredStatus: covered.CoveredStatus})
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
