package authpolicy

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	rbachttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	security "istio.io/api/security/v1beta1"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/store"
)

// meshPush builds the snapshot of the listener tests' mesh (pilot/envoy/testdata/lds/mesh.yaml) with extra
// documents, objects created one second apart in file order as those tests create them.
func meshPush(t *testing.T, extra ...string) *model.PushContext {
	t.Helper()
	data, err := os.ReadFile("../testdata/lds/mesh.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range extra {
		data = append(data, "\n---\n"+e...)
	}
	docs, err := config.SplitDocuments(data)
	if err != nil {
		t.Fatal(err)
	}
	st := store.New()
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, doc := range docs {
		if config.IsEmptyDocument(doc) {
			continue
		}
		c, err := config.Parse(doc, "mesh.yaml", i, "default")
		if err != nil {
			t.Fatal(err)
		}
		created = created.Add(time.Second)
		c.CreationTimestamp = created
		st.Upsert(store.LayerFile, c)
	}
	return model.Build(st, mesh.Default())
}

// outboundCluster names clusters as the cluster generator does, for providers resolved in these tests.
func outboundCluster(port uint32, subset, host string) string {
	return fmt.Sprintf("outbound|%d|%s|%s", port, subset, host)
}

// What a gRPC server cannot honour denies: CUSTOM policies deny what they match, a DENY rule on a header
// gRPC refuses denies everything, an ALLOW rule on one allows nothing; AUDIT is reported and left out.
func TestGRPCRBACFailsClosed(t *testing.T) {
	push := meshPush(t, `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: ext, namespace: shop}
spec:
  selector: {matchLabels: {app: mysql}}
  action: CUSTOM
  provider: {name: nowhere}
  rules: [{to: [{operation: {paths: [/secret]}}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: audit, namespace: shop}
spec:
  selector: {matchLabels: {app: mysql}}
  action: AUDIT
  rules: [{}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-timeout, namespace: shop}
spec:
  selector: {matchLabels: {app: mysql}}
  action: DENY
  rules: [{when: [{key: "request.headers[grpc-timeout]", values: ["1S"]}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: allow-scheme, namespace: shop}
spec:
  selector: {matchLabels: {app: mysql}}
  action: ALLOW
  rules: [{when: [{key: "request.headers[:scheme]", values: ["https"]}]}]
`)
	policies := push.AuthorizationPolicies("shop", map[string]string{"app": "mysql"})
	env := NewEnv(push, policies, outboundCluster)
	env.JWT = &JWTAuthn{rules: []jwtRule{{rule: &security.JWTRule{Issuer: "https://issuer.example",
		FromHeaders: []*security.JWTHeader{{Name: "X-Token"}}}, source: config.Key{Namespace: "shop", Name: "jwt"}}}}
	filters, notes := GRPCFilters(policies, env)
	var names []string
	rules := map[string]*rbacpb.RBAC{}
	for _, f := range filters {
		names = append(names, f.Name)
		r := &rbachttp.RBAC{}
		if err := f.GetTypedConfig().UnmarshalTo(r); err != nil {
			t.Fatal(err)
		}
		if err := r.ValidateAll(); err != nil {
			t.Error(err)
		}
		rules[f.Name] = r.Rules
	}
	if want := []string{grpcRBACJWTFilter, grpcRBACCustomFilter, grpcRBACDenyFilter, grpcRBACAllowFilter}; !slices.Equal(names, want) {
		t.Fatalf("filters %v, want %v", names, want)
	}
	jwt := rules[grpcRBACJWTFilter].Policies["ns[shop]-requestauthentication[jwt]-rule[0]"]
	if h := jwt.GetPrincipals()[0].GetOrIds().GetIds()[0].GetHeader(); h.GetName() != "x-token" || !h.GetPresentMatch() {
		t.Errorf("JWT: %v, want requests with header x-token denied", jwt)
	}
	if r := rules[grpcRBACCustomFilter]; r.Action != rbacpb.RBAC_DENY || len(r.Policies) != 1 {
		t.Errorf("CUSTOM as DENY: %v", r)
	}
	deny := rules[grpcRBACDenyFilter].Policies["ns[shop]-policy[deny-timeout]-rule[0]"]
	if deny == nil || deny.Principals[0].GetAny() != true || deny.Permissions[0].GetAny() != true {
		t.Errorf("DENY on grpc-timeout: %v, want deny everything", deny)
	}
	if p := rules[grpcRBACAllowFilter].Policies; p["ns[shop]-policy[allow-scheme]-rule[0]"] != nil || len(p) != 1 {
		t.Errorf("ALLOW policies %v, want mysql's alone (the :scheme rule dropped)", p)
	}
	for _, want := range []string{"RequestAuthentication shop/jwt rule 0", "CUSTOM policies [shop/ext]",
		"AUDIT policies [shop/audit] not applied", `grpc-timeout`, `":scheme"`} {
		if !slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, want) }) {
			t.Errorf("no note saying %q in %q", want, notes)
		}
	}
	for _, f := range filters {
		r := &rbachttp.RBAC{}
		_ = f.GetTypedConfig().UnmarshalTo(r)
		for _, p := range r.GetRules().GetPolicies() {
			for _, pr := range p.Principals {
				if h := grpcRefusedPrincipalHeader(pr); h != "" {
					t.Errorf("%s still matches header %s", f.Name, h)
				}
			}
		}
	}
}
