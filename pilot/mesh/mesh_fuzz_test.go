package mesh

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"",
		"{}\n",
		"null\n",
		"rootNamespace: mesh-root\ntrustDomain: example.org\naccessLogFile: /dev/stdout\ndefaultConfig:\n  domainSuffix: corp.local\n" +
			"  proxyMetadata: {}\n",
		"domainSuffix: a.b\ndefaultConfig: {domainSuffix: c.d}\nclusterID: east\nnetwork: net-1\n",
		"rootNamespace: Not_Valid\n",
		"trustDomain: \"\"\n",
		"defaultConfig: []\n",
		"defaultHttpRetryPolicy: {attempts: 3, perTryTimeout: 1.5s, retryOn: gateway-error, retryRemoteLocalities: true}\n",
		"rootNamespace: 7\n",
		"{\"trustDomain\": \"td\", \"meshNetworks\": {\"n\": {}}}",
		"a: &x [*x]\n",
		"extensionProviders: [{name: opa, envoyExtAuthzGrpc: {service: opa.ns, port: 9191, timeout: 1s}}, {name: z, zipkin: {}}]\n",
		"extensionProviders: [{name: h, envoyExtAuthzHttp: {service: a, port: 1, pathPrefix: /x, includeRequestHeadersInCheck: [a*]}}]\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := Default()
		if err := Parse(data, cfg); err != nil {
			return
		}
		// What Parse accepts is used as is: the root namespace names a namespace, the trust domain and
		// the domain suffix go into SPIFFE ids and host names.
		if errs := validation.IsDNS1123Label(cfg.RootNamespace); len(errs) > 0 {
			t.Fatalf("accepted rootNamespace %q: %v", cfg.RootNamespace, errs)
		}
		if errs := validation.IsDNS1123Subdomain(cfg.TrustDomain); len(errs) > 0 {
			t.Fatalf("accepted trustDomain %q: %v", cfg.TrustDomain, errs)
		}
		if errs := validation.IsDNS1123Subdomain(cfg.DomainSuffix); len(errs) > 0 {
			t.Fatalf("accepted domainSuffix %q: %v", cfg.DomainSuffix, errs)
		}
		if cfg.ClusterID == "" {
			t.Fatal("accepted an empty clusterID")
		}
		// Overlaying the same file again changes nothing, and the result written out reads back the same.
		again := *cfg
		if err := Parse(data, &again); err != nil || !reflect.DeepEqual(again, *cfg) {
			t.Fatalf("second overlay: %+v, %v; want %+v", again, err, *cfg)
		}
		out, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		back := Default()
		err = Parse(out, back)
		back.Unimplemented = cfg.Unimplemented // only fields Sextant reads are written out
		back.Spec = cfg.Spec                   // Istio's view of the file is not written out
		if err != nil || !reflect.DeepEqual(*back, *cfg) {
			t.Fatalf("written out as %q, read back as %+v, %v; want %+v", out, *back, err, *cfg)
		}
	})
}
