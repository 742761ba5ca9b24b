package mesh

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestLoadIstioMeshConfig(t *testing.T) {
	// An Istio mesh config with fields Sextant does not read: they are ignored.
	path := filepath.Join(t.TempDir(), "mesh.yaml")
	data := "rootNamespace: mesh-root\ntrustDomain: example.org\naccessLogFile: /dev/stdout\ndefaultConfig:\n  domainSuffix: corp.local\n" +
		"  proxyMetadata: {}\n"
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RootNamespace != "mesh-root" || cfg.TrustDomain != "example.org" || cfg.DomainSuffix != "corp.local" ||
		cfg.ClusterID != "Kubernetes" {
		t.Errorf("loaded %+v", cfg)
	}
}

func TestDefaultsAndErrors(t *testing.T) {
	cfg, err := Load("")
	if err != nil || !reflect.DeepEqual(cfg, Default()) || cfg.RootNamespace != "istio-system" || cfg.TrustDomain != "cluster.local" {
		t.Fatalf("defaults = %+v, %v", cfg, err)
	}
	err = Parse([]byte("rootNamespace: Not_Valid\n"), Default())
	if err == nil || !strings.Contains(err.Error(), "field rootNamespace") {
		t.Errorf("invalid root namespace: %v", err)
	}
	if _, err := Load("/does/not/exist"); err == nil {
		t.Error("missing file accepted")
	}
}

func TestOutboundTrafficPolicy(t *testing.T) {
	if got := Default().OutboundTrafficPolicy.Mode; got != AllowAny {
		t.Errorf("default mode %q, want %s", got, AllowAny)
	}
	cfg := Default()
	if err := Parse([]byte("outboundTrafficPolicy:\n  mode: REGISTRY_ONLY\n"), cfg); err != nil ||
		cfg.OutboundTrafficPolicy.Mode != RegistryOnly {
		t.Errorf("REGISTRY_ONLY read as %q, %v", cfg.OutboundTrafficPolicy.Mode, err)
	}
	// A file that does not name the mode keeps what was there.
	if err := Parse([]byte("trustDomain: example.org\n"), cfg); err != nil || cfg.OutboundTrafficPolicy.Mode != RegistryOnly {
		t.Errorf("mode after an overlay without it: %q, %v", cfg.OutboundTrafficPolicy.Mode, err)
	}
	err := Parse([]byte("outboundTrafficPolicy: {mode: ALLOW_SOME}\n"), Default())
	if err == nil || !strings.Contains(err.Error(), "field outboundTrafficPolicy.mode") {
		t.Errorf("unknown mode: %v", err)
	}
}

// inboundTrafficPolicy is read (PASSTHROUGH by default, as Istio's), not reported as unimplemented; an
// unknown mode is refused.
func TestInboundTrafficPolicy(t *testing.T) {
	if got := Default().InboundTrafficPolicy.Mode; got != InboundPassthrough {
		t.Errorf("default mode %q, want %s", got, InboundPassthrough)
	}
	cfg := Default()
	if err := Parse([]byte("inboundTrafficPolicy:\n  mode: LOCALHOST\n"), cfg); err != nil ||
		cfg.InboundTrafficPolicy.Mode != InboundLocalhost {
		t.Errorf("LOCALHOST read as %q, %v", cfg.InboundTrafficPolicy.Mode, err)
	}
	if len(cfg.Unimplemented) != 0 {
		t.Errorf("unimplemented %v", cfg.Unimplemented)
	}
	err := Parse([]byte("inboundTrafficPolicy: {mode: LOOPBACK}\n"), Default())
	if err == nil || !strings.Contains(err.Error(), "field inboundTrafficPolicy.mode") {
		t.Errorf("unknown mode: %v", err)
	}
}

