package config_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	networking "istio.io/api/networking/v1alpha3"
	networkingv1beta1 "istio.io/api/networking/v1beta1"
	security "istio.io/api/security/v1beta1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingk8s "k8s.io/api/networking/v1"
	"sigs.k8s.io/yaml"

	"github.com/sextantmesh/sextant/pilot/config"
)

// validDoc is one valid document per kind, written without metadata.namespace so the default applies.
type validDoc struct {
	kind       config.Kind
	apiVersion string // as written in doc
	doc        string
	namespaced bool
	specType   any
	check      func(t *testing.T, spec any)
}

var validDocs = []validDoc{
	{
		kind: config.Namespace, apiVersion: "v1", specType: &corev1.Namespace{},
		doc: `
apiVersion: v1
kind: Namespace
metadata:
  name: shop
  labels:
    istio.io/dataplane-mode: ambient
`,
		check: func(t *testing.T, spec any) {
			if got := spec.(*corev1.Namespace).Name; got != "shop" {
				t.Errorf("Namespace name = %q", got)
			}
		},
	},
	{
		kind: config.Service, apiVersion: "v1", namespaced: true, specType: &corev1.Service{},
		doc: `
apiVersion: v1
kind: Service
metadata:
  name: reviews
  labels: {app: reviews}
  annotations: {note: "hello"}
spec:
  selector: {app: reviews}
  ports:
  - name: http
    port: 9080
    targetPort: 9080
  - name: grpc
    port: 9090
`,
		check: func(t *testing.T, spec any) {
			s := spec.(*corev1.Service)
			if len(s.Spec.Ports) != 2 || s.Spec.Ports[0].Port != 9080 || s.Spec.Ports[1].Name != "grpc" {
				t.Errorf("Service ports = %+v", s.Spec.Ports)
			}
			if s.Spec.Selector["app"] != "reviews" {
				t.Errorf("Service selector = %v", s.Spec.Selector)
			}
		},
	},
	{
		kind: config.Pod, apiVersion: "v1", namespaced: true, specType: &corev1.Pod{},
		doc: `
apiVersion: v1
kind: Pod
metadata:
  name: reviews-v1-7d8f9
  labels: {app: reviews, version: v1}
spec:
  nodeName: node-a
  serviceAccountName: bookinfo-reviews
  containers:
  - name: reviews
    image: reviews:v1
status:
  phase: Running
  podIP: 10.0.1.5
`,
		check: func(t *testing.T, spec any) {
			p := spec.(*corev1.Pod)
			if p.Status.PodIP != "10.0.1.5" || p.Spec.NodeName != "node-a" || p.Spec.ServiceAccountName != "bookinfo-reviews" {
				t.Errorf("Pod = %+v / %+v", p.Spec, p.Status)
			}
		},
	},
	{
		kind: config.Node, apiVersion: "v1", specType: &corev1.Node{},
		doc: `
apiVersion: v1
kind: Node
metadata:
  name: node-a
  labels:
    topology.kubernetes.io/zone: eu-west1-a
`,
		check: func(t *testing.T, spec any) {
			if z := spec.(*corev1.Node).Labels["topology.kubernetes.io/zone"]; z != "eu-west1-a" {
				t.Errorf("Node zone label = %q", z)
			}
		},
	},
	{
		kind: config.EndpointSlice, apiVersion: "discovery.k8s.io/v1", namespaced: true, specType: &discoveryv1.EndpointSlice{},
		doc: `
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: reviews-abc12
  labels:
    kubernetes.io/service-name: reviews
addressType: IPv4
endpoints:
- addresses: ["10.0.1.5"]
  conditions: {ready: true}
ports:
- name: http
  port: 9080
`,
		check: func(t *testing.T, spec any) {
			s := spec.(*discoveryv1.EndpointSlice)
			if s.AddressType != discoveryv1.AddressTypeIPv4 || len(s.Endpoints) != 1 || s.Endpoints[0].Addresses[0] != "10.0.1.5" {
				t.Errorf("EndpointSlice = %+v", s)
			}
			if len(s.Ports) != 1 || s.Ports[0].Port == nil || *s.Ports[0].Port != 9080 {
				t.Errorf("EndpointSlice ports = %+v", s.Ports)
			}
		},
	},
	{
		kind: config.ServiceEntry, apiVersion: "networking.istio.io/v1", namespaced: true, specType: &networking.ServiceEntry{},
		doc: `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: httpbin
spec:
  hosts: [httpbin.org]
  location: MESH_EXTERNAL
  resolution: DNS
  ports:
  - {number: 443, name: https, protocol: TLS}
`,
		check: func(t *testing.T, spec any) {
			s := spec.(*networking.ServiceEntry)
			if s.Hosts[0] != "httpbin.org" || s.Resolution != networking.ServiceEntry_DNS || s.Ports[0].Number != 443 {
				t.Errorf("ServiceEntry = %v", s)
			}
		},
	},
	{
		kind: config.WorkloadEntry, apiVersion: "networking.istio.io/v1", namespaced: true, specType: &networking.WorkloadEntry{},
		doc: `
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata:
  name: vm-1
spec:
  address: 10.1.0.1
  labels: {app: ratings}
  ports: {http: 8080}
`,
		check: func(t *testing.T, spec any) {
			w := spec.(*networking.WorkloadEntry)
			if w.Address != "10.1.0.1" || w.Ports["http"] != 8080 {
				t.Errorf("WorkloadEntry = %v", w)
			}
		},
	},
	{
		kind: config.DestinationRule, apiVersion: "networking.istio.io/v1", namespaced: true, specType: &networking.DestinationRule{},
		doc: `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: reviews
spec:
  host: reviews
  trafficPolicy:
    tls: {mode: ISTIO_MUTUAL}
  subsets:
  - name: v1
    labels: {version: v1}
  - name: v2
    labels: {version: v2}
`,
		check: func(t *testing.T, spec any) {
			d := spec.(*networking.DestinationRule)
			if d.Host != "reviews" || len(d.Subsets) != 2 || d.TrafficPolicy.GetTls().GetMode() != networking.ClientTLSSettings_ISTIO_MUTUAL {
				t.Errorf("DestinationRule = %v", d)
			}
		},
	},
	{
		kind: config.VirtualService, apiVersion: "networking.istio.io/v1", namespaced: true, specType: &networking.VirtualService{},
		doc: `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: reviews
spec:
  hosts: [reviews]
  http:
  - match:
    - uri: {prefix: /api}
    route:
    - destination: {host: reviews, subset: v1}
      weight: 80
    - destination: {host: reviews, subset: v2}
      weight: 20
`,
		check: func(t *testing.T, spec any) {
			v := spec.(*networking.VirtualService)
			if v.Hosts[0] != "reviews" || len(v.Http) != 1 || len(v.Http[0].Route) != 2 || v.Http[0].Route[1].Weight != 20 {
				t.Errorf("VirtualService = %v", v)
			}
			if v.Http[0].Match[0].Uri.GetPrefix() != "/api" {
				t.Errorf("VirtualService match = %v", v.Http[0].Match)
			}
		},
	},
	{
		kind: config.Gateway, apiVersion: "networking.istio.io/v1", namespaced: true, specType: &networking.Gateway{},
		doc: `
apiVersion: networking.istio.io/v1
kind: Gateway
metadata:
  name: ingress
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 80, name: http, protocol: HTTP}
    hosts: ["*"]
`,
		check: func(t *testing.T, spec any) {
			g := spec.(*networking.Gateway)
			if g.Selector["istio"] != "ingressgateway" || g.Servers[0].Port.Number != 80 {
				t.Errorf("Gateway = %v", g)
			}
		},
	},
	{
		kind: config.Sidecar, apiVersion: "networking.istio.io/v1", namespaced: true, specType: &networking.Sidecar{},
		doc: `
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata:
  name: default
spec:
  egress:
  - hosts: ["./*", "istio-system/*"]
`,
		check: func(t *testing.T, spec any) {
			s := spec.(*networking.Sidecar)
			if len(s.Egress) != 1 || !reflect.DeepEqual(s.Egress[0].Hosts, []string{"./*", "istio-system/*"}) {
				t.Errorf("Sidecar = %v", s)
			}
		},
	},
	{
		kind: config.AuthorizationPolicy, apiVersion: "security.istio.io/v1", namespaced: true, specType: &security.AuthorizationPolicy{},
		doc: `
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: reviews-viewer
spec:
  selector:
    matchLabels: {app: reviews}
  action: ALLOW
  rules:
  - from:
    - source:
        principals: [cluster.local/ns/bookinfo/sa/productpage]
        ipBlocks: [10.0.0.0/8, 192.168.1.1]
    to:
    - operation: {methods: [GET], ports: ["9080"]}
`,
		check: func(t *testing.T, spec any) {
			a := spec.(*security.AuthorizationPolicy)
			if a.Action != security.AuthorizationPolicy_ALLOW ||
				a.Rules[0].From[0].Source.Principals[0] != "cluster.local/ns/bookinfo/sa/productpage" {
				t.Errorf("AuthorizationPolicy = %v", a)
			}
		},
	},
	{
		kind: config.PeerAuthentication, apiVersion: "security.istio.io/v1", namespaced: true, specType: &security.PeerAuthentication{},
		doc: `
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata:
  name: reviews
spec:
  selector:
    matchLabels: {app: reviews}
  mtls: {mode: STRICT}
  portLevelMtls:
    9080: {mode: PERMISSIVE}
`,
		check: func(t *testing.T, spec any) {
			p := spec.(*security.PeerAuthentication)
			if p.Mtls.Mode != security.PeerAuthentication_MutualTLS_STRICT ||
				p.PortLevelMtls[9080].GetMode() != security.PeerAuthentication_MutualTLS_PERMISSIVE {
				t.Errorf("PeerAuthentication = %v", p)
			}
		},
	},
	{
		kind: config.RequestAuthentication, apiVersion: "security.istio.io/v1", namespaced: true, specType: &security.RequestAuthentication{},
		doc: `
apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata:
  name: jwt
spec:
  selector:
    matchLabels: {app: reviews}
  jwtRules:
  - issuer: https://issuer.example.com
    jwksUri: https://issuer.example.com/jwks
    fromHeaders: [{name: x-token, prefix: "Bearer "}]
    outputClaimToHeaders: [{header: x-sub, claim: sub}]
`,
		check: func(t *testing.T, spec any) {
			r := spec.(*security.RequestAuthentication).JwtRules[0]
			if r.Issuer != "https://issuer.example.com" || r.FromHeaders[0].Prefix != "Bearer " || r.OutputClaimToHeaders[0].Claim != "sub" {
				t.Errorf("RequestAuthentication rule = %v", r)
			}
		},
	},
	{
		kind: config.ProxyConfig, apiVersion: "networking.istio.io/v1beta1", namespaced: true, specType: &networkingv1beta1.ProxyConfig{},
		doc: `
apiVersion: networking.istio.io/v1beta1
kind: ProxyConfig
metadata:
  name: per-workload
spec:
  selector:
    matchLabels: {app: reviews}
  concurrency: 0
  environmentVariables: {ISTIO_META_DNS_CAPTURE: "true"}
  image: {imageType: distroless}
`,
		check: func(t *testing.T, spec any) {
			p := spec.(*networkingv1beta1.ProxyConfig)
			if p.Concurrency == nil || p.Concurrency.Value != 0 || p.Image.GetImageType() != "distroless" ||
				p.EnvironmentVariables["ISTIO_META_DNS_CAPTURE"] != "true" {
				t.Errorf("ProxyConfig = %v", p)
			}
		},
	},
	{
		kind: config.WorkloadGroup, apiVersion: "networking.istio.io/v1", namespaced: true, specType: &networking.WorkloadGroup{},
		doc: `
apiVersion: networking.istio.io/v1
kind: WorkloadGroup
metadata:
  name: reviews-vm
spec:
  metadata: {labels: {app: reviews}}
  template: {serviceAccount: reviews, ports: {http: 9080}}
`,
		check: func(t *testing.T, spec any) {
			g := spec.(*networking.WorkloadGroup)
			if g.GetMetadata().GetLabels()["app"] != "reviews" || g.GetTemplate().GetServiceAccount() != "reviews" {
				t.Errorf("WorkloadGroup = %v", g)
			}
		},
	},
	{
		kind: config.Ingress, apiVersion: "networking.k8s.io/v1", namespaced: true, specType: &networkingk8s.Ingress{},
		doc: `
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: shop
  annotations: {kubernetes.io/ingress.class: istio}
spec:
  rules:
  - host: shop.example.com
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: reviews, port: {number: 9080}}}}
`,
		check: func(t *testing.T, spec any) {
			i := spec.(*networkingk8s.Ingress)
			if len(i.Spec.Rules) != 1 || i.Spec.Rules[0].HTTP.Paths[0].Backend.Service.Port.Number != 9080 {
				t.Errorf("Ingress = %v", i)
			}
		},
	},
	{
		kind: config.IngressClass, apiVersion: "networking.k8s.io/v1", specType: &networkingk8s.IngressClass{},
		doc: `
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: istio
spec:
  controller: istio.io/ingress-controller
`,
		check: func(t *testing.T, spec any) {
			if c := spec.(*networkingk8s.IngressClass); c.Spec.Controller != "istio.io/ingress-controller" {
				t.Errorf("IngressClass = %v", c)
			}
		},
	},
	{
		// stringData is written into data, over an entry of the same key, as the API server does.
		kind: config.Secret, apiVersion: "v1", namespaced: true, specType: &corev1.Secret{},
		doc: `
apiVersion: v1
kind: Secret
metadata:
  name: ingress-cert
type: kubernetes.io/tls
data:
  tls.crt: Y2VydA==
  tls.key: b2xk
stringData:
  tls.key: key
`,
		check: func(t *testing.T, spec any) {
			s := spec.(*corev1.Secret)
			if string(s.Data["tls.crt"]) != "cert" || string(s.Data["tls.key"]) != "key" || s.StringData != nil || s.Type != corev1.SecretTypeTLS {
				t.Errorf("Secret = %v", s)
			}
		},
	},
}

