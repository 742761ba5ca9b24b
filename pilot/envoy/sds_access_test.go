package envoy

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sextantmesh/sextant/pilot/authn"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/secretaccess"
)

// answers is a SecretAuthorizer whose decisions the test sets per account; unknown accounts are pending.
type answers struct {
	mu sync.Mutex
	m  map[string]secretaccess.Decision
}

func (a *answers) set(account string, d secretaccess.Decision) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[string]secretaccess.Decision{}
	}
	a.m[account] = d
}

func (a *answers) MayReadSecrets(id authn.Identity) secretaccess.Decision {
	a.mu.Lock()
	defer a.mu.Unlock()
	if d, ok := a.m[id.Account()]; ok {
		return d
	}
	return secretaccess.Decision{Pending: true, Reason: "review in flight"}
}

func connectedAll(string) bool { return true }

// A secret refused to a proxy is reported with the proxy, the Secret and why, until it is served or the
// proxy goes away; a pending answer is not a denial.
func TestSDSDenialsAreReported(t *testing.T) {
	cert, key := testCert(t, "a.example.com", time.Now().Add(time.Hour))
	push := ldsPush(t, nil,
		secretDoc("istio-system", "shop-cert", "kubernetes.io/tls", map[string][]byte{"tls.crt": cert, "tls.key": key}),
		secretDoc("shop", "shop-cert", "kubernetes.io/tls", map[string][]byte{"tls.crt": cert, "tls.key": key}))
	authz := &answers{}
	g := New(Options{SecretAuthorizer: authz})
	gw := authenticated(ldsGateway, "istio-system", "gw")
	w := sdsWatch("kubernetes://shop-cert", "kubernetes://shop/shop-cert")

	if got := sdsGenerate(t, g, gw, push, w); len(got) != 0 {
		t.Fatalf("served %v while the review is pending", slices.Sorted(mapsKeys(got)))
	}
	denials := g.SecretDenials(connectedAll)
	if len(denials) != 1 || denials[0].Resource != "kubernetes://shop/shop-cert" || denials[0].Namespace != "shop" ||
		denials[0].Name != "shop-cert" || denials[0].Proxy != gw.NodeID || denials[0].Identity != gw.Identity.String() ||
		!strings.Contains(denials[0].Reason, "namespace shop") {
		t.Fatalf("denials while pending = %+v; want only the other namespace's Secret", denials)
	}

	authz.set("istio-system/gw", secretaccess.Decision{Reason: "system:serviceaccount:istio-system:gw may not list Secrets"})
	if got := sdsGenerate(t, g, gw, push, w); len(got) != 0 {
		t.Fatalf("served %v although denied", slices.Sorted(mapsKeys(got)))
	}
	denials = g.SecretDenials(connectedAll)
	if len(denials) != 2 || denials[0].Resource != "kubernetes://shop-cert" || denials[0].Namespace != "istio-system" ||
		!strings.Contains(denials[0].Reason, "may not list Secrets") {
		t.Fatalf("denials = %+v; want the refused key pair and the other namespace's Secret", denials)
	}

	authz.set("istio-system/gw", secretaccess.Decision{Allowed: true})
	if got := sdsGenerate(t, g, gw, push, w); len(got) != 1 || got["kubernetes://shop-cert"] == nil {
		t.Fatalf("served %v once allowed; want its own namespace's secret only", slices.Sorted(mapsKeys(got)))
	}
	if denials = g.SecretDenials(connectedAll); len(denials) != 1 || denials[0].Resource != "kubernetes://shop/shop-cert" {
		t.Fatalf("denials once allowed = %+v", denials)
	}

	// The plaintext port: every secret is refused, and said so.
	plain := *ldsGateway
	plain.NodeID = "router~10.1.1.2~gw-2.istio-system~istio-system.svc.cluster.local"
	sdsGenerate(t, g, &plain, push, sdsWatch("kubernetes://shop-cert"))
	denials = g.SecretDenials(func(id string) bool { return id == plain.NodeID })
	if len(denials) != 1 || denials[0].Identity != "" || !strings.Contains(denials[0].Reason, "authenticated streams") {
		t.Fatalf("plaintext denials = %+v", denials)
	}
	// The gateway went away: its denial went with it.
	if denials = g.SecretDenials(func(id string) bool { return id == plain.NodeID }); len(denials) != 1 {
		t.Fatalf("after the gateway left: %+v", denials)
	}
	if denials = g.SecretDenials(connectedAll); len(denials) != 1 || denials[0].Proxy != plain.NodeID {
		t.Fatalf("a disconnected proxy's denial came back: %+v", denials)
	}
}

