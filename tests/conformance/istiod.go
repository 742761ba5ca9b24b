package conformance

import (
	"encoding/json"
	"fmt"
	"time"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"istio.io/istio/pilot/pkg/config/kube/crd"
	"istio.io/istio/pilot/pkg/model"
	"istio.io/istio/pilot/pkg/networking/grpcgen"
	"istio.io/istio/pilot/pkg/networking/util"
	labelutil "istio.io/istio/pilot/pkg/serviceregistry/util/label"
	"istio.io/istio/pilot/test/xds"
	"istio.io/istio/pkg/config"
	"istio.io/istio/pkg/config/mesh"
	"istio.io/istio/pkg/test"
)

// RenderIstiod runs istiod's generators in-process (its fake discovery server, the case's mesh config over the defaults) on the
// case and returns each proxy's output, by proxy name.
func RenderIstiod(t test.Failer, c *Case) (map[string]*Output, error) {
	kube, istio, err := splitConfig(c.Config)
	if err != nil {
		return nil, err
	}
	configs, err := parseIstioConfig(istio)
	if err != nil {
		return nil, err
	}
	opts := xds.FakeOptions{KubernetesObjectString: kube, Configs: configs}
	if c.Mesh != "" {
		m, err := mesh.ApplyMeshConfigDefaults(c.Mesh)
		if err != nil {
			return nil, fmt.Errorf("mesh.yaml: %w", err)
		}
		opts.MeshConfig = m
	}
	s := xds.NewFakeDiscoveryServer(t, opts)
	out := map[string]*Output{}
	for _, p := range c.Proxies {
		proxy := &model.Proxy{
			Type:            model.SidecarProxy,
			ID:              p.Name + "." + p.Namespace,
			ConfigNamespace: p.Namespace,
			Labels:          p.Labels,
			IPAddresses:     p.ips(),
			Metadata: &model.NodeMetadata{
				Labels:    p.Labels,
				Namespace: p.Namespace,
				ClusterID: "Kubernetes",
			},
		}
		if md := p.extraMetadata(); len(md) > 0 {
			// The fields of istiod's node metadata carry the agent's names as JSON tags.
			raw, err := json.Marshal(md)
			if err != nil {
				return nil, err
			}
			if err := json.Unmarshal(raw, proxy.Metadata); err != nil {
				return nil, fmt.Errorf("proxy %s: metadata: %w", p.Name, err)
			}
		}
		if p.Locality != "" {
			proxy.Locality = p.locality()
		}
		// As istiod's xDS server does on connect (setTopologyLabels): the proxy's labels carry its cluster,
		// locality, node and network, which locality failover priorities compare with the endpoints'.
		proxy.Labels = labelutil.AugmentLabels(proxy.Labels, proxy.Metadata.ClusterID, util.LocalityToString(proxy.Locality),
			proxy.GetNodeName(), proxy.Metadata.Network)
		if p.Type == "router" {
			proxy.Type = model.Router
		}
		if p.Type == "grpc" {
			proxy.Metadata.Generator = "grpc"
			proxy = s.SetupProxy(proxy)
			out[p.Name] = &Output{Routes: grpcRoutes(proxy, s.PushContext())}
			continue
		}
		proxy = s.SetupProxy(proxy)
		out[p.Name] = &Output{Clusters: s.Clusters(proxy), Endpoints: s.Endpoints(proxy), Routes: s.Routes(proxy),
			Listeners: s.Listeners(proxy)}
	}
	return out, nil
}

// parseIstioConfig reads Istio's config as istiod's Kubernetes config source would: each object carries the
// cluster's domain suffix, which resolves short hosts ("reviews") to reviews.NS.svc.cluster.local. (The fake
// server's own ConfigString parsing leaves the domain empty, so short names would not resolve.)
func parseIstioConfig(yaml string) ([]config.Config, error) {
	if yaml == "" {
		return nil, nil
	}
	configs, _, err := crd.ParseInputs(yaml)
	if err != nil {
		return nil, err
	}
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range configs {
		c := &configs[i]
		c.Domain = "cluster.local"
		if c.Namespace == "" {
			c.Namespace = "default"
		}
		if c.CreationTimestamp.IsZero() {
			c.CreationTimestamp = created
		}
	}
	return configs, nil
}

// grpcRoutes is what istiod's gRPC generator gives a proxyless client for the route configuration of every
// HTTP port of the services it sees, named outbound|PORT||HOST as its API listeners name them.
func grpcRoutes(proxy *model.Proxy, push *model.PushContext) []*route.RouteConfiguration {
	var names []string
	for _, svc := range proxy.SidecarScope.Services() {
		for _, port := range svc.Ports {
			if port.Protocol.IsHTTP() {
				names = append(names, model.BuildSubsetKey(model.TrafficDirectionOutbound, "", svc.Hostname, port.Port))
			}
		}
	}
	var out []*route.RouteConfiguration
	for _, r := range (&grpcgen.GrpcConfigGenerator{}).BuildHTTPRoutes(proxy, push, names) {
		rc := &route.RouteConfiguration{}
		if err := r.Resource.UnmarshalTo(rc); err == nil {
			out = append(out, rc)
		}
	}
	return out
}