// toJSON rewrites a YAML document as indented JSON.
func toJSON(t *testing.T, doc string) string {
	t.Helper()
	js, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatalf("test document is not YAML: %v", err)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, js, "", "  "); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

func nameOf(doc string) string {
	var m struct {
		Metadata struct{ Name string } `json:"metadata"`
	}
	if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
		panic(err)
	}
	return m.Metadata.Name
}

func TestParseEveryKind(t *testing.T) {
	covered := map[config.Kind]bool{}
	for _, tc := range validDocs {
		covered[tc.kind] = true
		for _, format := range []string{"yaml", "json"} {
			t.Run(string(tc.kind)+"/"+format, func(t *testing.T) {
				doc := tc.doc
				if format == "json" {
					doc = toJSON(t, doc)
					if !strings.HasPrefix(strings.TrimSpace(doc), "{") {
						t.Fatalf("not JSON: %s", doc)
					}
				}
				c, err := config.Parse([]byte(doc), "dir/mesh."+format, 3, "bookinfo")
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				wantNS := ""
				if tc.namespaced {
					wantNS = "bookinfo"
				}
				want := config.Key{Kind: tc.kind, Namespace: wantNS, Name: nameOf(tc.doc)}
				if c.Key != want {
					t.Errorf("Key = %v, want %v", c.Key, want)
				}
				if got, want := reflect.TypeOf(c.Spec), reflect.TypeOf(tc.specType); got != want {
					t.Fatalf("Spec is %v, want %v", got, want)
				}
				if c.Source != "file:dir/mesh."+format+"#3" {
					t.Errorf("Source = %q", c.Source)
				}
				if err := config.Validate(c); err != nil {
					t.Errorf("Validate of a parsed object: %v", err)
				}
				tc.check(t, c.Spec)
			})
		}
	}
	for _, ki := range config.Kinds() {
		if !covered[ki.Kind] {
			t.Errorf("kind %s has no valid document in this test", ki.Kind)
		}
	}
	if len(config.Kinds()) != 19 {
		t.Errorf("Kinds() has %d kinds, want 19", len(config.Kinds()))
	}
}

