package enforcement

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"fmt"
	"math/big"
	"testing"
)

// What gRPC cannot do, from grpc-go v1.85.0's source (each row below asserts what it does instead):
//   - PERMISSIVE cannot accept both plaintext and mTLS on one port: a server-side filter chain can match
//     only transport_protocol "raw_buffer" or nothing (internal/xds/xdsclient/xdsresource/unmarshal_lds.go,
//     addFilterChainsForTransportProtocols), so it cannot tell a TLS ClientHello from plaintext. Sextant,
//     like istiod, serves PERMISSIVE as plaintext, or as mTLS when the workload has
//     security.istio.io/tlsMode=istio (its clients then send mTLS).
//   - AUDIT: gRPC's RBAC filter ignores the LOG action (internal/xds/httpfilter/rbac/rbac.go, "as if RBAC
//     was not configured") and has no access log, so audited requests pass unmarked.
//   - CUSTOM: a proxyless server has no ext_authz client here, so Sextant makes CUSTOM policies deny what
//     their rules match (fail closed).
//   - JWT: grpc-go has no jwt_authn filter and its RBAC never matches metadata (internal/xds/rbac/matchers.go,
//     Principal_Metadata: "neverMatcher"), so requestPrincipals and request.auth.* never match, and a
//     RequestAuthentication makes Sextant deny requests that carry a token (none can be validated).
//   - Every gRPC request is a POST (A41: ":method can be hard-coded to POST").

// grpcRow is one entry of the matrix: the Istio YAML applied, and the calls with what Istio's
// documentation says they meet.
type grpcRow struct {
	name   string
	yaml   string
	labels string // extra pod labels, YAML lines under metadata.labels
	calls  []grpcCall
}

// grpcJWKS is a key set with one RSA public key (no token in these rows is signed by it).
var grpcJWKS = func() string {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	enc := base64.RawURLEncoding
	e := big.NewInt(int64(key.E)).Bytes()
	return fmt.Sprintf(`{"keys":[{"kty":"RSA","alg":"RS256","use":"sig","kid":"k1","n":%q,"e":%q}]}`,
		enc.EncodeToString(key.N.Bytes()), enc.EncodeToString(e))
}()

// grpcStrict is the namespace-wide PeerAuthentication STRICT.
const grpcStrict = `apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata:
  name: default
  namespace: default
spec:
  mtls:
    mode: STRICT
`

// grpcPolicy is an AuthorizationPolicy on the echo workload with the given action and rules (YAML at the
// indentation of spec's fields).
func grpcPolicy(name, action, rules string) string {
	return `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: ` + name + `
  namespace: default
spec:
  selector:
    matchLabels:
      app: echo
  action: ` + action + `
` + rules
}

// grpcPeerAuthn is a PeerAuthentication on the echo workload.
func grpcPeerAuthn(mode string) string {
	return `apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata:
  name: echo
  namespace: default
spec:
  selector:
    matchLabels:
      app: echo
  mtls:
    mode: ` + mode + `
`
}

const grpcDoc = "---\n"

