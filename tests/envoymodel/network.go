package envoymodel

import (
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	corspb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	extauthzhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	faultpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	jwtpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	rbachttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	routerpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	extauthznet "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/ext_authz/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rbacnet "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// unmarshal opens a typed_config into the message its type URL names, when it is one the model knows.
func unmarshal(a *anypb.Any) (proto.Message, error) {
	var m proto.Message
	switch a.GetTypeUrl() {
	case "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager":
		m = &hcm.HttpConnectionManager{}
	case "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy":
		m = &tcpproxy.TcpProxy{}
	case "type.googleapis.com/envoy.extensions.filters.network.rbac.v3.RBAC":
		m = &rbacnet.RBAC{}
	case "type.googleapis.com/envoy.extensions.filters.network.ext_authz.v3.ExtAuthz":
		m = &extauthznet.ExtAuthz{}
	case "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC":
		m = &rbachttp.RBAC{}
	case "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz":
		m = &extauthzhttp.ExtAuthz{}
	case "type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication":
		m = &jwtpb.JwtAuthentication{}
	case "type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault":
		m = &faultpb.HTTPFault{}
	case "type.googleapis.com/envoy.extensions.filters.http.cors.v3.Cors":
		m = &corspb.Cors{}
	case "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router":
		m = &routerpb.Router{}
	default:
		return nil, notModelled("filter type %s", a.GetTypeUrl())
	}
	if err := a.UnmarshalTo(m); err != nil {
		return nil, err
	}
	return m, nil
}

// runNetworkFilters runs the chain's read filters in order; the last must be terminal.
func (s *stream) runNetworkFilters(fc *listener.FilterChain) error {
	for _, f := range fc.GetFilters() {
		if f.GetConfigDiscovery() != nil {
			return notModelled("network filter %s: config_discovery", f.GetName())
		}
		m, err := unmarshal(f.GetTypedConfig())
		if err != nil {
			return err
		}
		switch c := m.(type) {
		case *rbacnet.RBAC:
			cont, err := s.networkRBAC(f.GetName(), c)
			if err != nil || !cont {
				return err
			}
		case *extauthznet.ExtAuthz:
			cont, err := s.networkExtAuthz(f.GetName(), c)
			if err != nil || !cont {
				return err
			}
		case *tcpproxy.TcpProxy:
			return s.tcpProxy(f.GetName(), c)
		case *hcm.HttpConnectionManager:
			return s.httpConnectionManager(f.GetName(), c)
		default:
			return notModelled("network filter %s (%T)", f.GetName(), m)
		}
	}
	s.closeConn("filter chain "+fc.GetName(), "no terminal network filter")
	return nil
}

func (s *stream) tcpProxy(name string, c *tcpproxy.TcpProxy) error {
	switch cs := c.GetClusterSpecifier().(type) {
	case *tcpproxy.TcpProxy_Cluster:
		return s.upstream(name, cs.Cluster, true)
	case *tcpproxy.TcpProxy_WeightedClusters:
		for _, wc := range cs.WeightedClusters.GetClusters() {
			if wc.GetWeight() > 0 {
				return s.upstream(name, wc.GetName(), true)
			}
		}
		s.closeConn(name, "no weighted cluster has weight")
		return nil
	}
	return notModelled("tcp_proxy %s: cluster specifier %T", name, c.GetClusterSpecifier())
}

// upstream forwards to a cluster, or fails as Envoy does when CDS has no such cluster: tcp_proxy closes
// the connection, the router answers 503.
func (s *stream) upstream(by, cluster string, tcp bool) error {
	if s.p.clusters[cluster] == nil {
		if tcp {
			s.closeConn(by, "cluster "+cluster+" not found")
		} else {
			s.localReply(by, 503, "cluster "+cluster+" not found")
		}
		return nil
	}
	s.forward(by, cluster)
	return nil
}
