package config

import (
	"fmt"
	"regexp"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
	"k8s.io/apimachinery/pkg/util/validation"
)

// validateWorkloadGroup applies istiod's validation of a WorkloadGroup: a template is required (its address
// and the like are filled in at registration, so it is not validated as a WorkloadEntry), metadata labels are
// Kubernetes labels, and the probe's numbers, ports, scheme and header names are sound.
func validateWorkloadGroup(s *networking.WorkloadGroup) error {
	if s.GetTemplate() == nil {
		return fieldErr("spec.template", "required")
	}
	for k, v := range s.GetMetadata().GetLabels() {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fieldErr("spec.metadata.labels", "invalid key %q: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return fieldErr("spec.metadata.labels", "invalid value %q of %q: %s", v, k, strings.Join(errs, "; "))
		}
	}
	for name, p := range s.GetTemplate().GetPorts() {
		if !validPort(int64(p)) {
			return fieldErr("spec.template.ports."+name, "%d is not a valid port (1-65535)", p)
		}
	}
	return validateReadinessProbe(s.GetProbe())
}

// probeHeaderName is istiod's rule for a probe's header names.
var probeHeaderName = regexp.MustCompile(`^[-A-Za-z0-9]+$`)

func validateReadinessProbe(p *networking.ReadinessProbe) error {
	if p == nil {
		return nil
	}
	for _, f := range []struct {
		name string
		v    int32
	}{{"initialDelaySeconds", p.InitialDelaySeconds}, {"timeoutSeconds", p.TimeoutSeconds}, {"periodSeconds", p.PeriodSeconds},
		{"successThreshold", p.SuccessThreshold}, {"failureThreshold", p.FailureThreshold}} {
		if f.v < 0 {
			return fieldErr("spec.probe."+f.name, "%d: must be non-negative", f.v)
		}
	}
	switch m := p.HealthCheckMethod.(type) {
	case *networking.ReadinessProbe_HttpGet:
		h := m.HttpGet
		if h == nil {
			return fieldErr("spec.probe.httpGet", "may not be null")
		}
		if !validPort(int64(h.Port)) {
			return fieldErr("spec.probe.httpGet.port", "%d is not a valid port (1-65535)", h.Port)
		}
		if h.Scheme != "" && h.Scheme != "HTTP" && h.Scheme != "HTTPS" {
			return fieldErr("spec.probe.httpGet.scheme", "%q: must be HTTP or HTTPS", h.Scheme)
		}
		for i, hd := range h.HttpHeaders {
			if hd == nil || !probeHeaderName.MatchString(hd.Name) {
				return fieldErr(fmt.Sprintf("spec.probe.httpGet.httpHeaders[%d].name", i), "%q is not a valid header name", hd.GetName())
			}
		}
	case *networking.ReadinessProbe_TcpSocket:
		if m.TcpSocket == nil {
			return fieldErr("spec.probe.tcpSocket", "may not be null")
		}
		if !validPort(int64(m.TcpSocket.Port)) {
			return fieldErr("spec.probe.tcpSocket.port", "%d is not a valid port (1-65535)", m.TcpSocket.Port)
		}
	case *networking.ReadinessProbe_Exec:
		if m.Exec == nil || len(m.Exec.Command) == 0 {
			return fieldErr("spec.probe.exec.command", "required")
		}
	default:
		return fieldErr("spec.probe", "httpGet, tcpSocket or exec is required (istiod accepts no other method here, grpc neither)")
	}
	return nil
}

// workloadGroupWarnings: the probe is agent-side. istiod never reads it; the VM's agent gets it from its own
// config (istioctl x workload entry configure writes it there) and reports the results over xDS.
func workloadGroupWarnings(s *networking.WorkloadGroup, warn func(field, format string, args ...any)) {
	if s.GetProbe() != nil {
		warn("spec.probe", "agent-side: the VM's agent runs the probe from its own config (istioctl x workload entry configure "+
			"writes it there); the control plane does not read it here")
	}
}
