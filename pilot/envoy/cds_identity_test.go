package envoy

import (
	"slices"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/store"
)

// meshTLSOf returns the TLS context a cluster gives endpoints with a sidecar: the tlsMode-istio match's, else
// the cluster's own socket.
func meshTLSOf(t *testing.T, c *cluster.Cluster) *tlsv3.UpstreamTlsContext {
	t.Helper()
	ts := c.GetTransportSocket()
	for _, m := range c.GetTransportSocketMatches() {
		if m.GetMatch().GetFields()["tlsMode"].GetStringValue() == "istio" {
			ts = m.GetTransportSocket()
		}
	}
	ctx := &tlsv3.UpstreamTlsContext{}
	if err := ts.GetTypedConfig().UnmarshalTo(ctx); err != nil {
		t.Fatalf("%s: no TLS socket: %v", c.Name, err)
	}
	return ctx
}

// acceptedSANs lists the names a TLS context accepts, each as TYPE:MATCH (ANY for an untyped matcher).
func acceptedSANs(ctx *tlsv3.UpstreamTlsContext) []string {
	vc := ctx.GetCommonTlsContext().GetCombinedValidationContext().GetDefaultValidationContext()
	if vc == nil {
		vc = ctx.GetCommonTlsContext().GetValidationContext()
	}
	var out []string
	for _, m := range vc.GetMatchSubjectAltNames() {
		out = append(out, "ANY:"+m.String())
	}
	for _, m := range vc.GetMatchTypedSubjectAltNames() {
		out = append(out, m.GetSanType().String()+":"+m.GetMatcher().String())
	}
	slices.Sort(out)
	return out
}

func exactSANs(names ...string) []string {
	var out []string
	for _, n := range names {
		out = append(out, `ANY:exact:"`+n+`"`)
	}
	slices.Sort(out)
	return out
}

// Mesh mTLS accepts exactly the service accounts of the service's endpoints, as istiod; before, any account of
// the service's namespace. A workload with a new account is a full push, and the client's cluster follows it
// (through the cluster list derived from the previous snapshot's).
func TestMeshMTLSAcceptsTheServiceAccountsOfTheEndpoints(t *testing.T) {
	st := storeFromYAML(t, []byte(autoMTLSMesh()))
	push := model.Build(st, mesh.Default())
	g := New(Options{})
	client := sidecarIn("default", "10.1.9.9", nil)
	reviews := clusterByName(t, generate(t, g, ClusterType, client, push, wildcard(ClusterType), newCluster), reviewsCluster)
	if got, want := acceptedSANs(meshTLSOf(t, reviews)), exactSANs("spiffe://cluster.local/ns/default/sa/reviews"); !slices.Equal(got, want) {
		t.Errorf("SANs %v, want %v", got, want)
	}
	var res model.UpdateResult
	push, res = applyDocsResult(t, st, push, `apiVersion: v1
kind: Pod
metadata: {name: reviews-v3, namespace: default, labels: {app: reviews, version: v3, security.istio.io/tlsMode: istio}}
spec: {serviceAccountName: reviews-v3, containers: [{name: app, image: x}]}
status: {phase: Running, podIP: 10.1.0.3, conditions: [{type: Ready, status: "True"}]}
`, `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: reviews-x, namespace: default, labels: {kubernetes.io/service-name: reviews}}
addressType: IPv4
ports: [{name: http, port: 9080, protocol: TCP}]
endpoints:
- addresses: [10.1.0.1]
  targetRef: {kind: Pod, namespace: default, name: reviews-v1}
- addresses: [10.1.0.3]
  targetRef: {kind: Pod, namespace: default, name: reviews-v3}
`)
	if !res.Full {
		t.Error("a new service account behind reviews is not a full push: clients would not learn it")
	}
	reviews = clusterByName(t, generate(t, g, ClusterType, client, push, wildcard(ClusterType), newCluster), reviewsCluster)
	want := exactSANs("spiffe://cluster.local/ns/default/sa/reviews", "spiffe://cluster.local/ns/default/sa/reviews-v3")
	if got := acceptedSANs(meshTLSOf(t, reviews)); !slices.Equal(got, want) {
		t.Errorf("after the new pod: SANs %v, want %v", got, want)
	}
	checkSameAsFreshBuild(t, g, ClusterType, client, push, 1)
}

// applyDocsResult is applyDocs that also returns what the update means for proxies.
func applyDocsResult(t *testing.T, st *store.Store, push *model.PushContext, docs ...string) (*model.PushContext, model.UpdateResult) {
	t.Helper()
	var changes []model.Change
	for i, doc := range docs {
		c, err := config.Parse([]byte(doc), "extra.yaml", i, "default")
		if err != nil {
			t.Fatal(err)
		}
		changes = append(changes, model.Change{Key: c.Key, Old: st.Get(c.Key), New: c})
		st.Upsert(store.LayerFile, c)
	}
	return model.Update(push, st, changes)
}

