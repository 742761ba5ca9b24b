package authpolicy

import (
	"bytes"
	"encoding/json"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	rbachttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	rbacnet "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/encoding/protojson"
	security "istio.io/api/security/v1beta1"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/tests/rbactest"
)

// rbacPolicies parses AuthorizationPolicies (YAML documents) and groups them by action, as the model does.
func rbacPolicies(t *testing.T, yaml string) model.AuthorizationPolicies {
	t.Helper()
	docs, err := config.SplitDocuments([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	var out model.AuthorizationPolicies
	for i, doc := range docs {
		if config.IsEmptyDocument(doc) {
			continue
		}
		c, err := config.Parse(doc, "test.yaml", i, "shop")
		if err != nil {
			t.Fatal(err)
		}
		switch c.Spec.(*security.AuthorizationPolicy).Action {
		case security.AuthorizationPolicy_ALLOW:
			out.Allow = append(out.Allow, c)
		case security.AuthorizationPolicy_DENY:
			out.Deny = append(out.Deny, c)
		case security.AuthorizationPolicy_AUDIT:
			out.Audit = append(out.Audit, c)
		case security.AuthorizationPolicy_CUSTOM:
			out.Custom = append(out.Custom, c)
		}
	}
	return out
}

// httpRules and tcpRules translate and decode the filters, checking each with ValidateAll.
func httpRules(t *testing.T, p model.AuthorizationPolicies, td string) ([]*rbacpb.RBAC, []string) {
	t.Helper()
	filters, notes := HTTPFilters(p, Env{TrustDomain: td})
	var out []*rbacpb.RBAC
	for _, f := range filters {
		if f.Name != httpRBACFilter {
			t.Errorf("filter name %q", f.Name)
		}
		r := &rbachttp.RBAC{}
		if err := f.GetTypedConfig().UnmarshalTo(r); err != nil {
			t.Fatal(err)
		}
		if err := r.ValidateAll(); err != nil {
			t.Errorf("http RBAC: %v", err)
		}
		out = append(out, r.Rules)
	}
	return out, notes
}

func tcpRules(t *testing.T, p model.AuthorizationPolicies, td string) ([]*rbacpb.RBAC, []string) {
	t.Helper()
	filters, notes := TCPFilters(p, Env{TrustDomain: td})
	var out []*rbacpb.RBAC
	for _, f := range filters {
		if f.Name != tcpRBACFilter {
			t.Errorf("filter name %q", f.Name)
		}
		r := &rbacnet.RBAC{}
		if err := f.GetTypedConfig().UnmarshalTo(r); err != nil {
			t.Fatal(err)
		}
		if err := r.ValidateAll(); err != nil {
			t.Errorf("tcp RBAC: %v", err)
		}
		out = append(out, r.Rules)
	}
	return out, notes
}

// req is a connection or request as the RBAC filters see it.
type req = rbactest.Request

func spiffe(ns, sa string) string { return "spiffe://cluster.local/ns/" + ns + "/sa/" + sa }

const reviewsPolicies = `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow}
spec:
  action: ALLOW
  rules:
  - from: [{source: {principals: [cluster.local/ns/shop/sa/frontend]}}]
    to: [{operation: {methods: [GET, HEAD], paths: ["/reviews/*", /health]}}]
  - from: [{source: {namespaces: [monitoring]}}]
    to: [{operation: {paths: ["*/metrics"], ports: ["9080"]}}]
  - from: [{source: {ipBlocks: [10.2.0.0/16, 192.168.1.1]}}]
    to: [{operation: {ports: ["9090"], hosts: ["*.example.com"]}}]
    when: [{key: "request.headers[x-api-key]", values: ["*"]}]
  - from: [{source: {principals: ["*"], notPrincipals: [cluster.local/ns/shop/sa/banned]}}]
    to: [{operation: {ports: ["9091"], notMethods: [DELETE]}}]
    when:
    - {key: source.ip, notValues: [10.9.9.9]}
    - {key: destination.port, values: ["9091"]}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny}
spec:
  action: DENY
  rules:
  - from: [{source: {notNamespaces: [shop]}}]
    to: [{operation: {paths: ["/admin*"]}}]
  - to: [{operation: {methods: [DELETE], ports: ["9090"]}}]
`

func TestRBACHTTP(t *testing.T) {
	rules, notes := httpRules(t, rbacPolicies(t, reviewsPolicies), "cluster.local")
	if len(notes) != 0 {
		t.Errorf("notes %v", notes)
	}
	if len(rules) != 2 || rules[0].Action != rbacpb.RBAC_DENY || rules[1].Action != rbacpb.RBAC_ALLOW {
		t.Fatalf("want DENY then ALLOW, got %v", rules)
	}
	frontend, banned := spiffe("shop", "frontend"), spiffe("shop", "banned")
	monitor, outsider := spiffe("monitoring", "prometheus"), spiffe("other", "x")
	for _, tc := range []struct {
		name string
		r    req
		want bool
	}{
		{"principal, method and path prefix", req{Principal: frontend, Port: 9080, Method: "GET", Path: "/reviews/1"}, true},
		{"second method", req{Principal: frontend, Port: 9080, Method: "HEAD", Path: "/health"}, true},
		{"wrong method", req{Principal: frontend, Port: 9080, Method: "POST", Path: "/reviews/1"}, false},
		{"wrong path", req{Principal: frontend, Port: 9080, Method: "GET", Path: "/other"}, false},
		{"wrong principal", req{Principal: spiffe("shop", "other"), Port: 9080, Method: "GET", Path: "/reviews/1"}, false},
		{"plaintext", req{Port: 9080, Method: "GET", Path: "/reviews/1"}, false},
		{"namespace, path suffix, port", req{Principal: monitor, Port: 9080, Method: "GET", Path: "/app/metrics"}, true},
		{"namespace on another port", req{Principal: monitor, Port: 9081, Method: "GET", Path: "/app/metrics"}, false},
		{"namespace regex is anchored", req{Principal: spiffe("monitoring-x", "p"), Port: 9080, Path: "/metrics"}, false},
		{"ip block, host suffix, header present",
			req{IP: "10.2.3.4", Port: 9090, Host: "API.example.com", Headers: map[string]string{"x-api-key": "k"}}, true},
		{"single ip is a /32", req{IP: "192.168.1.1", Port: 9090, Host: "a.example.com", Headers: map[string]string{"x-api-key": "k"}}, true},
		{"ip outside", req{IP: "192.168.1.2", Port: 9090, Host: "a.example.com", Headers: map[string]string{"x-api-key": "k"}}, false},
		{"header missing", req{IP: "10.2.3.4", Port: 9090, Host: "a.example.com"}, false},
		{"host mismatch", req{IP: "10.2.3.4", Port: 9090, Host: "example.org", Headers: map[string]string{"x-api-key": "k"}}, false},
		{"any principal, not banned, not DELETE, when", req{Principal: outsider, IP: "10.0.0.1", Port: 9091, Method: "GET", Path: "/"}, true},
		{"notPrincipals", req{Principal: banned, IP: "10.0.0.1", Port: 9091, Method: "GET", Path: "/"}, false},
		{"notMethods", req{Principal: outsider, IP: "10.0.0.1", Port: 9091, Method: "DELETE", Path: "/"}, false},
		{"when notValues source.ip", req{Principal: outsider, IP: "10.9.9.9", Port: 9091, Method: "GET", Path: "/"}, false},
		{"any principal needs mTLS", req{IP: "10.0.0.1", Port: 9091, Method: "GET", Path: "/"}, false},
		{"DENY outside namespace on /admin", req{Principal: outsider, IP: "10.0.0.1", Port: 9091, Method: "GET", Path: "/admin/x"}, false},
		{"DENY spares the namespace", req{Principal: spiffe("shop", "ok"), IP: "10.0.0.1", Port: 9091, Method: "GET", Path: "/admin/x"}, true},
		{"DENY method and port", req{IP: "10.2.3.4", Port: 9090, Method: "DELETE", Host: "a.example.com",
			Headers: map[string]string{"x-api-key": "k"}}, false},
	} {
		if got := rbactest.Allowed(t, rules, tc.r); got != tc.want {
			t.Errorf("%s: allowed %v, want %v", tc.name, got, tc.want)
		}
	}
	rbacGolden(t, "rbac_http", rules)
}

// TestRBACTCP: on TCP an ALLOW rule with HTTP-only parts allows nothing; a DENY rule loses them and denies more.
func TestRBACTCP(t *testing.T) {
	rules, notes := tcpRules(t, rbacPolicies(t, reviewsPolicies), "cluster.local")
	wantNotes := []string{
		`tcp: shop/deny rule 0: paths "/admin*" dropped (the rule denies more): HTTP-only, not checkable on a TCP connection`,
		`tcp: shop/deny rule 1: methods "DELETE" dropped (the rule denies more): HTTP-only, not checkable on a TCP connection`,
		`tcp: shop/allow rule 0 (ALLOW) skipped, it allows nothing: methods "GET": HTTP-only, not checkable on a TCP connection`,
		`tcp: shop/allow rule 1 (ALLOW) skipped, it allows nothing: paths "*/metrics": HTTP-only, not checkable on a TCP connection`,
		`tcp: shop/allow rule 2 (ALLOW) skipped, it allows nothing: request.headers[x-api-key] "*": HTTP-only, not checkable on a TCP connection`,
		`tcp: shop/allow rule 3 (ALLOW) skipped, it allows nothing: methods (not) "DELETE": HTTP-only, not checkable on a TCP connection`,
	}
	if !slices.Equal(notes, wantNotes) {
		t.Errorf("notes:\n%s\nwant:\n%s", strings.Join(notes, "\n"), strings.Join(wantNotes, "\n"))
	}
	if len(rules) != 2 || len(rules[1].Policies) != 0 {
		t.Fatalf("want DENY and an empty ALLOW, got %v", rules)
	}
	for _, tc := range []struct {
		name string
		r    req
	}{
		{"the frontend on its HTTP rule", req{Principal: spiffe("shop", "frontend"), Port: 9080}},
		{"any principal on 9091", req{Principal: spiffe("other", "x"), IP: "10.0.0.1", Port: 9091}},
	} {
		if rbactest.Allowed(t, rules, tc.r) {
			t.Errorf("%s: allowed on TCP", tc.name)
		}
	}
	// The DENY rules without their HTTP parts: everything outside shop, and everything on 9090.
	deny := rules[:1]
	if rbactest.Allowed(t, deny, req{Principal: spiffe("other", "x"), Port: 1}) ||
		!rbactest.Allowed(t, deny, req{Principal: spiffe("shop", "x"), Port: 1}) ||
		rbactest.Allowed(t, deny, req{Principal: spiffe("shop", "x"), Port: 9090}) {
		t.Error("DENY on TCP does not deny outside shop and on 9090 only")
	}

	// What L4 can check survives.
	l4 := rbacPolicies(t, `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: db}
spec:
  rules:
  - from: [{source: {principals: [cluster.local/ns/shop/sa/reviews], notIpBlocks: [10.0.0.0/8]}}]
    to: [{operation: {ports: ["3306"]}}]
    when: [{key: source.namespace, values: [shop]}]
`)
	rules, notes = tcpRules(t, l4, "cluster.local")
	if len(notes) != 0 || len(rules) != 1 {
		t.Fatalf("rules %v notes %v", rules, notes)
	}
	reviews := spiffe("shop", "reviews")
	if !rbactest.Allowed(t, rules, req{Principal: reviews, IP: "192.168.0.1", Port: 3306}) ||
		rbactest.Allowed(t, rules, req{Principal: reviews, IP: "10.1.0.1", Port: 3306}) ||
		rbactest.Allowed(t, rules, req{Principal: reviews, IP: "192.168.0.1", Port: 3307}) ||
		rbactest.Allowed(t, rules, req{Principal: spiffe("shop", "other"), IP: "192.168.0.1", Port: 3306}) {
		t.Error("L4 rule not enforced as written")
	}
	rbacGolden(t, "rbac_tcp", rules)
}

func TestRBACEmptyAndAllowAll(t *testing.T) {
	// An ALLOW policy without rules allows nothing.
	rules, _ := httpRules(t, rbacPolicies(t, `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: nothing}
spec: {}
`), "cluster.local")
	if len(rules) != 1 || rules[0].Action != rbacpb.RBAC_ALLOW || len(rules[0].Policies) != 0 {
		t.Fatalf("empty ALLOW: %v", rules)
	}
	if rbactest.Allowed(t, rules, req{Principal: spiffe("shop", "a"), Port: 80, Method: "GET", Path: "/"}) {
		t.Error("empty ALLOW allows")
	}
	// A rule without from and to allows everything, TCP included.
	all := rbacPolicies(t, `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: all}
spec:
  rules: [{}]
`)
	for _, rules := range [][]*rbacpb.RBAC{first(httpRules(t, all, "cluster.local")), first(tcpRules(t, all, "cluster.local"))} {
		if !rbactest.Allowed(t, rules, req{Port: 80, IP: "1.2.3.4"}) {
			t.Error("rule {} does not allow everything")
		}
	}
	// No policy: no filter.
	if f, notes := HTTPFilters(model.AuthorizationPolicies{}, Env{TrustDomain: "cluster.local"}); len(f) != 0 || len(notes) != 0 {
		t.Errorf("no policies gave %v %v", f, notes)
	}
}

func first[A, B any](a A, _ B) A { return a }

// AUDIT policies become a LOG filter ahead of DENY and ALLOW (istiod's order): it marks what its rules
// match for the access log and denies nothing.
func TestRBACAuditLogs(t *testing.T) {
	p := rbacPolicies(t, `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: audit}
spec:
  action: AUDIT
  rules: [{to: [{operation: {paths: [/x]}}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny}
spec:
  action: DENY
  rules: [{to: [{operation: {paths: [/admin]}}]}]
`)
	for _, tc := range []struct {
		name  string
		rules func(*testing.T, model.AuthorizationPolicies, string) ([]*rbacpb.RBAC, []string)
	}{{"http", httpRules}, {"tcp", tcpRules}} {
		t.Run(tc.name, func(t *testing.T) {
			rules, _ := tc.rules(t, p, "cluster.local")
			if len(rules) != 2 || rules[0].Action != rbacpb.RBAC_LOG || rules[1].Action != rbacpb.RBAC_DENY {
				t.Fatalf("rules %v, want LOG then DENY", rules)
			}
			if names := slices.Sorted(maps.Keys(rules[0].Policies)); !slices.Equal(names, []string{"ns[shop]-policy[audit]-rule[0]"}) {
				t.Errorf("LOG policies %v", names)
			}
		})
	}
	rules, _ := httpRules(t, p, "cluster.local")
	if len(rules) != 2 {
		t.Fatalf("%d HTTP rule sets", len(rules))
	}
	if !rbactest.Allowed(t, rules, req{Path: "/x"}) || rbactest.Allowed(t, rules, req{Path: "/admin"}) {
		t.Error("the LOG filter changed what is allowed")
	}
	// The audited path is what the LOG rule matches; on TCP the path is dropped, so it logs every connection.
	if !rbactest.Permits(t, rules[0].Policies["ns[shop]-policy[audit]-rule[0]"].Permissions[0], req{Path: "/x"}) ||
		rbactest.Permits(t, rules[0].Policies["ns[shop]-policy[audit]-rule[0]"].Permissions[0], req{Path: "/y"}) {
		t.Error("the LOG rule does not match exactly /x")
	}
}

func TestRBACPrincipalMatchers(t *testing.T) {
	for _, tc := range []struct {
		value, trustDomain string
		want               *matcher.StringMatcher
	}{
		{"cluster.local/ns/a/sa/b", "cluster.local",
			&matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: "spiffe://cluster.local/ns/a/sa/b"}}},
		{"cluster.local/ns/a/sa/b", "example.org",
			&matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: "spiffe://example.org/ns/a/sa/b"}}},
		{"other.org/ns/a/sa/b", "example.org",
			&matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: "spiffe://other.org/ns/a/sa/b"}}},
		{"cluster.local/ns/a/*", "cluster.local",
			&matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Prefix{Prefix: "spiffe://cluster.local/ns/a/"}}},
		{"*/sa/b", "example.org", &matcher.StringMatcher{
			MatchPattern: &matcher.StringMatcher_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: `spiffe://.*/sa/b`}}}},
		{"*", "cluster.local", &matcher.StringMatcher{
			MatchPattern: &matcher.StringMatcher_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: ".+"}}}},
	} {
		b := &rbacBuilder{trustDomain: tc.trustDomain}
		p, _ := b.srcPrincipal(tc.value)
		got := p.GetAuthenticated().GetPrincipalName()
		if protojson.Format(got) != protojson.Format(tc.want) {
			t.Errorf("%s (trust domain %s): %v, want %v", tc.value, tc.trustDomain, got, tc.want)
		}
	}
	// serviceAccounts and trustDomains.
	rules, _ := httpRules(t, rbacPolicies(t, `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: sa}
spec:
  rules:
  - from: [{source: {serviceAccounts: [shop/reviews], trustDomains: [cluster.local]}}]
`), "cluster.local")
	if !rbactest.Allowed(t, rules, req{Principal: spiffe("shop", "reviews")}) ||
		rbactest.Allowed(t, rules, req{Principal: spiffe("shop", "ratings")}) ||
		rbactest.Allowed(t, rules, req{Principal: "spiffe://other.org/ns/shop/sa/reviews"}) {
		t.Error("serviceAccounts/trustDomains not enforced")
	}
}

