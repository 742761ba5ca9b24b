package conformance

import (
	"encoding/json"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	meshconfig "istio.io/api/mesh/v1alpha1"
	"istio.io/istio/pkg/config/mesh"
	istiomodel "istio.io/istio/pkg/model"

	"github.com/sextantmesh/sextant/pilot/model"
)

// The PROXY_CONFIG an Istio agent sends — its defaults merged with a pod's proxy.istio.io/config annotation by
// Istio's own code, encoded as its bootstrap writes node metadata — is read by Sextant as istiod reads it,
// without notes: every default field is the agent's own or one Sextant honours.
func TestAgentProxyConfigMetadata(t *testing.T) {
	pc, err := mesh.MergeProxyConfig("gatewayTopology:\n  numTrustedProxies: 2\n  forwardClientCertDetails: FORWARD_ONLY\n"+
		"  proxyProtocol: {}\nconcurrency: 2\nholdApplicationUntilProxyStarts: true\n", mesh.DefaultProxyConfig())
	if err != nil {
		t.Fatal(err)
	}
	meta := &istiomodel.BootstrapNodeMetadata{NodeMetadata: istiomodel.NodeMetadata{Namespace: "istio-system",
		ProxyConfig: (*istiomodel.NodeMetaProxyConfig)(pc)}}
	raw, err := json.Marshal(meta)
	if err != nil {
		t.Fatal(err)
	}
	md := &structpb.Struct{}
	if err := protojson.Unmarshal(raw, md); err != nil {
		t.Fatal(err)
	}
	p, err := model.ParseProxy(&core.Node{Id: "router~10.1.0.100~gw-0.istio-system~istio-system.svc.cluster.local", Metadata: md})
	if err != nil {
		t.Fatal(err)
	}
	topo := p.ProxyConfig.GetGatewayTopology()
	if topo.GetNumTrustedProxies() != 2 || topo.GetForwardClientCertDetails() != meshconfig.ForwardClientCertDetails_FORWARD_ONLY ||
		topo.GetProxyProtocol() == nil || p.ProxyConfig.GetDrainDuration().AsDuration() != pc.GetDrainDuration().AsDuration() {
		t.Errorf("PROXY_CONFIG read as %v, sent %v", p.ProxyConfig, pc)
	}
	if len(p.MetadataNotes) != 0 {
		t.Errorf("notes on the agent's defaults: %q", p.MetadataNotes)
	}
}
