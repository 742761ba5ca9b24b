package authn

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// jwt builds a token whose payload has exp; the fake API server below decides validity by the token text.
func jwt(name string, exp time.Time) string {
	payload := base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, `{"exp":%d,"sub":%q}`, exp.Unix(), name))
	return "eyJhbGciOiJSUzI1NiJ9." + payload + ".sig"
}

// fakeAPIServer answers TokenReviews as the API server would for the tokens it knows.
func fakeAPIServer(t *testing.T, reviews *atomic.Int32, answers map[string]authenticationv1.TokenReviewStatus) *fake.Clientset {
	t.Helper()
	c := fake.NewClientset()
	c.PrependReactor("create", "tokenreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		reviews.Add(1)
		tr := action.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		if !slices.Equal(tr.Spec.Audiences, []string{"istio-ca"}) {
			t.Errorf("review asked for audiences %v, want [istio-ca]", tr.Spec.Audiences)
		}
		out := tr.DeepCopy()
		out.Status = answers[tr.Spec.Token]
		return true, out, nil
	})
	return c
}

func saStatus(ns, sa string, audiences ...string) authenticationv1.TokenReviewStatus {
	return authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: audiences, User: authenticationv1.UserInfo{
		Username: "system:serviceaccount:" + ns + ":" + sa, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns},
		Extra: map[string]authenticationv1.ExtraValue{podNameExtra: {"cart-1"}, podUIDExtra: {"uid-1"}}}}
}

func TestTokenReview(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	good := jwt("good", now.Add(time.Hour))
	answers := map[string]authenticationv1.TokenReviewStatus{
		good:                                 saStatus("shop", "cart", "istio-ca"),
		jwt("other-aud", now.Add(time.Hour)): saStatus("shop", "cart", "https://kubernetes.default.svc"),
		jwt("no-aud", now.Add(time.Hour)):    saStatus("shop", "cart"),
		jwt("user", now.Add(time.Hour)): {Authenticated: true, Audiences: []string{"istio-ca"},
			User: authenticationv1.UserInfo{Username: "alice", Groups: []string{"system:authenticated"}}},
		jwt("expired", now.Add(-time.Hour)): {Error: "[invalid bearer token, square/go-jose/jwt: validation failed, token is expired (exp)]"},
	}
	var reviews atomic.Int32
	a := NewTokenReviewAuthenticator(TokenReviewOptions{Client: fakeAPIServer(t, &reviews, answers), TrustDomain: "cluster.local",
		Now: func() time.Time { return now }})
	ctx := context.Background()

	caller, err := a.AuthenticateToken(ctx, good)
	if err != nil {
		t.Fatal(err)
	}
	if len(caller.Identities) != 1 || caller.Identities[0].String() != "spiffe://cluster.local/ns/shop/sa/cart" ||
		caller.PodName != "cart-1" || caller.PodUID != "uid-1" {
		t.Errorf("caller %+v", caller)
	}
	if _, err := a.AuthenticateToken(ctx, good); err != nil || reviews.Load() != 1 {
		t.Errorf("second use: %v, %d reviews, want the cached answer", err, reviews.Load())
	}
	if sent, hits := a.Counts(); sent != 1 || hits != 1 {
		t.Errorf("counts: %d reviews, %d cache hits; want 1 and 1", sent, hits)
	}
	for token, want := range map[string]string{
		jwt("other-aud", now.Add(time.Hour)): "want one of [istio-ca]",
		jwt("no-aud", now.Add(time.Hour)):    "want one of [istio-ca]",
		jwt("user", now.Add(time.Hour)):      "not a service account",
		jwt("expired", now.Add(-time.Hour)):  "token is expired",
		"unknown":                            "rejected by the Kubernetes API server",
	} {
		if _, err := a.AuthenticateToken(ctx, token); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("token %.40s…: %v, want an error containing %q", token, err, want)
		}
	}
}

func TestTokenReviewCacheEndsWithTheToken(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	clock := now
	short := jwt("short", now.Add(5*time.Second))
	var reviews atomic.Int32
	answers := map[string]authenticationv1.TokenReviewStatus{short: saStatus("shop", "cart", "istio-ca")}
	a := NewTokenReviewAuthenticator(TokenReviewOptions{Client: fakeAPIServer(t, &reviews, answers), TrustDomain: "cluster.local",
		CacheTTL: time.Minute, Now: func() time.Time { return clock }})
	if _, err := a.AuthenticateToken(context.Background(), short); err != nil {
		t.Fatal(err)
	}
	// Past the token's expiry the API server is asked again (and here says no) instead of the cache saying yes.
	clock = now.Add(6 * time.Second)
	answers[short] = authenticationv1.TokenReviewStatus{Error: "token is expired"}
	if _, err := a.AuthenticateToken(context.Background(), short); err == nil || reviews.Load() != 2 {
		t.Errorf("after expiry: %v after %d reviews, want a second review refusing it", err, reviews.Load())
	}
}