func TestExtensionProviders(t *testing.T) {
	cfg := Default()
	err := Parse([]byte(`
extensionProviders:
- name: opa
  envoyExtAuthzGrpc: {service: opa.authz.svc.cluster.local, port: 9191, timeout: 0.5s, failOpen: true}
- name: oauth
  envoyExtAuthzHttp:
    service: authz/oauth2-proxy.authz.svc.cluster.local
    port: 4180
    pathPrefix: /check
    statusOnError: "503"
    includeRequestHeadersInCheck: [authorization, x-auth-*]
    headersToUpstreamOnAllow: [x-user]
- name: tracing
  zipkin: {service: zipkin.istio-system.svc.cluster.local, port: 9411}
`), cfg)
	if err != nil {
		t.Fatal(err)
	}
	opa := cfg.ExtensionProvider("opa")
	if opa == nil || opa.Kind != KindExtAuthzGRPC || opa.EnvoyExtAuthzGRPC.Port != 9191 || !opa.EnvoyExtAuthzGRPC.FailOpen ||
		opa.EnvoyExtAuthzGRPC.CheckTimeout().Milliseconds() != 500 {
		t.Errorf("opa %+v", opa)
	}
	oauth := cfg.ExtensionProvider("oauth")
	if oauth == nil || oauth.Kind != KindExtAuthzHTTP || oauth.EnvoyExtAuthzHTTP.PathPrefix != "/check" ||
		oauth.EnvoyExtAuthzHTTP.CheckTimeout() != DefaultExtAuthzTimeout || len(oauth.EnvoyExtAuthzHTTP.IncludeRequestHeadersInCheck) != 2 {
		t.Errorf("oauth %+v", oauth)
	}
	if tr := cfg.ExtensionProvider("tracing"); tr == nil || tr.Kind != "zipkin" || tr.EnvoyExtAuthzGRPC != nil || tr.EnvoyExtAuthzHTTP != nil {
		t.Errorf("tracing %+v", tr)
	}
	if cfg.ExtensionProvider("none") != nil {
		t.Error("an undefined provider found")
	}
	for _, tc := range []struct{ yaml, field string }{
		{"extensionProviders: [{envoyExtAuthzGrpc: {service: a, port: 1}}]", "extensionProviders[0].name"},
		{"extensionProviders: [{name: a, envoyExtAuthzGrpc: {service: a, port: 1}}, {name: a, envoyExtAuthzGrpc: {service: b, port: 1}}]",
			"extensionProviders[1].name"},
		{"extensionProviders: [{name: Bad_Name, envoyExtAuthzGrpc: {service: a, port: 1}}]", "extensionProviders[0].name"},
		{"extensionProviders: [{name: a, envoyExtAuthzGrpc: {port: 1}}]", "extensionProviders[0].envoyExtAuthzGrpc.service"},
		{"extensionProviders: [{name: a, envoyExtAuthzGrpc: {service: a, port: 70000}}]", "extensionProviders[0].envoyExtAuthzGrpc.port"},
		{"extensionProviders: [{name: a, envoyExtAuthzHttp: {service: a, port: 1, timeout: soon}}]",
			"extensionProviders[0].envoyExtAuthzHttp.timeout"},
		{"extensionProviders: [{name: a, envoyExtAuthzHttp: {service: a, port: 1, pathPrefix: check}}]",
			"extensionProviders[0].envoyExtAuthzHttp.pathPrefix"},
		{"extensionProviders: [{name: a, envoyExtAuthzHttp: {service: a, port: 1, statusOnError: teapot}}]",
			"extensionProviders[0].envoyExtAuthzHttp.statusOnError"},
		{"extensionProviders: [{name: a, envoyExtAuthzHttp: {service: a, port: 1, headersToUpstreamOnAllow: ['*']}}]",
			"extensionProviders[0].envoyExtAuthzHttp.headersToUpstreamOnAllow"},
		{"extensionProviders: [{name: a, envoyExtAuthzHttp: {service: a, port: 1}, envoyExtAuthzGrpc: {service: a, port: 1}}]",
			"extensionProviders[0]"},
	} {
		err := Parse([]byte(tc.yaml), Default())
		if err == nil || !strings.Contains(err.Error(), "field "+tc.field) {
			t.Errorf("%s: %v, want an error naming %s", tc.yaml, err, tc.field)
		}
	}
}

func TestPathNormalization(t *testing.T) {
	if got := Default().PathNormalization.Normalization; got != PathNormalizationBase {
		t.Errorf("default normalization %q, want %s", got, PathNormalizationBase)
	}
	cfg := Default()
	if err := Parse([]byte("pathNormalization: {normalization: MERGE_SLASHES}\n"), cfg); err != nil ||
		cfg.PathNormalization.Normalization != PathNormalizationMergeSlashes {
		t.Errorf("MERGE_SLASHES read as %q, %v", cfg.PathNormalization.Normalization, err)
	}
	err := Parse([]byte("pathNormalization: {normalization: LOOSE}\n"), Default())
	if err == nil || !strings.Contains(err.Error(), "field pathNormalization.normalization") {
		t.Errorf("unknown normalization: %v", err)
	}
}

