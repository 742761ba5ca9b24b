package model

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"
	meshconfig "istio.io/api/mesh/v1alpha1"
)

// proxyConfigUnhonoured are the PROXY_CONFIG fields istiod's generators read that Sextant does not, with what
// the proxy gets instead. Every other field is the agent's own (bootstrap, drain, image, concurrency, ...).
var proxyConfigUnhonoured = map[string]string{
	"proxyHeaders":       "its outbound listeners, routes and clusters keep the default headers (inbound and gateway listeners follow it)",
	"connectionSettings": "HTTP timeouts, HTTP/2 limits, header and path actions and a gateway's buffer limit are Sextant's defaults",
	"privateKeyProvider": "certificates are served with their private keys in SDS, not through a private key provider",
}

// readProxyConfig reads node metadata PROXY_CONFIG, the ProxyConfig the agent resolved (the mesh's
// defaultConfig, ProxyConfig objects and the pod's proxy.istio.io/config annotation, merged at injection),
// as istiod reads it: protobuf JSON, unknown fields ignored, anything else refuses the node.
func (p *Proxy) readProxyConfig(v *structpb.Value) error {
	s := v.GetStructValue()
	if s == nil {
		return fmt.Errorf("metadata PROXY_CONFIG: want an object")
	}
	raw, err := protojson.Marshal(s)
	if err != nil {
		return fmt.Errorf("metadata PROXY_CONFIG: %w", err)
	}
	pc := &meshconfig.ProxyConfig{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(raw, pc); err != nil {
		return fmt.Errorf("metadata PROXY_CONFIG: %w", err)
	}
	p.ProxyConfig = pc
	var unread []string
	pc.ProtoReflect().Range(func(f protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		if _, ok := proxyConfigUnhonoured[f.JSONName()]; ok {
			unread = append(unread, f.JSONName())
		}
		return true
	})
	slices.Sort(unread)
	for _, name := range unread {
		p.MetadataNotes = append(p.MetadataNotes, fmt.Sprintf("metadata PROXY_CONFIG field %s is not honoured: %s",
			name, proxyConfigUnhonoured[name]))
	}
	if fcc := pc.GetGatewayTopology().GetForwardClientCertDetails(); meshconfig.ForwardClientCertDetails_name[int32(fcc)] == "" {
		p.MetadataNotes = append(p.MetadataNotes, fmt.Sprintf(
			"metadata PROXY_CONFIG field gatewayTopology.forwardClientCertDetails %d is no known value: read as SANITIZE_SET", fcc))
	}
	return nil
}

// ProxyConfigOr returns the ProxyConfig istiod's generators read for the proxy: what it sent as PROXY_CONFIG,
// else def (the mesh's defaultConfig). The two are not merged: the agent's already holds the mesh's defaults.
func (p *Proxy) ProxyConfigOr(def *meshconfig.ProxyConfig) *meshconfig.ProxyConfig {
	if p.ProxyConfig != nil {
		return p.ProxyConfig
	}
	return def
}
