package enforcement

// The Envoy half of the enforcement matrix: Istio YAML through Sextant's public API (file source, model,
// Envoy generators) into the sidecar's listeners, routes, clusters and endpoints, then each request
// through tests/envoymodel, a model of Envoy written from Envoy's source. These rows cover what grpc-go's
// xDS server cannot evaluate: AUDIT, CUSTOM (ext_authz against a real gRPC authorization server on
// loopback) and JWT. Each expectation is what Istio's documentation says of the policy.

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/sextantmesh/sextant/tests/envoymodel"
)

// envoyMesh is namespace shop with the frontend workload (10.1.0.5, port 8080 behind service port 80),
// and the authorization service authz/opa whose one endpoint is 127.0.0.1:AUTHZ_PORT.
const envoyMesh = `
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: v1
kind: Namespace
metadata: {name: authz}
---
apiVersion: v1
kind: Service
metadata: {name: frontend, namespace: shop}
spec:
  clusterIP: 10.96.0.20
  selector: {app: frontend}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: frontend-0, namespace: shop, labels: {app: frontend, security.istio.io/tlsMode: istio}}
spec: {serviceAccountName: frontend, containers: [{name: app, image: example/frontend, ports: [{containerPort: 8080}]}]}
status: {phase: Running, podIP: 10.1.0.5, podIPs: [{ip: 10.1.0.5}], conditions: [{type: Ready, status: "True"}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: frontend-a, namespace: shop, labels: {kubernetes.io/service-name: frontend}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints: [{addresses: ["10.1.0.5"], conditions: {ready: true}}]
---
apiVersion: v1
kind: Service
metadata: {name: opa, namespace: authz}
spec:
  clusterIP: 10.96.9.1
  ports: [{name: grpc, port: 9191, targetPort: AUTHZ_PORT}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: opa-a, namespace: authz, labels: {kubernetes.io/service-name: opa}}
addressType: IPv4
ports: [{name: grpc, port: AUTHZ_PORT, protocol: TCP}]
endpoints: [{addresses: ["127.0.0.1"], conditions: {ready: true}}]
`

// envoyProviders is the mesh config: provider opa (fail closed) and opa-open (failOpen), both the service
// above.
const envoyProviders = `
extensionProviders:
- name: opa
  envoyExtAuthzGrpc: {service: authz/opa.authz.svc.cluster.local, port: 9191, timeout: 0.5s}
- name: opa-open
  envoyExtAuthzGrpc: {service: authz/opa.authz.svc.cluster.local, port: 9191, timeout: 0.5s, failOpen: true}
`

const (
	envoyFrontendIP = "10.1.0.5"
	envoySleepID    = "spiffe://cluster.local/ns/shop/sa/sleep"
)

var envoyFrontend = envoymodel.Workload{Name: "frontend-0", Namespace: "shop", IP: envoyFrontendIP,
	Labels: map[string]string{"app": "frontend"}}

func envoyPolicy(name, action, extra, rules string) string {
	return `
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: ` + name + `, namespace: shop}
spec:
  selector: {matchLabels: {app: frontend}}
  action: ` + action + `
` + extra + `
  rules: ` + rules + `
`
}

// envoyAuthz is an authorization server on loopback with a fixed answer.
type envoyAuthz struct {
	authv3.UnimplementedAuthorizationServer
	allow bool
	calls atomic.Int32
}

func (a *envoyAuthz) Check(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	a.calls.Add(1)
	code := codes.PermissionDenied
	if a.allow {
		code = codes.OK
	}
	return &authv3.CheckResponse{Status: &status.Status{Code: int32(code)}}, nil
}

// envoyServeAuthz starts the server and returns its port.
func envoyServeAuthz(t *testing.T, a *envoyAuthz) int {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	authv3.RegisterAuthorizationServer(srv, a)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().(*net.TCPAddr).Port
}

// envoyDeadPort is a loopback port nothing listens on.
func envoyDeadPort(t *testing.T) int {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	lis.Close()
	return port
}

