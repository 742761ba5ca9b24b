package config_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/sextantmesh/sextant/pilot/config"
)

func parseOne(t *testing.T, doc string) (*config.Config, error) {
	t.Helper()
	return config.Parse([]byte(doc), "test.yaml", 0, "shop")
}

const policyHead = "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: p, namespace: shop}\nspec:\n"

// targetRefs istiod's validation refuses are refused, naming the field.
func TestAuthorizationPolicyTargetRefErrors(t *testing.T) {
	for _, tc := range []struct{ spec, field, message string }{
		{"  selector: {matchLabels: {app: a}}\n  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]\n",
			"spec.targetRefs", "only one of selector, targetRef and targetRefs"},
		{"  targetRef: {group: gateway.networking.k8s.io, kind: Gateway, name: gw}\n" +
			"  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]\n",
			"spec.targetRefs", "only one of"},
		{"  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway}]\n", "spec.targetRefs[0].name", "required"},
		{"  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw, namespace: other}]\n",
			"spec.targetRefs[0].namespace", "its own namespace"},
		{"  targetRef: {group: apps, kind: Deployment, name: d}\n", "spec.targetRef.kind", "apps/Deployment"},
		{"  targetRefs: [{kind: Gateway, name: gw}]\n", "spec.targetRefs[0].kind", "/Gateway"}, // the core group has no Gateway
	} {
		_, err := parseOne(t, policyHead+tc.spec+"  action: DENY\n")
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Field != tc.field || !strings.Contains(ce.Message, tc.message) {
			t.Errorf("spec %q: error %v, want field %s with %q", tc.spec, err, tc.field, tc.message)
		}
	}
}

// A DYNAMIC_DNS ServiceEntry that istiod's validation refuses is refused, naming the field.
func TestServiceEntryDynamicDNSErrors(t *testing.T) {
	const head = "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: se, namespace: shop}\nspec:\n" +
		"  resolution: DYNAMIC_DNS\n"
	for _, tc := range []struct{ spec, field, message string }{
		{"  hosts: [api.example.com]\n  ports: [{number: 80, name: http, protocol: HTTP}]\n", "spec.hosts[0]", "wildcard"},
		{"  hosts: [\"*.example.com\"]\n  addresses: [240.0.0.1]\n  ports: [{number: 80, name: http, protocol: HTTP}]\n",
			"spec.addresses", "DYNAMIC_DNS"},
		{"  hosts: [\"*.example.com\"]\n  endpoints: [{address: 1.2.3.4}]\n  ports: [{number: 80, name: http, protocol: HTTP}]\n",
			"spec.endpoints", "DYNAMIC_DNS"},
		{"  hosts: [\"*.example.com\"]\n  workloadSelector: {labels: {app: a}}\n  ports: [{number: 80, name: http, protocol: HTTP}]\n",
			"spec.workloadSelector", "DYNAMIC_DNS"},
		{"  hosts: [\"*.example.com\"]\n  ports: [{number: 80, name: http, protocol: HTTP}, {number: 5432, name: pg, protocol: TCP}]\n",
			"spec.ports[1].protocol", "HTTP, HTTP2, GRPC and TLS"},
		{"  hosts: [\"*.example.com\"]\n  ports: [{number: 443, name: https, protocol: HTTPS}]\n", "spec.ports[0].protocol",
			"HTTP, HTTP2, GRPC and TLS"},
	} {
		_, err := parseOne(t, head+tc.spec)
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Field != tc.field || !strings.Contains(ce.Message, tc.message) {
			t.Errorf("spec %q: error %v, want field %s with %q", tc.spec, err, tc.field, tc.message)
		}
	}
	if _, err := parseOne(t, head+"  hosts: [\"*.example.com\"]\n"+
		"  ports: [{number: 80, name: http, protocol: HTTP}, {number: 443, name: tls, protocol: TLS}, "+
		"{number: 9090, name: grpc, protocol: GRPC}]\n"); err != nil {
		t.Errorf("valid DYNAMIC_DNS ServiceEntry refused: %v", err)
	}
}