func TestParseMetadata(t *testing.T) {
	doc := `
apiVersion: v1
kind: Service
metadata:
  name: reviews
  namespace: shop
  labels: {app: reviews}
  annotations: {owner: team-a}
  resourceVersion: "42"
  generation: 7
  uid: 0b5c1a
  creationTimestamp: "2024-05-01T10:00:00Z"
spec:
  ports:
  - port: 80
`
	c, err := config.Parse([]byte(doc), "a.yaml", 0, "default")
	if err != nil {
		t.Fatal(err)
	}
	if c.Namespace != "shop" {
		t.Errorf("explicit namespace replaced by default: %q", c.Namespace)
	}
	if c.Labels["app"] != "reviews" || c.Annotations["owner"] != "team-a" {
		t.Errorf("labels %v annotations %v", c.Labels, c.Annotations)
	}
	if c.ResourceVersion != "42" || c.Generation != 7 || c.UID != "0b5c1a" || c.CreationTimestamp.Year() != 2024 {
		t.Errorf("metadata = rv %q gen %d uid %q created %v", c.ResourceVersion, c.Generation, c.UID, c.CreationTimestamp)
	}
	if svc := c.Spec.(*corev1.Service); svc.Namespace != "shop" || svc.Name != "reviews" {
		t.Errorf("Spec object meta = %s/%s", svc.Namespace, svc.Name)
	}
	if c.String() != "Service/shop/reviews (from file:a.yaml#0)" {
		t.Errorf("String() = %q", c.String())
	}
}

func TestParseDefaultNamespace(t *testing.T) {
	svc := "apiVersion: v1\nkind: Service\nmetadata:\n  name: a\n"
	c, err := config.Parse([]byte(svc), "", 0, "team-x")
	if err != nil {
		t.Fatal(err)
	}
	if c.Namespace != "team-x" {
		t.Errorf("namespace = %q, want the default team-x", c.Namespace)
	}
	// The Kubernetes object carries the namespace too, so consumers reading Spec agree with the key.
	if got := c.Spec.(*corev1.Service).Namespace; got != "team-x" {
		t.Errorf("Spec namespace = %q", got)
	}

	// Cluster-scoped kinds never get one, even when written with one (kubectl ignores it).
	node := "apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n  namespace: ignored\n"
	c, err = config.Parse([]byte(node), "", 0, "team-x")
	if err != nil {
		t.Fatal(err)
	}
	if c.Namespace != "" {
		t.Errorf("Node namespace = %q, want none", c.Namespace)
	}
}