var grpcMatrix = []grpcRow{
	{
		name:  "no policy allows",
		calls: []grpcCall{{method: "Check", want: grpcAllowed}, {method: "List", from: "127.0.0.2", want: grpcAllowed}},
	},
	{
		name:  "ALLOW without rules allows nothing",
		yaml:  grpcPolicy("allow-nothing", "ALLOW", ""),
		calls: []grpcCall{{method: "Check", want: grpcDenied}},
	},
	{
		name:  "ALLOW with an empty rule allows everything",
		yaml:  grpcPolicy("allow-all", "ALLOW", "  rules:\n  - {}\n"),
		calls: []grpcCall{{method: "Check", want: grpcAllowed}, {method: "List", want: grpcAllowed}},
	},
	{
		name: "ALLOW exact path: that method only",
		yaml: grpcPolicy("allow-check", "ALLOW", `  rules:
  - to:
    - operation:
        paths: ["/grpc.health.v1.Health/Check"]
`),
		calls: []grpcCall{{method: "Check", want: grpcAllowed}, {method: "List", want: grpcDenied}},
	},
	{
		name: "ALLOW path prefix: the whole service",
		yaml: grpcPolicy("allow-health", "ALLOW", `  rules:
  - to:
    - operation:
        paths: ["/grpc.health.v1.Health/*"]
`),
		calls: []grpcCall{{method: "Check", want: grpcAllowed}, {method: "List", want: grpcAllowed}},
	},
	{
		name: "ALLOW path suffix",
		yaml: grpcPolicy("allow-list", "ALLOW", `  rules:
  - to:
    - operation:
        paths: ["*/List"]
`),
		calls: []grpcCall{{method: "List", want: grpcAllowed}, {method: "Check", want: grpcDenied}},
	},
	{
		name: "ALLOW with no matching rule denies",
		yaml: grpcPolicy("allow-other", "ALLOW", `  rules:
  - to:
    - operation:
        paths: ["/other.Service/*"]
`),
		calls: []grpcCall{{method: "Check", want: grpcDenied}, {method: "List", want: grpcDenied}},
	},
	{
		name: "ALLOW notPaths",
		yaml: grpcPolicy("allow-not-list", "ALLOW", `  rules:
  - to:
    - operation:
        notPaths: ["/grpc.health.v1.Health/List"]
`),
		calls: []grpcCall{{method: "Check", want: grpcAllowed}, {method: "List", want: grpcDenied}},
	},
	{
		name: "DENY exact path; the rest stays allowed",
		yaml: grpcPolicy("deny-check", "DENY", `  rules:
  - to:
    - operation:
        paths: ["/grpc.health.v1.Health/Check"]
`),
		calls: []grpcCall{{method: "Check", want: grpcDenied}, {method: "List", want: grpcAllowed}},
	},
	{
		name: "DENY takes precedence over ALLOW",
		yaml: grpcPolicy("allow-all", "ALLOW", "  rules:\n  - {}\n") + grpcDoc + grpcPolicy("deny-list", "DENY", `  rules:
  - to:
    - operation:
        paths: ["/grpc.health.v1.Health/List"]
`),
		calls: []grpcCall{{method: "List", want: grpcDenied}, {method: "Check", want: grpcAllowed}},
	},
	{
		name: "methods: gRPC requests are POST",
		yaml: grpcPolicy("allow-post", "ALLOW", `  rules:
  - to:
    - operation:
        methods: ["POST"]
`),
		calls: []grpcCall{{method: "Check", want: grpcAllowed}},
	},
	{
		name: "methods: ALLOW GET only denies gRPC",
		yaml: grpcPolicy("allow-get", "ALLOW", `  rules:
  - to:
    - operation:
        methods: ["GET"]
`),
		calls: []grpcCall{{method: "Check", want: grpcDenied}},
	},
	{
		name: "headers: ALLOW when request.headers matches",
		yaml: grpcPolicy("allow-alice", "ALLOW", `  rules:
  - when:
    - key: request.headers[x-user]
      values: ["alice"]
`),
		calls: []grpcCall{
			{method: "Check", headers: []string{"x-user", "alice"}, want: grpcAllowed},
			{method: "Check", headers: []string{"x-user", "bob"}, want: grpcDenied},
			{method: "Check", want: grpcDenied},
		},
	},
	{
		name: "headers: DENY on a header prefix",
		yaml: grpcPolicy("deny-debug", "DENY", `  rules:
  - when:
    - key: request.headers[x-debug]
      values: ["on*"]
`),
		calls: []grpcCall{
			{method: "Check", headers: []string{"x-debug", "on-please"}, want: grpcDenied},
			{method: "Check", headers: []string{"x-debug", "off"}, want: grpcAllowed},
		},
	},
	{
		name: "ipBlocks: ALLOW one source address",
		yaml: grpcPolicy("allow-local", "ALLOW", `  rules:
  - from:
    - source:
        ipBlocks: ["127.0.0.1/32"]
`),
		calls: []grpcCall{{method: "Check", from: "127.0.0.1", want: grpcAllowed}, {method: "Check", from: "127.0.0.2", want: grpcDenied}},
	},
	{
		name: "remoteIpBlocks: DENY one source address",
		yaml: grpcPolicy("deny-two", "DENY", `  rules:
  - from:
    - source:
        remoteIpBlocks: ["127.0.0.2"]
`),
		calls: []grpcCall{{method: "Check", from: "127.0.0.2", want: grpcDenied}, {method: "Check", from: "127.0.0.1", want: grpcAllowed}},
	},
	{
		name: "notIpBlocks: DENY all but one block",
		yaml: grpcPolicy("deny-others", "DENY", `  rules:
  - from:
    - source:
        notIpBlocks: ["127.0.0.0/31"]
`),
		calls: []grpcCall{{method: "Check", from: "127.0.0.1", want: grpcAllowed}, {method: "Check", from: "127.0.0.2", want: grpcDenied}},
	},
	{
		name: "principals over mTLS",
		yaml: grpcStrict + grpcDoc + grpcPolicy("allow-client", "ALLOW", `  rules:
  - from:
    - source:
        principals: ["cluster.local/ns/default/sa/client"]
`),
		calls: []grpcCall{
			{method: "Check", identity: "default/client", want: grpcAllowed},
			{method: "Check", identity: "default/other", want: grpcDenied},
		},
	},
	{
		name: "principals: a trailing wildcard",
		yaml: grpcStrict + grpcDoc + grpcPolicy("allow-prefix", "ALLOW", `  rules:
  - from:
    - source:
        principals: ["cluster.local/ns/default/sa/cli*"]
`),
		calls: []grpcCall{
			{method: "Check", identity: "default/client", want: grpcAllowed},
			{method: "Check", identity: "default/server", want: grpcDenied},
		},
	},
	{
		name: "namespaces over mTLS",
		yaml: grpcStrict + grpcDoc + grpcPolicy("allow-default", "ALLOW", `  rules:
  - from:
    - source:
        namespaces: ["default"]
`),
		calls: []grpcCall{
			{method: "Check", identity: "default/client", want: grpcAllowed},
			{method: "Check", identity: "other/client", want: grpcDenied},
		},
	},
	{
		name: "namespaces need an identity: a plaintext caller has none",
		yaml: grpcPolicy("allow-default", "ALLOW", `  rules:
  - from:
    - source:
        namespaces: ["default"]
`),
		calls: []grpcCall{{method: "Check", want: grpcDenied}},
	},
	{
		name: "notNamespaces: DENY callers from elsewhere",
		yaml: grpcStrict + grpcDoc + grpcPolicy("deny-foreign", "DENY", `  rules:
  - from:
    - source:
        notNamespaces: ["default"]
`),
		calls: []grpcCall{
			{method: "Check", identity: "other/client", want: grpcDenied},
			{method: "Check", identity: "default/client", want: grpcAllowed},
		},
	},
	{
		name: "principal and path together",
		yaml: grpcStrict + grpcDoc + grpcPolicy("allow-client-check", "ALLOW", `  rules:
  - from:
    - source:
        principals: ["cluster.local/ns/default/sa/client"]
    to:
    - operation:
        paths: ["/grpc.health.v1.Health/Check"]
`),
		calls: []grpcCall{
			{method: "Check", identity: "default/client", want: grpcAllowed},
			{method: "List", identity: "default/client", want: grpcDenied},
			{method: "Check", identity: "default/other", want: grpcDenied},
		},
	},
	{
		name: "PeerAuthentication STRICT refuses plaintext",
		yaml: grpcStrict,
		calls: []grpcCall{
			{method: "Check", want: grpcRefused},
			{method: "Check", identity: "default/client", want: grpcAllowed},
		},
	},
	{
		name: "PeerAuthentication STRICT on the workload overrides a namespace DISABLE",
		yaml: grpcPeerAuthn("STRICT") + grpcDoc + `apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata:
  name: default
  namespace: default
spec:
  mtls:
    mode: DISABLE
`,
		calls: []grpcCall{{method: "Check", want: grpcRefused}, {method: "Check", identity: "default/client", want: grpcAllowed}},
	},
	{
		// gRPC serves one chain per port: PERMISSIVE is plaintext (see the top of this file).
		name:  "PeerAuthentication PERMISSIVE accepts plaintext",
		yaml:  grpcPeerAuthn("PERMISSIVE"),
		calls: []grpcCall{{method: "Check", want: grpcAllowed}, {method: "Check", identity: "default/client", want: grpcRefused}},
	},
	{
		name:   "PeerAuthentication PERMISSIVE with auto mTLS accepts mTLS",
		yaml:   grpcPeerAuthn("PERMISSIVE"),
		labels: "\n    security.istio.io/tlsMode: istio",
		calls:  []grpcCall{{method: "Check", identity: "default/client", want: grpcAllowed}, {method: "Check", want: grpcRefused}},
	},
	{
		name:  "PeerAuthentication DISABLE is plaintext only",
		yaml:  grpcPeerAuthn("DISABLE"),
		calls: []grpcCall{{method: "Check", want: grpcAllowed}, {method: "Check", identity: "default/client", want: grpcRefused}},
	},
	{
		name: "CUSTOM with a provider gRPC cannot consult fails closed",
		yaml: grpcPolicy("ext", "CUSTOM", `  provider:
    name: ext-authz
  rules:
  - to:
    - operation:
        paths: ["/grpc.health.v1.Health/List"]
`),
		calls: []grpcCall{{method: "List", want: grpcDenied}, {method: "Check", want: grpcAllowed}},
	},
	{
		// No JWT filter in gRPC (see the top of this file): a token cannot be told valid, so it is refused.
		name: "RequestAuthentication: a token gRPC cannot validate is refused, no token passes",
		yaml: `apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata:
  name: jwt
  namespace: default
spec:
  selector:
    matchLabels:
      app: echo
  jwtRules:
  - issuer: https://issuer.example
    jwks: '` + grpcJWKS + `'
  - issuer: https://other.example
    jwks: '` + grpcJWKS + `'
    fromHeaders:
    - name: x-jwt
`,
		calls: []grpcCall{
			{method: "Check", headers: []string{"authorization", "Bearer eyJhbGciOiJSUzI1NiJ9.e30.c2ln"}, want: grpcDenied},
			{method: "Check", headers: []string{"x-jwt", "eyJhbGciOiJSUzI1NiJ9.e30.c2ln"}, want: grpcDenied},
			{method: "Check", want: grpcAllowed},
		},
	},
	{
		name: "requestPrincipals never match without a JWT filter: ALLOW denies",
		yaml: grpcPolicy("allow-jwt", "ALLOW", `  rules:
  - from:
    - source:
        requestPrincipals: ["*"]
`),
		calls: []grpcCall{{method: "Check", want: grpcDenied}},
	},
	{
		// gRPC ignores RBAC's LOG action (see the top of this file): AUDIT denies nothing.
		name: "AUDIT denies nothing",
		yaml: grpcPolicy("audit", "AUDIT", `  rules:
  - to:
    - operation:
        paths: ["/grpc.health.v1.Health/Check"]
`),
		calls: []grpcCall{{method: "Check", want: grpcAllowed}},
	},
}

// TestGRPCEnforcementMatrix runs each row against a real xDS gRPC server configured by Sextant.
func TestGRPCEnforcementMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Sextant and gRPC servers per row")
	}
	total := 0
	for _, row := range grpcMatrix {
		t.Run(row.name, func(t *testing.T) {
			m := startGRPCMesh(t, row.yaml, row.labels)
			for _, c := range row.calls {
				got, err := m.do(c)
				if got != c.want {
					t.Errorf("%s: %s, want %s (%v)", c, got, c.want, err)
				} else {
					t.Logf("%s: %s", c, got)
				}
			}
		})
		total += len(row.calls)
	}
	t.Logf("%d rows, %d requests", len(grpcMatrix), total)
}
