package discovery_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	security "istio.io/api/security/v1beta1"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/discovery"
)

// A RequestAuthentication's jwksUri is fetched by the server: the first snapshot already holds the key set,
// a changed key set reaches a later one, and a failing server is reported in /debug/config_errors and the
// metrics while the last good key set stays in use.
func TestServerFetchesJWKS(t *testing.T) {
	var body atomic.Value
	body.Store(`{"keys":[{"kty":"oct","kid":"a","k":"YQ"}]}`)
	var failing atomic.Bool
	keys := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if failing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, body.Load())
	}))
	defer keys.Close()

	dir := t.TempDir()
	ra := fmt.Sprintf("apiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {name: jwt, namespace: shop}\n"+
		"spec:\n  jwtRules: [{issuer: https://idp.example.com, jwksUri: '%s/keys'}]\n", keys.URL)
	if err := os.WriteFile(filepath.Join(dir, "jwt.yaml"), []byte(ra), 0o644); err != nil {
		t.Fatal(err)
	}
	meshFile := filepath.Join(t.TempDir(), "mesh.yaml")
	if err := os.WriteFile(meshFile, []byte("jwksFetch: {refreshInterval: 50ms, retryInterval: 50ms}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv, err := discovery.NewServer(discovery.Args{ConfigDir: dir, MeshConfigFile: meshFile, GRPCAddr: "127.0.0.1:0",
		HTTPAddr: "127.0.0.1:0", DebounceAfter: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); srv.Wait() }()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	rule := &security.JWTRule{Issuer: "https://idp.example.com", JwksUri: keys.URL + "/keys"}
	if got, ok, _ := srv.Pipeline.Current().JWKS(rule); !ok || got != body.Load() {
		t.Fatalf("first snapshot: key set %q (ok %v), want the fetched one", got, ok)
	}

	body.Store(`{"keys":[{"kty":"oct","kid":"b","k":"Yg"}]}`)
	waitFor(t, "the new key set in a snapshot", func() bool { got, _, _ := srv.Pipeline.Current().JWKS(rule); return got == body.Load() })

	failing.Store(true)
	waitFor(t, "the failure reported", func() bool {
		for _, w := range srv.Warnings() {
			if w.Kind == string(config.RequestAuthentication) && w.Name == "jwt" && w.Field == "spec.jwtRules[0].jwksUri" {
				return true
			}
		}
		return false
	})
	waitFor(t, "the failure in a snapshot", func() bool { _, _, problem := srv.Pipeline.Current().JWKS(rule); return problem != "" })
	if got, ok, problem := srv.Pipeline.Current().JWKS(rule); !ok || got != body.Load() || !strings.Contains(problem, "status 503") {
		t.Errorf("after a failed refresh: %q %v %q, want the last good key set and the failure", got, ok, problem)
	}
	for path, want := range map[string]string{
		"/debug/config_errors": `fetching the key set from ` + keys.URL + `/keys failed`,
		"/metrics":             "sextant_jwks_failing 1",
	} {
		resp, err := http.Get("http://" + srv.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(data), want) {
			t.Errorf("%s lacks %q:\n%.2000s", path, want, data)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
