package debug

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sextantmesh/sextant/pilot/authn"
)

type fixedTokens map[string]authn.Identity

func (f fixedTokens) AuthenticateToken(_ context.Context, token string) (*authn.Caller, error) {
	id, ok := f[token]
	if !ok {
		return nil, errors.New("token expired")
	}
	return &authn.Caller{Identities: []authn.Identity{id}, Method: "token"}, nil
}

var accessTokens = fixedTokens{
	"admin": {TrustDomain: "cluster.local", Namespace: "istio-system", ServiceAccount: "istioctl"},
	"ops":   {TrustDomain: "cluster.local", Namespace: "ops", ServiceAccount: "debugger"},
	"shop":  {TrustDomain: "cluster.local", Namespace: "shop", ServiceAccount: "frontend"},
}

func TestAccessRules(t *testing.T) {
	a := &Access{Tokens: accessTokens, AdminNamespaces: []string{"istio-system", "ops"}}
	var servedNS string
	h := a.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		servedNS = callerNamespace(r.Context())
		w.WriteHeader(http.StatusOK)
	}))
	for _, tc := range []struct {
		name, remote, path, auth string
		want                     int
		wantNS, wantText         string
	}{
		{"loopback, no token", "127.0.0.1:5000", "/debug/configz", "", 200, "", ""},
		{"IPv6 loopback", "[::1]:5000", "/debug/pprof/profile", "", 200, "", ""},
		{"remote, no token", "10.0.0.9:5000", "/debug/config_dump", "", 401, "", "loopback callers, or callers with a service-account token"},
		{"remote, not bearer", "10.0.0.9:5000", "/debug/configz", "Basic dXNlcjpwYXNz", 401, "", "Authorization: want"},
		{"remote, bad token", "10.0.0.9:5000", "/debug/configz", "Bearer nope", 401, "", "token refused: token expired"},
		{"remote, admin namespace", "10.0.0.9:5000", "/debug/configz", "Bearer admin", 200, "", ""},
		{"remote, configured admin namespace", "10.0.0.9:5000", "/debug/pprof/", "Bearer ops", 200, "", ""},
		{"remote, other namespace, config_dump", "10.0.0.9:5000", "/debug/config_dump", "Bearer shop", 200, "shop", ""},
		{"remote, other namespace, another view", "10.0.0.9:5000", "/debug/configz", "Bearer shop", 403, "",
			"may read only /debug/config_dump of proxies in namespace shop"},
	} {
		servedNS = "unset"
		r := httptest.NewRequest(http.MethodGet, tc.path, nil)
		r.RemoteAddr = tc.remote
		if tc.auth != "" {
			r.Header.Set("Authorization", tc.auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("%s: %d, want %d: %s", tc.name, w.Code, tc.want, w.Body)
			continue
		}
		if tc.want == 200 && servedNS != tc.wantNS {
			t.Errorf("%s: served with caller namespace %q, want %q", tc.name, servedNS, tc.wantNS)
		}
		if tc.want != 200 && servedNS != "unset" {
			t.Errorf("%s: handler ran although refused", tc.name)
		}
		if !strings.Contains(w.Body.String(), tc.wantText) {
			t.Errorf("%s: body %s, want it to say %q", tc.name, w.Body, tc.wantText)
		}
		if w.Code == 401 && w.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without WWW-Authenticate", tc.name)
		}
	}

	// Without a cluster no token can be checked: only loopback callers are served, and told why.
	noCluster := (&Access{AdminNamespaces: []string{"istio-system"}}).wrap(http.NotFoundHandler())
	r := httptest.NewRequest(http.MethodGet, "/debug/configz", nil)
	r.Header.Set("Authorization", "Bearer admin")
	w := httptest.NewRecorder()
	noCluster.ServeHTTP(w, r)
	if w.Code != 401 || !strings.Contains(w.Body.String(), "token authentication needs a Kubernetes cluster") {
		t.Errorf("without a cluster: %d %s", w.Code, w.Body)
	}
}
