package config_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sextantmesh/sextant/pilot/config"
)

// Rules istiod's validation refuses are refused, naming the field: an empty source or operation, a `when`
// key istiod does not know or cannot read, and values that are empty or not what their field holds.
func TestAuthorizationPolicyRuleErrors(t *testing.T) {
	for _, tc := range []struct{ rule, field, message string }{
		{"from: [{source: {}}]", "spec.rules[0].from[0].source", "empty"},
		{"to: [{operation: {}}]", "spec.rules[0].to[0].operation", "empty"},
		{"from: [{}]", "spec.rules[0].from[0].source", "required"},
		{"to: [{}]", "spec.rules[0].to[0].operation", "required"},
		{"from: [{source: {principals: [\"\"]}}]", "spec.rules[0].from[0].source.principals[0]", "empty value"},
		{"from: [{source: {notRequestPrincipals: [a, \"\"]}}]", "spec.rules[0].from[0].source.notRequestPrincipals[1]", "empty value"},
		{"from: [{source: {remoteIpBlocks: [10.0.0.0/33]}}]", "spec.rules[0].from[0].source.remoteIpBlocks[0]", "not an IP address or CIDR"},
		{"from: [{source: {notRemoteIpBlocks: [host]}}]", "spec.rules[0].from[0].source.notRemoteIpBlocks[0]", "not an IP address or CIDR"},
		{"from: [{source: {namespaces: [a], serviceAccounts: [a/b]}}]", "spec.rules[0].from[0].source.serviceAccounts", "cannot be set with"},
		{"from: [{source: {serviceAccounts: [\"a/*\"]}}]", "spec.rules[0].from[0].source.serviceAccounts[0]", "wildcard"},
		{"from: [{source: {serviceAccounts: [a/b/c]}}]", "spec.rules[0].from[0].source.serviceAccounts[0]", "NAMESPACE/SERVICE_ACCOUNT"},
		{"from: [{source: {notServiceAccounts: [/b]}}]", "spec.rules[0].from[0].source.notServiceAccounts[0]", "NAMESPACE/SERVICE_ACCOUNT"},
		{"from: [{source: {serviceAccounts: [" + strings.Repeat("a,", 16) + "a]}}]",
			"spec.rules[0].from[0].source.serviceAccounts", "at most 16"},
		{"from: [{source: {trustDomains: [\"a*b\"]}}]", "spec.rules[0].from[0].source.trustDomains[0]", "start or the end"},
		{"from: [{source: {trustDomains: [\"*a*\"]}}]", "spec.rules[0].from[0].source.trustDomains[0]", "at most one wildcard"},
		{"from: [{source: {notTrustDomains: [a/b]}}]", "spec.rules[0].from[0].source.notTrustDomains[0]", "must not contain /"},
		{"to: [{operation: {methods: [GET, \"\"]}}]", "spec.rules[0].to[0].operation.methods[1]", "empty value"},
		{"to: [{operation: {notPorts: [\"70000\"]}}]", "spec.rules[0].to[0].operation.notPorts[0]", "not a port number"},
		{"to: [{operation: {paths: [\"/a/{**}/{*}\"]}}]", "spec.rules[0].to[0].operation.paths[0]", "last operator"},
		{"to: [{operation: {notPaths: [\"/a/{x}\"]}}]", "spec.rules[0].to[0].operation.notPaths[0]", "outside a path template"},
		{"to: [{operation: {paths: [\"/{*}/a b\"]}}]", "spec.rules[0].to[0].operation.paths[0]", "not a valid path literal"},
		{"when: [{key: request.headers, values: [a]}]", "spec.rules[0].when[0].key", "request.headers[NAME]"},
		{"when: [{key: \"request.headers[]\", values: [a]}]", "spec.rules[0].when[0].key", "request.headers[NAME]"},
		{"when: [{key: \"request.auth.claims[iss\", values: [a]}]", "spec.rules[0].when[0].key", "request.auth.claims[NAME]"},
		{"when: [{key: experimental.envoy.filters.a, values: [a]}]", "spec.rules[0].when[0].key", "experimental.envoy.filters.FILTER[KEY]"},
		{"when: [{key: source.ips, values: [10.0.0.1]}]", "spec.rules[0].when[0].key", "not a known attribute"},
		{"when: [{key: destination.namespace, values: [a]}]", "spec.rules[0].when[0].key", "metadata.namespace"},
		{"when: [{key: \"destination.labels[app]\", values: [a]}]", "spec.rules[0].when[0].key", "workload selector"},
		{"when: [{key: destination.user, values: [a]}]", "spec.rules[0].when[0].key", "v1alpha1"},
		{"when: [{key: source.ip, values: [10.0.0.300]}]", "spec.rules[0].when[0].values[0]", "not an IP address or CIDR"},
		{"when: [{key: remote.ip, notValues: [10.0.0.1, 1.2.3.4/40]}]", "spec.rules[0].when[0].notValues[1]", "not an IP address or CIDR"},
		{"when: [{key: destination.port, values: [http]}]", "spec.rules[0].when[0].values[0]", "not a port number"},
		{"when: [{key: source.serviceAccount, values: [\"*\"]}]", "spec.rules[0].when[0].values[0]", "wildcard"},
		{"when: [{key: source.trustDomain, notValues: [\"**\"]}]", "spec.rules[0].when[0].notValues[0]", "at most one wildcard"},
		{"when: [{key: source.namespace, values: [a, \"\"]}]", "spec.rules[0].when[0].values[1]", "empty value"},
		{"when: [{key: source.namespace}]", "spec.rules[0].when[0].values", "values or notValues"},
	} {
		for _, action := range []string{"ALLOW", "DENY"} {
			_, err := parseOne(t, fmt.Sprintf("%s  action: %s\n  rules:\n  - %s\n", policyHead, action, tc.rule))
			var ce *config.Error
			if !errors.As(err, &ce) || ce.Field != tc.field || !strings.Contains(ce.Message, tc.message) || ce.Name != "p" {
				t.Errorf("%s rule %s: error %v, want field %s with %q", action, tc.rule, err, tc.field, tc.message)
			}
		}
	}
}

