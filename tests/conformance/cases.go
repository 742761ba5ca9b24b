package conformance

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// Case is one directory under cases/: config.yaml holds the objects as a user writes them (Kubernetes objects
// and Istio config, one multi-document file), proxies.yaml the proxies whose configuration is compared and,
// optionally, shared YAML files (paths relative to the case) that come before config.yaml; an optional
// mesh.yaml the mesh config both control planes get.
type Case struct {
	Name    string
	Dir     string
	Config  string
	Proxies []Proxy
	// Mesh is the case's mesh config (mesh.yaml, Istio's MeshConfig as a user writes it), "" for the defaults.
	Mesh string
}

// Proxy is a sidecar (the default), a gateway (type router) or a proxyless gRPC client (type grpc, whose
// routes alone are compared: one configuration per service port, as the client asks for it) of the mesh.
type Proxy struct {
	Name      string            `json:"name"`
	Namespace string            `json:"namespace"`
	IP        string            `json:"ip"`
	Labels    map[string]string `json:"labels,omitempty"`
	// Locality is REGION/ZONE[/SUBZONE], sent as the node's locality (as the agent does from its node).
	Locality string `json:"locality,omitempty"`
	Type     string `json:"type,omitempty"`
	// Metadata is more node metadata, as the agent sends it (string values, Istio's names), e.g.
	// INTERCEPTION_MODE (the pod annotation sidecar.istio.io/interceptionMode) or UNPRIVILEGED_POD.
	Metadata map[string]string `json:"metadata,omitempty"`
	// ExtraIPs are the proxy's other addresses (a dual-stack pod's second family), after IP.
	ExtraIPs []string `json:"extraIPs,omitempty"`
	// ProxyConfig is node metadata PROXY_CONFIG, Istio's ProxyConfig as the agent sends it (the mesh's
	// defaultConfig merged with the pod's proxy.istio.io/config annotation), e.g. {gatewayTopology: {...}}.
	ProxyConfig map[string]any `json:"proxyConfig,omitempty"`
}

// ips are all the proxy's addresses, IP first.
func (p Proxy) ips() []string { return append([]string{p.IP}, p.ExtraIPs...) }

// extraMetadata is the node metadata the case gives beyond labels and namespace, by Istio's names.
func (p Proxy) extraMetadata() map[string]any {
	out := map[string]any{}
	for k, v := range p.Metadata {
		out[k] = v
	}
	if p.ProxyConfig != nil {
		out["PROXY_CONFIG"] = p.ProxyConfig
	}
	return out
}

// LoadCases reads every case directory under root, sorted by name.
func LoadCases(root string) ([]*Case, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	var out []*Case
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		c, err := LoadCase(filepath.Join(root, e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// LoadCase reads one case directory.
func LoadCase(dir string) (*Case, error) {
	cfg, err := os.ReadFile(filepath.Join(dir, "config.yaml"))
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(filepath.Join(dir, "proxies.yaml"))
	if err != nil {
		return nil, err
	}
	var file struct {
		Include []string `json:"include"`
		Proxies []Proxy  `json:"proxies"`
	}
	if err := yaml.UnmarshalStrict(raw, &file); err != nil {
		return nil, fmt.Errorf("%s/proxies.yaml: %w", dir, err)
	}
	var docs []string
	for _, inc := range file.Include {
		b, err := os.ReadFile(filepath.Join(dir, inc))
		if err != nil {
			return nil, fmt.Errorf("%s/proxies.yaml: include: %w", dir, err)
		}
		docs = append(docs, string(b))
	}
	docs = append(docs, string(cfg))
	c := &Case{Name: filepath.Base(dir), Dir: dir, Config: strings.Join(docs, "\n---\n"), Proxies: file.Proxies}
	if m, err := os.ReadFile(filepath.Join(dir, "mesh.yaml")); err == nil {
		c.Mesh = string(m)
	} else if !os.IsNotExist(err) {
		return nil, err
	}
	for i, p := range c.Proxies {
		if p.Name == "" || p.Namespace == "" || p.IP == "" {
			return nil, fmt.Errorf("%s/proxies.yaml: proxy %d needs name, namespace and ip", dir, i)
		}
		if p.Type == "" {
			c.Proxies[i].Type = "sidecar"
		} else if p.Type != "sidecar" && p.Type != "router" && p.Type != "grpc" {
			return nil, fmt.Errorf("%s/proxies.yaml: proxy %s: type %q, want sidecar, router or grpc", dir, p.Name, p.Type)
		}
	}
	if len(c.Proxies) == 0 {
		return nil, fmt.Errorf("%s/proxies.yaml: no proxies", dir)
	}
	return c, nil
}

var docSeparator = regexp.MustCompile(`(?m)^---\s*$`)

// splitConfig separates Istio's config (apiVersion *.istio.io) from Kubernetes objects, as istiod's fake
// server takes them in two strings; Sextant reads the file whole.
func splitConfig(all string) (kube, istio string, err error) {
	var k, i []string
	for _, doc := range docSeparator.Split(all, -1) {
		var head struct {
			APIVersion string `json:"apiVersion"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			return "", "", err
		}
		switch {
		case head.APIVersion == "":
			continue // empty or comment-only document
		case strings.Contains(head.APIVersion, "istio.io/"):
			i = append(i, doc)
		default:
			k = append(k, doc)
		}
	}
	return strings.Join(k, "\n---\n"), strings.Join(i, "\n---\n"), nil
}

// CapturePortsOf reads the capture ports of a case's mesh config (mesh.yaml), the defaults where it is
// silent.
func CapturePortsOf(meshYAML string) (CapturePorts, error) {
	var m struct {
		ProxyListenPort        uint32 `json:"proxyListenPort"`
		ProxyInboundListenPort uint32 `json:"proxyInboundListenPort"`
	}
	if err := yaml.Unmarshal([]byte(meshYAML), &m); err != nil {
		return CapturePorts{}, fmt.Errorf("mesh.yaml: %w", err)
	}
	p := DefaultCapturePorts
	if m.ProxyListenPort != 0 {
		p.Outbound = m.ProxyListenPort
	}
	if m.ProxyInboundListenPort != 0 {
		p.Inbound = m.ProxyInboundListenPort
	}
	return p, nil
}
