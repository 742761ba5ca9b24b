package jwks

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/durationpb"
	security "istio.io/api/security/v1beta1"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/store"
)

const (
	keysA = `{"keys":[{"kty":"oct","kid":"a","k":"c2VjcmV0LWE"}]}`
	keysB = `{"keys":[{"kty":"oct","kid":"b","k":"c2VjcmV0LWI"}]}`
)

// keyServer serves a key set that tests change, on loopback.
type keyServer struct {
	*httptest.Server
	mu     sync.Mutex
	body   string
	status int
	delay  time.Duration
	hits   atomic.Int64
}

func newKeyServer(t *testing.T, body string) *keyServer {
	k := &keyServer{body: body, status: http.StatusOK}
	k.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k.hits.Add(1)
		k.mu.Lock()
		body, status, delay := k.body, k.status, k.delay
		k.mu.Unlock()
		if r.URL.Path == openIDDiscoveryPath {
			body = fmt.Sprintf(`{"issuer":%q,"jwks_uri":%q}`, k.URL, k.URL+"/discovered-keys")
		}
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}))
	t.Cleanup(k.Close)
	return k
}

func (k *keyServer) set(body string, status int, delay time.Duration) {
	k.mu.Lock()
	k.body, k.status, k.delay = body, status, delay
	k.mu.Unlock()
}

type harness struct {
	t     *testing.T
	store *store.Store
	f     *Fetcher
}

