package envoymodel

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	extauthzhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	extauthznet "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/ext_authz/v3"
	upstreamhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
)

// defaultExtAuthzTimeout is the filter's timeout when the grpc_service sets none.
const defaultExtAuthzTimeout = 200 * time.Millisecond

// checkOutcome is the gRPC client's answer: OK, Denied (with the HTTP status to answer) or Error.
type checkOutcome struct {
	ok     bool
	denied bool
	status int
	err    error
}

func (s *stream) httpExtAuthz(name string, c *extauthzhttp.ExtAuthz) (bool, error) {
	if c.GetHttpService() != nil {
		return false, notModelled("ext_authz %s: http_service", name)
	}
	if c.GetFilterEnabled() != nil || c.GetDenyAtDisable() != nil || c.GetWithRequestBody() != nil ||
		c.GetClearRouteCache() || len(c.GetMetadataContextNamespaces()) > 0 || c.GetAllowedHeaders() != nil ||
		c.GetDisallowedHeaders() != nil {
		return false, notModelled("ext_authz %s: filter_enabled, deny_at_disable, with_request_body, clear_route_cache, "+
			"metadata_context_namespaces or header lists", name)
	}
	if c.GetTransportApiVersion() != core.ApiVersion_V3 {
		return false, notModelled("ext_authz %s: transport_api_version %v", name, c.GetTransportApiVersion())
	}
	if m := c.GetFilterEnabledMetadata(); m != nil {
		on, err := matchMetadata(m, s.res.Metadata)
		if err != nil {
			return false, err
		}
		if !on {
			s.tracef("%s not enabled for this request (filter_enabled_metadata)", name)
			return true, nil
		}
	}
	out, err := s.check(name, c.GetGrpcService(), s.httpCheckRequest())
	if err != nil {
		return false, err
	}
	switch {
	case out.ok:
		s.tracef("%s: check OK", name)
		return true, nil
	case out.denied:
		s.localReply(name, out.status, "ext_authz denied")
		return false, nil
	}
	if c.GetFailureModeAllow() {
		s.tracef("%s: check failed (%v), failure_mode_allow", name, out.err)
		return true, nil
	}
	status := 403
	if c.GetStatusOnError() != nil && c.GetStatusOnError().GetCode() != 0 {
		status = int(c.GetStatusOnError().GetCode())
	}
	s.localReply(name, status, fmt.Sprintf("ext_authz error: %v", out.err))
	return false, nil
}

func (s *stream) networkExtAuthz(name string, c *extauthznet.ExtAuthz) (bool, error) {
	if c.GetTransportApiVersion() != core.ApiVersion_V3 {
		return false, notModelled("network ext_authz %s: transport_api_version %v", name, c.GetTransportApiVersion())
	}
	if m := c.GetFilterEnabledMetadata(); m != nil {
		on, err := matchMetadata(m, s.res.Metadata)
		if err != nil {
			return false, err
		}
		if !on {
			s.tracef("%s not enabled for this connection (filter_enabled_metadata)", name)
			return true, nil
		}
	}
	out, err := s.check(name, c.GetGrpcService(), s.attributes())
	if err != nil {
		return false, err
	}
	switch {
	case out.ok:
		return true, nil
	case out.denied:
		s.closeConn(name, "ext_authz denied")
		return false, nil
	}
	if c.GetFailureModeAllow() {
		s.tracef("%s: check failed (%v), failure_mode_allow", name, out.err)
		return true, nil
	}
	s.closeConn(name, fmt.Sprintf("ext_authz error: %v", out.err))
	return false, nil
}

func socketAddress(ap netip.AddrPort) *core.Address {
	return &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
		Address: ap.Addr().String(), PortSpecifier: &core.SocketAddress_PortValue{PortValue: uint32(ap.Port())}}}}
}

// attributes are the connection's peers as CheckRequestUtils fills them.
func (s *stream) attributes() *authv3.CheckRequest {
	src := &authv3.AttributeContext_Peer{Address: socketAddress(s.remote)}
	if s.tls != nil && s.tls.Client != nil && len(s.tls.Client.URISANs) > 0 {
		src.Principal = s.tls.Client.URISANs[0]
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source:      src,
		Destination: &authv3.AttributeContext_Peer{Address: socketAddress(s.local)},
	}}
}

func (s *stream) httpCheckRequest() *authv3.CheckRequest {
	cr := s.attributes()
	h := map[string]string{}
	for _, n := range s.headers.names {
		h[n], _ = s.headers.get(n)
	}
	proto := "HTTP/1.1"
	if s.req.HTTP2 {
		proto = "HTTP/2"
	}
	cr.Attributes.Request = &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
		Method:   s.headers.first(":method"),
		Path:     s.headers.first(":path"),
		Host:     s.headers.first(":authority"),
		Scheme:   s.headers.first(":scheme"),
		Protocol: proto,
		Headers:  h,
	}}
	return cr
}