// Sidecar egress listeners istiod's validation refuses, and the unix domain socket and HTTP_PROXY ones
// Sextant does not build, are refused, naming the field.
func TestSidecarEgressErrors(t *testing.T) {
	const head = "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: s, namespace: shop}\nspec:\n  egress:\n"
	for _, tc := range []struct{ spec, field, message string }{
		{"  - hosts: [\"./*\"]\n  - port: {number: 80, protocol: HTTP}\n    hosts: [\"./*\"]\n", "spec.egress[0].port", "only the last"},
		{"  - port: {number: 80, protocol: HTTP}\n    hosts: [\"./*\"]\n  - port: {number: 80, protocol: TCP}\n    hosts: [\"./*\"]\n",
			"spec.egress[1].port.number", "already"},
		{"  - port: {number: 0, protocol: HTTP}\n    bind: unix:///var/run/app.sock\n    hosts: [\"./*\"]\n",
			"spec.egress[0].bind", "unix domain socket"},
		{"  - port: {number: 8080, protocol: HTTP_PROXY}\n    hosts: [\"*/*\"]\n", "spec.egress[0].port.protocol", "HTTP_PROXY"},
		{"  - port: {number: 8080, protocol: QUIC}\n    hosts: [\"*/*\"]\n", "spec.egress[0].port.protocol", "unsupported"},
		{"  - port: {number: 8080, protocol: HTTP}\n    bind: localhost\n    hosts: [\"*/*\"]\n", "spec.egress[0].bind", "IP address"},
		{"  - port: {number: 70000, protocol: HTTP}\n    hosts: [\"*/*\"]\n", "spec.egress[0].port.number", "not a port"},
	} {
		_, err := parseOne(t, head+tc.spec)
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Field != tc.field || !strings.Contains(ce.Message, tc.message) {
			t.Errorf("spec %q: error %v, want field %s with %q", tc.spec, err, tc.field, tc.message)
		}
	}
	ok := head + "  - port: {number: 9080, protocol: HTTP, name: http}\n    bind: 127.0.0.2\n    captureMode: NONE\n    hosts: [\"./*\"]\n" +
		"  - port: {number: 3306}\n    hosts: [\"db/*\"]\n  - hosts: [\"*/*\"]\n"
	c, err := parseOne(t, ok)
	if err != nil {
		t.Fatalf("valid Sidecar refused: %v", err)
	}
	if ws := config.Warnings(c); len(ws) != 0 {
		t.Errorf("egress port, bind and captureMode warn: %v", warningFields(ws))
	}
}

// A ServiceEntry of resolution NONE (the default) with endpoints is refused, as istiod's validation refuses
// it; a workload selector is its way to name workloads.
func TestServiceEntryNoneEndpointsRefused(t *testing.T) {
	const head = "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: se, namespace: shop}\nspec:\n" +
		"  hosts: [db.example.com]\n  ports: [{number: 5432, name: tcp, protocol: TCP}]\n"
	for _, resolution := range []string{"", "  resolution: NONE\n"} {
		_, err := parseOne(t, head+resolution+"  endpoints: [{address: 10.1.0.1}]\n")
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Field != "spec.endpoints" || !strings.Contains(ce.Message, "resolution NONE") {
			t.Errorf("%q: error %v, want field spec.endpoints naming resolution NONE", resolution, err)
		}
	}
	if _, err := parseOne(t, head+"  resolution: NONE\n  workloadSelector: {labels: {app: db}}\n"); err != nil {
		t.Errorf("resolution NONE with a workload selector refused: %v", err)
	}
}

func warningFields(ws []*config.FieldError) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.Field)
	}
	return out
}

