package mesh

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ExtensionProvider is one entry of Istio's MeshConfig.extensionProviders: a named external service that
// AuthorizationPolicies with action CUSTOM send requests to. Sextant implements the two ext_authz kinds;
// an entry of another kind (a tracer, a log sink) is kept by name and Kind so a CUSTOM policy naming it is
// refused for that reason rather than as undefined.
type ExtensionProvider struct {
	Name              string        `json:"name"`
	EnvoyExtAuthzHTTP *ExtAuthzHTTP `json:"envoyExtAuthzHttp,omitempty"`
	EnvoyExtAuthzGRPC *ExtAuthzGRPC `json:"envoyExtAuthzGrpc,omitempty"`
	// Kind is the provider's key as written in YAML (envoyExtAuthzHttp, envoyExtAuthzGrpc, zipkin, ...).
	Kind string `json:"-"`
}

// MarshalJSON writes the provider back as Istio spells it: its name and one key of its kind (an empty object
// for a kind Sextant does not read), so Parse reads the same provider again.
func (p ExtensionProvider) MarshalJSON() ([]byte, error) {
	m := map[string]any{"name": p.Name}
	switch {
	case p.EnvoyExtAuthzGRPC != nil:
		m[KindExtAuthzGRPC] = p.EnvoyExtAuthzGRPC
	case p.EnvoyExtAuthzHTTP != nil:
		m[KindExtAuthzHTTP] = p.EnvoyExtAuthzHTTP
	case p.Kind != "":
		m[p.Kind] = struct{}{}
	}
	return json.Marshal(m)
}

// The ext_authz provider kinds Sextant implements, spelled as in Istio's YAML.
const (
	KindExtAuthzHTTP = "envoyExtAuthzHttp"
	KindExtAuthzGRPC = "envoyExtAuthzGrpc"
)

// ExtAuthzGRPC is Istio's EnvoyExternalAuthorizationGrpcProvider.
type ExtAuthzGRPC struct {
	// Service is "HOST" or "NAMESPACE/HOST" of the authorization service; Port its port.
	Service string `json:"service"`
	Port    uint32 `json:"port"`
	// Timeout bounds one check (Istio's default 600s when empty), as a duration such as "0.5s".
	Timeout string `json:"timeout,omitempty"`
	// FailOpen lets requests through when the service cannot be reached or errs.
	FailOpen bool `json:"failOpen,omitempty"`
	// StatusOnError is the HTTP status returned on such errors (Envoy's 403 when empty).
	StatusOnError             string       `json:"statusOnError,omitempty"`
	IncludeRequestBodyInCheck *RequestBody `json:"includeRequestBodyInCheck,omitempty"`
}

// ExtAuthzHTTP is Istio's EnvoyExternalAuthorizationHttpProvider.
type ExtAuthzHTTP struct {
	Service       string `json:"service"`
	Port          uint32 `json:"port"`
	Timeout       string `json:"timeout,omitempty"`
	FailOpen      bool   `json:"failOpen,omitempty"`
	StatusOnError string `json:"statusOnError,omitempty"`
	// PathPrefix is prepended to the checked request's path in the check request.
	PathPrefix string `json:"pathPrefix,omitempty"`
	// IncludeRequestHeadersInCheck (or the older IncludeHeadersInCheck) lists the request headers sent in
	// the check: exact names, or a prefix or suffix with "*".
	IncludeRequestHeadersInCheck    []string          `json:"includeRequestHeadersInCheck,omitempty"`
	IncludeHeadersInCheck           []string          `json:"includeHeadersInCheck,omitempty"`
	IncludeAdditionalHeadersInCheck map[string]string `json:"includeAdditionalHeadersInCheck,omitempty"`
	HeadersToUpstreamOnAllow        []string          `json:"headersToUpstreamOnAllow,omitempty"`
	HeadersToDownstreamOnDeny       []string          `json:"headersToDownstreamOnDeny,omitempty"`
	HeadersToDownstreamOnAllow      []string          `json:"headersToDownstreamOnAllow,omitempty"`
	IncludeRequestBodyInCheck       *RequestBody      `json:"includeRequestBodyInCheck,omitempty"`
}

// RequestBody is Istio's EnvoyExternalAuthorizationRequestBody: how much of the body a check carries.
type RequestBody struct {
	MaxRequestBytes     uint32 `json:"maxRequestBytes,omitempty"`
	AllowPartialMessage bool   `json:"allowPartialMessage,omitempty"`
	PackAsBytes         bool   `json:"packAsBytes,omitempty"`
}

// DefaultExtAuthzTimeout is istiod's timeout for a check when the provider sets none.
const DefaultExtAuthzTimeout = 600 * time.Second

