package envoy

import (
	"fmt"

	router "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	meshconfig "istio.io/api/mesh/v1alpha1"

	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
)

// proxyHeaders is what istiod reads of a proxy's ProxyConfig proxyHeaders (util.GetProxyHeaders) for the
// connection managers of its inbound listeners and gateway listeners: the Server header, request ids,
// X-Forwarded-Port, Envoy's debug headers, and inbound, the X-Forwarded-Client-Cert handling. A value, so it
// can be part of a cache key.
type proxyHeaders struct {
	serverName       string
	passServer       bool // server.disabled: the upstream's Server header passes through
	noRequestID      bool
	suppressDebug    bool
	forwardedPort    bool
	fcc              hcm.HttpConnectionManager_ForwardClientCertDetails
	subject, uri     bool // setCurrentClientCertDetails, inbound: istiod's defaults true
	dns, cert, chain bool
}

// proxyHeadersOf reads the proxy's proxyHeaders as istiod does: from its PROXY_CONFIG, else the mesh's
// defaultConfig (never both), over istiod's defaults for inbound and gateway listeners.
func proxyHeadersOf(proxy *model.Proxy, m *mesh.Config) proxyHeaders {
	h := proxyHeaders{serverName: ldsServerName, fcc: hcm.HttpConnectionManager_APPEND_FORWARD, subject: true, uri: true, dns: true}
	ph := proxy.ProxyConfigOr(m.GetSpec().GetDefaultConfig()).GetProxyHeaders()
	if ph == nil {
		return h
	}
	if c := ph.GetForwardedClientCert(); c != meshconfig.ForwardClientCertDetails_UNDEFINED &&
		meshconfig.ForwardClientCertDetails_name[int32(c)] != "" {
		h.fcc = hcm.HttpConnectionManager_ForwardClientCertDetails(c - 1) // the mesh enum counts UNDEFINED first
	}
	if s := ph.GetServer(); s != nil {
		if s.GetDisabled().GetValue() {
			h.serverName, h.passServer = "", true
		} else if s.GetValue() != "" {
			h.serverName = s.GetValue()
		}
	}
	h.noRequestID = ph.GetRequestId().GetDisabled().GetValue()
	h.suppressDebug = ph.GetEnvoyDebugHeaders().GetDisabled().GetValue()
	h.forwardedPort = ph.GetXForwardedPort().GetEnabled().GetValue()
	if d := ph.GetSetCurrentClientCertDetails(); d != nil {
		h.subject = d.GetSubject() == nil || d.GetSubject().GetValue()
		h.uri = d.GetUri() == nil || d.GetUri().GetValue()
		h.dns = d.GetDns() == nil || d.GetDns().GetValue()
		h.cert, h.chain = d.GetCert().GetValue(), d.GetChain().GetValue()
	}
	return h
}

// String describes the settings for cache keys.
func (h proxyHeaders) String() string {
	type fields proxyHeaders // without this method, which %v would call again
	return fmt.Sprintf("%+v", fields(h))
}

// apply sets the connection manager's headers that every class reads: Server, request ids,
// X-Forwarded-Port, and the router's debug headers.
func (h proxyHeaders) apply(hc *hcm.HttpConnectionManager) {
	hc.ServerName = h.serverName
	hc.ServerHeaderTransformation = hcm.HttpConnectionManager_OVERWRITE
	if h.passServer {
		hc.ServerHeaderTransformation = hcm.HttpConnectionManager_PASS_THROUGH
	}
	hc.GenerateRequestId = nil
	if h.noRequestID {
		hc.GenerateRequestId = wrapperspb.Bool(false)
	}
	hc.AppendXForwardedPort = h.forwardedPort
	if h.suppressDebug {
		for i, f := range hc.HttpFilters {
			if f.GetName() == ldsRouterFilterName {
				hc.HttpFilters[i] = ldsHTTPFilter(ldsRouterFilterName, &router.Router{SuppressEnvoyHeaders: true})
			}
		}
	}
}

// applyInbound is apply and, as istiod's inbound listeners, the X-Forwarded-Client-Cert handling and the
// details of the peer's certificate it adds.
func (h proxyHeaders) applyInbound(hc *hcm.HttpConnectionManager) {
	h.apply(hc)
	hc.ForwardClientCertDetails = h.fcc
	hc.SetCurrentClientCertDetails = &hcm.HttpConnectionManager_SetCurrentClientCertDetails{
		Subject: wrapperspb.Bool(h.subject), Uri: h.uri, Dns: h.dns, Cert: h.cert, Chain: h.chain}
}
