package discovery

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
)

// Many proxies connecting at once each need a TokenReview: the security client must not hold them to
// client-go's default 5 requests per second (60 tokens took 10 s there; here they must take less than 3).
func TestTokenReviewsAreNotThrottled(t *testing.T) {
	var reviews atomic.Int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/apis/authentication.k8s.io/v1/tokenreviews" {
			http.NotFound(w, r)
			return
		}
		// The body is the client's encoding (protobuf for built-in kinds); the answer only needs to be a review.
		var tr authenticationv1.TokenReview
		tr.APIVersion, tr.Kind = "authentication.k8s.io/v1", "TokenReview"
		n := reviews.Add(1)
		tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"istio-ca"},
			User: authenticationv1.UserInfo{Username: fmt.Sprintf("system:serviceaccount:shop:sa-%d", n),
				Groups: []string{"system:serviceaccounts"}}}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(tr)
	}))
	t.Cleanup(api.Close)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
users: [{name: u, user: {token: admin}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, api.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(Args{Kubeconfig: kubeconfig, SecureGRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		CADir: filepath.Join(dir, "ca")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.closeListeners)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Go(func() {
			if _, err := srv.tokens.AuthenticateToken(context.Background(), fmt.Sprintf("sa-%d", i)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if took := time.Since(start); took > 3*time.Second || reviews.Load() != 60 {
		t.Errorf("60 token reviews took %v (%d sent)", took, reviews.Load())
	}
}
