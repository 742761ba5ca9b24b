package discovery_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sextantmesh/sextant/pilot/authn"
	"github.com/sextantmesh/sextant/pilot/discovery"
	"github.com/sextantmesh/sextant/pilot/envoy"
	"github.com/sextantmesh/sextant/tests/debugtest"
)

// nonLoopbackIP returns an address of this machine that is not loopback, so a request to it arrives
// from a non-loopback address as a remote caller's would.
func nonLoopbackIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	t.Skip("no non-loopback IPv4 address on this machine")
	return ""
}

var debugTokens = tokens{
	"bookinfo": {Identities: []authn.Identity{{TrustDomain: "cluster.local", Namespace: "bookinfo", ServiceAccount: "debugger"}},
		Method: "token"},
	"shop": {Identities: []authn.Identity{{TrustDomain: "cluster.local", Namespace: "shop", ServiceAccount: "frontend"}}, Method: "token"},
	"admin": {Identities: []authn.Identity{{TrustDomain: "cluster.local", Namespace: "istio-system", ServiceAccount: "istioctl"}},
		Method: "token"},
}

func TestDebugNeedsLoopbackOrToken(t *testing.T) {
	ip := nonLoopbackIP(t)
	srv, err := discovery.NewServer(discovery.Args{ConfigDir: copyDir(t, "../../examples/bookinfo"), GRPCAddr: "127.0.0.1:0",
		HTTPAddr: net.JoinHostPort(ip, "0"), DebounceAfter: 20 * time.Millisecond, TokenAuthenticator: debugTokens})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); srv.Wait() })
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	env := &debugtest.Env{Server: srv, URL: "http://" + srv.HTTPAddr()}
	node := debugtest.SidecarNode("productpage-v1-0000", "bookinfo")
	env.Connect(t, node).Subscribe(envoy.ClusterType)
	get := func(path, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, env.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	debugtest.Eventually(t, "the proxy connected", func() bool {
		code, _ := get("/debug/config_dump?proxyID=productpage-v1-0000.bookinfo", "admin")
		return code == http.StatusOK
	})
	dump := "/debug/config_dump?proxyID=productpage-v1-0000.bookinfo"
	for _, tc := range []struct {
		path, token string
		want        int
		says        string
	}{
		{dump, "", http.StatusUnauthorized, "loopback callers, or callers with a service-account token"},
		{dump, "expired", http.StatusUnauthorized, "token refused"},
		{dump, "shop", http.StatusForbidden, "needs a token of its namespace bookinfo"},
		{dump, "bookinfo", http.StatusOK, `"proxy"`},
		{dump, "admin", http.StatusOK, `"proxy"`},
		{"/debug/configz", "bookinfo", http.StatusForbidden, "may read only /debug/config_dump"},
		{"/debug/configz", "", http.StatusUnauthorized, "Bearer"},
		{"/debug/pprof/cmdline", "", http.StatusUnauthorized, "Bearer"},
		{"/debug/anything", "", http.StatusUnauthorized, "Bearer"},
		{"/debug/configz", "admin", http.StatusOK, `"kind"`},
		{"/metrics", "", http.StatusOK, "sextant_"},
		{"/ready", "", http.StatusOK, "ready"},
		{"/healthz", "", http.StatusOK, "ok"},
	} {
		code, body := get(tc.path, tc.token)
		if code != tc.want || !strings.Contains(body, tc.says) {
			t.Errorf("GET %s with token %q from %s: %d, want %d saying %q:\n%.300s", tc.path, tc.token, ip, code, tc.want, tc.says, body)
		}
	}
}
