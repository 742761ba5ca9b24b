package mesh

import (
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	meshconfig "istio.io/api/mesh/v1alpha1"
)

// DefaultProxyConfig is what Sextant's generators read of the mesh's defaultConfig (gatewayTopology), used
// for a proxy that sends no PROXY_CONFIG, as istiod uses it; nil when the mesh config sets none of it.
func (c *Config) DefaultProxyConfig() *meshconfig.ProxyConfig {
	if c == nil {
		return nil
	}
	return c.defaultProxy
}

// parseGatewayTopology reads defaultConfig.gatewayTopology as istiod reads it (protobuf JSON, unknown fields
// ignored); a value it cannot read fails the mesh config, naming the field.
func parseGatewayTopology(raw json.RawMessage) (*meshconfig.ProxyConfig, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	topo := &meshconfig.Topology{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(raw, topo); err != nil {
		return nil, fmt.Errorf("field defaultConfig.gatewayTopology: %w", err)
	}
	return &meshconfig.ProxyConfig{GatewayTopology: topo}, nil
}
