package conformance

import (
	"istio.io/istio/pilot/pkg/model"
	"istio.io/istio/pilot/test/xds"
	"istio.io/istio/pkg/test"
)

// RenderIstiod runs istiod's generators in-process (its fake discovery server, mesh config defaults) on the
// case and returns each proxy's normalised snapshot, by proxy name.
func RenderIstiod(t test.Failer, c *Case) (map[string]Snapshot, error) {
	kube, istio, err := splitConfig(c.Config)
	if err != nil {
		return nil, err
	}
	s := xds.NewFakeDiscoveryServer(t, xds.FakeOptions{KubernetesObjectString: kube, ConfigString: istio})
	out := map[string]Snapshot{}
	for _, p := range c.Proxies {
		proxy := &model.Proxy{
			Type:            model.SidecarProxy,
			ID:              p.Name + "." + p.Namespace,
			ConfigNamespace: p.Namespace,
			Labels:          p.Labels,
			IPAddresses:     []string{p.IP},
			Metadata: &model.NodeMetadata{
				Labels:    p.Labels,
				Namespace: p.Namespace,
				ClusterID: "Kubernetes",
			},
		}
		if p.Type == "router" {
			proxy.Type = model.Router
		}
		proxy = s.SetupProxy(proxy)
		snap := Snapshot{}
		if err := normaliseClusters(snap, s.Clusters(proxy)); err != nil {
			return nil, err
		}
		normaliseEndpoints(snap, s.Endpoints(proxy))
		normaliseRoutes(snap, s.Routes(proxy), routeHosts(snap))
		out[p.Name] = snap
	}
	return out, nil
}