// envoyProxy renders the frontend sidecar for the mesh plus policies, the authorization service on port.
func envoyProxy(t *testing.T, policies, meshConfig string, authzPort int) *envoymodel.Proxy {
	t.Helper()
	cfg := strings.ReplaceAll(envoyMesh, "AUTHZ_PORT", strconv.Itoa(authzPort)) + policies
	g, err := envoymodel.Generate(t.TempDir(), cfg, meshConfig, envoyFrontend)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Rejected) > 0 {
		t.Fatalf("config rejected: %v", g.Rejected)
	}
	p, err := envoymodel.New(g.Resources)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// envoyRequest is an HTTP request to the frontend on 8080 from the sleep workload over Istio mTLS.
func envoyRequest(method, path string) envoymodel.Request {
	return envoymodel.Request{
		DestinationIP: envoyFrontendIP, DestinationPort: 8080, SourceIP: "10.1.0.1",
		TLS: &envoymodel.TLS{ALPN: []string{"istio-peer-exchange", "istio", "http/1.1"},
			Client: &envoymodel.Certificate{URISANs: []string{envoySleepID}}},
		Method: method, Path: path, Host: "frontend.shop.svc.cluster.local",
	}
}

func envoyEvaluate(t *testing.T, p *envoymodel.Proxy, r envoymodel.Request) *envoymodel.Result {
	t.Helper()
	res, err := p.Evaluate(context.Background(), r)
	if err != nil {
		t.Fatalf("the model cannot evaluate Sextant's config: %v", err)
	}
	t.Logf("%s %s: %s", r.Method, r.Path, res)
	return res
}

func envoyWant(t *testing.T, res *envoymodel.Result, allowed bool) {
	t.Helper()
	if res.Allowed() != allowed {
		t.Errorf("allowed = %v, want %v: %s", res.Allowed(), allowed, res)
	}
}

// AUDIT: the request is neither allowed nor denied by the policy; a match is flagged for logging
// (Envoy's RBAC LOG action sets envoy.common/access_log_hint).
func TestEnvoyAudit(t *testing.T) {
	p := envoyProxy(t, envoyPolicy("audit", "AUDIT", "", `[{to: [{operation: {methods: [GET]}}]}]`), "", envoyDeadPort(t))
	for _, tc := range []struct {
		method string
		logged bool
	}{{"GET", true}, {"POST", false}} {
		t.Run(tc.method, func(t *testing.T) {
			res := envoyEvaluate(t, p, envoyRequest(tc.method, "/"))
			envoyWant(t, res, true)
			hint := res.MetadataValue(envoymodel.CommonNamespace, envoymodel.AccessLogHint)
			if hint == nil || hint.GetBoolValue() != tc.logged {
				t.Errorf("access_log_hint = %v, want %v", hint, tc.logged)
			}
		})
	}
}

// CUSTOM: the provider decides the requests the rules match; an unreachable provider denies unless it
// fails open; requests the rules do not match never reach it.
func TestEnvoyCustom(t *testing.T) {
	custom := func(provider string) string {
		return envoyPolicy("ext", "CUSTOM", "  provider: {name: "+provider+"}", `[{to: [{operation: {paths: ["/admin*"]}}]}]`)
	}
	allowing, denying := &envoyAuthz{allow: true}, &envoyAuthz{}
	allowPort, denyPort, dead := envoyServeAuthz(t, allowing), envoyServeAuthz(t, denying), envoyDeadPort(t)
	for _, tc := range []struct {
		name     string
		provider string
		port     int
		path     string
		allowed  bool
		checks   int
	}{
		{"server allows", "opa", allowPort, "/admin", true, 1},
		{"server denies", "opa", denyPort, "/admin", false, 1},
		{"unreachable, failOpen false", "opa", dead, "/admin", false, 1},
		{"unreachable, failOpen true", "opa-open", dead, "/admin", true, 1},
		{"path the rules do not match: not consulted", "opa", denyPort, "/public", true, 0},
		{"provider not defined: matching request denied", "nowhere", allowPort, "/admin", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := envoyProxy(t, custom(tc.provider), envoyProviders, tc.port)
			res := envoyEvaluate(t, p, envoyRequest("GET", tc.path))
			envoyWant(t, res, tc.allowed)
			if res.ExtAuthzChecks != tc.checks {
				t.Errorf("%d checks, want %d", res.ExtAuthzChecks, tc.checks)
			}
		})
	}
}