// An authorizer's answer arriving later reaches the proxies of that identity, and only them.
func TestSDSAccessDecisionPushesOnlyItsIdentity(t *testing.T) {
	cert, key := testCert(t, "a.example.com", time.Now().Add(time.Hour))
	push := ldsPush(t, nil,
		secretDoc("istio-system", "shop-cert", "kubernetes.io/tls", map[string][]byte{"tls.crt": cert, "tls.key": key}))
	authz := &answers{}
	gen := New(Options{SecretAuthorizer: authz}).ByTypeURL()[SecretType]
	sds := gen.(interface {
		model.DeltaGenerator
		model.PushFilter
	})
	gw := authenticated(ldsGateway, "istio-system", "gw")
	other := authenticated(ldsGateway, "istio-system", "other")
	// The namespace named or implied: a gateway of istio-system asking for shop's Secret must name shop.
	w := sdsWatch("kubernetes://shop-cert", "kubernetes://shop/shop-cert")
	if res, _ := sds.Generate(gw, push, w, nil); len(res) != 0 {
		t.Fatal("served while pending")
	}

	authz.set("istio-system/gw", secretaccess.Decision{Allowed: true})
	req := &model.PushRequest{SecretAccessUpdated: map[string]struct{}{"istio-system/gw": {}}, Push: push}
	if !sds.NeedsPush(gw, w, req) {
		t.Error("the decided identity's proxy is not pushed")
	}
	if sds.NeedsPush(other, w, req) {
		t.Error("another identity's proxy is pushed")
	}
	res, removed, incremental, err := sds.GenerateDeltas(gw, push, w, req)
	if err != nil || len(removed) != 0 || !incremental {
		t.Fatalf("deltas: removed %v, incremental %v, err %v", removed, incremental, err)
	}
	if got := decodeSecrets(t, res); len(got) != 1 || got["kubernetes://shop-cert"] == nil {
		t.Errorf("pushed %v once allowed", slices.Sorted(mapsKeys(got)))
	}
	for _, typeURL := range []string{ClusterType, EndpointType, ListenerType, RouteType} {
		if f, ok := New(Options{}).ByTypeURL()[typeURL].(model.PushFilter); ok && f.NeedsPush(gw, &model.WatchedResource{TypeURL: typeURL}, req) {
			t.Errorf("an access decision pushes %s", typeURL)
		}
	}
}

// Without a cluster (secretaccess.FileMode) a namespace's key pairs go to its gateways and to the
// accounts named readers: a plain sidecar of the namespace is refused, and said so; a gateway of another
// namespace is refused as every proxy is for a namespace not its own.
func TestSDSFileModeServesGatewaysAndNamedReaders(t *testing.T) {
	cert, key := testCert(t, "shop.example.com", time.Now().Add(time.Hour))
	push := ldsPush(t, nil,
		secretDoc("shop", "shop-cert", "kubernetes.io/tls", map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": cert}))
	readers, err := secretaccess.ParseFileModeReaders("shop/mysql, other/x")
	if err != nil {
		t.Fatal(err)
	}
	g := New(Options{SecretAuthorizer: readers})
	// The namespace named or implied: a gateway of istio-system asking for shop's Secret must name shop.
	w := sdsWatch("kubernetes://shop-cert", "kubernetes://shop/shop-cert")

	shopGateway := *ldsGateway
	shopGateway.NodeID, shopGateway.ID, shopGateway.Namespace = "router~10.1.1.9~gw-9.shop~shop.svc.cluster.local", "gw-9.shop", "shop"
	for _, tc := range []struct {
		name  string
		proxy *model.Proxy
		want  bool
	}{
		{"a gateway of the namespace", authenticated(&shopGateway, "shop", "shop-gateway"), true},
		{"a sidecar the flag names", authenticated(ldsMySQL, "shop", "mysql"), true},
		{"a plain sidecar of the namespace", authenticated(ldsReviews, "shop", "reviews"), false},
		{"a gateway of another namespace", authenticated(ldsGateway, "istio-system", "gw"), false},
	} {
		got := sdsGenerate(t, g, tc.proxy, push, w)
		if served := got["kubernetes://shop/shop-cert"] != nil; served != tc.want {
			t.Errorf("%s: served %v, want %v", tc.name, served, tc.want)
		}
		if tc.want && (got["kubernetes://shop/shop-cert"].GetTlsCertificate().GetPrivateKey() == nil || got["kubernetes://shop-cert"] == nil) {
			t.Errorf("%s: served %v, want both names with their key", tc.name, slices.Sorted(mapsKeys(got)))
		}
	}

	denied := map[string]SecretDenial{}
	for _, d := range g.SecretDenials(connectedAll) {
		if d.Resource == "kubernetes://shop/shop-cert" {
			denied[d.Proxy] = d
		}
	}
	if len(denied) != 2 {
		t.Fatalf("denials = %+v; want the plain sidecar's and the other namespace's gateway's", denied)
	}
	d := denied[ldsReviews.NodeID]
	if d.Namespace != "shop" || d.Name != "shop-cert" || !strings.Contains(d.Reason, "--sds-file-mode-readers") ||
		!strings.Contains(d.Reason, "shop/reviews") || !strings.Contains(d.Reason, "other/x,shop/mysql") {
		t.Errorf("the sidecar's denial = %+v; want the Secret, the flag, the account and who is named", d)
	}
	if d := denied[ldsGateway.NodeID]; !strings.Contains(d.Reason, "namespace of the proxy's verified identity") {
		t.Errorf("the other gateway's denial = %+v", d)
	}

	// The CA alone is public, as with a cluster: the sidecar may verify peers with it.
	got := sdsGenerate(t, g, authenticated(ldsReviews, "shop", "reviews"), push, sdsWatch("kubernetes://shop-cert-cacert"))
	if got["kubernetes://shop-cert-cacert"].GetValidationContext() == nil {
		t.Errorf("the CA was refused to the sidecar: %v", slices.Sorted(mapsKeys(got)))
	}
}

func TestSDSFileModeReadersRejectMalformedEntries(t *testing.T) {
	for _, list := range []string{"shop", "shop/", "/mysql", "shop/a/b"} {
		if _, err := secretaccess.ParseFileModeReaders(list); err == nil || !strings.Contains(err.Error(), "--sds-file-mode-readers") {
			t.Errorf("%q: err = %v; want one naming the flag", list, err)
		}
	}
}
