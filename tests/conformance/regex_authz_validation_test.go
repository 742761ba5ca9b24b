package conformance

import (
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"
	"istio.io/istio/pkg/config"
	"istio.io/istio/pkg/config/validation"
	"sigs.k8s.io/yaml"

	sconfig "github.com/sextantmesh/sextant/pilot/config"
)

// sameVerdict checks that Sextant refuses spec (YAML of a kind's spec) exactly when Istio's own validation does.
func sameVerdict(t *testing.T, kind sconfig.Kind, spec proto.Message, validate validation.ValidateFunc, doc string) {
	t.Helper()
	js, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if err := protojson.Unmarshal(js, spec); err != nil {
		t.Fatalf("%s: %v", doc, err)
	}
	_, istioErr := validate(config.Config{Meta: config.Meta{Name: "x", Namespace: "shop"}, Spec: spec})
	sextantErr := sconfig.Validate(&sconfig.Config{Key: sconfig.Key{Kind: kind, Namespace: "shop", Name: "x"}, Spec: spec})
	if (istioErr != nil) != (sextantErr != nil) {
		t.Errorf("%s\nIstio's validation says %v\nSextant's %v", doc, istioErr, sextantErr)
	}
}

// TestRouteRegexValidationAsIstio: a regex in every field of an HTTP route that holds one, and the rewrites,
// are refused by Sextant exactly when Istio's validation refuses them.
func TestRouteRegexValidationAsIstio(t *testing.T) {
	regexes := []string{`/admin(/.*)?`, `(?=admin).*`, `a{1000}`, `a{1001}`, `(`, `\1`, `(?i)on`, `*`, `[[:alpha:]]+`, `\pL`, `\C`}
	for _, re := range regexes {
		q := `"` + re + `"`
		if re == `\1` || re == `\pL` || re == `\C` {
			q = `'` + re + `'`
		}
		for _, route := range []string{
			`match: [{uri: {regex: ` + q + `}}]`,
			`match: [{scheme: {regex: ` + q + `}}]`,
			`match: [{method: {regex: ` + q + `}}]`,
			`match: [{authority: {regex: ` + q + `}}]`,
			`match: [{headers: {x-a: {regex: ` + q + `}}}]`,
			`match: [{queryParams: {a: {regex: ` + q + `}}}]`,
			`match: [{withoutHeaders: {x-a: {regex: ` + q + `}}}]`,
			`rewrite: {uriRegexRewrite: {match: ` + q + `, rewrite: /x}}`,
			`corsPolicy: {allowOrigins: [{regex: ` + q + `}]}`,
		} {
			sameVerdict(t, sconfig.VirtualService, &networking.VirtualService{}, validation.ValidateVirtualService,
				"hosts: [web]\nhttp:\n- "+route+"\n  route: [{destination: {host: web}}]\n")
		}
	}
	for _, rewrite := range []string{`{}`, `{uri: /a}`, `{authority: a}`, `{uri: /a, uriRegexRewrite: {match: "^/b", rewrite: /c}}`,
		`{uriRegexRewrite: {match: "^/b"}}`, `{uriRegexRewrite: {rewrite: /c}}`} {
		sameVerdict(t, sconfig.VirtualService, &networking.VirtualService{}, validation.ValidateVirtualService,
			"hosts: [web]\nhttp:\n- rewrite: "+rewrite+"\n  route: [{destination: {host: web}}]\n")
	}
}

// TestAuthorizationRuleValidationAsIstio: a rule's from, to and when are refused by Sextant exactly when
// Istio's validation refuses them.
func TestAuthorizationRuleValidationAsIstio(t *testing.T) {
	rules := []string{
		`from: [{source: {}}]`, `to: [{operation: {}}]`, `from: [{source: {principals: [a]}}]`, `to: [{operation: {methods: [GET]}}]`,
		`from: [{source: {principals: [""]}}]`, `from: [{source: {remoteIpBlocks: [10.0.0.0/33]}}]`,
		`from: [{source: {notRemoteIpBlocks: [host]}}]`, `from: [{source: {namespaces: [a], serviceAccounts: [a/b]}}]`,
		`from: [{source: {serviceAccounts: ["a/*"]}}]`, `from: [{source: {serviceAccounts: [a/b/c]}}]`,
		`from: [{source: {notServiceAccounts: [/b]}}]`,
		`from: [{source: {trustDomains: ["a*b"]}}]`, `from: [{source: {trustDomains: ["*a"]}}]`, `from: [{source: {notTrustDomains: [a/b]}}]`,
		`to: [{operation: {methods: [GET, ""]}}]`, `to: [{operation: {notPorts: ["70000"]}}]`, `to: [{operation: {ports: ["80"]}}]`,
		`to: [{operation: {paths: ["/a/{**}/{*}"]}}]`, `to: [{operation: {notPaths: ["/a/{x}"]}}]`, `to: [{operation: {paths: ["/{*}/a b"]}}]`,
		`to: [{operation: {paths: ["/api/{*}/items/{**}"]}}]`,
		`when: [{key: request.headers, values: [a]}]`, `when: [{key: "request.headers[]", values: [a]}]`,
		`when: [{key: "request.headers[x-a]", values: [a]}]`, `when: [{key: "request.auth.claims[iss", values: [a]}]`,
		`when: [{key: "request.auth.claims[a][b]", values: [a]}]`, `when: [{key: experimental.envoy.filters.a, values: [a]}]`,
		`when: [{key: "experimental.envoy.filters.a[b]", values: [a]}]`, `when: [{key: source.ips, values: [10.0.0.1]}]`,
		`when: [{key: destination.namespace, values: [a]}]`, `when: [{key: "destination.labels[app]", values: [a]}]`,
		`when: [{key: destination.user, values: [a]}]`, `when: [{key: source.ip, values: [10.0.0.300]}]`,
		`when: [{key: remote.ip, notValues: [10.0.0.1, 1.2.3.4/40]}]`, `when: [{key: destination.port, values: [http]}]`,
		`when: [{key: source.serviceAccount, values: ["*"]}]`, `when: [{key: source.trustDomain, notValues: ["**"]}]`,
		`when: [{key: source.namespace, values: [a, ""]}]`, `when: [{key: source.namespace}]`, `when: [{key: connection.sni, values: [a]}]`,
		`when: [{key: source.principal, values: [a]}]`, `when: [{key: request.auth.presenter, values: [a]}]`,
	}
	for _, rule := range rules {
		for _, action := range []string{"ALLOW", "DENY"} {
			sameVerdict(t, sconfig.AuthorizationPolicy, &security.AuthorizationPolicy{}, validation.ValidateAuthorizationPolicy,
				"action: "+action+"\nrules:\n- "+rule+"\n")
		}
	}
}