// A targetRef to a waypoint's target (Service, ServiceEntry, GatewayClass) loads, with a warning naming it;
// one to a Gateway API Gateway is honoured and warns of nothing.
func TestAuthorizationPolicyTargetRefWarnings(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want []string
	}{
		{"  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]\n", nil},
		{"  targetRef: {group: gateway.networking.k8s.io, kind: Gateway, name: gw}\n", nil},
		{"  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}, {kind: Service, name: reviews}]\n",
			[]string{"spec.targetRefs[1]"}},
		{"  targetRef: {group: networking.istio.io, kind: ServiceEntry, name: ext}\n", []string{"spec.targetRef"}},
		{"  targetRefs: [{group: '', kind: Service, name: a}, {group: core, kind: Service, name: b}]\n",
			[]string{"spec.targetRefs[0]", "spec.targetRefs[1]"}},
		{"  selector: {matchLabels: {app: a}}\n", nil},
	} {
		c, err := parseOne(t, policyHead+tc.spec+"  action: ALLOW\n")
		if err != nil {
			t.Errorf("spec %q: %v", tc.spec, err)
			continue
		}
		ws := config.Warnings(c)
		if got := warningFields(ws); !slices.Equal(got, tc.want) {
			t.Errorf("spec %q: warnings on %v, want %v", tc.spec, got, tc.want)
		}
		for _, w := range ws {
			if !strings.Contains(w.Message, "waypoint") {
				t.Errorf("warning %s: %q does not say why", w.Field, w.Message)
			}
		}
	}
}

// Sidecar fields Sextant does not implement load, each with a warning naming it.
func TestSidecarWarnings(t *testing.T) {
	c, err := parseOne(t, `apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: default, namespace: shop}
spec:
  ingress:
  - port: {number: 9443, protocol: HTTPS, name: https}
    tls: {mode: SIMPLE, serverCertificate: /etc/certs/cert.pem, privateKey: /etc/certs/key.pem}
  egress:
  - port: {number: 3306, protocol: MYSQL, name: mysql}
    bind: 127.0.0.1
    captureMode: NONE
    hosts: ["db/*"]
  - hosts: ["./*"]
  outboundTrafficPolicy:
    mode: ALLOW_ANY
    egressProxy: {host: egress.istio-system.svc.cluster.local, port: {number: 443}}
  inboundConnectionPool: {http: {http1MaxPendingRequests: 10}}
`)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"spec.ingress[0].tls", "spec.outboundTrafficPolicy.egressProxy"}
	if got := warningFields(config.Warnings(c)); !slices.Equal(got, want) {
		t.Errorf("warnings on %v, want %v", got, want)
	}
	plain, err := parseOne(t, "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: s, namespace: shop}\nspec:\n"+
		"  egress: [{hosts: [\"./*\"]}]\n  outboundTrafficPolicy: {mode: REGISTRY_ONLY}\n")
	if err != nil {
		t.Fatal(err)
	}
	if ws := config.Warnings(plain); len(ws) != 0 {
		t.Errorf("a Sidecar Sextant honours warns: %v", warningFields(ws))
	}
}