func TestRBACWhenKeys(t *testing.T) {
	p := rbacPolicies(t, `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: when}
spec:
  rules:
  - when:
    - {key: source.principal, values: [cluster.local/ns/shop/sa/a]}
    - {key: source.namespace, values: [shop]}
    - {key: destination.port, notValues: ["81"]}
    - {key: "request.headers[x-env]", values: ["prod-*"]}
  - when: [{key: request.auth.principal, values: ["*"]}]
  - when: [{key: "experimental.envoy.filters.a[b]", values: [x]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-unknown}
spec:
  action: DENY
  rules:
  - to: [{operation: {ports: ["82"]}}]
    when: [{key: "experimental.envoy.filters.a[b]", values: [x]}]
`)
	rules, notes := httpRules(t, p, "cluster.local")
	wantNotes := []string{
		`http: shop/deny-unknown rule 0: when key "experimental.envoy.filters.a[b]" not supported, condition dropped (the rule denies more)`,
		`http: shop/when rule 2 (ALLOW) skipped, it allows nothing: when key "experimental.envoy.filters.a[b]": not supported`,
	}
	if !slices.Equal(notes, wantNotes) {
		t.Errorf("notes:\n%s", strings.Join(notes, "\n"))
	}
	a := spiffe("shop", "a")
	prod := map[string]string{"x-env": "prod-eu"}
	for _, tc := range []struct {
		name string
		r    req
		want bool
	}{
		{"all conditions", req{Principal: a, Port: 80, Headers: prod}, true},
		{"destination.port notValues", req{Principal: a, Port: 81, Headers: prod}, false},
		{"header prefix", req{Principal: a, Port: 80, Headers: map[string]string{"x-env": "dev"}}, false},
		{"principal", req{Principal: spiffe("shop", "b"), Port: 80, Headers: prod}, false},
		{"request.auth.principal never set", req{Port: 80}, false},
		{"DENY without the unknown condition", req{Principal: a, Port: 82, Headers: prod}, false},
	} {
		if got := rbactest.Allowed(t, rules, tc.r); got != tc.want {
			t.Errorf("%s: allowed %v, want %v", tc.name, got, tc.want)
		}
	}
	// On TCP the header and request.auth conditions are HTTP-only: those ALLOW rules allow nothing.
	rules, notes = tcpRules(t, p, "cluster.local")
	if rbactest.Allowed(t, rules, req{Principal: a, Port: 80}) || len(notes) != 4 {
		t.Errorf("TCP: notes %v", notes)
	}
}

