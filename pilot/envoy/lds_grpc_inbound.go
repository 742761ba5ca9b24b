package envoy

// Inbound listeners of proxyless gRPC servers (google.golang.org/grpc/xds.NewGRPCServer and its peers), as
// istiod's grpcgen builds them:
//   - A server asks for "xds.istio.io/grpc/lds/inbound/IP:PORT" (its bootstrap's
//     server_listener_resource_name_template, filled with the address it listens on). The listener is built
//     only when PORT is a port of the proxy's workload (a target port of a service selecting it, the ports
//     a sidecar gets inbound chains for); otherwise it is left out, and the server does not serve. Its
//     address is the IP:PORT of the name: gRPC refuses a listener whose address differs from its own.
//   - gRPC's filter chain match cannot tell TLS from plaintext (A36: only "raw_buffer" transport
//     protocols), so one chain per listener: STRICT terminates mTLS with the certificate provider instance
//     "default" (certificate "default", root "ROOTCA") the agent's bootstrap defines, client certificates
//     required; DISABLE is plaintext; PERMISSIVE is plaintext too, or mTLS when the workload carries
//     security.istio.io/tlsMode=istio (its clients then send mTLS), as istiod decides.
//   - The chain's connection manager has an inline route answering every path with a non-forwarding
//     action, and the HTTP filters: RBAC for the policies (authpolicy.GRPCFilters, which says what a gRPC
//     server cannot honour and how it fails closed), then the router.

import (
	"net"
	"slices"
	"strconv"
	"strings"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sextantmesh/sextant/pilot/envoy/authpolicy"
	"github.com/sextantmesh/sextant/pilot/model"
)

// GRPCServerListenerPrefix begins the listener names proxyless gRPC servers ask for (Istio's bootstrap
// template "xds.istio.io/grpc/lds/inbound/%s").
const GRPCServerListenerPrefix = "xds.istio.io/grpc/lds/inbound/"

// Names of the certificate provider instance and its certificates in the bootstrap Istio's agent writes.
const (
	grpcCertProvider = "default"
	grpcCertName     = "default"
	grpcRootName     = "ROOTCA"
)

// grpcTLSModeLabel is the label that tells clients to send mTLS to a workload (auto mTLS).
const grpcTLSModeLabel = "security.istio.io/tlsMode"

// grpcInboundKey: a server listener is built from its name and what desc spells out; policies also key by
// index identity, as the sidecar's inbound listener does.
type grpcInboundKey struct {
	policies any
	name     string
	desc     string
}

// grpcInboundListener returns the listener a proxyless gRPC server asks for by name, nil when the name
// is malformed or its port is not one of the workload's.
func (l listenerGenerator) grpcInboundListener(proxy *model.Proxy, push *model.PushContext, name string) (*model.Resource, error) {
	host, port, ok := grpcServerAddress(name)
	if !ok {
		return nil, nil
	}
	_, labels, ports := l.g.sidecarInboundPortsOf(proxy, push)
	if !slices.ContainsFunc(ports, func(p inboundPort) bool { return p.port == port }) {
		return nil, nil
	}
	mode := grpcServerMTLS(push.PeerAuthentication(proxy.Namespace, labels).ModeForPort(port), labels)
	policies := push.AuthorizationPolicies(proxy.Namespace, labels)
	env := authpolicy.NewEnv(push, policies, OutboundClusterName)
	env.JWT = authpolicy.NewJWTAuthn(push, proxy.Namespace, labels, false)
	desc := string(mode) + "|" + env.Describe() + authpolicy.DescribePolicies(policies)
	return l.g.cached(grpcInboundKey{push.PoliciesID(), name, desc}, name, func() proto.Message {
		lis, notes := buildGRPCServerListener(name, host, port, mode, policies, env)
		authpolicy.LogNotes(notes, "namespace", proxy.Namespace, "proxy", proxy.ID, "listener", name)
		return lis
	})
}

// grpcServerAddress reads IP and PORT from "xds.istio.io/grpc/lds/inbound/IP:PORT".
func grpcServerAddress(name string) (string, uint32, bool) {
	addr, ok := strings.CutPrefix(name, GRPCServerListenerPrefix)
	if !ok {
		return "", 0, false
	}
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return "", 0, false
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 {
		return "", 0, false
	}
	return host, uint32(port), true
}

// grpcServerMTLS is the mode a gRPC server can honour: it has one chain, so PERMISSIVE becomes plaintext,
// or mTLS when the workload's label makes its clients send mTLS (istiod's rule).
func grpcServerMTLS(mode model.MTLSMode, labels map[string]string) model.MTLSMode {
	if mode == model.MTLSPermissive {
		if labels[grpcTLSModeLabel] == "istio" {
			return model.MTLSStrict
		}
		return model.MTLSDisable
	}
	return mode
}

// buildGRPCServerListener builds the listener for a server on host:port, and notes on the policies.
func buildGRPCServerListener(name, host string, port uint32, mode model.MTLSMode, policies model.AuthorizationPolicies,
	env authpolicy.Env) (*listener.Listener, []string) {
	filters, notes := authpolicy.GRPCFilters(policies, env)
	filters = append(filters, ldsRouterFilter())
	suffix := "plaintext"
	if mode == model.MTLSStrict {
		suffix = "mtls"
	}
	hc := &hcm.HttpConnectionManager{
		StatPrefix: "inbound_" + suffix,
		RouteSpecifier: &hcm.HttpConnectionManager_RouteConfig{RouteConfig: &route.RouteConfiguration{
			Name: "inbound",
			VirtualHosts: []*route.VirtualHost{{
				Name:    "inbound|grpc|" + ldsPortName(port),
				Domains: []string{"*"},
				Routes: []*route.Route{{
					Match:  &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
					Action: &route.Route_NonForwardingAction{NonForwardingAction: &route.NonForwardingAction{}},
				}},
			}},
		}},
		HttpFilters: filters,
	}
	chain := &listener.FilterChain{
		Name:    "inbound-" + suffix,
		Filters: []*listener.Filter{ldsNetworkFilter("inbound-hcm"+suffix, hc)},
	}
	if mode == model.MTLSStrict {
		chain.TransportSocket = ldsDownstreamTLSSocket(grpcServerTLS())
	}
	return &listener.Listener{
		Name:         name,
		Address:      socketAddress(host, port),
		FilterChains: []*listener.FilterChain{chain},
	}, notes
}

// grpcServerTLS terminates mesh mTLS with the bootstrap's certificate provider: the workload certificate,
// client certificates required and validated against the mesh root.
func grpcServerTLS() *tlsv3.DownstreamTlsContext {
	return &tlsv3.DownstreamTlsContext{
		RequireClientCertificate: wrapperspb.Bool(true),
		CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsCertificateProviderInstance: &tlsv3.CertificateProviderPluginInstance{
				InstanceName: grpcCertProvider, CertificateName: grpcCertName},
			ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
				CaCertificateProviderInstance: &tlsv3.CertificateProviderPluginInstance{
					InstanceName: grpcCertProvider, CertificateName: grpcRootName},
			}},
		},
	}
}