// check calls Authorization/Check on the grpc_service's cluster: OK allows, any other status denies with
// the denied response's HTTP status (403 by default), and a failed call is an error.
func (s *stream) check(name string, svc *core.GrpcService, req *authv3.CheckRequest) (checkOutcome, error) {
	if svc.GetGoogleGrpc() != nil || svc.GetEnvoyGrpc() == nil {
		return checkOutcome{}, notModelled("ext_authz %s: grpc_service other than envoy_grpc", name)
	}
	if len(svc.GetInitialMetadata()) > 0 || svc.GetRetryPolicy() != nil {
		return checkOutcome{}, notModelled("ext_authz %s: grpc_service initial_metadata or retry_policy", name)
	}
	timeout := defaultExtAuthzTimeout
	if svc.GetTimeout() != nil {
		timeout = svc.GetTimeout().AsDuration()
	}
	addr, err := s.p.resolve(svc.GetEnvoyGrpc().GetClusterName())
	if err != nil {
		return checkOutcome{}, err
	}
	s.res.ExtAuthzChecks++
	if addr == "" {
		// A cluster without endpoints: the async client fails the call (no healthy upstream).
		return checkOutcome{err: fmt.Errorf("cluster %s has no endpoints", svc.GetEnvoyGrpc().GetClusterName())}, nil
	}
	ctx, cancel := context.WithTimeout(s.ctx, timeout)
	defer cancel()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority(svc.GetEnvoyGrpc().GetAuthority()))
	if err != nil {
		return checkOutcome{err: err}, nil
	}
	defer conn.Close()
	resp, err := authv3.NewAuthorizationClient(conn).Check(ctx, req, grpc.WaitForReady(false))
	if err != nil {
		s.tracef("%s: Check to %s failed: %v", name, addr, err)
		return checkOutcome{err: err}, nil
	}
	if codes.Code(resp.GetStatus().GetCode()) == codes.OK {
		return checkOutcome{ok: true}, nil
	}
	status := 403
	if d := resp.GetDeniedResponse(); d != nil && d.GetStatus().GetCode() > 0 {
		status = int(d.GetStatus().GetCode())
	}
	s.tracef("%s: Check denied (gRPC status %d)", name, resp.GetStatus().GetCode())
	return checkOutcome{denied: true, status: status}, nil
}

// resolve finds the address a cluster sends to: its first endpoint, from EDS or its load_assignment. The
// cluster must speak HTTP/2 (gRPC) in plaintext; anything else is not modelled.
func (p *Proxy) resolve(name string) (string, error) {
	c := p.clusters[name]
	if c == nil {
		return "", notModelled("ext_authz cluster %s is not in CDS (Envoy refuses the filter config)", name)
	}
	if !speaksHTTP2(c) {
		return "", notModelled("ext_authz cluster %s is not configured for HTTP/2", name)
	}
	var cla *endpoint.ClusterLoadAssignment
	switch c.GetType() {
	case cluster.Cluster_EDS:
		cla = p.endpoints[c.GetEdsClusterConfig().GetServiceName()]
		if cla == nil {
			cla = p.endpoints[name]
		}
	case cluster.Cluster_STATIC:
		cla = c.GetLoadAssignment()
	default:
		return "", notModelled("ext_authz cluster %s of type %v", name, c.GetType())
	}
	for _, loc := range cla.GetEndpoints() {
		for _, lb := range loc.GetLbEndpoints() {
			if lb.GetHealthStatus() != core.HealthStatus_UNKNOWN && lb.GetHealthStatus() != core.HealthStatus_HEALTHY {
				continue
			}
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			if sa == nil {
				return "", notModelled("ext_authz cluster %s: endpoint without a socket address", name)
			}
			if err := plaintextTo(c, lb); err != nil {
				return "", err
			}
			return net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue()))), nil
		}
	}
	return "", nil
}

func speaksHTTP2(c *cluster.Cluster) bool {
	if c.GetHttp2ProtocolOptions() != nil {
		return true
	}
	a := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
	if a == nil {
		return false
	}
	var o upstreamhttp.HttpProtocolOptions
	if a.UnmarshalTo(&o) != nil {
		return false
	}
	return o.GetExplicitHttpConfig().GetHttp2ProtocolOptions() != nil
}

// plaintextTo checks the transport socket the endpoint gets is plaintext: the cluster's, or the first
// transport_socket_matches entry whose match the endpoint's envoy.transport_socket_match metadata fits.
func plaintextTo(c *cluster.Cluster, lb *endpoint.LbEndpoint) error {
	ts := c.GetTransportSocket()
	md := lb.GetMetadata().GetFilterMetadata()["envoy.transport_socket_match"]
	for _, m := range c.GetTransportSocketMatches() {
		fits := true
		for k, v := range m.GetMatch().GetFields() {
			got := md.GetFields()[k]
			if got == nil || got.GetStringValue() != v.GetStringValue() {
				fits = false
				break
			}
		}
		if fits {
			ts = m.GetTransportSocket()
			break
		}
	}
	if ts == nil || ts.GetTypedConfig().GetTypeUrl() == rawBufferType {
		return nil
	}
	return notModelled("ext_authz cluster %s: transport socket %s to its endpoint", c.GetName(), ts.GetTypedConfig().GetTypeUrl())
}