// timeoutOrDefault reads a timeout Parse has validated; empty means istiod's default.
func timeoutOrDefault(s string) time.Duration {
	if d, err := time.ParseDuration(s); err == nil && s != "" {
		return d
	}
	return DefaultExtAuthzTimeout
}

// CheckTimeout is the gRPC provider's check timeout.
func (p *ExtAuthzGRPC) CheckTimeout() time.Duration { return timeoutOrDefault(p.Timeout) }

// CheckTimeout is the HTTP provider's check timeout.
func (p *ExtAuthzHTTP) CheckTimeout() time.Duration { return timeoutOrDefault(p.Timeout) }

// ExtensionProvider returns the provider named name, nil when none is.
func (c *Config) ExtensionProvider(name string) *ExtensionProvider {
	for i := range c.ExtensionProviders {
		if c.ExtensionProviders[i].Name == name {
			return &c.ExtensionProviders[i]
		}
	}
	return nil
}

// parseExtensionProviders reads the extensionProviders list, recording each entry's kind, and validates
// the ext_authz ones as istiod does; an error names the entry and the field.
func parseExtensionProviders(raw json.RawMessage) ([]ExtensionProvider, error) {
	var out []ExtensionProvider
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("field extensionProviders: %w", err)
	}
	var keys []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		return nil, fmt.Errorf("field extensionProviders: %w", err)
	}
	seen := map[string]bool{}
	for i := range out {
		p := &out[i]
		field := fmt.Sprintf("extensionProviders[%d]", i)
		for k := range keys[i] {
			if k != "name" {
				if p.Kind != "" {
					return nil, fmt.Errorf("field %s: %q has two kinds, %s and %s", field, p.Name, min(p.Kind, k), max(p.Kind, k))
				}
				p.Kind = k
			}
		}
		if p.Name == "" {
			return nil, fmt.Errorf("field %s.name: must not be empty", field)
		}
		if errs := validation.IsDNS1123Label(p.Name); len(errs) > 0 {
			return nil, fmt.Errorf("field %s.name: %q: %v", field, p.Name, errs)
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("field %s.name: %q: duplicate provider name", field, p.Name)
		}
		seen[p.Name] = true
		var err error
		switch {
		case p.EnvoyExtAuthzGRPC != nil:
			g := p.EnvoyExtAuthzGRPC
			err = validateExtAuthz(field+"."+KindExtAuthzGRPC, g.Service, g.Port, g.Timeout, g.StatusOnError)
		case p.EnvoyExtAuthzHTTP != nil:
			h := p.EnvoyExtAuthzHTTP
			f := field + "." + KindExtAuthzHTTP
			err = validateExtAuthz(f, h.Service, h.Port, h.Timeout, h.StatusOnError)
			if err == nil && h.PathPrefix != "" {
				if _, perr := url.Parse(h.PathPrefix); perr != nil || !strings.HasPrefix(h.PathPrefix, "/") {
					err = fmt.Errorf("field %s.pathPrefix: %q: must be a path beginning with /", f, h.PathPrefix)
				}
			}
			for _, list := range []struct {
				name   string
				values []string
			}{
				{"includeRequestHeadersInCheck", h.IncludeRequestHeadersInCheck}, {"includeHeadersInCheck", h.IncludeHeadersInCheck},
				{"headersToUpstreamOnAllow", h.HeadersToUpstreamOnAllow}, {"headersToDownstreamOnDeny", h.HeadersToDownstreamOnDeny},
				{"headersToDownstreamOnAllow", h.HeadersToDownstreamOnAllow},
			} {
				// A lone "*" would send (or pass back) every header; istiod refuses it, and so does Sextant.
				if err == nil && slices.Contains(list.values, "*") {
					err = fmt.Errorf("field %s.%s: a single \"*\" is not supported, use a prefix or suffix match", f, list.name)
				}
			}
		}
		if err != nil {
			return nil, err
		}
	}
	if len(out) == 0 {
		return nil, nil // an empty list clears the providers, as an absent one would read back
	}
	return out, nil
}

func validateExtAuthz(field, service string, port uint32, timeout, statusOnError string) error {
	if service == "" {
		return fmt.Errorf("field %s.service: must not be empty", field)
	}
	if port < 1 || port > 65535 {
		return fmt.Errorf("field %s.port: %d: must be in [1, 65535]", field, port)
	}
	if timeout != "" {
		if d, err := time.ParseDuration(timeout); err != nil || d <= 0 {
			return fmt.Errorf("field %s.timeout: %q: want a positive duration such as 0.5s", field, timeout)
		}
	}
	if statusOnError != "" {
		if code, err := strconv.Atoi(statusOnError); err != nil || code < 100 || code > 599 {
			return fmt.Errorf("field %s.statusOnError: %q: want an HTTP status code", field, statusOnError)
		}
	}
	return nil
}