func start(t *testing.T, fetch mesh.JWKSFetch) *harness {
	t.Helper()
	m := mesh.Default()
	m.JWKSFetch = fetch
	st := store.New()
	h := &harness{t: t, store: st, f: New(Options{Store: st, Mesh: m})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.f.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return h
}

func (h *harness) requestAuthn(name string, rules ...*security.JWTRule) {
	h.t.Helper()
	c := &config.Config{Key: config.Key{Kind: config.RequestAuthentication, Namespace: "shop", Name: name},
		Source: "file:/etc/sextant/jwt.yaml#3", Spec: &security.RequestAuthentication{JwtRules: rules}}
	if err := config.Validate(c); err != nil {
		h.t.Fatal(err)
	}
	h.store.Upsert(store.LayerFile, c)
}

func (h *harness) fetched(issuer, uri string) *config.FetchedKeySet {
	c := h.store.Get(config.FetchedJWKSKey(issuer, uri))
	if c == nil {
		return nil
	}
	return c.Spec.(*config.FetchedKeySet)
}

func (h *harness) eventually(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestFetchStoresTheKeySet(t *testing.T) {
	srv := newKeyServer(t, keysA)
	h := start(t, mesh.JWKSFetch{})
	h.requestAuthn("jwt", &security.JWTRule{Issuer: "https://idp.example.com", JwksUri: srv.URL + "/keys"})
	h.eventually("the key set", func() bool { ks := h.fetched("", srv.URL+"/keys"); return ks != nil && ks.JWKS == keysA })
	if p := h.f.Problems(); len(p) != 0 {
		t.Errorf("problems %v", p)
	}
	c := h.store.Get(config.FetchedJWKSKey("", srv.URL+"/keys"))
	if c.Source != SourceName || c.ResourceVersion == "" {
		t.Errorf("stored object %+v", c)
	}
	if got := sample(t, h.f.Collector(), "sextant_jwks_fetches_total", "success"); got != 1 {
		t.Errorf("successful fetches %v, want 1", got)
	}
}

// sample reads one sample of a collector's metric name, with those label values.
func sample(t *testing.T, c prometheus.Collector, name string, labelValues ...string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := len(m.GetLabel()) == len(labelValues)
			for i, l := range m.GetLabel() {
				match = match && l.GetValue() == labelValues[i]
			}
			if match {
				return m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no sample %s %v", name, labelValues)
	return 0
}

// A server slower than the timeout fails the fetch in bounded time: no key set, tokens rejected, reported
// on the rule's field and counted.
func TestFetchTimeout(t *testing.T) {
	srv := newKeyServer(t, keysA)
	srv.set(keysA, http.StatusOK, 10*time.Second)
	h := start(t, mesh.JWKSFetch{Timeout: "100ms"})
	began := time.Now()
	h.requestAuthn("jwt", &security.JWTRule{Issuer: "https://idp.example.com", JwksUri: srv.URL + "/keys"})
	h.eventually("the failure", func() bool { ks := h.fetched("", srv.URL+"/keys"); return ks != nil && ks.Error != "" })
	if took := time.Since(began); took > 3*time.Second {
		t.Errorf("the fetch took %s, the timeout is 100ms", took)
	}
	ks := h.fetched("", srv.URL+"/keys")
	if ks.JWKS != "" || !strings.Contains(ks.Error, "timeout") {
		t.Errorf("stored %+v", ks)
	}
	p := h.f.Problems()
	if len(p) != 1 || p[0].Kind != "RequestAuthentication" || p[0].Namespace != "shop" || p[0].Name != "jwt" ||
		p[0].Field != "spec.jwtRules[0].jwksUri" || p[0].File != "/etc/sextant/jwt.yaml" || p[0].Index != 3 || !p[0].Warning ||
		!strings.Contains(p[0].Message, "every token of its issuer is rejected") {
		t.Errorf("problems %+v", p)
	}
	if got := sample(t, h.f.Collector(), "sextant_jwks_failing"); got != 1 {
		t.Errorf("failing key sets %v, want 1", got)
	}
}

// A rule's own timeout applies (capped at maxTimeout).
func TestFetchRuleTimeout(t *testing.T) {
	srv := newKeyServer(t, keysA)
	srv.set(keysA, http.StatusOK, 300*time.Millisecond)
	h := start(t, mesh.JWKSFetch{Timeout: "50ms"})
	h.requestAuthn("jwt", &security.JWTRule{Issuer: "i", JwksUri: srv.URL + "/keys", Timeout: durationpb.New(2 * time.Second)})
	h.eventually("the key set", func() bool { ks := h.fetched("", srv.URL+"/keys"); return ks != nil && ks.JWKS == keysA })
}

func TestFetchSizeLimit(t *testing.T) {
	srv := newKeyServer(t, keysA)
	h := start(t, mesh.JWKSFetch{MaxBytes: 20})
	h.requestAuthn("jwt", &security.JWTRule{Issuer: "i", JwksUri: srv.URL + "/keys"})
	h.eventually("the failure", func() bool { ks := h.fetched("", srv.URL+"/keys"); return ks != nil && ks.Error != "" })
	if ks := h.fetched("", srv.URL+"/keys"); ks.JWKS != "" || !strings.Contains(ks.Error, "larger than 20 bytes") {
		t.Errorf("stored %+v", ks)
	}
}

// Refreshed periodically: a new key set replaces the old; a failing refresh keeps the last good set (and
// says so) until maxStale, then tokens are rejected.
func TestRefreshKeepsLastGood(t *testing.T) {
	srv := newKeyServer(t, keysA)
	h := start(t, mesh.JWKSFetch{RefreshInterval: "20ms", RetryInterval: "20ms", MaxStale: "1h"})
	h.requestAuthn("jwt", &security.JWTRule{Issuer: "i", JwksUri: srv.URL + "/keys"})
	uri := srv.URL + "/keys"
	h.eventually("the first key set", func() bool { ks := h.fetched("", uri); return ks != nil && ks.JWKS == keysA })
	srv.set(keysB, http.StatusOK, 0)
	h.eventually("the refreshed key set", func() bool { return h.fetched("", uri).JWKS == keysB })
	srv.set("", http.StatusServiceUnavailable, 0)
	h.eventually("the failed refresh", func() bool { return h.fetched("", uri).Error != "" })
	if ks := h.fetched("", uri); ks.JWKS != keysB || !strings.Contains(ks.Error, "status 503") {
		t.Errorf("after a failed refresh: %+v", ks)
	}
	if p := h.f.Problems(); len(p) != 1 || !strings.Contains(p[0].Message, "still in use") {
		t.Errorf("problems %+v", p)
	}
	// Not a valid key set: refused like a failure, the last good set kept.
	srv.set(`{"keys": "none"}`, http.StatusOK, 0)
	h.eventually("the bad key set refused", func() bool { return strings.Contains(h.fetched("", uri).Error, "JSON Web Key Set") })
	if ks := h.fetched("", uri); ks.JWKS != keysB {
		t.Errorf("a bad key set replaced the last good one: %+v", ks)
	}
	srv.set(keysA, http.StatusOK, 0)
	h.eventually("recovery", func() bool { ks := h.fetched("", uri); return ks.JWKS == keysA && ks.Error == "" })
	if p := h.f.Problems(); len(p) != 0 {
		t.Errorf("problems after recovery %+v", p)
	}
}

func TestStaleKeySetDropped(t *testing.T) {
	srv := newKeyServer(t, keysA)
	h := start(t, mesh.JWKSFetch{RefreshInterval: "20ms", RetryInterval: "20ms", MaxStale: "50ms"})
	h.requestAuthn("jwt", &security.JWTRule{Issuer: "i", JwksUri: srv.URL + "/keys"})
	uri := srv.URL + "/keys"
	h.eventually("the key set", func() bool { ks := h.fetched("", uri); return ks != nil && ks.JWKS == keysA })
	srv.set("", http.StatusInternalServerError, 0)
	h.eventually("the stale key set dropped", func() bool { ks := h.fetched("", uri); return ks.JWKS == "" && ks.Error != "" })
}

// Unchanged refreshes store nothing new, so they push nothing.
func TestUnchangedRefreshStoresNothing(t *testing.T) {
	srv := newKeyServer(t, keysA)
	h := start(t, mesh.JWKSFetch{RefreshInterval: "10ms"})
	var events atomic.Int64
	h.store.AddHandler(func(ev store.Event) {
		if ev.Key().Kind == config.FetchedJWKS {
			events.Add(1)
		}
	})
	h.requestAuthn("jwt", &security.JWTRule{Issuer: "i", JwksUri: srv.URL + "/keys"})
	h.eventually("several refreshes", func() bool { return srv.hits.Load() >= 5 })
	if n := events.Load(); n != 1 {
		t.Errorf("%d store events for %d fetches of the same key set, want 1", n, srv.hits.Load())
	}
}

// Without jwksUri, the key set is found through the issuer's OpenID discovery; without a usable jwks_uri
// the failure names the issuer field.
func TestOpenIDDiscovery(t *testing.T) {
	srv := newKeyServer(t, keysA)
	h := start(t, mesh.JWKSFetch{})
	h.requestAuthn("jwt", &security.JWTRule{Issuer: srv.URL})
	h.eventually("the discovered key set", func() bool { ks := h.fetched(srv.URL, ""); return ks != nil && ks.JWKS == keysA })

	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `{"jwks_uri": "file:///etc/keys"}`)
	}))
	t.Cleanup(bad.Close)
	h.requestAuthn("bad", &security.JWTRule{Issuer: bad.URL})
	h.eventually("the discovery failure", func() bool { ks := h.fetched(bad.URL, ""); return ks != nil && ks.Error != "" })
	p := h.f.Problems()
	if len(p) != 1 || p[0].Name != "bad" || p[0].Field != "spec.jwtRules[0].issuer" ||
		!strings.Contains(p[0].Message, `jwks_uri "file:///etc/keys"`) {
		t.Errorf("problems %+v", p)
	}
}

