package mesh

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"

	"google.golang.org/protobuf/encoding/protojson"
	meshconfig "istio.io/api/mesh/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/sextantmesh/sextant/pilot/config"
)

// Config holds the mesh-wide settings Sextant uses.
type Config struct {
	// RootNamespace holds mesh-wide policy (default istio-system).
	RootNamespace string `json:"rootNamespace,omitempty"`
	// TrustDomain is the SPIFFE trust domain of workload identities (default cluster.local).
	TrustDomain string `json:"trustDomain,omitempty"`
	// DomainSuffix is the cluster's DNS domain: SERVICE.NAMESPACE.svc.DomainSuffix (default cluster.local).
	DomainSuffix string `json:"domainSuffix,omitempty"`
	// ClusterID names this cluster in workload uids (default Kubernetes).
	ClusterID string `json:"clusterID,omitempty"`
	// Network is the default network of workloads (default empty: one flat network).
	Network string `json:"network,omitempty"`
	// OutboundTrafficPolicy says where sidecars send traffic to destinations they do not know, when their
	// Sidecar does not say (default ALLOW_ANY).
	OutboundTrafficPolicy OutboundTrafficPolicy `json:"outboundTrafficPolicy"`
	// InboundTrafficPolicy says where sidecars send traffic for their own workload (default PASSTHROUGH).
	InboundTrafficPolicy InboundTrafficPolicy `json:"inboundTrafficPolicy"`
	// ExtensionProviders are the external authorization services CUSTOM AuthorizationPolicies name.
	ExtensionProviders []ExtensionProvider `json:"extensionProviders,omitempty"`
	// PathNormalization says how proxies normalise request paths before routing and authorization match
	// them (default BASE), so a policy on /admin also governs /public/../admin.
	PathNormalization PathNormalization `json:"pathNormalization"`
	// JWKSFetch bounds the fetching of RequestAuthentication key sets (a Sextant field; see JWKSFetch).
	JWKSFetch JWKSFetch `json:"jwksFetch"`
	// DefaultHTTPRetryPolicy is the retry policy of HTTP routes whose VirtualService sets no retries, and of
	// routes without a VirtualService (nil: istiod's built-in default, two retries on connection failures).
	DefaultHTTPRetryPolicy *RetryPolicy `json:"defaultHttpRetryPolicy,omitempty"`
	// TrustDomainAliases are other trust domains whose identities are this mesh's (during a trust domain
	// migration): accepted by sidecars, matched by authorization policies, expected of servers.
	TrustDomainAliases []string `json:"trustDomainAliases,omitempty"`
	// DefaultServiceExportTo, DefaultVirtualServiceExportTo and DefaultDestinationRuleExportTo are the
	// exportTo of services, VirtualServices and DestinationRules that set none (nil: "*", everywhere).
	DefaultServiceExportTo         []string `json:"defaultServiceExportTo,omitempty"`
	DefaultVirtualServiceExportTo  []string `json:"defaultVirtualServiceExportTo,omitempty"`
	DefaultDestinationRuleExportTo []string `json:"defaultDestinationRuleExportTo,omitempty"`
	// DiscoverySelectors limit the namespaces whose objects are read from the cluster: a namespace is read
	// when any selector matches its labels; none reads every namespace (istiod's discoverySelectors).
	DiscoverySelectors []metav1.LabelSelector `json:"discoverySelectors,omitempty"`
	// Spec is the file read as Istio's MeshConfig over istiod's defaults (mesh.DefaultMeshConfig), as istiod
	// reads it; the fields above are Sextant's view of some of it, and its own fields the proto lacks.
	Spec *meshconfig.MeshConfig `json:"-"`
	// Unimplemented lists the paths of the fields the file sets that Sextant does not implement
	// (defaultConfig.tracing.zipkin.address), by the table of pilot/config/compat_mesh.go, so that they are
	// reported rather than silently ignored.
	Unimplemented []string `json:"-"`
	// defaultProxy is what is read of defaultConfig; see DefaultProxyConfig.
	defaultProxy *meshconfig.ProxyConfig
	// ingress is what is read of the ingress fields; see Ingress.
	ingress *Ingress
}

