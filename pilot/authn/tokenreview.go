package authn

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// DefaultAudience is the audience a token must be issued for, as istiod's default (istio-ca).
const DefaultAudience = "istio-ca"

// Kubernetes' TokenReview extra keys naming the pod a bound token was issued for.
const (
	podNameExtra = "authentication.kubernetes.io/pod-name"
	podUIDExtra  = "authentication.kubernetes.io/pod-uid"
)

// TokenReviewOptions configure a TokenReviewAuthenticator.
type TokenReviewOptions struct {
	Client      kubernetes.Interface
	TrustDomain string
	// Audiences the token must be issued for, one of them at least (default DefaultAudience).
	Audiences []string
	// CacheTTL is how long a review's answer is reused for the same token (default 30s); a token's
	// expiry shortens it. Failures are kept a fifth of it, so a client retrying a bad token does not
	// cost a review per retry.
	CacheTTL time.Duration
	// MaxCached bounds the cache (default 10,000 tokens).
	MaxCached int
	Now       func() time.Time
}

// TokenReviewAuthenticator validates service-account tokens with the Kubernetes TokenReview API.
type TokenReviewAuthenticator struct {
	opts TokenReviewOptions

	mu    sync.Mutex
	cache map[[32]byte]cachedReview

	reviews, cacheHits atomic.Uint64
}

// Counts returns how many tokens were sent to the TokenReview API and how many were answered from the cache.
func (a *TokenReviewAuthenticator) Counts() (reviews, cacheHits uint64) {
	return a.reviews.Load(), a.cacheHits.Load()
}

type cachedReview struct {
	caller  *Caller
	err     error
	expires time.Time
}

// NewTokenReviewAuthenticator returns an authenticator asking opts.Client.
func NewTokenReviewAuthenticator(opts TokenReviewOptions) *TokenReviewAuthenticator {
	if len(opts.Audiences) == 0 {
		opts.Audiences = []string{DefaultAudience}
	}
	if opts.CacheTTL <= 0 {
		opts.CacheTTL = 30 * time.Second
	}
	if opts.MaxCached <= 0 {
		opts.MaxCached = 10000
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &TokenReviewAuthenticator{opts: opts, cache: map[[32]byte]cachedReview{}}
}

// AuthenticateToken implements TokenAuthenticator.
func (a *TokenReviewAuthenticator) AuthenticateToken(ctx context.Context, token string) (*Caller, error) {
	key := sha256.Sum256([]byte(token))
	now := a.opts.Now()
	a.mu.Lock()
	if c, ok := a.cache[key]; ok && now.Before(c.expires) {
		a.mu.Unlock()
		a.cacheHits.Add(1)
		return c.caller, c.err
	}
	a.mu.Unlock()
	a.reviews.Add(1)

	caller, err := a.review(ctx, token)
	if err != nil && ctx.Err() != nil {
		return nil, err // the caller went away: nothing learnt about the token
	}
	ttl := a.opts.CacheTTL
	if err != nil {
		ttl /= 5
	} else if exp, ok := tokenExpiry(token); ok && exp.Sub(now) < ttl {
		// The apiserver verified the token, so its exp claim is its own; an expired token must not be
		// accepted from the cache.
		ttl = exp.Sub(now)
	}
	a.mu.Lock()
	if len(a.cache) >= a.opts.MaxCached {
		for k, c := range a.cache {
			if !now.Before(c.expires) {
				delete(a.cache, k)
			}
		}
		if len(a.cache) >= a.opts.MaxCached {
			clear(a.cache)
		}
	}
	a.cache[key] = cachedReview{caller: caller, err: err, expires: now.Add(ttl)}
	a.mu.Unlock()
	return caller, err
}

func (a *TokenReviewAuthenticator) review(ctx context.Context, token string) (*Caller, error) {
	review, err := a.opts.Client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: a.opts.Audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("token review failed: %w", err)
	}
	st := review.Status
	if st.Error != "" {
		return nil, fmt.Errorf("token rejected by the Kubernetes API server: %s", st.Error)
	}
	if !st.Authenticated {
		return nil, fmt.Errorf("token rejected by the Kubernetes API server (expired, revoked, or not for audience %s)",
			strings.Join(a.opts.Audiences, ","))
	}
	// An API server that ignores audiences answers with none: such a token may be for anyone, so it is refused.
	if !slices.ContainsFunc(st.Audiences, func(aud string) bool { return slices.Contains(a.opts.Audiences, aud) }) {
		return nil, fmt.Errorf("token is for audiences %v, want one of %v", st.Audiences, a.opts.Audiences)
	}
	if !slices.Contains(st.User.Groups, "system:serviceaccounts") {
		return nil, fmt.Errorf("token of %q is not a service account's", st.User.Username)
	}
	parts := strings.Split(st.User.Username, ":")
	if len(parts) != 4 || parts[0] != "system" || parts[1] != "serviceaccount" || parts[2] == "" || parts[3] == "" {
		return nil, fmt.Errorf("token review names user %q, want system:serviceaccount:NAMESPACE:NAME", st.User.Username)
	}
	extra := func(key string) string {
		if v := st.User.Extra[key]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	return &Caller{
		Identities: []Identity{{TrustDomain: a.opts.TrustDomain, Namespace: parts[2], ServiceAccount: parts[3]}},
		Method:     "token",
		PodName:    extra(podNameExtra),
		PodUID:     extra(podUIDExtra),
	}, nil
}

// tokenExpiry reads the exp claim of a JWT without verifying it (the caller only uses it once the
// token is verified).
func tokenExpiry(token string) (time.Time, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp *json.Number `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Exp == nil {
		return time.Time{}, false
	}
	secs, err := claims.Exp.Int64()
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(secs, 0), true
}

var _ TokenAuthenticator = (*TokenReviewAuthenticator)(nil)
