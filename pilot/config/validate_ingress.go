package config

import (
	"fmt"
	"net"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// IngressClassAnnotation is the annotation that names an Ingress's class before spec.ingressClassName;
// istiod reads it first.
const IngressClassAnnotation = "kubernetes.io/ingress.class"

// validateIngress applies the API server's validation of an Ingress (k8s.io/kubernetes
// pkg/apis/networking/validation), so that a file holds only what a cluster would have accepted.
func validateIngress(s *networkingv1.Ingress) error {
	spec := &s.Spec
	if len(spec.Rules) == 0 && spec.DefaultBackend == nil {
		return fieldErr("spec", "either defaultBackend or rules must be specified")
	}
	if spec.DefaultBackend != nil {
		if err := validateIngressBackend("spec.defaultBackend", spec.DefaultBackend); err != nil {
			return err
		}
	}
	for i, r := range spec.Rules {
		f := fmt.Sprintf("spec.rules[%d]", i)
		if err := validateIngressHost(f+".host", r.Host); err != nil {
			return err
		}
		if r.HTTP == nil {
			continue
		}
		if len(r.HTTP.Paths) == 0 {
			return fieldErr(f+".http.paths", "required")
		}
		for j := range r.HTTP.Paths {
			if err := validateIngressPath(fmt.Sprintf("%s.http.paths[%d]", f, j), &r.HTTP.Paths[j]); err != nil {
				return err
			}
		}
	}
	for i, t := range spec.TLS {
		for j, h := range t.Hosts {
			if err := validateIngressHost(fmt.Sprintf("spec.tls[%d].hosts[%d]", i, j), h); err != nil {
				return err
			}
		}
		if t.SecretName != "" {
			if errs := validation.IsDNS1123Subdomain(t.SecretName); len(errs) > 0 {
				return fieldErr(fmt.Sprintf("spec.tls[%d].secretName", i), "%q: %s", t.SecretName, strings.Join(errs, "; "))
			}
		}
	}
	if c := spec.IngressClassName; c != nil {
		if errs := validation.IsDNS1123Subdomain(*c); len(errs) > 0 {
			return fieldErr("spec.ingressClassName", "%q: %s", *c, strings.Join(errs, "; "))
		}
	}
	return nil
}

func validateIngressHost(field, h string) error {
	if h == "" {
		return nil
	}
	if net.ParseIP(h) != nil {
		return fieldErr(field, "%q: must be a DNS name, not an IP address", h)
	}
	errs := validation.IsDNS1123Subdomain(h)
	if strings.Contains(h, "*") {
		errs = validation.IsWildcardDNS1123Subdomain(h)
	}
	if len(errs) > 0 {
		return fieldErr(field, "%q: %s", h, strings.Join(errs, "; "))
	}
	return nil
}

func validateIngressPath(f string, p *networkingv1.HTTPIngressPath) error {
	if p.PathType == nil {
		return fieldErr(f+".pathType", "required")
	}
	switch *p.PathType {
	case networkingv1.PathTypeExact, networkingv1.PathTypePrefix:
		if !strings.HasPrefix(p.Path, "/") {
			return fieldErr(f+".path", "%q: must be an absolute path", p.Path)
		}
		for _, seq := range []string{"//", "/./", "/../", "%2f", "%2F"} {
			if strings.Contains(p.Path, seq) {
				return fieldErr(f+".path", "%q: must not contain '%s'", p.Path, seq)
			}
		}
		for _, suffix := range []string{"/..", "/."} {
			if strings.HasSuffix(p.Path, suffix) {
				return fieldErr(f+".path", "%q: cannot end with '%s'", p.Path, suffix)
			}
		}
	case networkingv1.PathTypeImplementationSpecific:
		if p.Path != "" && !strings.HasPrefix(p.Path, "/") {
			return fieldErr(f+".path", "%q: must be an absolute path", p.Path)
		}
	default:
		return fieldErr(f+".pathType", "%q: want Exact, Prefix or ImplementationSpecific", *p.PathType)
	}
	return validateIngressBackend(f+".backend", &p.Backend)
}

func validateIngressBackend(f string, b *networkingv1.IngressBackend) error {
	switch {
	case b.Resource != nil && b.Service != nil:
		return fieldErr(f, "cannot set both resource and service backends")
	case b.Resource != nil:
		if b.Resource.Kind == "" || b.Resource.Name == "" {
			return fieldErr(f+".resource", "kind and name are required")
		}
		return nil
	case b.Service == nil:
		return fieldErr(f, "resource or service backend is required")
	}
	svc := b.Service
	if errs := validation.IsDNS1035Label(svc.Name); len(errs) > 0 {
		return fieldErr(f+".service.name", "%q: %s", svc.Name, strings.Join(errs, "; "))
	}
	switch {
	case svc.Port.Name != "" && svc.Port.Number != 0:
		return fieldErr(f+".service.port", "cannot set both port name and port number")
	case svc.Port.Name != "":
		if errs := validation.IsValidPortName(svc.Port.Name); len(errs) > 0 {
			return fieldErr(f+".service.port.name", "%q: %s", svc.Port.Name, strings.Join(errs, "; "))
		}
	case svc.Port.Number != 0:
		if !validPort(int64(svc.Port.Number)) {
			return fieldErr(f+".service.port.number", "%d: must be between 1 and 65535", svc.Port.Number)
		}
	default:
		return fieldErr(f+".service.port", "port name or number is required")
	}
	return nil
}

// validateIngressClass applies the API server's rule for the controller: a domain-prefixed path.
func validateIngressClass(s *networkingv1.IngressClass) error {
	c := s.Spec.Controller
	domain, path, ok := strings.Cut(c, "/")
	if !ok || path == "" || len(validation.IsDNS1123Subdomain(domain)) > 0 {
		return fieldErr("spec.controller", "%q: must be a domain-prefixed path (such as istio.io/ingress-controller)", c)
	}
	return nil
}

// ingressWarnings names what istiod leaves out of its conversion of an Ingress, which Sextant leaves out
// too (pilot/model/ingress.go): it is accepted, and has no effect.
func ingressWarnings(s *networkingv1.Ingress, warn func(field, format string, args ...any)) {
	if s.Spec.DefaultBackend != nil {
		warn("spec.defaultBackend", "ignored, as istiod ignores it: route the hosts with a VirtualService instead")
	}
	for i, r := range s.Spec.Rules {
		if r.HTTP == nil {
			warn(fmt.Sprintf("spec.rules[%d]", i), "a rule without http paths is ignored, as istiod ignores it")
			continue
		}
		for j, p := range r.HTTP.Paths {
			if p.Backend.Resource != nil {
				warn(fmt.Sprintf("spec.rules[%d].http.paths[%d].backend.resource", i, j),
					"ignored, as istiod ignores it: only service backends are routed; this path is left out")
			}
		}
	}
	for i, t := range s.Spec.TLS {
		if t.SecretName == "" {
			warn(fmt.Sprintf("spec.tls[%d]", i), "an entry without secretName is ignored, as istiod ignores it: no TLS server for its hosts")
		}
	}
}

// ingressClassWarnings: istiod reads only an IngressClass's controller.
func ingressClassWarnings(s *networkingv1.IngressClass, warn func(field, format string, args ...any)) {
	if s.Spec.Parameters != nil {
		warn("spec.parameters", "ignored, as istiod ignores it: the mesh config's ingress fields configure the conversion")
	}
}