// PathNormalization is Istio's MeshConfig.pathNormalization.
type PathNormalization struct {
	// Normalization is NONE, BASE (RFC 3986 normalisation; DEFAULT means the same), MERGE_SLASHES, or
	// DECODE_AND_MERGE_SLASHES.
	Normalization string `json:"normalization,omitempty"`
}

// The path normalisations, spelled as in Istio's YAML.
const (
	PathNormalizationNone                  = "NONE"
	PathNormalizationBase                  = "BASE"
	PathNormalizationDefault               = "DEFAULT"
	PathNormalizationMergeSlashes          = "MERGE_SLASHES"
	PathNormalizationDecodeAndMergeSlashes = "DECODE_AND_MERGE_SLASHES"
)

// OutboundTrafficPolicy is Istio's MeshConfig.outboundTrafficPolicy.
type OutboundTrafficPolicy struct {
	// Mode is AllowAny (unknown destinations pass through) or RegistryOnly (they are refused).
	Mode string `json:"mode,omitempty"`
}

// InboundTrafficPolicy is Istio's MeshConfig.inboundTrafficPolicy.
type InboundTrafficPolicy struct {
	// Mode is InboundPassthrough (to the workload at the connection's original destination, its pod IP) or
	// InboundLocalhost (to 127.0.0.1, for applications that listen on localhost only).
	Mode string `json:"mode,omitempty"`
}

// The inbound traffic policy modes, spelled as in Istio's YAML.
const (
	InboundPassthrough = "PASSTHROUGH"
	InboundLocalhost   = "LOCALHOST"
)

// The outbound traffic policy modes, spelled as in Istio's YAML.
const (
	AllowAny     = "ALLOW_ANY"
	RegistryOnly = "REGISTRY_ONLY"
)

// RetryPolicy is Istio's MeshConfig.defaultHttpRetryPolicy, a VirtualService's HTTPRetry, read as istiod
// reads it (protobuf JSON: perTryTimeout "2s", unknown fields refused).
type RetryPolicy struct{ Spec *networking.HTTPRetry }

// DefaultRetries returns the mesh's default HTTP retry policy, nil when the mesh config sets none.
// GetSpec is Spec, nil for a nil Config, so a getter chain reads istiod's defaults from a hand-built one.
func (c *Config) GetSpec() *meshconfig.MeshConfig {
	if c == nil {
		return nil
	}
	return c.Spec
}

func (c *Config) DefaultRetries() *networking.HTTPRetry {
	if c == nil || c.DefaultHTTPRetryPolicy == nil {
		return nil
	}
	return c.DefaultHTTPRetryPolicy.Spec
}

func (p *RetryPolicy) UnmarshalJSON(data []byte) error {
	spec := &networking.HTTPRetry{}
	if err := protojson.Unmarshal(data, spec); err != nil {
		return fmt.Errorf("field defaultHttpRetryPolicy: %w", err)
	}
	p.Spec = spec
	return nil
}

func (p RetryPolicy) MarshalJSON() ([]byte, error) { return protojson.Marshal(p.Spec) }

func (c *Config) addUnimplemented(name string) {
	if i, found := slices.BinarySearch(c.Unimplemented, name); !found {
		c.Unimplemented = slices.Insert(c.Unimplemented, i, name)
	}
}

// Warnings returns the fields of Unimplemented as warnings on file, each naming its field and saying, from
// the compatibility table, why it has no effect.
func (c *Config) Warnings(file string) []*config.Error {
	var out []*config.Error
	for _, field := range c.Unimplemented {
		e := config.MeshFieldEntry(field)
		what := "Sextant does not honour this mesh config field: "
		if e.Status == config.Partly {
			what = "Sextant honours this mesh config field in part: "
		}
		out = append(out, &config.Error{File: file, Kind: "MeshConfig", Field: field, Warning: true, Message: what + e.Note})
	}
	return out
}