// CUSTOM goes first, then DENY, then ALLOW: a request the provider allows is still denied by an ALLOW
// policy it does not match.
func TestEnvoyCustomThenAllow(t *testing.T) {
	allowing := &envoyAuthz{allow: true}
	policies := envoyPolicy("ext", "CUSTOM", "  provider: {name: opa}", `[{to: [{operation: {paths: ["/admin*"]}}]}]`) +
		envoyPolicy("only-get", "ALLOW", "", `[{to: [{operation: {methods: [GET]}}]}]`)
	p := envoyProxy(t, policies, envoyProviders, envoyServeAuthz(t, allowing))
	res := envoyEvaluate(t, p, envoyRequest("POST", "/admin"))
	envoyWant(t, res, false)
	if res.ExtAuthzChecks != 1 {
		t.Errorf("%d checks, want 1", res.ExtAuthzChecks)
	}
	envoyWant(t, envoyEvaluate(t, p, envoyRequest("GET", "/admin")), true)
}

// A DENY on /admin holds against a path that reaches /admin through dot segments: Istio normalises
// request paths before authorization (meshConfig pathNormalization BASE, its default).
func TestEnvoyDenyNormalisedPath(t *testing.T) {
	p := envoyProxy(t, envoyPolicy("no-admin", "DENY", "", `[{to: [{operation: {paths: ["/admin*"]}}]}]`), "", envoyDeadPort(t))
	envoyWant(t, envoyEvaluate(t, p, envoyRequest("GET", "/admin")), false)
	envoyWant(t, envoyEvaluate(t, p, envoyRequest("GET", "/public/../admin")), false)
}

// An ALLOW policy holds on the workload's port even when some service of the mesh uses that port too.
func TestEnvoyInboundPortSharedWithAService(t *testing.T) {
	catalog := `
---
apiVersion: v1
kind: Service
metadata: {name: catalog, namespace: shop}
spec:
  clusterIP: 10.96.0.30
  ports: [{name: http, port: 8080}]
`
	p := envoyProxy(t, catalog+envoyPolicy("sleep-only", "ALLOW", "",
		`[{from: [{source: {principals: ["cluster.local/ns/shop/sa/sleep"]}}]}]`), "", envoyDeadPort(t))
	envoyWant(t, envoyEvaluate(t, p, envoyRequest("GET", "/")), true)
	other := envoyRequest("GET", "/")
	other.TLS.Client.URISANs = []string{"spiffe://cluster.local/ns/other/sa/intruder"}
	envoyWant(t, envoyEvaluate(t, p, other), false)
	plaintext := envoyRequest("GET", "/")
	plaintext.TLS = nil
	envoyWant(t, envoyEvaluate(t, p, plaintext), false)
}

// HTTP rules hold on a port of unknown protocol: Istio sniffs HTTP there (plaintext HTTP/1.1 and h2c,
// and over mTLS the istio-http ALPN its clients send) and applies the path rules.
func TestEnvoySniffedPort(t *testing.T) {
	legacy := `
---
apiVersion: v1
kind: Service
metadata: {name: frontend-legacy, namespace: shop}
spec:
  clusterIP: 10.96.0.21
  selector: {app: frontend}
  ports: [{name: legacy, port: 9090, targetPort: 9091}]
`
	p := envoyProxy(t, legacy+envoyPolicy("no-admin", "DENY", "", `[{to: [{operation: {paths: ["/admin*"]}}]}]`), "", envoyDeadPort(t))
	for _, tc := range []struct {
		name  string
		tls   []string // ALPN over mTLS; nil for plaintext
		http2 bool
	}{
		{"plaintext HTTP/1.1", nil, false},
		{"plaintext h2c", nil, true},
		{"mTLS istio-http/1.1", []string{"istio-http/1.1", "istio", "http/1.1"}, false},
		{"mTLS istio-h2", []string{"istio-h2", "istio", "h2"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for path, allowed := range map[string]bool{"/admin": false, "/": true} {
				r := envoyRequest("GET", path)
				r.DestinationPort, r.HTTP2 = 9091, tc.http2
				if tc.tls == nil {
					r.TLS = nil
				} else {
					r.TLS.ALPN = tc.tls
				}
				envoyWant(t, envoyEvaluate(t, p, r), allowed)
			}
		})
	}
}