func TestParseAPIVersions(t *testing.T) {
	spellings := []struct {
		apiVersion string
		kinds      []config.Kind
	}{
		{"networking.istio.io/v1", []config.Kind{config.ServiceEntry, config.WorkloadEntry, config.DestinationRule, config.VirtualService,
			config.Gateway, config.Sidecar}},
		{"networking.istio.io/v1beta1", []config.Kind{config.ServiceEntry, config.WorkloadEntry, config.DestinationRule, config.VirtualService,
			config.Gateway, config.Sidecar}},
		{"networking.istio.io/v1alpha3", []config.Kind{config.ServiceEntry, config.WorkloadEntry, config.DestinationRule, config.VirtualService,
			config.Gateway, config.Sidecar}},
		{"security.istio.io/v1", []config.Kind{config.AuthorizationPolicy, config.PeerAuthentication}},
		{"security.istio.io/v1beta1", []config.Kind{config.AuthorizationPolicy, config.PeerAuthentication}},
		{"v1", []config.Kind{config.Namespace, config.Service, config.Pod, config.Node}},
		{"discovery.k8s.io/v1", []config.Kind{config.EndpointSlice}},
	}
	docs := map[config.Kind]validDoc{}
	for _, d := range validDocs {
		docs[d.kind] = d
	}
	for _, sp := range spellings {
		for _, k := range sp.kinds {
			t.Run(sp.apiVersion+"/"+string(k), func(t *testing.T) {
				d := docs[k]
				doc := strings.Replace(d.doc, "apiVersion: "+d.apiVersion+"\n", "apiVersion: "+sp.apiVersion+"\n", 1)
				if !strings.Contains(doc, "apiVersion: "+sp.apiVersion+"\n") {
					t.Fatal("test document has no apiVersion line to replace")
				}
				c, err := config.Parse([]byte(doc), "f.yaml", 0, "default")
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				if c.Kind != k || reflect.TypeOf(c.Spec) != reflect.TypeOf(d.specType) {
					t.Errorf("got %s with %T", c.Kind, c.Spec)
				}
				ki, err := config.LookupKind(sp.apiVersion, string(k))
				if err != nil || ki.Kind != k {
					t.Errorf("LookupKind(%q, %s) = %v, %v", sp.apiVersion, k, ki.Kind, err)
				}
			})
		}
	}
}

func TestKindInfo(t *testing.T) {
	for _, tc := range []struct {
		kind       config.Kind
		apiVersion string
		namespaced bool
	}{
		{config.Namespace, "v1", false},
		{config.Node, "v1", false},
		{config.Service, "v1", true},
		{config.EndpointSlice, "discovery.k8s.io/v1", true},
		{config.VirtualService, "networking.istio.io/v1", true},
		{config.AuthorizationPolicy, "security.istio.io/v1", true},
	} {
		ki, ok := config.Info(tc.kind)
		if !ok {
			t.Errorf("Info(%s) not found", tc.kind)
			continue
		}
		if ki.APIVersion() != tc.apiVersion || ki.Namespaced != tc.namespaced {
			t.Errorf("Info(%s) = %s namespaced=%v, want %s namespaced=%v", tc.kind, ki.APIVersion(), ki.Namespaced, tc.apiVersion, tc.namespaced)
		}
	}
	if _, ok := config.Info("HTTPRoute"); ok {
		t.Error("Info(HTTPRoute) found")
	}
}