// Default returns Istio's defaults.
func Default() *Config {
	return &Config{RootNamespace: "istio-system", TrustDomain: "cluster.local", DomainSuffix: "cluster.local", ClusterID: "Kubernetes",
		OutboundTrafficPolicy: OutboundTrafficPolicy{Mode: AllowAny}, InboundTrafficPolicy: InboundTrafficPolicy{Mode: InboundPassthrough},
		PathNormalization: PathNormalization{Normalization: PathNormalizationBase}, Spec: defaultSpec()}
}

// Load reads a mesh config file: Istio's MeshConfig, with Sextant's own fields beside it. The fields Sextant
// does not implement are listed in Unimplemented; a field MeshConfig lacks is an error. An empty path gives
// the defaults.
func Load(path string) (*Config, error) {
	cfg := Default()
	if path == "" {
		return cfg, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if err := Parse(data, cfg); err != nil {
		return nil, fmt.Errorf("mesh config %s: %w", path, err)
	}
	return cfg, nil
}

// Parse overlays the settings found in data on cfg.
func Parse(data []byte, cfg *Config) error {
	var file struct {
		Config
		// Istio keeps the cluster domain in the proxy defaults; accept it there too.
		DefaultConfig struct {
			DomainSuffix    string          `json:"domainSuffix,omitempty"`
			GatewayTopology json.RawMessage `json:"gatewayTopology,omitempty"`
		} `json:"defaultConfig"`
		// Read apart: each entry's kind is the key beside its name.
		ExtensionProviders json.RawMessage `json:"extensionProviders"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		return err
	}
	base := cfg.Spec
	if base == nil {
		base = defaultSpec()
	}
	spec, warned, err := parseSpec(data, base)
	if err != nil {
		return err
	}
	if file.RootNamespace != "" {
		cfg.RootNamespace = file.RootNamespace
	}
	if file.TrustDomain != "" {
		cfg.TrustDomain = file.TrustDomain
	}
	if file.DefaultConfig.DomainSuffix != "" {
		cfg.DomainSuffix = file.DefaultConfig.DomainSuffix
	}
	if file.DefaultConfig.GatewayTopology != nil {
		pc, err := parseGatewayTopology(file.DefaultConfig.GatewayTopology)
		if err != nil {
			return err
		}
		cfg.defaultProxy = pc
	}
	if file.DomainSuffix != "" {
		cfg.DomainSuffix = file.DomainSuffix
	}
	if file.ClusterID != "" {
		cfg.ClusterID = file.ClusterID
	}
	if file.Network != "" {
		cfg.Network = file.Network
	}
	if err := overlayModes(cfg, &file.Config); err != nil {
		return err
	}
	for i, a := range file.TrustDomainAliases {
		if errs := validation.IsDNS1123Subdomain(a); len(errs) > 0 {
			return fmt.Errorf("field trustDomainAliases[%d]: %q: %v", i, a, errs)
		}
	}
	if file.TrustDomainAliases != nil {
		cfg.TrustDomainAliases = file.TrustDomainAliases
	}
	if err := overlayExportTo(cfg, &file.Config); err != nil {
		return err
	}
	if err := parseIngress(data, cfg); err != nil {
		return err
	}
	if file.DiscoverySelectors != nil {
		for i := range file.DiscoverySelectors {
			if _, err := metav1.LabelSelectorAsSelector(&file.DiscoverySelectors[i]); err != nil {
				return fmt.Errorf("field discoverySelectors[%d]: %w", i, err)
			}
		}
		cfg.DiscoverySelectors = file.DiscoverySelectors
	}
	if file.DefaultHTTPRetryPolicy != nil {
		cfg.DefaultHTTPRetryPolicy = file.DefaultHTTPRetryPolicy
	}
	if err := file.JWKSFetch.validate(); err != nil {
		return err
	}
	cfg.JWKSFetch.overlay(file.JWKSFetch)
	if len(file.ExtensionProviders) > 0 && string(file.ExtensionProviders) != "null" {
		providers, err := parseExtensionProviders(file.ExtensionProviders)
		if err != nil {
			return err
		}
		cfg.ExtensionProviders = providers
	}
	if errs := validation.IsDNS1123Label(cfg.RootNamespace); len(errs) > 0 {
		return fmt.Errorf("field rootNamespace: %q: %v", cfg.RootNamespace, errs)
	}
	if errs := validation.IsDNS1123Subdomain(cfg.TrustDomain); len(errs) > 0 {
		return fmt.Errorf("field trustDomain: %q: %v", cfg.TrustDomain, errs)
	}
	if errs := validation.IsDNS1123Subdomain(cfg.DomainSuffix); len(errs) > 0 {
		return fmt.Errorf("field domainSuffix: %q: %v", cfg.DomainSuffix, errs)
	}
	for _, p := range warned {
		cfg.addUnimplemented(p)
	}
	cfg.Spec = spec
	return nil
}

// overlayExportTo sets the default exportTo lists file gives, each value "*", ".", "~" or a namespace name.
func overlayExportTo(cfg, file *Config) error {
	for _, f := range []struct {
		name     string
		from, to *[]string
	}{
		{"defaultServiceExportTo", &file.DefaultServiceExportTo, &cfg.DefaultServiceExportTo},
		{"defaultVirtualServiceExportTo", &file.DefaultVirtualServiceExportTo, &cfg.DefaultVirtualServiceExportTo},
		{"defaultDestinationRuleExportTo", &file.DefaultDestinationRuleExportTo, &cfg.DefaultDestinationRuleExportTo},
	} {
		if *f.from == nil {
			continue
		}
		for i, e := range *f.from {
			if e == "*" || e == "." || e == "~" {
				continue
			}
			if errs := validation.IsDNS1123Label(e); len(errs) > 0 {
				return fmt.Errorf("field %s[%d]: %q: want *, ., ~ or a namespace name", f.name, i, e)
			}
		}
		*f.to = *f.from
	}
	return nil
}

// overlayModes copies the traffic and path modes the file sets, refusing a value sidecars cannot enforce.
func overlayModes(cfg *Config, f *Config) error {
	if m := f.OutboundTrafficPolicy.Mode; m != "" {
		// Only the two modes sidecars can enforce are accepted: an unknown one must not fall back to letting
		// everything out.
		if m != AllowAny && m != RegistryOnly {
			return fmt.Errorf("field outboundTrafficPolicy.mode: %q: want %s or %s", m, AllowAny, RegistryOnly)
		}
		cfg.OutboundTrafficPolicy.Mode = m
	}
	if m := f.InboundTrafficPolicy.Mode; m != "" {
		if m != InboundPassthrough && m != InboundLocalhost {
			return fmt.Errorf("field inboundTrafficPolicy.mode: %q: want %s or %s", m, InboundPassthrough, InboundLocalhost)
		}
		cfg.InboundTrafficPolicy.Mode = m
	}
	if n := f.PathNormalization.Normalization; n != "" {
		switch n {
		case PathNormalizationNone, PathNormalizationBase, PathNormalizationDefault, PathNormalizationMergeSlashes,
			PathNormalizationDecodeAndMergeSlashes:
			cfg.PathNormalization.Normalization = n
		default:
			// An unknown value must not silently leave paths unnormalised: authorization would match less.
			return fmt.Errorf("field pathNormalization.normalization: %q: want one of %s, %s, %s, %s, %s", n, PathNormalizationNone,
				PathNormalizationBase, PathNormalizationDefault, PathNormalizationMergeSlashes, PathNormalizationDecodeAndMergeSlashes)
		}
	}
	return nil
}