func TestJWKSFetchSettings(t *testing.T) {
	if got := Default().JWKSFetch.Settings(); got.Timeout != 5*time.Second || got.RefreshInterval != 20*time.Minute ||
		got.RetryInterval != time.Minute || got.MaxStale != 168*time.Hour || got.MaxBytes != 1<<20 || got.MaxTimeout != 30*time.Second {
		t.Errorf("defaults %+v", got)
	}
	cfg := Default()
	if err := Parse([]byte("jwksFetch: {timeout: 2s, maxBytes: 4096, refreshInterval: 5m}\n"), cfg); err != nil {
		t.Fatal(err)
	}
	if got := cfg.JWKSFetch.Settings(); got.Timeout != 2*time.Second || got.MaxBytes != 4096 || got.RefreshInterval != 5*time.Minute ||
		got.RetryInterval != time.Minute {
		t.Errorf("parsed %+v", got)
	}
	for doc, field := range map[string]string{
		"jwksFetch: {timeout: soon}\n":     "jwksFetch.timeout",
		"jwksFetch: {maxStale: -1h}\n":     "jwksFetch.maxStale",
		"jwksFetch: {maxBytes: -1}\n":      "jwksFetch.maxBytes",
		"jwksFetch: {retryInterval: 0s}\n": "jwksFetch.retryInterval",
	} {
		if err := Parse([]byte(doc), Default()); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%q: %v, want an error naming %s", doc, err, field)
		}
	}
}

// Fields of Istio's MeshConfig that Sextant does not read are listed, so that they are reported instead of
// silently having no effect.
func TestUnimplementedFieldsAreListed(t *testing.T) {
	cfg := Default()
	data := "trustDomain: example.org\ndefaultProviders: {metrics: [prometheus]}\nenableTracing: true\n" +
		"defaultConfig:\n  domainSuffix: corp.local\n  holdApplicationUntilProxyStarts: true\n"
	if err := Parse([]byte(data), cfg); err != nil {
		t.Fatal(err)
	}
	want := []string{"defaultConfig.holdApplicationUntilProxyStarts", "defaultProviders.metrics", "enableTracing"}
	if !slices.Equal(cfg.Unimplemented, want) {
		t.Errorf("unimplemented %q, want %q", cfg.Unimplemented, want)
	}
	if err := Parse([]byte("enableTracing: false\n"), cfg); err != nil || len(cfg.Unimplemented) != 3 {
		t.Errorf("after a second overlay naming one again: %q, %v", cfg.Unimplemented, err)
	}
}

// defaultHttpRetryPolicy is read as istiod reads it (protobuf JSON of a VirtualService's HTTPRetry), kept
// over a later overlay that does not set it, and refused when istiod would refuse it.
func TestDefaultHTTPRetryPolicy(t *testing.T) {
	cfg := Default()
	if cfg.DefaultRetries() != nil {
		t.Fatalf("default %v, want none", cfg.DefaultRetries())
	}
	data := "defaultHttpRetryPolicy:\n  attempts: 5\n  perTryTimeout: 2s\n  retryOn: 5xx,409\n  retryIgnorePreviousHosts: false\n"
	if err := Parse([]byte(data), cfg); err != nil {
		t.Fatal(err)
	}
	p := cfg.DefaultRetries()
	if p.GetAttempts() != 5 || p.GetPerTryTimeout().AsDuration() != 2*time.Second || p.GetRetryOn() != "5xx,409" ||
		p.GetRetryIgnorePreviousHosts() == nil || p.GetRetryIgnorePreviousHosts().GetValue() {
		t.Errorf("policy %v", p)
	}
	if len(cfg.Unimplemented) != 0 {
		t.Errorf("unimplemented %q", cfg.Unimplemented)
	}
	if err := Parse([]byte("trustDomain: example.org\n"), cfg); err != nil || cfg.DefaultRetries() != p {
		t.Errorf("after an overlay without it: %v, %v", cfg.DefaultRetries(), err)
	}
	for _, bad := range []string{"defaultHttpRetryPolicy: {attempts: 2, retries: 3}\n", "defaultHttpRetryPolicy: {perTryTimeout: 2}\n",
		"defaultHttpRetryPolicy: [1]\n"} {
		if err := Parse([]byte(bad), Default()); err == nil || !strings.Contains(err.Error(), "defaultHttpRetryPolicy") {
			t.Errorf("%q: error %v, want one naming defaultHttpRetryPolicy", bad, err)
		}
	}
}