// A key set no rule needs any more is deleted from the store; inline keys are never fetched.
func TestKeySetDeletedWithItsRules(t *testing.T) {
	srv := newKeyServer(t, keysA)
	h := start(t, mesh.JWKSFetch{})
	h.requestAuthn("jwt", &security.JWTRule{Issuer: "i", JwksUri: srv.URL + "/keys"}, &security.JWTRule{Issuer: "j", Jwks: keysB})
	h.eventually("the key set", func() bool { return h.fetched("", srv.URL+"/keys") != nil })
	if n := h.store.Count(config.FetchedJWKS); n != 1 {
		t.Errorf("%d key sets stored, want 1 (inline keys are not fetched)", n)
	}
	h.store.Delete(store.LayerFile, config.Key{Kind: config.RequestAuthentication, Namespace: "shop", Name: "jwt"})
	h.eventually("the key set deleted", func() bool { return h.fetched("", srv.URL+"/keys") == nil })
}

func TestBlockedAddresses(t *testing.T) {
	for addr, want := range map[string]bool{"169.254.169.254": true, "fe80::1": true, "100.100.100.200": true,
		"::ffff:169.254.169.254": true, "127.0.0.1": false, "10.0.0.1": false, "203.0.113.9": false} {
		if got := blockedAddress(netip.MustParseAddr(addr)); got != want {
			t.Errorf("%s: blocked %v, want %v", addr, got, want)
		}
	}
	// The default client refuses such an address before sending anything.
	f := New(Options{Store: store.New()})
	_, err := f.get(context.Background(), "http://169.254.169.254/keys")
	if err == nil || !strings.Contains(err.Error(), "link-local") {
		t.Errorf("fetch from a metadata address: %v", err)
	}
}