func TestParseErrors(t *testing.T) {
	svc := func(spec string) string {
		return "apiVersion: v1\nkind: Service\nmetadata:\n  name: reviews\n  namespace: bookinfo\nspec:\n" + spec
	}
	istio := func(kind, spec string) string {
		group := "networking.istio.io/v1"
		if kind == "AuthorizationPolicy" || kind == "PeerAuthentication" {
			group = "security.istio.io/v1"
		}
		return "apiVersion: " + group + "\nkind: " + kind + "\nmetadata:\n  name: obj\n  namespace: bookinfo\nspec:\n" + spec
	}
	const bookinfo = "bookinfo"
	tests := []struct {
		name      string
		doc       string
		kind      string
		namespace string
		objName   string
		field     string // exact, unless fieldHas is set
		fieldHas  []string
		message   []string // substrings of Message
	}{
		{
			name:    "unparseable YAML",
			doc:     "apiVersion: v1\nkind: Service\nmetadata: {name: [reviews\n",
			message: []string{"not valid YAML", "line"},
		},
		{
			name:    "tabs for indentation",
			doc:     "apiVersion: v1\nkind: Service\nmetadata:\n\tname: reviews\n",
			message: []string{"not valid YAML"},
		},
		{
			name:    "empty document",
			doc:     "# only a comment\n",
			message: []string{"empty document"},
		},
		{
			name:    "not an object",
			doc:     "- a\n- b\n",
			message: []string{"cannot unmarshal array"},
		},
		{
			name: "unknown kind", doc: "apiVersion: v1\nkind: Deployment\nmetadata:\n  name: reviews\n",
			kind: "Deployment", objName: "reviews", field: "kind",
			message: []string{`unknown kind "Deployment"`},
		},
		{
			name: "missing kind", doc: "apiVersion: v1\nmetadata:\n  name: reviews\n",
			objName: "reviews", field: "kind", message: []string{"missing"},
		},
		{
			name: "missing apiVersion", doc: "kind: Service\nmetadata:\n  name: reviews\n",
			kind: "Service", objName: "reviews", field: "apiVersion", message: []string{"missing"},
		},
		{
			name: "unknown apiVersion for a core kind", doc: "apiVersion: v2\nkind: Service\nmetadata:\n  name: reviews\n",
			kind: "Service", objName: "reviews", field: "apiVersion",
			message: []string{`"v2"`, "not served for kind Service", "(want v1)"},
		},
		{
			name: "unknown apiVersion for an Istio kind",
			doc:  "apiVersion: networking.istio.io/v2\nkind: VirtualService\nmetadata:\n  name: reviews\n",
			kind: "VirtualService", objName: "reviews", field: "apiVersion",
			message: []string{`"networking.istio.io/v2"`, "networking.istio.io/v1|v1beta1|v1alpha3"},
		},
		{
			name: "known kind in the wrong group", doc: "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata:\n  name: gw\n",
			kind: "Gateway", objName: "gw", field: "apiVersion",
			message: []string{`"gateway.networking.k8s.io/v1"`, "networking.istio.io/v1"},
		},
		{
			name: "security kinds have no v1alpha3",
			doc:  "apiVersion: security.istio.io/v1alpha3\nkind: PeerAuthentication\nmetadata:\n  name: pa\n",
			kind: "PeerAuthentication", objName: "pa", field: "apiVersion",
			message: []string{"security.istio.io/v1|v1beta1"},
		},
		{
			name: "missing metadata.name", doc: "apiVersion: v1\nkind: Service\nmetadata:\n  namespace: bookinfo\n",
			kind: "Service", namespace: bookinfo, field: "metadata.name", message: []string{"missing"},
		},
		{
			name: "no metadata at all", doc: "apiVersion: v1\nkind: Service\nspec: {}\n",
			kind: "Service", field: "metadata.name", message: []string{"missing"},
		},
		{
			name: "invalid name", doc: "apiVersion: v1\nkind: Service\nmetadata:\n  name: Reviews_V1\n",
			kind: "Service", objName: "Reviews_V1", field: "metadata.name",
			message: []string{`"Reviews_V1" is invalid`, "RFC 1123"},
		},
		{
			name: "invalid namespace", doc: "apiVersion: v1\nkind: Service\nmetadata:\n  name: reviews\n  namespace: Book.Info\n",
			kind: "Service", namespace: "Book.Info", objName: "reviews", field: "metadata.namespace",
			message: []string{`"Book.Info" is invalid`},
		},
		{
			name: "name of the wrong type", doc: "apiVersion: v1\nkind: Service\nmetadata:\n  name: 5\n",
			kind: "Service", field: "metadata.name", message: []string{"cannot unmarshal number", "want string"},
		},
		{
			name: "Service port is a word", doc: svc("  ports:\n  - port: eighty\n"),
			kind: "Service", namespace: bookinfo, objName: "reviews", fieldHas: []string{"spec", "ports", "port"},
			message: []string{"cannot unmarshal string", "int32"},
		},
		{
			name: "unknown field in a Service spec", doc: svc("  portz:\n  - port: 80\n"),
			kind: "Service", namespace: bookinfo, objName: "reviews", field: "spec.portz",
			message: []string{"unknown field"},
		},
		{
			name: "unknown field in metadata", doc: "apiVersion: v1\nkind: Service\nmetadata:\n  name: reviews\n  lables: {a: b}\n",
			kind: "Service", namespace: "default", objName: "reviews", field: "metadata.lables",
			message: []string{"unknown field"},
		},
		{
			name: "VirtualService hosts is a number", doc: istio("VirtualService", "  hosts: 5\n"),
			kind: "VirtualService", namespace: bookinfo, objName: "obj", field: "spec.hosts",
			message: []string{"wrong type", "5"},
		},
		{
			name: "VirtualService route weight is a word",
			doc:  istio("VirtualService", "  hosts: [a]\n  http:\n  - route:\n    - destination: {host: a}\n      weight: heavy\n"),
			kind: "VirtualService", namespace: bookinfo, objName: "obj", field: "spec.http[0].route[0].weight",
			message: []string{"int32", "heavy"},
		},
		{
			name: "wrong type after non-ASCII text",
			doc: istio("VirtualService", "  hosts: [\"bücher.example\", \"日本.example\"]\n  http:\n"+
				"  - headers: {request: {set: {x-note: \"naïve \\\"quoted\\\" {[,]}\"}}}\n    route: {destination: {host: a}}\n"),
			kind: "VirtualService", namespace: bookinfo, objName: "obj", field: "spec.http[0].route",
			message: []string{"wrong type"},
		},
		{
			name: "unknown field in an Istio spec", doc: istio("VirtualService", "  hosts: [a]\n  htttp: []\n"),
			kind: "VirtualService", namespace: bookinfo, objName: "obj", field: "spec.htttp",
			message: []string{`unknown field "htttp"`},
		},
		{
			name: "unknown nested field in an Istio spec",
			doc:  istio("Gateway", "  servers:\n  - port: {number: 80, name: http, protocol: HTTP}\n    host: [a]\n"),
			kind: "Gateway", namespace: bookinfo, objName: "obj", field: "spec.servers[0].host",
			message: []string{`unknown field "host"`},
		},
		{
			name: "unknown enum value", doc: istio("PeerAuthentication", "  mtls: {mode: STRICTEST}\n"),
			kind: "PeerAuthentication", namespace: bookinfo, objName: "obj", field: "spec.mtls.mode",
			message: []string{"STRICTEST"},
		},
		{
			name: "unknown top-level field in an Istio document", doc: istio("VirtualService", "  hosts: [a]\nspecs: {}\n"),
			kind: "VirtualService", namespace: bookinfo, objName: "obj", field: "specs",
			message: []string{"unknown field"},
		},
		{
			name: "delegate VirtualService (no hosts) with gateways",
			doc:  istio("VirtualService", "  gateways: [gw]\n  http:\n  - route:\n    - destination: {host: a}\n"),
			kind: "VirtualService", namespace: bookinfo, objName: "obj", field: "spec.gateways",
			message: []string{"delegate", "must not name gateways"},
		},
		{
			name: "delegate VirtualService with tcp routes", doc: istio("VirtualService", "  tcp:\n  - route:\n    - destination: {host: a}\n"),
			kind: "VirtualService", namespace: bookinfo, objName: "obj", field: "spec.tcp",
			message: []string{"only have http routes"},
		},
		{
			name: "delegate VirtualService that delegates", doc: istio("VirtualService", "  http:\n  - delegate: {name: b}\n"),
			kind: "VirtualService", namespace: bookinfo, objName: "obj", field: "spec.http[0].delegate",
			message: []string{"cannot delegate again"},
		},
		{
			name: "root route with both delegate and route",
			doc:  istio("VirtualService", "  hosts: [a]\n  http:\n  - delegate: {name: b}\n    route:\n    - destination: {host: a}\n"),
			kind: "VirtualService", namespace: bookinfo, objName: "obj", field: "spec.http[0].route",
			message: []string{"cannot be combined with delegate"},
		},
		{
			name: "VirtualService without routes", doc: istio("VirtualService", "  hosts: [a]\n"),
			kind: "VirtualService", namespace: bookinfo, objName: "obj", field: "spec.http",
			message: []string{"at least one"},
		},
		{
			name: "VirtualService weight 150", doc: istio("VirtualService",
				"  hosts: [a]\n  http:\n  - route:\n    - destination: {host: a}\n      weight: 150\n"),
			kind: "VirtualService", namespace: bookinfo, objName: "obj", field: "spec.http[0].route[0].weight",
			message: []string{"150", "between 0 and 100"},
		},
		{
			name: "VirtualService destination without host",
			doc:  istio("VirtualService", "  hosts: [a]\n  http:\n  - route:\n    - destination: {host: a}\n    - destination: {subset: v1}\n"),
			kind: "VirtualService", namespace: bookinfo, objName: "obj", field: "spec.http[0].route[1].destination.host",
			message: []string{"required"},
		},
		{
			name: "DestinationRule without host", doc: istio("DestinationRule", "  subsets:\n  - name: v1\n"),
			kind: "DestinationRule", namespace: bookinfo, objName: "obj", field: "spec.host",
			message: []string{"required"},
		},
		{
			name: "DestinationRule duplicate subset", doc: istio("DestinationRule", "  host: a\n  subsets:\n  - name: v1\n  - name: v1\n"),
			kind: "DestinationRule", namespace: bookinfo, objName: "obj", field: "spec.subsets[1].name",
			message: []string{`duplicate subset "v1"`},
		},
		{
			name: "DestinationRule tunnel", doc: istio("DestinationRule",
				"  host: a\n  trafficPolicy:\n    tunnel: {protocol: CONNECT, targetHost: egress.example, targetPort: 8443}\n"),
			kind: "DestinationRule", namespace: bookinfo, objName: "obj", field: "spec.trafficPolicy.tunnel",
			message: []string{"not implemented, so refused", "CONNECT tunnel to egress.example"},
		},
		{
			name: "DestinationRule subset tunnel",
			doc: istio("DestinationRule",
				"  host: a\n  subsets:\n  - name: v1\n    trafficPolicy:\n      tunnel: {targetHost: egress.example, targetPort: 8443}\n"),
			kind: "DestinationRule", namespace: bookinfo, objName: "obj", field: "spec.subsets[0].trafficPolicy.tunnel",
			message: []string{"not implemented, so refused"},
		},
		{
			name: "ServiceEntry port 0", doc: istio("ServiceEntry",
				"  hosts: [example.com]\n  ports:\n  - {number: 0, name: http, protocol: HTTP}\n"),
			kind: "ServiceEntry", namespace: bookinfo, objName: "obj", field: "spec.ports[0].number",
			message: []string{"0 is not a valid port"},
		},
		{
			name: "Gateway server without hosts", doc: istio("Gateway", "  servers:\n  - port: {number: 80, name: http, protocol: HTTP}\n"),
			kind: "Gateway", namespace: bookinfo, objName: "obj", field: "spec.servers[0].hosts",
			message: []string{"at least one host"},
		},
		{
			name: "Sidecar egress host without namespace",
			doc:  istio("Sidecar", "  egress:\n  - hosts: [\"istio-system/*\", \"reviews.bookinfo.svc.cluster.local\"]\n"),
			kind: "Sidecar", namespace: bookinfo, objName: "obj", field: "spec.egress[0].hosts[1]",
			message: []string{"NAMESPACE/HOST"},
		},
		{
			name: "AuthorizationPolicy bad ipBlock",
			doc:  istio("AuthorizationPolicy", "  rules:\n  - from:\n    - source: {ipBlocks: [10.0.0.0/8, 10.0.0.300]}\n"),
			kind: "AuthorizationPolicy", namespace: bookinfo, objName: "obj", field: "spec.rules[0].from[0].source.ipBlocks[1]",
			message: []string{`"10.0.0.300"`, "not an IP address or CIDR"},
		},
		{
			name: "AuthorizationPolicy bad notIpBlock",
			doc:  istio("AuthorizationPolicy", "  rules:\n  - from:\n    - source: {ipBlocks: [10.0.0.0/8], notIpBlocks: [nope]}\n"),
			kind: "AuthorizationPolicy", namespace: bookinfo, objName: "obj", field: "spec.rules[0].from[0].source.notIpBlocks[0]",
			message: []string{`"nope"`},
		},
		{
			name: "AuthorizationPolicy port with trailing junk",
			doc:  istio("AuthorizationPolicy", "  rules:\n  - to:\n    - operation: {ports: [\"8080\", \"80abc\"]}\n"),
			kind: "AuthorizationPolicy", namespace: bookinfo, objName: "obj", field: "spec.rules[0].to[0].operation.ports[1]",
			message: []string{`"80abc" is not a port number`},
		},
		{
			name: "AuthorizationPolicy bad notPort",
			doc:  istio("AuthorizationPolicy", "  rules:\n  - to:\n    - operation: {notPorts: [\"70000\"]}\n"),
			kind: "AuthorizationPolicy", namespace: bookinfo, objName: "obj", field: "spec.rules[0].to[0].operation.notPorts[0]",
			message: []string{`"70000"`},
		},
		{
			name: "AuthorizationPolicy CUSTOM without provider", doc: istio("AuthorizationPolicy", "  action: CUSTOM\n"),
			kind: "AuthorizationPolicy", namespace: bookinfo, objName: "obj", field: "spec.provider",
			message: []string{"CUSTOM"},
		},
		{
			name: "PeerAuthentication portLevelMtls without selector",
			doc:  istio("PeerAuthentication", "  portLevelMtls:\n    8080: {mode: DISABLE}\n"),
			kind: "PeerAuthentication", namespace: bookinfo, objName: "obj", field: "spec.portLevelMtls",
			message: []string{"selector"},
		},
		{
			name: "Service port out of range", doc: svc("  ports:\n  - port: 70000\n"),
			kind: "Service", namespace: bookinfo, objName: "reviews", field: "spec.ports[0].port",
			message: []string{"70000 is not a valid port"},
		},
		{
			name: "Service ports need names", doc: svc("  ports:\n  - port: 80\n  - port: 81\n"),
			kind: "Service", namespace: bookinfo, objName: "reviews", field: "spec.ports[0].name",
			message: []string{"more than one port"},
		},
		{
			name: "EndpointSlice without addressType",
			doc:  "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: s1\nendpoints:\n- addresses: [10.0.0.1]\n",
			kind: "EndpointSlice", namespace: "default", objName: "s1", field: "addressType",
			message: []string{"required"},
		},
		{
			name: "EndpointSlice bad address", doc: "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: s1\n" +
				"addressType: IPv4\nendpoints:\n- addresses: [10.0.0.1]\n- addresses: [pod-a]\n",
			kind: "EndpointSlice", namespace: "default", objName: "s1", field: "endpoints[1].addresses[0]",
			message: []string{`"pod-a" is not an IP address`},
		},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			index := 10 + i
			c, err := config.Parse([]byte(tc.doc), "conf/mesh.yaml", index, "default")
			if err == nil {
				t.Fatalf("Parse accepted it: %v", c)
			}
			var e *config.Error
			if !errors.As(err, &e) {
				t.Fatalf("error is %T, want *config.Error: %v", err, err)
			}
			if e.File != "conf/mesh.yaml" || e.Index != index {
				t.Errorf("File/Index = %q/%d, want conf/mesh.yaml/%d", e.File, e.Index, index)
			}
			if e.Kind != tc.kind || e.Namespace != tc.namespace || e.Name != tc.objName {
				t.Errorf("object = %q %q/%q, want %q %q/%q", e.Kind, e.Namespace, e.Name, tc.kind, tc.namespace, tc.objName)
			}
			if tc.fieldHas != nil {
				for _, s := range tc.fieldHas {
					if !strings.Contains(e.Field, s) {
						t.Errorf("Field = %q, want it to mention %q", e.Field, s)
					}
				}
			} else if e.Field != tc.field {
				t.Errorf("Field = %q, want %q", e.Field, tc.field)
			}
			if e.Message == "" {
				t.Error("empty Message")
			}
			for _, s := range tc.message {
				if !strings.Contains(e.Message, s) {
					t.Errorf("Message = %q, want it to contain %q", e.Message, s)
				}
			}
			// The message is about the document the user wrote: no positions in the JSON it was converted to,
			// and no Go-internal prefixes.
			for _, bad := range []string{"proto:", "json:", "(line 1:", "error converting YAML to JSON"} {
				if strings.Contains(e.Message, bad) {
					t.Errorf("Message %q contains %q", e.Message, bad)
				}
			}
			if strings.TrimSpace(e.Message) != e.Message {
				t.Errorf("Message %q has surrounding space", e.Message)
			}
			s := e.Error()
			if !strings.HasPrefix(s, fmt.Sprintf("conf/mesh.yaml: document %d", index)) || !strings.Contains(s, e.Message) {
				t.Errorf("Error() = %q", s)
			}
			if e.Field != "" && !strings.Contains(s, "field "+e.Field) {
				t.Errorf("Error() = %q does not name the field", s)
			}
		})
	}
}