// ipBlocks match the connection's peer; remoteIpBlocks the client address the sidecar takes from
// X-Forwarded-For (the last entry, with no trusted hops configured).
func TestEnvoyIPBlocks(t *testing.T) {
	for _, tc := range []struct {
		name, source string
		xff          string
		allowed      bool
	}{
		{"ipBlocks: peer inside", `ipBlocks: ["10.1.0.0/16"]`, "", true},
		{"ipBlocks: X-Forwarded-For does not count", `ipBlocks: ["192.168.0.0/16"]`, "192.168.1.7", false},
		{"remoteIpBlocks: from X-Forwarded-For", `remoteIpBlocks: ["192.168.0.0/16"]`, "1.2.3.4, 192.168.1.7", true},
		{"remoteIpBlocks: only the last entry counts", `remoteIpBlocks: ["192.168.0.0/16"]`, "192.168.1.7, 1.2.3.4", false},
		{"remoteIpBlocks: without the header, the peer", `remoteIpBlocks: ["10.1.0.0/16"]`, "", true},
		{"notIpBlocks", `notIpBlocks: ["10.1.0.1/32"]`, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := envoyProxy(t, envoyPolicy("ips", "ALLOW", "", `[{from: [{source: {`+tc.source+`}}]}]`), "", envoyDeadPort(t))
			r := envoyRequest("GET", "/")
			if tc.xff != "" {
				r.Headers = map[string][]string{"x-forwarded-for": {tc.xff}}
			}
			envoyWant(t, envoyEvaluate(t, p, r), tc.allowed)
		})
	}
}

// On a TCP port the rules are checked per connection by the network RBAC filter: principals hold over
// mTLS, and a plaintext connection has none.
func TestEnvoyTCPPrincipals(t *testing.T) {
	db := `
---
apiVersion: v1
kind: Service
metadata: {name: frontend-db, namespace: shop}
spec:
  clusterIP: 10.96.0.22
  selector: {app: frontend}
  ports: [{name: tcp-db, port: 5432, targetPort: 5433}]
`
	p := envoyProxy(t, db+envoyPolicy("sleep-only", "ALLOW", "",
		`[{from: [{source: {principals: ["cluster.local/ns/shop/sa/sleep"]}}]}]`), "", envoyDeadPort(t))
	conn := func(principal string, tls bool) envoymodel.Request {
		r := envoyRequest("", "/")
		r.DestinationPort = 5433
		r.TLS.ALPN = []string{"istio-peer-exchange", "istio"}
		r.TLS.Client.URISANs = []string{principal}
		if !tls {
			r.TLS = nil
		}
		return r
	}
	envoyWant(t, envoyEvaluate(t, p, conn(envoySleepID, true)), true)
	envoyWant(t, envoyEvaluate(t, p, conn("spiffe://cluster.local/ns/other/sa/x", true)), false)
	envoyWant(t, envoyEvaluate(t, p, conn("", false)), false)
}

// Mesh mTLS admits only certificates of the mesh's trust domain: a workload of another trust domain
// signed by the same root cannot pass itself off under a policy, nor without one.
func TestEnvoyForeignTrustDomain(t *testing.T) {
	for name, policies := range map[string]string{
		"no policy":           "",
		"ALLOW any principal": envoyPolicy("any", "ALLOW", "", `[{from: [{source: {principals: ["*"]}}]}]`),
	} {
		t.Run(name, func(t *testing.T) {
			p := envoyProxy(t, policies, "", envoyDeadPort(t))
			envoyWant(t, envoyEvaluate(t, p, envoyRequest("GET", "/")), true)
			r := envoyRequest("GET", "/")
			r.TLS.Client.URISANs = []string{"spiffe://elsewhere.example/ns/shop/sa/sleep"}
			res := envoyEvaluate(t, p, r)
			envoyWant(t, res, false)
			if res.Decision != envoymodel.ConnectionClosed {
				t.Errorf("want the handshake to fail: %s", res)
			}
		})
	}
}
