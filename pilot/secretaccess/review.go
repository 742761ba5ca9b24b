package secretaccess

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"

	"github.com/sextantmesh/sextant/pilot/authn"
)

// Decision is an answer about one identity.
type Decision struct {
	// Allowed: the identity may be served its namespace's key pairs.
	Allowed bool
	// Pending: no answer yet (the first review is in flight); not a denial, and OnDecided follows.
	Pending bool
	// Reason says why not, naming the identity, for logs and /debug/config_errors.
	Reason string
}

// Options configure a Reviewer.
type Options struct {
	Reviews authorizationclient.SubjectAccessReviewInterface
	// AllowedTTL is how long a yes is reused (default 1m); DeniedTTL a no or a failed review (default 10s),
	// so a Role granted after a denial takes effect soon. istiod keeps them 5 and 1 minutes.
	AllowedTTL time.Duration
	DeniedTTL  time.Duration
	// Timeout bounds one review (default 10s).
	Timeout time.Duration
	// OnDecided is called, outside any lock, when an identity's answer arrives or changes, so the proxies
	// of that identity can be pushed their secrets again.
	OnDecided func(authn.Identity)
	// MaxCached bounds the identities remembered (default 10,000).
	MaxCached int
	Logger    *slog.Logger
	Now       func() time.Time
}

// Reviewer asks the Kubernetes API server whether a service account may list Secrets in its namespace
// (verb list, as istiod's credentials controller). MayReadSecrets answers from memory, never waiting for
// the API server: an unknown or expired identity is reviewed in the background.
type Reviewer struct {
	opts Options

	mu      sync.Mutex
	entries map[string]*entry

	reviews, failures atomic.Uint64
}

type entry struct {
	decision Decision
	expires  time.Time
	inflight bool
}

// New returns a Reviewer asking opts.Reviews.
func New(opts Options) *Reviewer {
	if opts.AllowedTTL <= 0 {
		opts.AllowedTTL = time.Minute
	}
	if opts.DeniedTTL <= 0 {
		opts.DeniedTTL = 10 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.MaxCached <= 0 {
		opts.MaxCached = 10000
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Reviewer{opts: opts, entries: map[string]*entry{}}
}

// MayReadSecrets returns the cached answer for id, starting a review when there is none or it expired.
// An expired answer is still returned until the new one arrives: a proxy allowed a minute ago does not
// flap to denied for the length of a round trip.
func (r *Reviewer) MayReadSecrets(id authn.Identity) Decision {
	key := id.Account()
	now := r.opts.Now()
	r.mu.Lock()
	e := r.entries[key]
	if e == nil {
		r.makeRoom(now)
		e = &entry{decision: Decision{Pending: true, Reason: "waiting for the Kubernetes API server's SubjectAccessReview of " +
			username(id)}}
		r.entries[key] = e
	}
	start := !e.inflight && (e.decision.Pending || !now.Before(e.expires))
	if start {
		e.inflight = true
	}
	d := e.decision
	r.mu.Unlock()
	if start {
		go r.review(id)
	}
	return d
}

// Reviews returns how many SubjectAccessReviews were sent, and how many failed (no answer).
func (r *Reviewer) Reviews() (sent, failed uint64) { return r.reviews.Load(), r.failures.Load() }

// makeRoom drops expired answers, then everything not in flight, when the cache is full. The caller holds mu.
func (r *Reviewer) makeRoom(now time.Time) {
	if len(r.entries) < r.opts.MaxCached {
		return
	}
	for k, e := range r.entries {
		if !e.inflight && !now.Before(e.expires) {
			delete(r.entries, k)
		}
	}
	if len(r.entries) >= r.opts.MaxCached {
		for k, e := range r.entries {
			if !e.inflight {
				delete(r.entries, k)
			}
		}
	}
}

func username(id authn.Identity) string {
	return "system:serviceaccount:" + id.Namespace + ":" + id.ServiceAccount
}

func (r *Reviewer) review(id authn.Identity) {
	ctx, cancel := context.WithTimeout(context.Background(), r.opts.Timeout)
	defer cancel()
	r.reviews.Add(1)
	user := username(id)
	// The groups a service account's own requests carry, so a RoleBinding to the namespace's service
	// accounts counts as it would for the workload itself.
	resp, err := r.opts.Reviews.Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               user,
		Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + id.Namespace, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: id.Namespace, Verb: "list", Resource: "secrets"},
	}}, metav1.CreateOptions{})
	var d Decision
	switch {
	case err != nil:
		r.failures.Add(1)
		// Fail closed: no answer is no.
		d.Reason = fmt.Sprintf("SubjectAccessReview of %s failed, so it is not allowed: %v", user, err)
	case resp.Status.Allowed && !resp.Status.Denied:
		d.Allowed = true
	default:
		d.Reason = fmt.Sprintf("%s may not list Secrets in namespace %s (SubjectAccessReview)", user, id.Namespace)
		if resp.Status.Reason != "" {
			d.Reason += ": " + resp.Status.Reason
		}
		if resp.Status.EvaluationError != "" {
			d.Reason += "; evaluation error: " + resp.Status.EvaluationError
		}
	}
	ttl := r.opts.DeniedTTL
	if d.Allowed {
		ttl = r.opts.AllowedTTL
	}
	now := r.opts.Now()
	key := id.Account()
	r.mu.Lock()
	e := r.entries[key]
	if e == nil { // dropped to make room meanwhile
		e = &entry{decision: Decision{Pending: true}}
		r.entries[key] = e
	}
	changed := e.decision.Pending || e.decision.Allowed != d.Allowed
	e.decision, e.expires, e.inflight = d, now.Add(ttl), false
	r.mu.Unlock()
	if err != nil {
		r.opts.Logger.Warn("SubjectAccessReview failed; the identity gets no key pairs over SDS until it succeeds",
			"identity", id.String(), "error", err)
	}
	if changed && r.opts.OnDecided != nil {
		r.opts.OnDecided(id)
	}
}
