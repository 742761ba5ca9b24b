package envoy

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"slices"
	"testing"
	"time"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/sextantmesh/sextant/pilot/authn"
	"github.com/sextantmesh/sextant/pilot/config"
	meshconfig "github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/secretaccess"
	"github.com/sextantmesh/sextant/pilot/store"
	"github.com/sextantmesh/sextant/pkg/nameset"
)

// testCert returns a self-signed certificate for host and its key, PEM encoded.
func testCert(t testing.TB, host string, notAfter time.Time) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: host},
		DNSNames: []string{host}, NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

// secretDoc is a Secret document with data entries given as raw bytes (base64 encoded here).
func secretDoc(ns, name, typ string, data map[string][]byte) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Secret\nmetadata:\n  name: %s\n  namespace: %s\n", name, ns)
	if typ != "" {
		fmt.Fprintf(&b, "type: %s\n", typ)
	}
	b.WriteString("data:\n")
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s: %s\n", k, base64.StdEncoding.EncodeToString(data[k]))
	}
	return b.String()
}

func sdsWatch(names ...string) *model.WatchedResource {
	return &model.WatchedResource{TypeURL: SecretType, ResourceNames: nameset.New(names...)}
}

// authenticated returns a copy of p whose stream was authenticated as ns/sa.
func authenticated(p *model.Proxy, ns, sa string) *model.Proxy {
	q := *p
	q.Identity = &authn.Identity{TrustDomain: "cluster.local", Namespace: ns, ServiceAccount: sa}
	return &q
}