// A ServiceEntry's subjectAltNames are what mesh mTLS and TLS origination check (as istiod); a WorkloadEntry
// that names a service account is reached over mesh mTLS (its tlsMode is istio), one without is not. A
// DestinationRule's sni is sent under ISTIO_MUTUAL. Before, subjectAltNames were ignored, WorkloadEntries were
// plaintext and the SNI was always Istio's own.
func TestServiceEntryIdentities(t *testing.T) {
	push := pushFromYAML(t, []byte(`
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: billing, namespace: default}
spec:
  hosts: [billing.internal]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 8080, name: http, protocol: HTTP}]
  subjectAltNames: ["spiffe://cluster.local/ns/billing/sa/billing"]
  workloadSelector: {labels: {app: billing}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-1, namespace: default}
spec: {address: 10.2.0.5, labels: {app: billing}, serviceAccount: billing-vm}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-2, namespace: default}
spec: {address: 10.2.0.6, labels: {app: billing}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: api, namespace: default}
spec:
  hosts: [api.example.com]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{number: 443, name: tls, protocol: TLS}]
  subjectAltNames: [api.example.com]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: api, namespace: default}
spec:
  host: api.example.com
  trafficPolicy: {tls: {mode: SIMPLE}}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ledger, namespace: default}
spec:
  hosts: [ledger.internal]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 9000, name: tcp, protocol: TCP}]
  endpoints: [{address: 10.3.0.1, serviceAccount: ledger}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: ledger, namespace: default}
spec:
  host: ledger.internal
  trafficPolicy: {tls: {mode: ISTIO_MUTUAL, sni: ledger.custom}}
`))
	g := New(Options{})
	client := sidecarIn("default", "10.1.9.9", nil)
	cs := generate(t, g, ClusterType, client, push, wildcard(ClusterType), newCluster)

	billing := clusterByName(t, cs, "outbound|8080||billing.internal")
	want := exactSANs("spiffe://cluster.local/ns/billing/sa/billing", "spiffe://cluster.local/ns/default/sa/billing-vm")
	if got := acceptedSANs(meshTLSOf(t, billing)); !slices.Equal(got, want) {
		t.Errorf("billing SANs %v, want %v", got, want)
	}
	modes := tlsModes(t, g, push, "outbound|8080||billing.internal")
	if modes["10.2.0.5"] != "istio" || modes["10.2.0.6"] != "disabled" {
		t.Errorf("WorkloadEntry tlsModes %v: want istio for the one with a service account, disabled for the other", modes)
	}

	api := meshTLSOf(t, clusterByName(t, cs, "outbound|443||api.example.com"))
	if got, want := acceptedSANs(api), exactSANs("api.example.com"); !slices.Equal(got, want) {
		t.Errorf("SIMPLE towards a ServiceEntry: SANs %v, want its subjectAltNames %v", got, want)
	}

	ledger := clusterByName(t, cs, "outbound|9000||ledger.internal")
	ctx := meshTLSOf(t, ledger)
	if ctx.Sni != "ledger.custom" {
		t.Errorf("ISTIO_MUTUAL sni = %q, want the DestinationRule's", ctx.Sni)
	}
	if got, want := acceptedSANs(ctx), exactSANs("spiffe://cluster.local/ns/default/sa/ledger"); !slices.Equal(got, want) {
		t.Errorf("ledger SANs %v, want %v", got, want)
	}
}

// Without a DestinationRule sni, SIMPLE and MUTUAL take the SNI from each request's Host (auto_sni), and check
// the certificate against that Host when no names are given (auto_san_validation), as istiod; before, the
// SNI was fixed to the service's host.
func TestUpstreamTLSAutoSNI(t *testing.T) {
	opts := func(c *cluster.Cluster) *httpv3.HttpProtocolOptions {
		o := &httpv3.HttpProtocolOptions{}
		if a := c.TypedExtensionProtocolOptions["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]; a != nil {
			if err := a.UnmarshalTo(o); err != nil {
				t.Fatal(err)
			}
		}
		return o
	}
	for _, tc := range []struct {
		tls               string
		sni               string
		autoSNI, autoSANs bool
		description       string
	}{
		{tls: `{mode: SIMPLE}`, autoSNI: true, autoSANs: true, description: "no sni, no names"},
		{tls: `{mode: SIMPLE, subjectAltNames: [reviews.example.com]}`, autoSNI: true, description: "names given"},
		{tls: `{mode: SIMPLE, insecureSkipVerify: true}`, autoSNI: true, description: "checking off"},
		{tls: `{mode: SIMPLE, sni: reviews.example.com}`, sni: "reviews.example.com", description: "sni given"},
	} {
		cs := policyClusters(t, `
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: default}
spec:
  host: reviews
  trafficPolicy:
    tls: `+tc.tls+`
`, map[string]string{"app": "sleep"})
		c := clusterByName(t, cs, reviewsCluster)
		if got := meshTLSOf(t, c).Sni; got != tc.sni {
			t.Errorf("%s: sni %q, want %q", tc.description, got, tc.sni)
		}
		u := opts(c).GetUpstreamHttpProtocolOptions()
		if u.GetAutoSni() != tc.autoSNI || u.GetAutoSanValidation() != tc.autoSANs {
			t.Errorf("%s: auto_sni %v auto_san_validation %v, want %v %v", tc.description, u.GetAutoSni(),
				u.GetAutoSanValidation(), tc.autoSNI, tc.autoSANs)
		}
	}
}