// TestRBACInvalidValues: validation rejects bad values at the edge; should one get through, a DENY rule
// keeps its valid values and an ALLOW rule drops out.
func TestRBACInvalidValues(t *testing.T) {
	policy := func(action security.AuthorizationPolicy_Action) *config.Config {
		return &config.Config{Key: config.Key{Kind: config.AuthorizationPolicy, Namespace: "shop", Name: "bad"},
			Spec: &security.AuthorizationPolicy{Action: action, Rules: []*security.Rule{{
				From: []*security.Rule_From{{Source: &security.Source{IpBlocks: []string{"not-an-ip", "10.0.0.1"}}}},
				To:   []*security.Rule_To{{Operation: &security.Operation{Ports: []string{"http"}, NotPorts: []string{"81"}}}},
			}}}}
	}
	rules, notes := httpRules(t, model.AuthorizationPolicies{Deny: []*config.Config{policy(security.AuthorizationPolicy_DENY)}},
		"cluster.local")
	want := []string{
		`http: shop/bad rule 0: ipBlocks "not-an-ip" dropped (the rule denies more): not an IP address or CIDR block`,
		`http: shop/bad rule 0: ports "http" dropped (the rule denies more): not a port number`,
	}
	if !slices.Equal(notes, want) {
		t.Errorf("notes %v", notes)
	}
	if rbactest.Allowed(t, rules, req{IP: "10.0.0.1", Port: 80}) || !rbactest.Allowed(t, rules, req{IP: "10.0.0.2", Port: 80}) ||
		!rbactest.Allowed(t, rules, req{IP: "10.0.0.1", Port: 81}) {
		t.Error("the valid values are not kept")
	}
	rules, notes = httpRules(t, model.AuthorizationPolicies{Allow: []*config.Config{policy(security.AuthorizationPolicy_ALLOW)}},
		"cluster.local")
	if len(rules) != 1 || len(rules[0].Policies) != 0 || len(notes) != 1 {
		t.Errorf("ALLOW with a bad value: %v %v", rules, notes)
	}
}

var updateGolden = flag.Bool("update", false, "rewrite the golden files under testdata")

// rbacGolden compares the rule sets, as a JSON array of protojson, with testdata/NAME.json (-update
// rewrites it). protojson's spacing is deliberately unstable, so the JSON is compacted and re-indented.
func rbacGolden(t *testing.T, name string, rules []*rbacpb.RBAC) {
	t.Helper()
	var parts []string
	for _, r := range rules {
		b, err := protojson.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, string(b))
	}
	var compact, got bytes.Buffer
	if err := json.Compact(&compact, []byte("["+strings.Join(parts, ",")+"]")); err != nil {
		t.Fatal(err)
	}
	if err := json.Indent(&got, compact.Bytes(), "", "  "); err != nil {
		t.Fatal(err)
	}
	got.WriteByte('\n')
	path := filepath.Join("testdata", name+".json")
	if *updateGolden {
		if err := os.WriteFile(path, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	wl, gl := strings.Split(string(want), "\n"), strings.Split(got.String(), "\n")
	for i := range max(len(wl), len(gl)) {
		if i >= len(wl) || i >= len(gl) || wl[i] != gl[i] {
			t.Errorf("%s differs from the generated rules at line %d (run with -update to accept)", path, i+1)
			return
		}
	}
}