func TestErrorString(t *testing.T) {
	for _, tc := range []struct {
		e    config.Error
		want string
	}{
		{config.Error{Index: 2, Message: "empty document"}, "document 2: empty document"},
		{config.Error{File: "a.yaml", Index: 0, Kind: "Service", Namespace: "ns", Name: "n", Field: "spec.ports[0].port", Message: "bad"},
			"a.yaml: document 0 (Service ns/n): field spec.ports[0].port: bad"},
		{config.Error{File: "a.yaml", Index: 1, Kind: "Node", Name: "n1", Message: "bad"}, "a.yaml: document 1 (Node n1): bad"},
		{config.Error{File: "a.yaml", Index: 1, Kind: "Service", Message: "bad"}, "a.yaml: document 1 (Service): bad"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
}

func TestSplitDocuments(t *testing.T) {
	for _, tc := range []struct {
		name  string
		in    string
		docs  int
		empty []bool // IsEmptyDocument per document
	}{
		{"empty input", "", 0, nil},
		{"one document", "a: 1\n", 1, []bool{false}},
		{"no trailing newline", "a: 1", 1, []bool{false}},
		{"two documents", "a: 1\n---\nb: 2\n", 2, []bool{false, false}},
		{"leading and trailing separators", "---\na: 1\n---\nb: 2\n---\n", 2, []bool{false, false}},
		{"separator with a comment", "a: 1\n--- # next\nb: 2\n", 2, []bool{false, false}},
		{"comment-only document keeps its position", "a: 1\n---\n# nothing here\n---\nb: 2\n", 3, []bool{false, true, false}},
		{"blank document keeps its position", "a: 1\n---\n\n\n---\nb: 2\n", 3, []bool{false, true, false}},
		{"header comment", "# file header\n---\na: 1\n", 2, []bool{true, false}},
		{"two separators in a row", "a: 1\n---\n---\nb: 2\n", 3, []bool{false, true, false}},
		{"three separators in a row", "a: 1\n---\n---\n---\nb: 2\n", 4, []bool{false, true, true, false}},
		{"leading separators", "---\n---\na: 1\n", 2, []bool{true, false}},
		{"JSON object", "{\"a\": 1,\n \"b\": [1, 2]}\n", 1, []bool{false}},
		{"dashes inside a block scalar are not a separator", "a: |\n  x\n  ---y\nb: 2\n", 1, []bool{false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			docs, err := config.SplitDocuments([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if len(docs) != tc.docs {
				t.Fatalf("got %d documents %q, want %d", len(docs), docs, tc.docs)
			}
			for i, d := range docs {
				if got := config.IsEmptyDocument(d); got != tc.empty[i] {
					t.Errorf("IsEmptyDocument(%q) = %v, want %v", d, got, tc.empty[i])
				}
			}
		})
	}

	// A document's index counts every separator before it, however the documents between are written.
	for _, in := range []string{
		"a: 1\n---\n---\n---\nb: 2\n",
		"a: 1\n---\n# c\n---\n---\nb: 2\n",
		"a: 1\n---\n---\n# c\n---\nb: 2\n",
		"a: 1\n---\n\n---\n# c\n---\nb: 2\n",
		"a: 1\n--- # one\n--- # two\n--- # three\nb: 2\n---\n---\n",
	} {
		docs, err := config.SplitDocuments([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		if len(docs) < 4 || string(docs[3]) == "" || !strings.Contains(string(docs[3]), "b: 2") {
			t.Errorf("SplitDocuments(%q) = %q: want b at index 3", in, docs)
		}
		for i := 4; i < len(docs); i++ {
			if !config.IsEmptyDocument(docs[i]) {
				t.Errorf("SplitDocuments(%q): trailing document %d = %q", in, i, docs[i])
			}
		}
	}

	// Each non-empty document parses on its own.
	docs, err := config.SplitDocuments([]byte(validDocs[0].doc + "---\n" + validDocs[1].doc + "---\n# trailing comment\n"))
	if err != nil {
		t.Fatal(err)
	}
	var kinds []config.Kind
	for i, d := range docs {
		if config.IsEmptyDocument(d) {
			continue
		}
		c, err := config.Parse(d, "f.yaml", i, "default")
		if err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		kinds = append(kinds, c.Kind)
	}
	if !reflect.DeepEqual(kinds, []config.Kind{validDocs[0].kind, validDocs[1].kind}) {
		t.Errorf("kinds = %v", kinds)
	}
}

func TestIsEmptyDocument(t *testing.T) {
	for _, tc := range []struct {
		in    string
		empty bool
	}{
		{"", true},
		{"\n \n\t\n", true},
		{"# comment\n  # indented comment\n", true},
		{"---\n# comment\n", true},
		{"a: 1\n", false},
		{"# comment\na: 1 # trailing\n", false},
		{"{}", false},
		{"null", false}, // not empty to the splitter; Parse reports it as an empty document
	} {
		if got := config.IsEmptyDocument([]byte(tc.in)); got != tc.empty {
			t.Errorf("IsEmptyDocument(%q) = %v, want %v", tc.in, got, tc.empty)
		}
	}
	if _, err := config.Parse([]byte("null\n"), "", 0, "default"); err == nil || !strings.Contains(err.Error(), "empty document") {
		t.Errorf("Parse(null) = %v, want an empty document error", err)
	}
}

// TestBookinfoExample guards that the shipped example stays valid.
func TestBookinfoExample(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "examples", "bookinfo", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no examples/bookinfo/*.yaml found")
	}
	seen := map[config.Key]string{}
	kinds := map[config.Kind]int{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs, err := config.SplitDocuments(data)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		n := 0
		for i, d := range docs {
			if config.IsEmptyDocument(d) {
				continue
			}
			c, err := config.Parse(d, f, i, "default")
			if err != nil {
				t.Errorf("%v", err)
				continue
			}
			n++
			kinds[c.Kind]++
			if prev, dup := seen[c.Key]; dup {
				t.Errorf("%s defined twice: %s and %s", c.Key, prev, c.Source)
			}
			seen[c.Key] = c.Source
		}
		if n == 0 {
			t.Errorf("%s holds no objects", f)
		}
	}
	for _, k := range []config.Kind{config.Namespace, config.Service, config.Pod, config.EndpointSlice, config.VirtualService,
		config.DestinationRule, config.AuthorizationPolicy} {
		if kinds[k] == 0 {
			t.Errorf("the example has no %s", k)
		}
	}
}

// Istio reads a Duration with time.ParseDuration (golang/protobuf's jsonpb), and the CRD schema's duration()
// agrees, so "1m" or "500ms" must load from a file as they do from a cluster; protojson alone takes only "Ns".
func TestParseGoDurations(t *testing.T) {
	doc := `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: shop}
spec:
  host: reviews
  trafficPolicy:
    connectionPool:
      tcp: {connectTimeout: 500ms, idleTimeout: 24h}
      http: {idleTimeout: 1h30m}
    outlierDetection: {interval: 1m, baseEjectionTime: 5m}
  subsets:
  - name: v1
    labels: {version: v1}
    trafficPolicy:
      outlierDetection: {interval: 1.5s}
`
	c, err := config.Parse([]byte(doc), "dr.yaml", 0, "default")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	tp := c.Spec.(*networking.DestinationRule).TrafficPolicy
	for name, got := range map[string]string{
		"connectTimeout":   tp.ConnectionPool.Tcp.ConnectTimeout.AsDuration().String(),
		"tcp.idleTimeout":  tp.ConnectionPool.Tcp.IdleTimeout.AsDuration().String(),
		"http.idleTimeout": tp.ConnectionPool.Http.IdleTimeout.AsDuration().String(),
		"interval":         tp.OutlierDetection.Interval.AsDuration().String(),
		"baseEjectionTime": tp.OutlierDetection.BaseEjectionTime.AsDuration().String(),
		"subset interval":  c.Spec.(*networking.DestinationRule).Subsets[0].TrafficPolicy.OutlierDetection.Interval.AsDuration().String(),
	} {
		want := map[string]string{"connectTimeout": "500ms", "tcp.idleTimeout": "24h0m0s", "http.idleTimeout": "1h30m0s",
			"interval": "1m0s", "baseEjectionTime": "5m0s", "subset interval": "1.5s"}[name]
		if got != want {
			t.Errorf("%s = %s, want %s", name, got, want)
		}
	}

	// A VirtualService's durations sit in lists (http[].timeout, retries.perTryTimeout, fault delays).
	vs := `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: shop}
spec:
  hosts: [reviews]
  http:
  - timeout: 2m
    retries: {attempts: 4, perTryTimeout: 500ms}
    fault: {delay: {fixedDelay: 100ms, percentage: {value: 10}}}
    route:
    - destination: {host: reviews}
`
	c, err = config.Parse([]byte(vs), "vs.yaml", 0, "default")
	if err != nil {
		t.Fatalf("Parse VirtualService: %v", err)
	}
	r := c.Spec.(*networking.VirtualService).Http[0]
	if r.Timeout.AsDuration().String() != "2m0s" || r.Retries.PerTryTimeout.AsDuration().String() != "500ms" ||
		r.Fault.Delay.GetFixedDelay().AsDuration().String() != "100ms" {
		t.Errorf("VirtualService durations = %v %v %v", r.Timeout, r.Retries.PerTryTimeout, r.Fault.Delay.GetFixedDelay())
	}

	// What ParseDuration refuses is still refused, at its field.
	bad := strings.Replace(vs, "perTryTimeout: 500ms", "perTryTimeout: 5 minutes", 1)
	_, err = config.Parse([]byte(bad), "vs.yaml", 0, "default")
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Field != "spec.http[0].retries.perTryTimeout" {
		t.Errorf("bad duration: %v", err)
	}
}

// A document of a kind Istio users apply but Sextant does not read says so, at field kind, for Istio's own
// kinds and for Gateway API kinds, including the Gateway API Gateway that shares its name with Istio's.
func TestParseUnreadKind(t *testing.T) {
	for _, tc := range []struct{ apiVersion, kind string }{
		{"networking.istio.io/v1alpha3", "EnvoyFilter"},
		{"telemetry.istio.io/v1", "Telemetry"},
		{"extensions.istio.io/v1alpha1", "WasmPlugin"},
		{"gateway.networking.k8s.io/v1", "Gateway"},
		{"gateway.networking.k8s.io/v1", "HTTPRoute"},
	} {
		doc := fmt.Sprintf("apiVersion: %s\nkind: %s\nmetadata: {name: x, namespace: shop}\nspec: {}\n", tc.apiVersion, tc.kind)
		_, err := config.Parse([]byte(doc), "f.yaml", 2, "default")
		var ce *config.Error
		field := "kind"
		if tc.kind == "Gateway" {
			field = "apiVersion" // the name is also Istio's Gateway, which the document may have meant
		}
		if !errors.As(err, &ce) || ce.Field != field || ce.Kind != tc.kind || ce.Name != "x" ||
			!strings.Contains(ce.Message, "kind "+tc.kind+" of apiVersion \""+tc.apiVersion+"\" is not read by Sextant") {
			t.Errorf("%s %s: %v", tc.apiVersion, tc.kind, err)
		}
	}
}
