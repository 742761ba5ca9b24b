package envoymodel

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/buffer/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
)

// The configs below are written by hand from Envoy's documentation, independently of any generator.

func parseListener(t *testing.T, js string) *listener.Listener {
	t.Helper()
	var l listener.Listener
	if err := protojson.Unmarshal([]byte(js), &l); err != nil {
		t.Fatalf("listener: %v\n%s", err, js)
	}
	return &l
}

func parseCluster(t *testing.T, js string) *cluster.Cluster {
	t.Helper()
	var c cluster.Cluster
	if err := protojson.Unmarshal([]byte(js), &c); err != nil {
		t.Fatalf("cluster: %v", err)
	}
	return &c
}

const routerFilter = `{"name": "envoy.filters.http.router", ` +
	`"typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}`

// hcmFilter is an HTTP connection manager with an inline route to cluster backend and the given filters
// before the router.
func hcmFilter(extra string, filters ...string) string {
	all := append(filters, routerFilter)
	return `{"name": "envoy.filters.network.http_connection_manager", "typed_config": {
	  "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
	  "stat_prefix": "in", ` + extra + `
	  "route_config": {"name": "r", "virtual_hosts": [{"name": "vh", "domains": ["*"],
	    "routes": [{"match": {"prefix": "/"}, "route": {"cluster": "backend"}}]}]},
	  "http_filters": [` + strings.Join(all, ",") + `]}}`
}

func rbacFilter(rules string) string {
	return `{"name": "envoy.filters.http.rbac", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC", ` +
		rules + `}}`
}

const backendCluster = `{"name": "backend", "type": "STATIC", "load_assignment": {"cluster_name": "backend"}}`