func TestDiscoverySelectors(t *testing.T) {
	cfg := Default()
	err := Parse([]byte("discoverySelectors:\n- matchLabels: {env: prod}\n"+
		"- matchExpressions:\n  - {key: app, operator: In, values: [a, b]}\n"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.DiscoverySelectors) != 2 || cfg.DiscoverySelectors[0].MatchLabels["env"] != "prod" ||
		cfg.DiscoverySelectors[1].MatchExpressions[0].Key != "app" {
		t.Fatalf("selectors %+v", cfg.DiscoverySelectors)
	}
	if slices.Contains(cfg.Unimplemented, "discoverySelectors") {
		t.Error("discoverySelectors reported as not implemented")
	}
	err = Parse([]byte("discoverySelectors:\n- matchExpressions:\n  - {key: app, operator: Near}\n"), Default())
	if err == nil || !strings.Contains(err.Error(), "discoverySelectors[0]") {
		t.Fatalf("err = %v, want one naming discoverySelectors[0]", err)
	}
}

func TestDefaultExportTo(t *testing.T) {
	cfg := Default()
	err := Parse([]byte("defaultServiceExportTo: [\".\"]\n"+
		"defaultVirtualServiceExportTo: [\"*\", team-a]\ndefaultDestinationRuleExportTo: [\"~\"]\n"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.DefaultServiceExportTo, []string{"."}) || !slices.Equal(cfg.DefaultVirtualServiceExportTo, []string{"*", "team-a"}) ||
		!slices.Equal(cfg.DefaultDestinationRuleExportTo, []string{"~"}) {
		t.Fatalf("got %v %v %v", cfg.DefaultServiceExportTo, cfg.DefaultVirtualServiceExportTo, cfg.DefaultDestinationRuleExportTo)
	}
	err = Parse([]byte("defaultServiceExportTo: [\"Team_A\"]\n"), Default())
	if err == nil || !strings.Contains(err.Error(), "defaultServiceExportTo[0]") {
		t.Fatalf("err = %v, want one naming defaultServiceExportTo[0]", err)
	}
}

// Mesh mTLS takes versions and ciphers, not ECDH curves: istiod refuses a mesh config that sets them, and so
// does Sextant, naming the field; tlsDefaults takes them.
func TestMeshMTLSRefusesECDHCurves(t *testing.T) {
	err := Parse([]byte("meshMTLS: {minProtocolVersion: TLSV1_3, ecdhCurves: [P-256]}\n"), Default())
	if err == nil || !strings.Contains(err.Error(), "meshMTLS.ecdhCurves") {
		t.Errorf("meshMTLS.ecdhCurves: %v, want refused naming it", err)
	}
	cfg := Default()
	if err := Parse([]byte("meshMTLS: {minProtocolVersion: TLSV1_3}\ntlsDefaults: {ecdhCurves: [P-256]}\n"), cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Spec.GetMeshMTLS().GetMinProtocolVersion().String() != "TLSV1_3" || len(cfg.Spec.GetTlsDefaults().GetEcdhCurves()) != 1 {
		t.Errorf("spec %v", cfg.Spec)
	}
}

// The mesh's localityLbSetting is refused where istiod's validation refuses it, naming the field.
func TestLocalityLbSettingErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, field string }{
		{"localityLbSetting: {failover: [{from: a, to: b}], distribute: [{from: 'a/*', to: {'b/*': 100}}]}\n", "localityLbSetting.failover"},
		{"localityLbSetting: {failover: [{from: a, to: b}], failoverPriority: [topology.kubernetes.io/zone]}\n",
			"localityLbSetting.failoverPriority[0]"},
	} {
		if err := Parse([]byte(tc.yaml), Default()); err == nil || !strings.Contains(err.Error(), "field "+tc.field+":") {
			t.Errorf("%q: error %v, want one naming %s", tc.yaml, err, tc.field)
		}
	}
	if err := Parse([]byte("localityLbSetting: {failover: [{from: a, to: b}], failoverPriority: [my-label]}\n"), Default()); err != nil {
		t.Errorf("valid localityLbSetting refused: %v", err)
	}
}

// The capture ports are read, and one that is no port is refused, naming the field.
func TestCapturePorts(t *testing.T) {
	cfg := Default()
	if err := Parse([]byte("proxyListenPort: 15101\nproxyInboundListenPort: 15106\n"), cfg); err != nil {
		t.Fatal(err)
	}
	if s := cfg.GetSpec(); s.GetProxyListenPort() != 15101 || s.GetProxyInboundListenPort() != 15106 {
		t.Errorf("ports = %d, %d", s.GetProxyListenPort(), s.GetProxyInboundListenPort())
	}
	for _, doc := range []string{"proxyListenPort: 0\n", "proxyInboundListenPort: 70000\n"} {
		field, _, _ := strings.Cut(doc, ":")
		if err := Parse([]byte(doc), Default()); err == nil || !strings.Contains(err.Error(), "field "+field+":") {
			t.Errorf("%q: error %v, want one naming %s", doc, err, field)
		}
	}
}
