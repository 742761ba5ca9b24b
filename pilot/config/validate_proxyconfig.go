package config

import (
	"strings"

	networkingv1beta1 "istio.io/api/networking/v1beta1"
)

// validateProxyConfig applies istiod's validation of a ProxyConfig object: selector labels without empty
// keys or wildcards, and a concurrency that is not negative.
func validateProxyConfig(s *networkingv1beta1.ProxyConfig) error {
	for k, v := range s.GetSelector().GetMatchLabels() {
		if k == "" {
			return fieldErr("spec.selector.matchLabels", "empty key is not supported in selector: %q", k+"="+v)
		}
		if strings.Contains(k, "*") || strings.Contains(v, "*") {
			return fieldErr("spec.selector.matchLabels", "wildcard is not supported in selector: %q", k+"="+v)
		}
	}
	if c := s.GetConcurrency(); c != nil && c.GetValue() < 0 {
		return fieldErr("spec.concurrency", "%d: must be greater than or equal to 0", c.GetValue())
	}
	return nil
}

// proxyConfigWarnings: every field of a ProxyConfig object is agent-side. istiod reads the kind only in its
// sidecar injector (and its gateway deployments), which write the merged result into the pod; its xDS output
// follows what the agent then sends (PROXY_CONFIG, ISTIO_META_*), which Sextant reads from the node.
func proxyConfigWarnings(s *networkingv1beta1.ProxyConfig, warn func(field, format string, args ...any)) {
	const noInjector = "Sextant runs no sidecar injector, so this object changes no pod"
	if s.GetSelector() != nil {
		warn("spec.selector", "agent-side: picks the pods the sidecar injector applies this object to; %s", noInjector)
	}
	if s.GetConcurrency() != nil {
		warn("spec.concurrency", "agent-side: the proxy's worker threads are set when the injector creates the pod; %s", noInjector)
	}
	if len(s.GetEnvironmentVariables()) > 0 {
		warn("spec.environmentVariables", "agent-side: the injector sets them on the proxy container (what the agent then sends as "+
			"node metadata is read from the node); %s", noInjector)
	}
	if s.GetImage() != nil {
		warn("spec.image", "agent-side: the injector picks the proxy image with it; %s", noInjector)
	}
}