// inbound is a capture listener on 15006 with one plaintext chain for port 8080 running the filters.
func inbound(t *testing.T, hcmExtra string, filters ...string) *Proxy {
	t.Helper()
	l := parseListener(t, `{"name": "virtualInbound", "address": {"socket_address": {"address": "0.0.0.0", "port_value": 15006}},
	  "listener_filters": [
	    {"name": "o", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.listener.original_dst.v3.OriginalDst"}},
	    {"name": "t", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector"}}],
	  "filter_chains": [
	    {"name": "c8080", "filter_chain_match": {"destination_port": 8080, "transport_protocol": "raw_buffer"},
	     "filters": [`+hcmFilter(hcmExtra, filters...)+`]},
	    {"name": "c8080-tls", "filter_chain_match": {"destination_port": 8080, "transport_protocol": "tls"},
	     "filters": [`+hcmFilter(hcmExtra, filters...)+`],
	     "transport_socket": {"name": "tls",
	       "typed_config": {"@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
	       "common_tls_context": {"validation_context": {}}}}}]}`)
	p, err := New(Resources{Listeners: []*listener.Listener{l}, Clusters: []*cluster.Cluster{parseCluster(t, backendCluster)}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func eval(t *testing.T, p *Proxy, r Request) *Result {
	t.Helper()
	if r.DestinationIP == "" {
		r.DestinationIP = "10.0.0.2"
	}
	if r.DestinationPort == 0 {
		r.DestinationPort = 8080
	}
	if r.SourceIP == "" {
		r.SourceIP = "10.0.0.9"
	}
	if r.Path == "" {
		r.Path = "/"
	}
	res, err := p.Evaluate(context.Background(), r)
	if err != nil {
		t.Fatalf("Evaluate: %v", err)
	}
	return res
}

func wantAllowed(t *testing.T, res *Result, want bool) {
	t.Helper()
	if res.Allowed() != want {
		t.Errorf("allowed = %v, want %v: %s", res.Allowed(), want, res)
	}
}

func TestFilterChainSelection(t *testing.T) {
	l := parseListener(t, `{"name": "in", "address": {"socket_address": {"address": "0.0.0.0", "port_value": 15006}},
	  "listener_filters": [
	    {"name": "o", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.listener.original_dst.v3.OriginalDst"}},
	    {"name": "t", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector"}}],
	  "filter_chains": [
	    {"name": "p8080-tls", "filter_chain_match": {"destination_port": 8080, "transport_protocol": "tls"},
	     "filters": [{"name": "tcp", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
	       "stat_prefix": "a", "cluster": "tls8080"}}],
	     "transport_socket": {"name": "tls",
	       "typed_config": {"@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
	       "require_client_certificate": true, "common_tls_context": {"combined_validation_context": {
	         "default_validation_context": {"match_subject_alt_names": [{"prefix": "spiffe://td/"}]},
	         "validation_context_sds_secret_config": {"name": "ROOTCA"}}}}}},
	    {"name": "p8080-plain", "filter_chain_match": {"destination_port": 8080, "transport_protocol": "raw_buffer"},
	     "filters": [{"name": "tcp", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
	       "stat_prefix": "a", "cluster": "plain8080"}}]},
	    {"name": "any-plain", "filter_chain_match": {"transport_protocol": "raw_buffer"},
	     "filters": [{"name": "tcp", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
	       "stat_prefix": "a", "cluster": "passthrough"}}]},
	    {"name": "src", "filter_chain_match": {"destination_port": 9000,
	      "source_prefix_ranges": [{"address_prefix": "10.1.0.0", "prefix_len": 16}]},
	     "filters": [{"name": "tcp", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
	       "stat_prefix": "a", "cluster": "src"}}]}]}`)
	var clusters []*cluster.Cluster
	for _, n := range []string{"tls8080", "plain8080", "passthrough", "src"} {
		clusters = append(clusters, parseCluster(t, `{"name": "`+n+`", "type": "STATIC"}`))
	}
	p, err := New(Resources{Listeners: []*listener.Listener{l}, Clusters: clusters})
	if err != nil {
		t.Fatal(err)
	}
	peer := &TLS{Client: &Certificate{URISANs: []string{"spiffe://td/ns/a/sa/b"}}}
	for _, tc := range []struct {
		name     string
		req      Request
		decision Decision
		cluster  string
	}{
		{"plaintext to 8080", Request{}, Forwarded, "plain8080"},
		{"mTLS to 8080", Request{TLS: peer}, Forwarded, "tls8080"},
		{"TLS without client certificate fails the handshake", Request{TLS: &TLS{}}, ConnectionClosed, ""},
		{"client certificate of another trust domain fails the handshake",
			Request{TLS: &TLS{Client: &Certificate{URISANs: []string{"spiffe://other/ns/a/sa/b"}}}}, ConnectionClosed, ""},
		{"plaintext to another port takes the port-less chain", Request{DestinationPort: 7070}, Forwarded, "passthrough"},
		// The port-9000 chain is the most specific by port; its source range does not fit and Envoy does
		// not go back to the port-less chains.
		{"no backtracking to port-less chains", Request{DestinationPort: 9000}, ConnectionClosed, ""},
		{"source range fits", Request{DestinationPort: 9000, SourceIP: "10.1.3.4"}, Forwarded, "src"},
		{"TLS to a port with only a plaintext chain", Request{DestinationPort: 7070, TLS: peer}, ConnectionClosed, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := eval(t, p, tc.req)
			if res.Decision != tc.decision || res.Cluster != tc.cluster {
				t.Errorf("got %s, want %s %s", res, tc.decision, tc.cluster)
			}
		})
	}
}

// A listener with use_original_dst hands the connection to the listener on its original destination,
// bound or not: inbound capture with use_original_dst reaches an outbound listener on the same port.
func TestUseOriginalDstHandOff(t *testing.T) {
	mk := func(useOriginalDst bool) *Proxy {
		u := ""
		if useOriginalDst {
			u = `"use_original_dst": true,`
		}
		in := parseListener(t, `{"name": "virtualInbound", `+u+` "address": {"socket_address": {"address": "0.0.0.0", "port_value": 15006}},
		  "listener_filters": [
		    {"name": "o", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.listener.original_dst.v3.OriginalDst"}}],
		  "filter_chains": [{"name": "inbound", "filter_chain_match": {"destination_port": 8080}, "filters": [`+
			hcmFilter("", rbacFilter(`"rules": {"action": "ALLOW"}`))+`]}]}`)
		out := parseListener(t, `{"name": "0.0.0.0_8080", "bind_to_port": false,
		  "address": {"socket_address": {"address": "0.0.0.0", "port_value": 8080}},
		  "filter_chains": [{"name": "outbound", "filters": [`+hcmFilter("")+`]}]}`)
		p, err := New(Resources{Listeners: []*listener.Listener{in, out}, Clusters: []*cluster.Cluster{parseCluster(t, backendCluster)}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	res := eval(t, mk(false), Request{})
	if res.Listener != "virtualInbound" || res.Status != 403 {
		t.Errorf("without use_original_dst: %s", res)
	}
	res = eval(t, mk(true), Request{})
	if res.Listener != "0.0.0.0_8080" || !res.Allowed() {
		t.Errorf("with use_original_dst: %s", res)
	}
}

func TestRBACMatchers(t *testing.T) {
	principal := func(id string) string {
		return `"rules": {"action": "ALLOW", "policies": {"p": {"permissions": [{"any": true}], "principals": [` + id + `]}}}`
	}
	permission := func(perm string) string {
		return `"rules": {"action": "ALLOW", "policies": {"p": {"permissions": [` + perm + `], "principals": [{"any": true}]}}}`
	}
	mtls := &TLS{Client: &Certificate{URISANs: []string{"spiffe://cluster.local/ns/shop/sa/web"}, Subject: "CN=web"}}
	for _, tc := range []struct {
		name  string
		rules string
		req   Request
		want  bool
	}{
		{"no policies deny", `"rules": {"action": "ALLOW"}`, Request{}, false},
		{"DENY without policies allows", `"rules": {"action": "DENY"}`, Request{}, true},
		{"header exact", permission(`{"header": {"name": ":method", "string_match": {"exact": "GET"}}}`), Request{Method: "GET"}, true},
		{"header exact, other method", permission(`{"header": {"name": ":method", "string_match": {"exact": "GET"}}}`),
			Request{Method: "POST"}, false},
		{"repeated header joined with commas", permission(`{"header": {"name": "x-a", "string_match": {"exact": "1,2"}}}`),
			Request{Headers: map[string][]string{"x-a": {"1", "2"}}}, true},
		{"absent header with inverted exact match does not match",
			permission(`{"header": {"name": "x-a", "string_match": {"exact": "v"}, "invert_match": true}}`), Request{}, false},
		{"absent header, present_match false", permission(`{"header": {"name": "x-a", "present_match": false}}`), Request{}, true},
		{"absent header, inverted present_match", permission(`{"header": {"name": "x-a", "present_match": true, "invert_match": true}}`),
			Request{}, true},
		{"url_path ignores the query", permission(`{"url_path": {"path": {"exact": "/a"}}}`), Request{Path: "/a?x=1"}, true},
		{"url_path prefix", permission(`{"url_path": {"path": {"prefix": "/api/"}}}`), Request{Path: "/apix"}, false},
		{"not_rule", permission(`{"not_rule": {"url_path": {"path": {"exact": "/a"}}}}`), Request{Path: "/b"}, true},
		{"and_rules",
			permission(`{"and_rules": {"rules": [{"destination_port": 8080}, {"header": {"name": ":method", "string_match": {"exact": "GET"}}}]}}`),
			Request{}, true},
		{"and_rules, one fails", permission(`{"and_rules": {"rules": [{"destination_port": 9090}, {"any": true}]}}`), Request{}, false},
		{"or_rules", permission(`{"or_rules": {"rules": [{"destination_port": 9090}, {"destination_port": 8080}]}}`), Request{}, true},
		{"destination_ip", permission(`{"destination_ip": {"address_prefix": "10.0.0.0", "prefix_len": 24}}`), Request{}, true},
		{"authenticated over mTLS", principal(`{"authenticated": {"principal_name": {"exact": "spiffe://cluster.local/ns/shop/sa/web"}}}`),
			Request{TLS: mtls}, true},
		{"authenticated subject", principal(`{"authenticated": {"principal_name": {"exact": "CN=web"}}}`), Request{TLS: mtls}, true},
		{"authenticated on plaintext", principal(`{"authenticated": {"principal_name": {"prefix": ""}}}`), Request{}, false},
		{"direct_remote_ip", principal(`{"direct_remote_ip": {"address_prefix": "10.0.0.9", "prefix_len": 32}}`), Request{}, true},
		{"remote_ip reads x-forwarded-for", principal(`{"remote_ip": {"address_prefix": "192.168.1.0", "prefix_len": 24}}`),
			Request{Headers: map[string][]string{"x-forwarded-for": {"1.2.3.4, 192.168.1.7"}}}, true},
		{"direct_remote_ip ignores x-forwarded-for", principal(`{"direct_remote_ip": {"address_prefix": "192.168.1.0", "prefix_len": 24}}`),
			Request{Headers: map[string][]string{"x-forwarded-for": {"192.168.1.7"}}}, false},
		{"not_id", principal(`{"not_id": {"direct_remote_ip": {"address_prefix": "10.0.0.0", "prefix_len": 8}}}`), Request{}, false},
		{"metadata absent", principal(`{"metadata": {"filter": "f", "path": [{"key": "k"}], "value": {"string_match": {"exact": "v"}}}}`),
			Request{}, false},
		{"inverted metadata absent", principal(
			`{"metadata": {"filter": "f", "path": [{"key": "k"}], "value": {"string_match": {"exact": "v"}}, "invert": true}}`), Request{}, true},
		{"filter_state absent", principal(`{"filter_state": {"key": "io.istio.peer_principal", "string_match": {"exact": "x"}}}`),
			Request{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := inbound(t, "", rbacFilter(tc.rules))
			wantAllowed(t, eval(t, p, tc.req), tc.want)
		})
	}
}

// Policies are tried in name order: the first match names the effective policy.
func TestRBACShadowAndLog(t *testing.T) {
	shadow := rbacFilter(`"shadow_rules_stat_prefix": "pfx_", "shadow_rules": {"action": "DENY", "policies": {
	  "b-admin": {"permissions": [{"url_path": {"path": {"prefix": "/admin"}}}], "principals": [{"any": true}]},
	  "a-admin-x": {"permissions": [{"url_path": {"path": {"exact": "/admin/x"}}}], "principals": [{"any": true}]}}}`)
	logRules := rbacFilter(`"rules": {"action": "LOG", "policies": {"get": {"permissions": [{"header": {"name": ":method", ` +
		`"string_match": {"exact": "GET"}}}], "principals": [{"any": true}]}}}`)
	p := inbound(t, "", shadow, logRules)

	res := eval(t, p, Request{Path: "/admin/x", Method: "GET"})
	wantAllowed(t, res, true)
	if got := res.MetadataString(HTTPRBACNamespace, "pfx_"+ShadowEffectivePolicyID); got != "a-admin-x" {
		t.Errorf("effective policy %q, want a-admin-x", got)
	}
	if got := res.MetadataString(HTTPRBACNamespace, "pfx_"+ShadowEngineResult); got != "denied" {
		t.Errorf("shadow result %q", got)
	}
	if v := res.MetadataValue(CommonNamespace, AccessLogHint); v == nil || !v.GetBoolValue() {
		t.Errorf("access_log_hint %v, want true", v)
	}

	res = eval(t, p, Request{Path: "/public", Method: "POST"})
	wantAllowed(t, res, true)
	if got := res.MetadataValue(HTTPRBACNamespace, "pfx_"+ShadowEffectivePolicyID); got != nil {
		t.Errorf("effective policy %v without a match", got)
	}
	if got := res.MetadataString(HTTPRBACNamespace, "pfx_"+ShadowEngineResult); got != "allowed" {
		t.Errorf("shadow result %q", got)
	}
	if v := res.MetadataValue(CommonNamespace, AccessLogHint); v == nil || v.GetBoolValue() {
		t.Errorf("access_log_hint %v, want false", v)
	}
}

func TestPathNormalisation(t *testing.T) {
	deny := rbacFilter(`"rules": {"action": "DENY", "policies": {"admin": {"permissions": [{"url_path": {"path": {"prefix": "/admin"}}}], ` +
		`"principals": [{"any": true}]}}}`)
	for _, tc := range []struct {
		name, hcm, path string
		want            bool
	}{
		{"no normalisation: dot segments slip by", ``, "/public/../admin", true},
		{"normalize_path resolves them", `"normalize_path": true,`, "/public/../admin", false},
		{"normalize_path, encoded dots", `"normalize_path": true,`, "/public/%2e%2e/admin", false},
		{"merge_slashes", `"merge_slashes": true,`, "//admin", false},
		{"reject escaped slashes", `"path_with_escaped_slashes_action": "REJECT_REQUEST",`, "/x%2Fy", false},
		{"keep escaped slashes", `"path_with_escaped_slashes_action": "KEEP_UNCHANGED",`, "/x%2Fy", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantAllowed(t, eval(t, inbound(t, tc.hcm, deny), Request{Path: tc.path}), tc.want)
		})
	}
}

func TestUnsupportedConfigFails(t *testing.T) {
	for name, filter := range map[string]string{
		"CEL condition": rbacFilter(`"rules": {"action": "ALLOW", "policies": {"p": {"permissions": [{"any": true}], ` +
			`"principals": [{"any": true}], "condition": {"const_expr": {"bool_value": true}}}}}`),
		"unknown filter": `{"name": "x", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.buffer.v3.Buffer", ` +
			`"max_request_bytes": 10}}`,
		"fault abort": `{"name": "f", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault", ` +
			`"abort": {"http_status": 503, "percentage": {"numerator": 100}}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			p := inbound(t, "", filter)
			_, err := p.Evaluate(context.Background(), Request{DestinationIP: "10.0.0.2", DestinationPort: 8080, SourceIP: "10.0.0.9", Path: "/"})
			var u *unsupported
			if !errors.As(err, &u) {
				t.Errorf("err = %v, want a not-modelled error", err)
			}
		})
	}
}

// authzServer answers Check with a fixed decision and counts the calls.
type authzServer struct {
	authv3.UnimplementedAuthorizationServer
	allow bool
	delay time.Duration
	calls atomic.Int32
	last  atomic.Pointer[authv3.CheckRequest]
}

func (a *authzServer) Check(ctx context.Context, r *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	a.calls.Add(1)
	a.last.Store(r)
	if a.delay > 0 {
		select {
		case <-time.After(a.delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if a.allow {
		return &authv3.CheckResponse{Status: &status.Status{Code: int32(codes.OK)}}, nil
	}
	return &authv3.CheckResponse{Status: &status.Status{Code: int32(codes.PermissionDenied)},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{
			DeniedResponse: &authv3.DeniedHttpResponse{Status: &typev3.HttpStatus{Code: typev3.StatusCode_Unauthorized}}}}, nil
}

func startAuthz(t *testing.T, a *authzServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	authv3.RegisterAuthorizationServer(srv, a)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// unusedAddr is a loopback port nothing listens on.
func unusedAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

func extAuthzProxy(t *testing.T, addr, authz string) *Proxy {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	shadow := rbacFilter(`"shadow_rules_stat_prefix": "ext_", "shadow_rules": {"action": "DENY", "policies": {
	  "ext-admin": {"permissions": [{"url_path": {"path": {"prefix": "/admin"}}}], "principals": [{"any": true}]}}}`)
	ext := `{"name": "envoy.filters.http.ext_authz",
	  "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz",
	  "transport_api_version": "V3", "grpc_service": {"envoy_grpc": {"cluster_name": "authz"}, "timeout": "0.3s"}, ` + authz + `
	  "filter_enabled_metadata": {"filter": "envoy.filters.http.rbac", "path": [{"key": "ext_shadow_effective_policy_id"}],
	    "value": {"string_match": {"prefix": "ext-"}}}}}`
	l := parseListener(t, `{"name": "virtualInbound", "address": {"socket_address": {"address": "0.0.0.0", "port_value": 15006}},
	  "listener_filters": [
	    {"name": "o", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.listener.original_dst.v3.OriginalDst"}}],
	  "filter_chains": [{"filter_chain_match": {"destination_port": 8080}, "filters": [`+hcmFilter("", shadow, ext)+`]}]}`)
	authzCluster := parseCluster(t, `{"name": "authz", "type": "STATIC",
	  "typed_extension_protocol_options": {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
	  "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
	    "explicit_http_config": {"http2_protocol_options": {}}}},
	  "load_assignment": {"cluster_name": "authz",
	    "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {"socket_address": {"address": "`+host+`", "port_value": `+port+`}}}}]}]}}`)
	p, err := New(Resources{Listeners: []*listener.Listener{l}, Clusters: []*cluster.Cluster{parseCluster(t, backendCluster), authzCluster}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExtAuthz(t *testing.T) {
	allow := &authzServer{allow: true}
	deny := &authzServer{}
	slow := &authzServer{allow: true, delay: 2 * time.Second}
	allowAddr, denyAddr, slowAddr := startAuthz(t, allow), startAuthz(t, deny), startAuthz(t, slow)
	down := unusedAddr(t)
	for _, tc := range []struct {
		name, addr, cfg, path string
		allowed               bool
		status, checks        int
	}{
		{"server allows", allowAddr, "", "/admin", true, 0, 1},
		{"server denies with its status", denyAddr, "", "/admin", false, 401, 1},
		{"not enabled for other paths", denyAddr, "", "/public", true, 0, 0},
		{"unreachable, fail closed", down, "", "/admin", false, 403, 1},
		{"unreachable, status_on_error", down, `"status_on_error": {"code": 503},`, "/admin", false, 503, 1},
		{"unreachable, failure_mode_allow", down, `"failure_mode_allow": true,`, "/admin", true, 0, 1},
		{"timeout is an error", slowAddr, "", "/admin", false, 403, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := eval(t, extAuthzProxy(t, tc.addr, tc.cfg), Request{Path: tc.path})
			wantAllowed(t, res, tc.allowed)
			if res.Status != tc.status || res.ExtAuthzChecks != tc.checks {
				t.Errorf("status %d checks %d, want %d %d: %s", res.Status, res.ExtAuthzChecks, tc.status, tc.checks, res)
			}
		})
	}
	if r := allow.last.Load(); r.GetAttributes().GetRequest().GetHttp().GetPath() != "/admin" ||
		r.GetAttributes().GetSource().GetAddress().GetSocketAddress().GetAddress() != "10.0.0.9" {
		t.Errorf("check request %v", r)
	}
}

// http_inspector reports http/1.1 or h2c for plaintext HTTP unless its filter_disabled predicate holds for
// the connection's (restored) local address; chains then match on those application protocols.
func TestHTTPInspectorAndFilterDisabled(t *testing.T) {
	tcpChain := func(name string, port int, protos string) string {
		m := `"destination_port": ` + strconv.Itoa(port)
		if protos != "" {
			m += `, "application_protocols": ` + protos
		}
		return `{"name": "` + name + `", "filter_chain_match": {` + m + `}, "filters": [{"name": "tcp", "typed_config": {
		  "@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
		    "stat_prefix": "a", "cluster": "` + name + `"}}]}`
	}
	l := parseListener(t, `{"name": "in", "address": {"socket_address": {"address": "0.0.0.0", "port_value": 15006}},
	  "listener_filters": [
	    {"name": "o", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.listener.original_dst.v3.OriginalDst"}},
	    {"name": "h", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.listener.http_inspector.v3.HttpInspector"},
	     "filter_disabled": {"not_match": {"destination_port_range": {"start": 9000, "end": 9001}}}}],
	  "filter_chains": [`+strings.Join([]string{
		tcpChain("sniffed-http", 9000, `["http/1.1", "h2c"]`), tcpChain("sniffed-tcp", 9000, ""),
		tcpChain("other-http", 9100, `["http/1.1", "h2c"]`), tcpChain("other-tcp", 9100, ""),
	}, ",")+`]}`)
	var clusters []*cluster.Cluster
	for _, n := range []string{"sniffed-http", "sniffed-tcp", "other-http", "other-tcp"} {
		clusters = append(clusters, parseCluster(t, `{"name": "`+n+`", "type": "STATIC"}`))
	}
	p, err := New(Resources{Listeners: []*listener.Listener{l}, Clusters: clusters})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		port  uint32
		http2 bool
		want  string
	}{{9000, false, "sniffed-http"}, {9000, true, "sniffed-http"}, {9100, false, "other-tcp"}} {
		if res := eval(t, p, Request{DestinationPort: tc.port, HTTP2: tc.http2}); res.Cluster != tc.want {
			t.Errorf("port %d h2 %v: %s, want %s", tc.port, tc.http2, res, tc.want)
		}
	}
}

// An authorization cluster the model cannot call as Envoy would (not HTTP/2, TLS to the endpoint) is an
// error, not a guessed answer.
func TestExtAuthzClusterNotModelled(t *testing.T) {
	addr := startAuthz(t, &authzServer{allow: true})
	for name, mutate := range map[string]func(*cluster.Cluster){
		"HTTP/1.1 cluster": func(c *cluster.Cluster) { c.TypedExtensionProtocolOptions = nil },
		"TLS to the endpoint": func(c *cluster.Cluster) {
			c.TransportSocket = parseCluster(t, `{"name": "x", "transport_socket": {"name": "tls", "typed_config": {
			  "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"}}}`).TransportSocket
		},
	} {
		t.Run(name, func(t *testing.T) {
			p := extAuthzProxy(t, addr, "")
			mutate(p.clusters["authz"])
			_, err := p.Evaluate(context.Background(),
				Request{DestinationIP: "10.0.0.2", DestinationPort: 8080, SourceIP: "10.0.0.9", Path: "/admin"})
			var u *unsupported
			if !errors.As(err, &u) {
				t.Errorf("err = %v, want a not-modelled error", err)
			}
		})
	}
}
