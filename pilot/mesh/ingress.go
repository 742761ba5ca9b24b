package mesh

import (
	"fmt"

	"sigs.k8s.io/yaml"
)

// Ingress is how Kubernetes Ingresses are served: the mesh config's ingressClass, ingressControllerMode,
// ingressService and ingressSelector, with istiod's defaults.
type Ingress struct {
	// Class is the value of the kubernetes.io/ingress.class annotation that selects an Ingress (default istio).
	Class string `json:"ingressClass,omitempty"`
	// Mode is OFF (no Ingress is served), STRICT (only those of Class or of an IngressClass of Istio's
	// controller; the default) or DEFAULT (those too, and those that name no class).
	Mode string `json:"ingressControllerMode,omitempty"`
	// Service is the ingress gateway's Service, whose name is its pods' istio label when Selector is empty
	// (default istio-ingressgateway, whose pods are labelled istio: ingressgateway).
	Service string `json:"ingressService,omitempty"`
	// Selector is the istio label of the gateway pods that serve Ingresses.
	Selector string `json:"ingressSelector,omitempty"`
}

// The ingress controller modes, spelled as in Istio's YAML.
const (
	IngressOff     = "OFF"
	IngressDefault = "DEFAULT"
	IngressStrict  = "STRICT"
	// IngressUnspecified is accepted, as istiod accepts it, and serves no Ingress, as istiod does.
	IngressUnspecified = "UNSPECIFIED"
)

// ingressFields are the mesh config fields parseIngress reads.
var ingressFields = []string{"ingressClass", "ingressControllerMode", "ingressService", "ingressSelector"}

func defaultIngress() Ingress {
	return Ingress{Class: "istio", Mode: IngressStrict, Service: "istio-ingressgateway"}
}

// Ingress returns the Ingress settings: istiod's defaults where the mesh config sets nothing.
func (c *Config) Ingress() Ingress {
	if c == nil || c.ingress == nil {
		return defaultIngress()
	}
	return *c.ingress
}

// GatewaySelector is the label selector of the gateway pods the Gateway made of an Ingress selects, as
// istiod picks it: istio: Selector, else istio: Service unless that is the default Service (whose pods
// are labelled istio: ingressgateway), else istio: ingressgateway.
func (i Ingress) GatewaySelector() map[string]string {
	switch {
	case i.Selector != "":
		return map[string]string{"istio": i.Selector}
	case i.Service != "" && i.Service != "istio-ingressgateway":
		return map[string]string{"istio": i.Service}
	}
	return map[string]string{"istio": "ingressgateway"}
}

// parseIngress overlays the ingress fields data sets on cfg's.
func parseIngress(data []byte, cfg *Config) error {
	var file Ingress
	if err := yaml.Unmarshal(data, &file); err != nil {
		return err
	}
	out := cfg.Ingress()
	if file.Class != "" {
		out.Class = file.Class
	}
	if file.Service != "" {
		out.Service = file.Service
	}
	if file.Selector != "" {
		out.Selector = file.Selector
	}
	switch file.Mode {
	case "":
	case IngressOff, IngressDefault, IngressStrict, IngressUnspecified:
		out.Mode = file.Mode
	default:
		return fmt.Errorf("field ingressControllerMode: %q: want %s, %s or %s", file.Mode, IngressOff, IngressDefault, IngressStrict)
	}
	cfg.ingress = &out
	return nil
}