// Fields of VirtualService, ServiceEntry and Gateway the generators do not read are warned, each at its path.
func TestRoutingWarnings(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      []string
	}{
		{"VirtualService", `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: r, namespace: shop}
spec:
  hosts: [reviews]
  http:
  - match: [{uri: {prefix: /a}, statPrefix: a}]
    corsPolicy: {allowOrigins: [{exact: "https://x.example"}]}
    retries: {attempts: 2, retryRemoteLocalities: true}
    route: [{destination: {host: reviews}}]
  - delegate: {name: inner, namespace: shop}
  tcp:
  - match: [{port: 9000}, {sourceLabels: {app: a}, sourceSubnet: 10.1.0.0/16}]
    route: [{destination: {host: reviews}}]
  tls:
  - match: [{sniHosts: [reviews], destinationSubnets: [10.0.0.0/8], sourceLabels: {app: a}}]
    route: [{destination: {host: reviews}}]
`, []string{ // corsPolicy, retryRemoteLocalities, statPrefix, sourceLabels and destinationSubnets are honoured
			"spec.tcp[0].match[1].sourceSubnet"}},
		{"ServiceEntry", `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: se, namespace: shop}
spec:
  hosts: [api.example.com]
  ports: [{number: 443, name: tls, protocol: TLS}]
  resolution: DNS
  subjectAltNames: ["spiffe://cluster.local/ns/shop/sa/api"]
`, nil}, // subjectAltNames is honoured: mesh mTLS and TLS origination check the server against these names
		{"ServiceEntry", `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: se, namespace: shop}
spec:
  hosts: ["*.api.example.com"]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: DYNAMIC_DNS
`, nil}, // DYNAMIC_DNS is honoured: a dynamic forward proxy cluster, and its filters on the listeners
		{"Gateway", `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: shop}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 443, name: https, protocol: HTTPS}
    hosts: ["*"]
    tls: {mode: SIMPLE, credentialName: cert, minProtocolVersion: TLSV1_2, maxProtocolVersion: TLSV1_3, ` +
			`cipherSuites: [ECDHE-RSA-AES128-GCM-SHA256, NO-SUCH-CIPHER, -ALL], subjectAltNames: [client.example]}
  - port: {number: 8443, name: https-old, protocol: HTTPS}
    hosts: ["*"]
    tls: {mode: SIMPLE, credentialName: cert, minProtocolVersion: TLSV1_0}
  - port: {number: 15443, name: tls, protocol: TLS}
    hosts: ["*.local"]
    tls: {mode: AUTO_PASSTHROUGH}
`, []string{"spec.servers[0].tls.subjectAltNames", "spec.servers[0].tls.cipherSuites", "spec.servers[1].tls.minProtocolVersion"}},
	} {
		c, err := parseOne(t, tc.doc)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := warningFields(config.Warnings(c)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: warnings on %v, want %v", tc.name, got, tc.want)
		}
		for _, w := range config.ObjectWarnings(c, "f.yaml", 3) {
			if !w.Warning || w.Kind != tc.name || w.Index != 3 || !strings.Contains(w.Error(), "f.yaml: document 3 ("+tc.name) {
				t.Errorf("%s: ObjectWarnings gives %+v", tc.name, w)
			}
		}
	}
	plain, err := parseOne(t, "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: r, namespace: shop}\nspec:\n"+
		"  hosts: [reviews]\n  http: [{retries: {attempts: 2, retryRemoteLocalities: false}, route: [{destination: {host: reviews}}]}]\n")
	if err != nil {
		t.Fatal(err)
	}
	if ws := config.Warnings(plain); len(ws) != 0 {
		t.Errorf("a VirtualService Sextant honours warns: %v", warningFields(ws))
	}
}

// A VirtualService without hosts is a delegate, as in istiod: it loads, and so does the root that names it,
// neither with a warning (the model merges the delegate's routes into the root's).
func TestDelegateVirtualServiceLoads(t *testing.T) {
	for _, doc := range []string{
		"apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: inner, namespace: shop}\nspec:\n  http:\n" +
			"  - match: [{uri: {prefix: /a/b}}]\n    route: [{destination: {host: reviews}}]\n",
		"apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: root, namespace: shop}\nspec:\n  hosts: [reviews]\n" +
			"  http:\n  - match: [{uri: {prefix: /a}}]\n    delegate: {name: inner}\n",
	} {
		c, err := parseOne(t, doc)
		if err != nil {
			t.Errorf("%s: %v", doc, err)
			continue
		}
		if ws := config.Warnings(c); len(ws) > 0 {
			t.Errorf("%s: warnings %v", doc, warningFields(ws))
		}
	}
}