// Every key and form istiod accepts stays accepted.
func TestAuthorizationPolicyRulesAccepted(t *testing.T) {
	_, err := parseOne(t, policyHead+`  action: ALLOW
  rules:
  - from:
    - source: {principals: [cluster.local/ns/a/sa/b], notRequestPrincipals: ["*"], ipBlocks: [10.0.0.0/8], notRemoteIpBlocks: [1.2.3.4]}
    - source: {serviceAccounts: [a/b, c], notServiceAccounts: [d/e], trustDomains: ["*.example.com", "*"]}
    to:
    - operation: {ports: ["8080"], notMethods: [DELETE], paths: ["/api/{*}/items/{**}"], notHosts: ["*.internal"]}
    when:
    - {key: "request.headers[x-user]", values: [bob]}
    - {key: "request.auth.claims[realm][role]", values: [admin]}
    - {key: "request.auth.claims[iss]", notValues: [evil]}
    - {key: "experimental.envoy.filters.network.mysql_proxy[db.table]", values: ["[update]"]}
    - {key: source.ip, values: [10.0.0.1, 10.1.0.0/16]}
    - {key: remote.ip, values: ["::1"]}
    - {key: destination.ip, values: [10.0.0.2]}
    - {key: destination.port, values: ["443"]}
    - {key: source.namespace, values: [a]}
    - {key: source.principal, values: [cluster.local/ns/a/sa/b]}
    - {key: source.serviceAccount, values: [a/b]}
    - {key: source.trustDomain, values: ["*.example.com"]}
    - {key: request.auth.principal, values: [iss/sub]}
    - {key: request.auth.audiences, values: [web]}
    - {key: request.auth.presenter, values: [app]}
    - {key: connection.sni, values: [web.example.com]}
`)
	if err != nil {
		t.Fatal(err)
	}
}