// sdsGenerate runs SDS for the proxy and decodes the secrets by name, each checked with ValidateAll.
func sdsGenerate(t *testing.T, g *Generators, proxy *model.Proxy, push *model.PushContext,
	w *model.WatchedResource) map[string]*tlsv3.Secret {
	t.Helper()
	res, err := g.ByTypeURL()[SecretType].Generate(proxy, push, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	return decodeSecrets(t, res)
}

func decodeSecrets(t *testing.T, res model.Resources) map[string]*tlsv3.Secret {
	t.Helper()
	out := map[string]*tlsv3.Secret{}
	for _, r := range res {
		s := &tlsv3.Secret{}
		if err := r.Any.UnmarshalTo(s); err != nil {
			t.Fatal(err)
		}
		if s.Name != r.Name {
			t.Errorf("resource %q holds secret %q", r.Name, s.Name)
		}
		if err := s.ValidateAll(); err != nil {
			t.Errorf("secret %s: %v", s.Name, err)
		}
		out[s.Name] = s
	}
	return out
}

func TestSDSGatewayCertificates(t *testing.T) {
	shopCert, shopKey := testCert(t, "shop.example.com", time.Now().Add(24*time.Hour))
	partnersCert, partnersKey := testCert(t, "partners.example.com", time.Now().Add(24*time.Hour))
	clientCA, _ := testCert(t, "client-ca", time.Now().Add(24*time.Hour))
	push := ldsPush(t, nil,
		secretDoc("istio-system", "shop-cert", "kubernetes.io/tls", map[string][]byte{"tls.crt": shopCert, "tls.key": shopKey}),
		// Generic layout, with its CA in the -cacert companion.
		secretDoc("istio-system", "partners-cert", "", map[string][]byte{"cert": partnersCert, "key": partnersKey}),
		secretDoc("istio-system", "partners-cert-cacert", "", map[string][]byte{"cacert": clientCA}),
	)
	g := New(Options{})
	gw := authenticated(ldsGateway, "istio-system", "istio-ingressgateway")

	// The names the gateway's listener asks for are the ones served.
	var names []string
	for _, l := range ldsGenerate(t, g, gw, push, wildcard(ListenerType)) {
		for _, fc := range l.FilterChains {
			ctx := &tlsv3.DownstreamTlsContext{}
			if fc.GetTransportSocket().GetTypedConfig().UnmarshalTo(ctx) != nil {
				continue
			}
			for _, s := range ctx.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs() {
				names = append(names, s.Name)
			}
			if s := ctx.GetCommonTlsContext().GetCombinedValidationContext().GetValidationContextSdsSecretConfig(); s != nil {
				if s.GetSdsConfig().GetAds() == nil {
					t.Errorf("%s is not served over ADS: %v", s.Name, s.SdsConfig)
				}
				names = append(names, s.Name)
			}
		}
	}
	slices.Sort(names)
	want := []string{"kubernetes://partners-cert", "kubernetes://partners-cert-cacert", "kubernetes://shop-cert"}
	if !slices.Equal(names, want) {
		t.Fatalf("listeners name secrets %v, want %v", names, want)
	}

	got := sdsGenerate(t, g, gw, push, sdsWatch(names...))
	if len(got) != 3 {
		t.Fatalf("served %d secrets, want 3: %v", len(got), got)
	}
	shop := got["kubernetes://shop-cert"].GetTlsCertificate()
	if !bytes.Equal(shop.GetCertificateChain().GetInlineBytes(), shopCert) || !bytes.Equal(shop.GetPrivateKey().GetInlineBytes(), shopKey) {
		t.Errorf("shop-cert = %v", shop)
	}
	if p := got["kubernetes://partners-cert"].GetTlsCertificate(); !bytes.Equal(p.GetCertificateChain().GetInlineBytes(), partnersCert) {
		t.Errorf("partners-cert = %v", p)
	}
	if ca := got["kubernetes://partners-cert-cacert"].GetValidationContext(); !bytes.Equal(ca.GetTrustedCa().GetInlineBytes(), clientCA) {
		t.Errorf("partners-cert-cacert = %v", ca)
	}
}

func TestSDSCAFromTheSecretItself(t *testing.T) {
	cert, key := testCert(t, "shop.example.com", time.Now().Add(time.Hour))
	ca, _ := testCert(t, "ca", time.Now().Add(time.Hour))
	push := ldsPush(t, nil, secretDoc("istio-system", "shop-cert", "kubernetes.io/tls",
		map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": ca}))
	gw := authenticated(ldsGateway, "istio-system", "gw")
	got := sdsGenerate(t, New(Options{}), gw, push, sdsWatch("kubernetes://shop-cert-cacert"))
	if v := got["kubernetes://shop-cert-cacert"].GetValidationContext(); !bytes.Equal(v.GetTrustedCa().GetInlineBytes(), ca) {
		t.Errorf("without a -cacert Secret the CA comes from ca.crt of the Secret itself: %v", got)
	}
}

func TestSDSNamespaceOfVerifiedIdentityOnly(t *testing.T) {
	cert, key := testCert(t, "a.example.com", time.Now().Add(time.Hour))
	other, otherKey := testCert(t, "b.example.com", time.Now().Add(time.Hour))
	push := ldsPush(t, nil,
		secretDoc("istio-system", "shop-cert", "kubernetes.io/tls", map[string][]byte{"tls.crt": cert, "tls.key": key}),
		secretDoc("shop", "shop-cert", "kubernetes.io/tls", map[string][]byte{"tls.crt": other, "tls.key": otherKey}),
		secretDoc("shop", "only-in-shop", "kubernetes.io/tls", map[string][]byte{"tls.crt": other, "tls.key": otherKey}),
	)
	g := New(Options{})
	w := sdsWatch("kubernetes://shop-cert", "kubernetes://only-in-shop", "kubernetes://shop/shop-cert", "kubernetes://istio-system/shop-cert")

	// The node claims istio-system, but its stream was authenticated as shop: shop's Secrets, nothing else.
	claimsSystem := authenticated(ldsGateway, "shop", "frontend")
	got := sdsGenerate(t, g, claimsSystem, push, w)
	if len(got) != 3 || got["kubernetes://istio-system/shop-cert"] != nil {
		t.Fatalf("served %v; want shop's three names, never istio-system's", slices.Sorted(mapsKeys(got)))
	}
	if c := got["kubernetes://shop-cert"].GetTlsCertificate().GetCertificateChain().GetInlineBytes(); !bytes.Equal(c, other) {
		t.Error("kubernetes://shop-cert is not shop's Secret")
	}

	// A stream that was not authenticated gets no secret at all, whatever its node says.
	if got := sdsGenerate(t, g, ldsGateway, push, w); len(got) != 0 {
		t.Errorf("unauthenticated stream served %v", slices.Sorted(mapsKeys(got)))
	}
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

type denyAll struct{}

func (denyAll) MayReadSecrets(authn.Identity) secretaccess.Decision {
	return secretaccess.Decision{Reason: "not allowed to list secrets"}
}

func TestSDSAuthorizerGuardsKeysNotCAs(t *testing.T) {
	cert, key := testCert(t, "a.example.com", time.Now().Add(time.Hour))
	push := ldsPush(t, nil, secretDoc("istio-system", "shop-cert", "kubernetes.io/tls",
		map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": cert}))
	got := sdsGenerate(t, New(Options{SecretAuthorizer: denyAll{}}), authenticated(ldsGateway, "istio-system", "gw"), push,
		sdsWatch("kubernetes://shop-cert", "kubernetes://shop-cert-cacert"))
	if len(got) != 1 || got["kubernetes://shop-cert-cacert"] == nil {
		t.Errorf("served %v; want only the CA, which is public", slices.Sorted(mapsKeys(got)))
	}
}

func TestSDSMissingAndMalformedSecrets(t *testing.T) {
	cert, _ := testCert(t, "a.example.com", time.Now().Add(time.Hour))
	_, otherKey := testCert(t, "b.example.com", time.Now().Add(time.Hour))
	push := ldsPush(t, nil,
		secretDoc("istio-system", "shop-cert", "kubernetes.io/tls", map[string][]byte{"tls.crt": cert, "tls.key": otherKey}),
		secretDoc("istio-system", "partners-cert", "Opaque", map[string][]byte{"password": []byte("hunter2")}),
	)
	gw := authenticated(ldsGateway, "istio-system", "gw")
	g := New(Options{})
	w := sdsWatch("kubernetes://shop-cert", "kubernetes://partners-cert", "kubernetes://partners-cert-cacert", "kubernetes://nowhere")
	if got := sdsGenerate(t, g, gw, push, w); len(got) != 0 {
		t.Errorf("served %v from missing and malformed Secrets", slices.Sorted(mapsKeys(got)))
	}
	// The gateway's listeners are still generated, naming the secrets that will come once fixed.
	if ls := ldsGenerate(t, g, gw, push, wildcard(ListenerType)); len(ls) != 2 {
		t.Errorf("%d listeners", len(ls))
	}

	problems := push.CredentialProblems(time.Now())
	var text []string
	for _, p := range problems {
		text = append(text, p.Error())
		if !p.Warning || p.Kind != "Gateway" || p.Namespace != "istio-system" || p.Name == "" {
			t.Errorf("problem %+v does not name the Gateway", p)
		}
		if bytes.Contains([]byte(p.Message), []byte("hunter2")) {
			t.Errorf("problem quotes Secret data: %s", p.Message)
		}
	}
	for _, want := range []string{"Secret istio-system/shop-cert: certificate and key unusable: private key does not match public key",
		`Secret istio-system/partners-cert: no certificate: want entries "tls.crt" and "tls.key" (kubernetes.io/tls) ` +
			`or "cert" and "key"; has "password"`,
		`Secret istio-system/partners-cert-cacert: no CA certificate`} {
		if !slices.ContainsFunc(text, func(s string) bool { return bytes.Contains([]byte(s), []byte(want)) }) {
			t.Errorf("no problem saying %q in:\n%s", want, text)
		}
	}
}

func TestSDSMalformedUpdateKeepsLastGood(t *testing.T) {
	cert, key := testCert(t, "a.example.com", time.Now().Add(time.Hour))
	st, push := sdsStore(t, secretDoc("istio-system", "shop-cert", "kubernetes.io/tls", map[string][]byte{"tls.crt": cert, "tls.key": key}))
	gw := authenticated(ldsGateway, "istio-system", "gw")
	g := New(Options{})
	w := sdsWatch("kubernetes://shop-cert")
	if got := sdsGenerate(t, g, gw, push, w); len(got) != 1 {
		t.Fatalf("served %d", len(got))
	}
	next := sdsUpdate(t, st, push, secretDoc("istio-system", "shop-cert", "kubernetes.io/tls", map[string][]byte{"tls.crt": cert}))
	got := sdsGenerate(t, g, gw, next, w)
	if c := got["kubernetes://shop-cert"].GetTlsCertificate(); !bytes.Equal(c.GetPrivateKey().GetInlineBytes(), key) {
		t.Errorf("after an edit that dropped tls.key, served %v; want the previous version", got)
	}
	if ps := next.CredentialProblems(time.Now()); len(ps) == 0 ||
		!bytes.Contains([]byte(ps[0].Message), []byte("serving its previous version")) {
		t.Errorf("problems %v", ps)
	}
}

func TestSDSPushesOnlyWatchersOfAChangedSecret(t *testing.T) {
	cert, key := testCert(t, "a.example.com", time.Now().Add(time.Hour))
	gen := New(Options{}).ByTypeURL()[SecretType].(interface {
		model.PushFilter
		model.DeltaGenerator
	})
	gw := authenticated(ldsGateway, "istio-system", "gw")
	w := sdsWatch("kubernetes://shop-cert", "kubernetes://partners-cert-cacert")
	st, push := sdsStore(t,
		secretDoc("istio-system", "shop-cert", "kubernetes.io/tls", map[string][]byte{"tls.crt": cert, "tls.key": key}),
		secretDoc("istio-system", "partners-cert", "", map[string][]byte{"cacert": cert}))
	changed := func(keys ...config.Key) *model.PushRequest {
		m := map[config.Key]struct{}{}
		for _, k := range keys {
			m[k] = struct{}{}
		}
		return &model.PushRequest{ConfigsUpdated: m, Push: push}
	}
	secret := func(ns, name string) config.Key { return config.Key{Kind: config.Secret, Namespace: ns, Name: name} }
	for _, tc := range []struct {
		name string
		req  *model.PushRequest
		want bool
	}{
		{"watched secret", changed(secret("istio-system", "shop-cert")), true},
		{"secret whose CA is watched", changed(secret("istio-system", "partners-cert")), true},
		{"same name, another namespace", changed(secret("shop", "shop-cert")), false},
		{"unwatched secret", changed(secret("istio-system", "other")), false},
		{"a VirtualService", &model.PushRequest{Full: true,
			ConfigsUpdated: map[config.Key]struct{}{{Kind: config.VirtualService, Namespace: "shop", Name: "x"}: {}}}, false},
		{"the first snapshot", &model.PushRequest{Full: true}, true},
	} {
		if got := gen.NeedsPush(gw, w, tc.req); got != tc.want {
			t.Errorf("%s: NeedsPush = %v, want %v", tc.name, got, tc.want)
		}
	}
	if gen.NeedsPush(ldsGateway, w, changed(secret("istio-system", "shop-cert"))) {
		t.Error("an unauthenticated stream is pushed secrets")
	}

	// The push for one changed Secret carries only the secrets it concerns.
	next := sdsUpdate(t, st, push, secretDoc("istio-system", "shop-cert", "kubernetes.io/tls",
		map[string][]byte{"tls.crt": cert, "tls.key": key, "x": nil}))
	req := changed(secret("istio-system", "shop-cert"))
	req.Push = next
	res, removed, incremental, err := gen.GenerateDeltas(gw, next, w, req)
	if err != nil || !incremental || len(removed) != 0 {
		t.Fatalf("GenerateDeltas: incremental %v, removed %v, err %v", incremental, removed, err)
	}
	if got := decodeSecrets(t, res); len(got) != 1 || got["kubernetes://shop-cert"] == nil {
		t.Errorf("pushed %v, want only kubernetes://shop-cert", slices.Sorted(mapsKeys(got)))
	}
}

// sdsStore builds the snapshot of testdata/lds/mesh.yaml plus docs, returning the store to update it from.
func sdsStore(t *testing.T, docs ...string) (*store.Store, *model.PushContext) {
	t.Helper()
	mesh, err := os.ReadFile("testdata/lds/mesh.yaml")
	if err != nil {
		t.Fatal(err)
	}
	split, err := config.SplitDocuments(mesh)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		split = append(split, []byte(d))
	}
	st := store.New()
	for i, doc := range split {
		if config.IsEmptyDocument(doc) {
			continue
		}
		c, err := config.Parse(doc, "mesh.yaml", i, "default")
		if err != nil {
			t.Fatal(err)
		}
		st.Upsert(store.LayerFile, c)
	}
	return st, model.Build(st, meshconfig.Default())
}

// sdsUpdate applies doc to st and derives the next snapshot from push, as the pipeline does.
func sdsUpdate(t *testing.T, st *store.Store, push *model.PushContext, doc string) *model.PushContext {
	t.Helper()
	c, err := config.Parse([]byte(doc), "secrets.yaml", 0, "default")
	if err != nil {
		t.Fatal(err)
	}
	old := st.Get(c.Key)
	st.Upsert(store.LayerFile, c)
	next, res := model.Update(push, st, []model.Change{{Key: c.Key, Old: old, New: c}})
	if res.Full {
		t.Error("a Secret change asked for a full push")
	}
	if _, ok := res.SecretsUpdated[c.Namespace+"/"+c.Name]; !ok {
		t.Errorf("SecretsUpdated = %v", res.SecretsUpdated)
	}
	return next
}