// exportTo values istiod's validation refuses are refused, naming the entry; before, "~" among namespaces
// was read as those namespaces alone, and a misspelt or duplicated entry was taken as it stood.
func TestExportToErrors(t *testing.T) {
	const (
		vs = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: vs, namespace: shop}\nspec:\n  hosts: [reviews]\n" +
			"  http: [{route: [{destination: {host: reviews}}]}]\n"
		dr = "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: dr, namespace: shop}\nspec:\n  host: reviews\n"
		se = "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: se, namespace: shop}\nspec:\n" +
			"  hosts: [api.example.com]\n  ports: [{number: 443, name: tls, protocol: TLS}]\n"
	)
	for _, tc := range []struct{ doc, field, message string }{
		{vs + "  exportTo: [\"~\", team-b]\n", "spec.exportTo[0]", "ServiceEntry only"},
		{vs + "  exportTo: [\"~\"]\n", "spec.exportTo[0]", "ServiceEntry only"},
		{vs + "  exportTo: [shop, \".\"]\n", "spec.exportTo[1]", "duplicate entry: . and the object's namespace shop"},
		{vs + "  exportTo: [team-b, team-b]\n", "spec.exportTo[1]", `duplicate entry "team-b"`},
		{vs + "  exportTo: [\"*\", team-b]\n", "spec.exportTo", "cannot be combined"},
		{vs + "  exportTo: [Team_B]\n", "spec.exportTo[0]", "namespace name"},
		{dr + "  exportTo: [\"~\"]\n", "spec.exportTo[0]", "ServiceEntry only"},
		{dr + "  workloadSelector: {matchLabels: {app: a}}\n  exportTo: [\"*\"]\n", "spec.exportTo", "beyond its own namespace shop"},
		{dr + "  workloadSelector: {matchLabels: {app: a}}\n  exportTo: [\".\", team-b]\n", "spec.exportTo", "more than one entry"},
		{se + "  exportTo: [\"~\", \".\"]\n", "spec.exportTo", "cannot be combined"},
	} {
		_, err := parseOne(t, tc.doc)
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Field != tc.field || !strings.Contains(ce.Message, tc.message) {
			t.Errorf("%q: error %v, want field %s with %q", tc.doc[strings.Index(tc.doc, "exportTo"):], err, tc.field, tc.message)
		}
	}
	for _, doc := range []string{
		vs + "  exportTo: [\".\", team-b]\n",
		vs + "  exportTo: [\"*\"]\n",
		dr + "  workloadSelector: {matchLabels: {app: a}}\n  exportTo: [\".\"]\n",
		se + "  exportTo: [\"~\"]\n",
	} {
		if _, err := parseOne(t, doc); err != nil {
			t.Errorf("%q refused: %v", doc[strings.Index(doc, "exportTo"):], err)
		}
	}
}

// A localityLbSetting istiod's validation refuses is refused, at the rule's level and a port's, naming the field;
// failover with a label that is not a topology level is kept.
func TestDestinationRuleLocalityLbErrors(t *testing.T) {
	const head = "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: r, namespace: shop}\nspec:\n  host: a\n"
	const failover = "failover: [{from: us-east, to: us-west}]"
	for _, tc := range []struct{ spec, field, message string }{
		{"  trafficPolicy: {loadBalancer: {localityLbSetting: {" + failover + ", distribute: [{from: 'us-east/*', to: {'us-west/*': 100}}]}}}\n",
			"spec.trafficPolicy.loadBalancer.localityLbSetting.failover", "'distribute' and 'failover'"},
		{"  trafficPolicy: {loadBalancer: {localityLbSetting: {" + failover +
			", failoverPriority: [my-label, topology.kubernetes.io/region]}}}\n",
			"spec.trafficPolicy.loadBalancer.localityLbSetting.failoverPriority[1]", "topology.kubernetes.io/region"},
		{"  trafficPolicy: {portLevelSettings: [{port: {number: 80}, loadBalancer: {localityLbSetting: {" + failover +
			", failoverPriority: [topology.kubernetes.io/zone]}}}]}\n",
			"spec.trafficPolicy.portLevelSettings[0].loadBalancer.localityLbSetting.failoverPriority[0]", "topology.kubernetes.io/zone"},
		{"  subsets: [{name: v1, trafficPolicy: {loadBalancer: {localityLbSetting: {" + failover +
			", failoverPriority: [topology.istio.io/subzone]}}}}]\n",
			"spec.subsets[0].trafficPolicy.loadBalancer.localityLbSetting.failoverPriority[0]", "topology.istio.io/subzone"},
	} {
		_, err := parseOne(t, head+tc.spec)
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Field != tc.field || !strings.Contains(ce.Message, tc.message) {
			t.Errorf("spec %q: error %v, want field %s with %q", tc.spec, err, tc.field, tc.message)
		}
	}
	for _, ok := range []string{
		"  trafficPolicy: {loadBalancer: {localityLbSetting: {" + failover + ", failoverPriority: [my-label]}}}\n",
		"  trafficPolicy: {loadBalancer: {localityLbSetting: {failoverPriority: [topology.kubernetes.io/region]}}}\n",
	} {
		if _, err := parseOne(t, head+ok); err != nil {
			t.Errorf("valid rule %q refused: %v", ok, err)
		}
	}
}
