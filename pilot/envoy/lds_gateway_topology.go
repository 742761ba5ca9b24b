package envoy

import (
	"fmt"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	proxyprotocol "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/proxy_protocol/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	meshconfig "istio.io/api/mesh/v1alpha1"

	"github.com/sextantmesh/sextant/pilot/model"
)

const ldsProxyProtocolFilter = "envoy.filters.listener.proxy_protocol"

// gatewayTopology is what istiod reads of a gateway's ProxyConfig (gatewayTopology) for its listeners: how many
// proxies in front of it X-Forwarded-For trusts, what becomes of the X-Forwarded-Client-Cert header, and
// whether every connection starts with a PROXY protocol header. A value, so it can be part of a cache key.
type gatewayTopology struct {
	trustedHops   uint32
	fcc           hcm.HttpConnectionManager_ForwardClientCertDetails
	proxyProtocol bool
	// headers: the proxy's proxyHeaders, but for XFCC, which gateways take from the topology, as istiod's.
	headers proxyHeaders
}

// gatewayTopologyOf reads the topology as istiod does: from the proxy's PROXY_CONFIG, else from def, the mesh's
// defaultConfig (never both). Unset, the gateway trusts no hop and sets XFCC from the client certificate.
func gatewayTopologyOf(proxy *model.Proxy, def *meshconfig.ProxyConfig) gatewayTopology {
	t := gatewayTopology{fcc: hcm.HttpConnectionManager_SANITIZE_SET}
	topo := proxy.ProxyConfigOr(def).GetGatewayTopology()
	if topo == nil {
		return t
	}
	t.trustedHops = topo.GetNumTrustedProxies()
	t.proxyProtocol = topo.GetProxyProtocol() != nil
	// The mesh enum counts UNDEFINED first, Envoy's does not; an unknown value keeps the default, as the
	// proxy's metadata note says.
	if c := topo.GetForwardClientCertDetails(); c != meshconfig.ForwardClientCertDetails_UNDEFINED &&
		meshconfig.ForwardClientCertDetails_name[int32(c)] != "" {
		t.fcc = hcm.HttpConnectionManager_ForwardClientCertDetails(c - 1)
	}
	return t
}

// String describes the topology for cache keys and tests.
func (t gatewayTopology) String() string {
	return fmt.Sprintf("hops=%d fcc=%s proxy_protocol=%t headers=%s", t.trustedHops, t.fcc, t.proxyProtocol, t.headers)
}

// applyHTTP sets the connection manager's client address and certificate forwarding. Like istiod, the
// current certificate's details are added only where the header is set from it (APPEND_FORWARD, SANITIZE_SET).
func (t gatewayTopology) applyHTTP(hc *hcm.HttpConnectionManager) {
	hc.XffNumTrustedHops = t.trustedHops
	hc.ForwardClientCertDetails = t.fcc
	hc.SetCurrentClientCertDetails = nil
	if t.fcc == hcm.HttpConnectionManager_APPEND_FORWARD || t.fcc == hcm.HttpConnectionManager_SANITIZE_SET {
		hc.SetCurrentClientCertDetails = &hcm.HttpConnectionManager_SetCurrentClientCertDetails{
			Subject: wrapperspb.Bool(true), Cert: true, Dns: true, Uri: true}
	}
}

// listenerFilters puts the PROXY protocol filter, when asked for, ahead of the others: the header comes
// before the TLS handshake the inspector reads.
func (t gatewayTopology) listenerFilters(others []*listener.ListenerFilter) []*listener.ListenerFilter {
	if !t.proxyProtocol {
		return others
	}
	return append([]*listener.ListenerFilter{ldsListenerFilter(ldsProxyProtocolFilter, &proxyprotocol.ProxyProtocol{})}, others...)
}
