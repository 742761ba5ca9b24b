package secretaccess

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sextantmesh/sextant/pilot/authn"
)

// apiServer answers SubjectAccessReviews from a set of allowed users, recording each review.
type apiServer struct {
	mu      sync.Mutex
	allowed map[string]bool
	fail    error
	seen    []authorizationv1.SubjectAccessReviewSpec
}

func (a *apiServer) client() *fake.Clientset {
	c := fake.NewClientset()
	c.PrependReactor("create", "subjectaccessreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		sar := action.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		a.mu.Lock()
		defer a.mu.Unlock()
		a.seen = append(a.seen, sar.Spec)
		if a.fail != nil {
			return true, nil, a.fail
		}
		out := sar.DeepCopy()
		out.Status.Allowed = a.allowed[sar.Spec.User]
		if !out.Status.Allowed {
			out.Status.Reason = "no RBAC policy matched"
		}
		return true, out, nil
	})
	return c
}

func (a *apiServer) set(f func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f()
}

func (a *apiServer) reviews() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.seen)
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var (
	gateway = authn.Identity{TrustDomain: "cluster.local", Namespace: "istio-system", ServiceAccount: "ingress"}
	cart    = authn.Identity{TrustDomain: "cluster.local", Namespace: "shop", ServiceAccount: "cart"}
)

func newReviewer(t *testing.T, api *apiServer, clk *clock) (*Reviewer, chan authn.Identity) {
	t.Helper()
	decided := make(chan authn.Identity, 10)
	r := New(Options{Reviews: api.client().AuthorizationV1().SubjectAccessReviews(), Now: clk.now,
		OnDecided: func(id authn.Identity) { decided <- id }})
	return r, decided
}

func waitDecided(t *testing.T, decided chan authn.Identity, want authn.Identity) {
	t.Helper()
	select {
	case id := <-decided:
		if id != want {
			t.Fatalf("decided %s, want %s", id, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no decision for %s", want)
	}
}

func TestFirstAnswerIsPendingThenDecided(t *testing.T) {
	api := &apiServer{allowed: map[string]bool{"system:serviceaccount:istio-system:ingress": true}}
	clk := &clock{t: time.Unix(1e9, 0)}
	r, decided := newReviewer(t, api, clk)

	if d := r.MayReadSecrets(gateway); !d.Pending || d.Allowed {
		t.Fatalf("first answer %+v, want pending", d)
	}
	if d := r.MayReadSecrets(cart); !d.Pending {
		t.Fatalf("first answer for cart %+v, want pending", d)
	}
	got := map[authn.Identity]bool{}
	for range 2 {
		select {
		case id := <-decided:
			got[id] = true
		case <-time.After(5 * time.Second):
			t.Fatal("no decision")
		}
	}
	if !got[gateway] || !got[cart] {
		t.Fatalf("decided %v", got)
	}
	if d := r.MayReadSecrets(gateway); !d.Allowed || d.Pending {
		t.Errorf("gateway: %+v, want allowed", d)
	}
	d := r.MayReadSecrets(cart)
	if d.Allowed || d.Pending || !strings.Contains(d.Reason, "system:serviceaccount:shop:cart may not list Secrets in namespace shop") ||
		!strings.Contains(d.Reason, "no RBAC policy matched") {
		t.Errorf("cart: %+v, want denied naming the account and the API server's reason", d)
	}
	if n := api.reviews(); n != 2 {
		t.Errorf("%d reviews, want one per identity", n)
	}
	for _, spec := range api.seen {
		ra := spec.ResourceAttributes
		if ra == nil || ra.Verb != "list" || ra.Resource != "secrets" || ra.Group != "" || ra.Name != "" {
			t.Errorf("review asks %+v, want list secrets", ra)
			continue
		}
		ns := strings.Split(spec.User, ":")[2]
		if ra.Namespace != ns || !slices.Contains(spec.Groups, "system:serviceaccounts:"+ns) ||
			!slices.Contains(spec.Groups, "system:serviceaccounts") {
			t.Errorf("review of %s in namespace %q with groups %v", spec.User, ra.Namespace, spec.Groups)
		}
	}
}

func TestAnswersAreCachedAndRefreshed(t *testing.T) {
	api := &apiServer{allowed: map[string]bool{"system:serviceaccount:istio-system:ingress": true}}
	clk := &clock{t: time.Unix(1e9, 0)}
	r, decided := newReviewer(t, api, clk)
	r.MayReadSecrets(gateway)
	waitDecided(t, decided, gateway)
	for range 100 {
		if d := r.MayReadSecrets(gateway); !d.Allowed {
			t.Fatalf("cached answer %+v", d)
		}
	}
	if n := api.reviews(); n != 1 {
		t.Fatalf("%d reviews for one identity within the TTL", n)
	}

	// Access revoked; the allowed answer expires: it is still served until the new review answers, then denied.
	api.set(func() { api.allowed = nil })
	clk.add(time.Minute)
	if d := r.MayReadSecrets(gateway); !d.Allowed {
		t.Fatalf("expired answer while the new review is in flight: %+v", d)
	}
	waitDecided(t, decided, gateway)
	if d := r.MayReadSecrets(gateway); d.Allowed || d.Pending {
		t.Fatalf("after revocation %+v, want denied", d)
	}
	// A denial is kept a shorter time: granted again, allowed after DeniedTTL.
	api.set(func() { api.allowed = map[string]bool{"system:serviceaccount:istio-system:ingress": true} })
	clk.add(9 * time.Second)
	if d := r.MayReadSecrets(gateway); d.Allowed {
		t.Fatal("denial not cached")
	}
	clk.add(time.Second)
	r.MayReadSecrets(gateway)
	waitDecided(t, decided, gateway)
	if d := r.MayReadSecrets(gateway); !d.Allowed {
		t.Fatalf("after the grant %+v", d)
	}
	if n := api.reviews(); n != 3 {
		t.Errorf("%d reviews, want 3", n)
	}
}

func TestFailedReviewDenies(t *testing.T) {
	api := &apiServer{fail: errors.New("connection refused")}
	clk := &clock{t: time.Unix(1e9, 0)}
	r, decided := newReviewer(t, api, clk)
	r.MayReadSecrets(gateway)
	waitDecided(t, decided, gateway)
	d := r.MayReadSecrets(gateway)
	if d.Allowed || d.Pending || !strings.Contains(d.Reason, "connection refused") {
		t.Fatalf("after a failed review %+v, want denied with the error", d)
	}
	if sent, failed := r.Reviews(); sent != 1 || failed != 1 {
		t.Errorf("reviews sent %d, failed %d", sent, failed)
	}
	// The same answer again is no news: no second push.
	api.set(func() { api.fail = nil })
	clk.add(10 * time.Second)
	r.MayReadSecrets(gateway)
	deadline := time.Now().Add(5 * time.Second)
	for api.reviews() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	select {
	case id := <-decided:
		t.Errorf("decision %s reported although unchanged (denied)", id)
	default:
	}
}
