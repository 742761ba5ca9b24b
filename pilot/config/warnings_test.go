package config_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/sextantmesh/sextant/pilot/config"
)

// Traffic policy, fault and match fields Sextant does not implement are warned at their paths, at every
// level of a DestinationRule, each saying what happens instead.
func TestUnimplementedFieldWarnings(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      []string
	}{
		{"DestinationRule", `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: d, namespace: shop}
spec:
  host: reviews
  trafficPolicy:
    loadBalancer: {simple: ROUND_ROBIN, zoneAwareLbSetting: {minClusterSize: 3}}
    outlierDetection: {consecutiveErrors: 3, outlierDetectionHttpErrorCodes: [503], failurePercentageThreshold: 20}
    retryBudget: {percent: 20}
    portLevelSettings:
    - port: {number: 9080}
      loadBalancer: {backendUtilization: {}, localityLbSetting: {failoverPriority: [topology.istio.io/network]}}
  subsets:
  - name: v1
    labels: {version: v1}
    trafficPolicy:
      outlierDetection: {consecutiveErrors: 1}
      retryBudget: {minRetryConcurrency: 5}
`, []string{"spec.trafficPolicy.outlierDetection.consecutiveErrors",
			"spec.trafficPolicy.outlierDetection.outlierDetectionHttpErrorCodes", "spec.trafficPolicy.outlierDetection.failurePercentageThreshold",
			"spec.trafficPolicy.portLevelSettings[0].loadBalancer.backendUtilization", "spec.trafficPolicy.retryBudget",
			"spec.subsets[0].trafficPolicy.outlierDetection.consecutiveErrors", "spec.subsets[0].trafficPolicy.retryBudget"}},
		{"VirtualService", `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: r, namespace: shop}
spec:
  hosts: [reviews]
  http:
  - fault: {delay: {exponentialDelay: 1s}, abort: {http2Error: REFUSED_STREAM}}
    route: [{destination: {host: reviews}}]
  tcp:
  - match: [{port: 9000, sourceSubnet: 10.0.0.0/8}]
    route: [{destination: {host: reviews}}]
`, []string{"spec.http[0].fault.delay.exponentialDelay", "spec.http[0].fault.abort.http2Error", "spec.tcp[0].match[0].sourceSubnet"}},
		{"Gateway", `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: shop}
spec:
  servers:
  - port: {number: 80, name: http, protocol: HTTP}
    hosts: ["*"]
    defaultEndpoint: 127.0.0.1:8080
`, []string{"spec.servers[0].defaultEndpoint"}},
	} {
		c, err := parseOne(t, tc.doc)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		ws := config.Warnings(c)
		if got := warningFields(ws); !slices.Equal(got, tc.want) {
			t.Errorf("%s: warnings on %v, want %v", tc.name, got, tc.want)
		}
		for _, w := range ws {
			if w.Message == "" {
				t.Errorf("%s %s: no message", tc.name, w.Field)
			}
		}
	}
}

// caCertCredentialName would be ignored in favour of the system roots, trusting more servers than the rule
// asks: it is refused, at every level.
func TestClientTLSCACertCredentialNameRejected(t *testing.T) {
	for _, tc := range []struct{ policy, field string }{
		{"  trafficPolicy: {tls: {mode: SIMPLE, caCertCredentialName: ca}}\n", "spec.trafficPolicy.tls.caCertCredentialName"},
		{"  trafficPolicy: {portLevelSettings: [{port: {number: 443}, tls: {mode: SIMPLE, caCertCredentialName: ca}}]}\n",
			"spec.trafficPolicy.portLevelSettings[0].tls.caCertCredentialName"},
		{"  subsets: [{name: v1, trafficPolicy: {tls: {mode: SIMPLE, caCertCredentialName: ca}}}]\n",
			"spec.subsets[0].trafficPolicy.tls.caCertCredentialName"},
	} {
		_, err := parseOne(t, "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: d, namespace: shop}\nspec:\n"+
			"  host: api.example.com\n"+tc.policy)
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Field != tc.field || !strings.Contains(ce.Message, "credentialName") {
			t.Errorf("%q: error %v, want field %s", tc.policy, err, tc.field)
		}
	}
	if _, err := parseOne(t, "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: d, namespace: shop}\nspec:\n"+
		"  host: api.example.com\n  trafficPolicy: {tls: {mode: SIMPLE, credentialName: ca}}\n"); err != nil {
		t.Errorf("credentialName alone: %v", err)
	}
}
