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
//     action, and the HTTP filters: RBAC for the CUSTOM, DENY and ALLOW policies, then the router.
//     gRPC's RBAC knows ALLOW and DENY only and has no ext_authz client here, so CUSTOM policies deny what
//     their rules match (fail closed, reported); AUDIT policies are reported and left out (gRPC ignores
//     the LOG action: it has no access log to mark). Header matchers gRPC refuses (":scheme", "grpc-*")
//     would make it reject the whole listener: an ALLOW rule using one is dropped (it allows nothing), a
//     DENY rule using one denies every request. JWT conditions (request.auth.*, requestPrincipals) never
//     match in gRPC's RBAC: a proxyless server validates no token. So a RequestAuthentication on the
//     workload denies every request that carries a token where its rules look (fail closed, reported):
//     none can be told valid. Requests without a token pass, as Istio's do.

import (
	"cmp"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbachttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

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

// Filter names must be unique within one connection manager for gRPC (it NACKs duplicates).
const (
	grpcRBACAllowFilter  = httpRBACFilter
	grpcRBACDenyFilter   = httpRBACFilter + ".DENY"
	grpcRBACCustomFilter = httpRBACFilter + ".CUSTOM"
	grpcRBACJWTFilter    = httpRBACFilter + ".JWT"
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
	env := newAuthzEnv(push, policies)
	env.jwt = newJWTAuthn(push, proxy.Namespace, labels, false)
	desc := string(mode) + "|" + env.describe() + describePolicies(policies)
	return l.g.cached(grpcInboundKey{push.PoliciesID(), name, desc}, name, func() proto.Message {
		lis, notes := buildGRPCServerListener(name, host, port, mode, policies, env)
		logAuthzNotes(notes, "namespace", proxy.Namespace, "proxy", proxy.ID, "listener", name)
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
	env authzEnv) (*listener.Listener, []string) {
	filters, notes := buildGRPCRBAC(policies, env)
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

// buildGRPCRBAC returns the RBAC HTTP filters of a gRPC server, in Envoy's order: CUSTOM (as DENY), DENY,
// ALLOW.
func buildGRPCRBAC(policies model.AuthorizationPolicies, env authzEnv) ([]*hcm.HttpFilter, []string) {
	b := &rbacBuilder{trustDomain: env.trustDomain}
	var out []*hcm.HttpFilter
	if r := grpcUnverifiableTokens(b, env.jwt); r != nil {
		out = append(out, ldsHTTPFilter(grpcRBACJWTFilter, &rbachttp.RBAC{Rules: grpcRBACRefusable(b, r)}))
	}
	custom := &rbacpb.RBAC{Action: rbacpb.RBAC_DENY, Policies: map[string]*rbacpb.Policy{}}
	for _, g := range b.custom(policies.Custom, env) {
		if g.failure == "" { // custom() reported the others already
			b.notef("%sCUSTOM policies %v: a proxyless gRPC server cannot consult provider %q; the requests their rules match are denied",
				failClosedNote, g.policies, g.provider)
		}
		maps.Copy(custom.Policies, g.denyRules().Policies)
	}
	if len(custom.Policies) > 0 {
		out = append(out, ldsHTTPFilter(grpcRBACCustomFilter, &rbachttp.RBAC{Rules: grpcRBACRefusable(b, custom)}))
	}
	if len(policies.Audit) > 0 {
		names := make([]string, 0, len(policies.Audit))
		for _, c := range policies.Audit {
			names = append(names, c.Key.NamespacedName())
		}
		b.notef("AUDIT policies %v not applied: a proxyless gRPC server ignores RBAC's LOG action (no access log to mark)", names)
	}
	for _, r := range b.local(model.AuthorizationPolicies{Deny: policies.Deny, Allow: policies.Allow}) {
		name := grpcRBACAllowFilter
		if r.Action == rbacpb.RBAC_DENY {
			name = grpcRBACDenyFilter
		}
		out = append(out, ldsHTTPFilter(name, &rbachttp.RBAC{Rules: grpcRBACRefusable(b, r)}))
	}
	return out, b.notes
}

// grpcUnverifiableTokens denies the requests that carry a token where a RequestAuthentication rule looks
// for one: a proxyless server has no JWT filter, so it can tell a valid token from a forged one no more
// than Istio's 401 for an invalid token requires. Requests without a token pass, as Istio's do (and
// requestPrincipals never match them). Query parameters do not exist in gRPC; cookies are the "cookie"
// header.
func grpcUnverifiableTokens(b *rbacBuilder, j *jwtAuthn) *rbacpb.RBAC {
	if j == nil {
		return nil
	}
	r := &rbacpb.RBAC{Action: rbacpb.RBAC_DENY, Policies: map[string]*rbacpb.Policy{}}
	for _, jr := range j.rules {
		var headers []string
		for _, h := range jr.rule.GetFromHeaders() {
			headers = append(headers, strings.ToLower(h.GetName()))
		}
		if len(jr.rule.GetFromCookies()) > 0 {
			headers = append(headers, "cookie")
		}
		if len(jr.rule.GetFromHeaders()) == 0 && len(jr.rule.GetFromCookies()) == 0 && len(jr.rule.GetFromParams()) == 0 {
			headers = append(headers, "authorization") // Envoy's default location; its access_token parameter has no gRPC form
		}
		var present []*rbacpb.Principal
		for _, h := range slices.Compact(slices.Sorted(slices.Values(headers))) {
			present = append(present, &rbacpb.Principal{Identifier: &rbacpb.Principal_Header{Header: rbacHeaderMatcher(h, "*", false)}})
		}
		if len(present) == 0 {
			continue
		}
		name := fmt.Sprintf("ns[%s]-requestauthentication[%s]-rule[%d]", jr.source.Namespace, jr.source.Name, jr.index)
		r.Policies[name] = &rbacpb.Policy{Permissions: []*rbacpb.Permission{rbacPermissionAny()},
			Principals: []*rbacpb.Principal{rbacPrincipalOr(present)}}
		b.notef("%sRequestAuthentication %s rule %d (issuer %q): a proxyless gRPC server cannot validate tokens; "+
			"requests carrying one in %v are denied",
			failClosedNote, jr.source.NamespacedName(), jr.index, jr.rule.GetIssuer(), headers)
	}
	if len(r.Policies) == 0 {
		return nil
	}
	return r
}

// grpcRBACRefusable rewrites the policies of r that use a header gRPC refuses in RBAC (":scheme" or a
// "grpc-" name: it would NACK the listener): an ALLOW policy is dropped (it allows nothing), a DENY policy
// denies every request.
func grpcRBACRefusable(b *rbacBuilder, r *rbacpb.RBAC) *rbacpb.RBAC {
	for name, p := range r.Policies {
		header := ""
		for _, pr := range p.Principals {
			header = cmp.Or(header, grpcRefusedPrincipalHeader(pr))
		}
		for _, pe := range p.Permissions {
			header = cmp.Or(header, grpcRefusedPermissionHeader(pe))
		}
		if header == "" {
			continue
		}
		if r.Action == rbacpb.RBAC_ALLOW {
			delete(r.Policies, name)
			b.notef("%s (ALLOW) skipped, it allows nothing: gRPC cannot match header %q", name, header)
			continue
		}
		r.Policies[name] = &rbacpb.Policy{Permissions: []*rbacpb.Permission{rbacPermissionAny()},
			Principals: []*rbacpb.Principal{rbacPrincipalAny()}}
		b.notef("%s%s (%s): gRPC cannot match header %q; the rule denies every request", failClosedNote, name, r.Action, header)
	}
	return r
}

func grpcRefusedHeader(h *route.HeaderMatcher) string {
	if n := strings.ToLower(h.GetName()); n == ":scheme" || strings.HasPrefix(n, "grpc-") {
		return h.GetName()
	}
	return ""
}

func grpcRefusedPrincipalHeader(p *rbacpb.Principal) string {
	switch id := p.GetIdentifier().(type) {
	case *rbacpb.Principal_Header:
		return grpcRefusedHeader(id.Header)
	case *rbacpb.Principal_AndIds:
		return grpcRefusedPrincipalSet(id.AndIds.GetIds())
	case *rbacpb.Principal_OrIds:
		return grpcRefusedPrincipalSet(id.OrIds.GetIds())
	case *rbacpb.Principal_NotId:
		return grpcRefusedPrincipalHeader(id.NotId)
	}
	return ""
}

func grpcRefusedPrincipalSet(ids []*rbacpb.Principal) string {
	for _, id := range ids {
		if h := grpcRefusedPrincipalHeader(id); h != "" {
			return h
		}
	}
	return ""
}

func grpcRefusedPermissionHeader(p *rbacpb.Permission) string {
	switch r := p.GetRule().(type) {
	case *rbacpb.Permission_Header:
		return grpcRefusedHeader(r.Header)
	case *rbacpb.Permission_AndRules:
		return grpcRefusedPermissionSet(r.AndRules.GetRules())
	case *rbacpb.Permission_OrRules:
		return grpcRefusedPermissionSet(r.OrRules.GetRules())
	case *rbacpb.Permission_NotRule:
		return grpcRefusedPermissionHeader(r.NotRule)
	}
	return ""
}

func grpcRefusedPermissionSet(rules []*rbacpb.Permission) string {
	for _, r := range rules {
		if h := grpcRefusedPermissionHeader(r); h != "" {
			return h
		}
	}
	return ""
}
