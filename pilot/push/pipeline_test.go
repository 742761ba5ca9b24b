package push_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	security "istio.io/api/security/v1beta1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/push"
	"github.com/sextantmesh/sextant/pilot/store"
)

type recorder struct {
	mu   sync.Mutex
	reqs []*model.PushRequest
	ch   chan *model.PushRequest
}

func newRecorder(p *push.Pipeline) *recorder {
	r := &recorder{ch: make(chan *model.PushRequest, 100)}
	p.Subscribe(func(req *model.PushRequest) {
		r.mu.Lock()
		r.reqs = append(r.reqs, req)
		r.mu.Unlock()
		r.ch <- req
	})
	return r
}

// running starts a pipeline with opts, past its initial push, and returns what it pushes next.
func running(t *testing.T, opts push.Options) *recorder {
	p := push.New(opts)
	rec := newRecorder(p)
	p.Initialize()
	rec.next(t, time.Second)
	go p.Run(t.Context())
	return rec
}

func (r *recorder) next(t *testing.T, within time.Duration) *model.PushRequest {
	t.Helper()
	select {
	case req := <-r.ch:
		return req
	case <-time.After(within):
		t.Fatalf("no push within %s", within)
		return nil
	}
}

func service(name string) *config.Config {
	return &config.Config{Key: config.Key{Kind: config.Service, Namespace: "ns", Name: name}, Spec: &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec:       corev1.ServiceSpec{ClusterIP: "10.0.0.1", Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}}
}

func slice(service string, ips ...string) *config.Config {
	name, port := "http", int32(80)
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{discoveryv1.LabelServiceName: service}},
		AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{{Name: &name, Port: &port}}}
	for _, ip := range ips {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}})
	}
	return &config.Config{Key: config.Key{Kind: config.EndpointSlice, Namespace: "ns", Name: service + "-1"}, Spec: s}
}

func TestDebounceMergesBurstIntoOneBuild(t *testing.T) {
	st := store.New()
	p := push.New(push.Options{Store: st, DebounceAfter: 50 * time.Millisecond, DebounceMax: 5 * time.Second})
	rec := newRecorder(p)
	p.Initialize()
	if req := rec.next(t, time.Second); !req.Full || req.Reason["initial"] != 1 {
		t.Fatalf("initial push = %+v", req)
	}
	ctx := t.Context()
	go p.Run(ctx)
	for i := range 5 {
		st.Upsert(store.LayerFile, service("a"))
		st.Upsert(store.LayerFile, &config.Config{Key: config.Key{Kind: config.AuthorizationPolicy, Namespace: "ns", Name: "p"},
			Generation: int64(i), Spec: &security.AuthorizationPolicy{}})
		time.Sleep(5 * time.Millisecond)
	}
	req := rec.next(t, 2*time.Second)
	if !req.Full || len(req.ConfigsUpdated) != 2 {
		t.Errorf("merged push = full %v configs %v", req.Full, req.ConfigsUpdated)
	}
	select {
	case extra := <-rec.ch:
		t.Errorf("burst produced a second push: %+v", extra.ConfigsUpdated)
	case <-time.After(200 * time.Millisecond):
	}
	if st := p.Stats(); st.Builds != 2 || st.MergedEvents != 8 {
		t.Errorf("stats = %+v", st)
	}
	if p.Current().Version != 2 {
		t.Errorf("version = %d", p.Current().Version)
	}
}

func TestDebounceMaxDelayBoundsAStorm(t *testing.T) {
	st := store.New()
	rec := running(t, push.Options{Store: st, DebounceAfter: 100 * time.Millisecond, DebounceMax: 300 * time.Millisecond})
	stop := time.After(1 * time.Second)
	start := time.Now()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	i := 0
	var first time.Duration
loop:
	for {
		select {
		case <-stop:
			break loop
		case <-tick.C:
			i++
			st.Upsert(store.LayerFile, &config.Config{Key: config.Key{Kind: config.AuthorizationPolicy, Namespace: "ns", Name: "p"},
				Generation: int64(i), Spec: &security.AuthorizationPolicy{}})
		case <-rec.ch:
			if first == 0 {
				first = time.Since(start)
			}
		}
	}
	if first == 0 || first > 600*time.Millisecond {
		t.Errorf("a continuous storm held the first push for %s (max delay 300ms)", first)
	}
}

func TestEndpointChangeYieldsIncrementalRequest(t *testing.T) {
	st := store.New()
	st.Upsert(store.LayerFile, service("a"))
	st.Upsert(store.LayerFile, slice("a", "10.1.0.1"))
	p := push.New(push.Options{Store: st, DebounceAfter: 10 * time.Millisecond})
	rec := newRecorder(p)
	first := p.Initialize()
	rec.next(t, time.Second)
	go p.Run(t.Context())
	st.Upsert(store.LayerFile, slice("a", "10.1.0.1", "10.1.0.2"))
	req := rec.next(t, 2*time.Second)
	if req.Full {
		t.Error("endpoint change asked for a full push")
	}
	if _, ok := req.ServicesUpdated["ns/a.ns.svc.cluster.local"]; !ok {
		t.Errorf("ServicesUpdated = %v", req.ServicesUpdated)
	}
	if req.Push != p.Current() || req.Push.Version != first.Version+1 {
		t.Error("request does not carry the published snapshot")
	}
	if req.Reason["endpoint"] != 1 {
		t.Errorf("reason = %v", req.Reason)
	}
}

func TestEndpointChurnIsPushedEveryEndpointWindow(t *testing.T) {
	st := store.New()
	st.Upsert(store.LayerFile, service("a"))
	rec := running(t, push.Options{Store: st, DebounceAfter: 2 * time.Second, DebounceMax: 10 * time.Second,
		DebounceEndpoints: 50 * time.Millisecond})
	// An endpoint change every 20 ms never leaves a 50 ms quiet period; pushes must still come about every
	// 50 ms, not after DebounceAfter.
	churnEndpoints(t, st, "a", 20*time.Millisecond)
	for i := range 3 {
		start := time.Now()
		req := rec.next(t, 3*time.Second)
		if req.Full || time.Since(start) > time.Second {
			t.Errorf("endpoint push %d after %s (full %v); want about 50ms, not the 2s debounce", i, time.Since(start), req.Full)
		}
	}
}

func TestSingleEndpointChangeUsesTheShortQuietPeriod(t *testing.T) {
	st := store.New()
	st.Upsert(store.LayerFile, service("a"))
	rec := running(t, push.Options{Store: st, DebounceAfter: 500 * time.Millisecond, DebounceEndpoints: 20 * time.Millisecond})
	start := time.Now()
	st.Upsert(store.LayerFile, slice("a", "10.1.0.1"))
	if req := rec.next(t, 2*time.Second); req.Full {
		t.Error("endpoint change pushed as full")
	}
	if took := time.Since(start); took >= 500*time.Millisecond {
		t.Errorf("endpoint change waited %s, the config debounce; want about the 20ms endpoint quiet period", took)
	}
	// A config change still waits for the full quiet period.
	start = time.Now()
	st.Upsert(store.LayerFile, policy("p"))
	rec.next(t, 2*time.Second)
	if took := time.Since(start); took < 500*time.Millisecond {
		t.Errorf("config change pushed after %s, before its 500ms quiet period", took)
	}
}

// Endpoint churn neither delays a config change nor is delayed by one: config changes debounce on each
// other only.
func TestConfigChangeDuringEndpointChurn(t *testing.T) {
	st := store.New()
	st.Upsert(store.LayerFile, service("a"))
	rec := running(t, push.Options{Store: st, DebounceAfter: 300 * time.Millisecond, DebounceFirst: 30 * time.Millisecond,
		DebounceMax: 10 * time.Second})
	churnEndpoints(t, st, "a", 10*time.Millisecond)
	full := func() time.Duration {
		start := time.Now()
		for time.Since(start) < 5*time.Second {
			if req := rec.next(t, 5*time.Second); req.Full {
				return time.Since(start)
			}
		}
		t.Fatal("no full push in 5s")
		return 0
	}
	time.Sleep(400 * time.Millisecond) // endpoint churn only: no config change for longer than DebounceAfter
	st.Upsert(store.LayerFile, policy("p1"))
	if took := full(); took > 250*time.Millisecond {
		t.Errorf("the first config change in a while was pushed after %s; want about DebounceFirst (30ms)", took)
	}
	st.Upsert(store.LayerFile, policy("p2")) // right after another: the usual debounce, not DebounceMax
	if took := full(); took > 2*time.Second {
		t.Errorf("a config change during endpoint churn was pushed after %s; want about DebounceAfter (300ms)", took)
	}
}

// churnEndpoints changes service svc's EndpointSlice every period until the test ends.
func churnEndpoints(t *testing.T, st *store.Store, svc string, period time.Duration) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(period):
				st.Upsert(store.LayerFile, slice(svc, fmt.Sprintf("10.1.0.%d", i%250)))
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
	})
}

func policy(name string) *config.Config {
	return &config.Config{Key: config.Key{Kind: config.AuthorizationPolicy, Namespace: "ns", Name: name},
		Spec: &security.AuthorizationPolicy{}}
}

// The first config change after a quiet spell is pushed after DebounceFirst; changes close behind it join
// it; a change soon after that push waits the whole DebounceAfter.
func TestFirstChangeAfterQuietSpellUsesTheShortQuietPeriod(t *testing.T) {
	st := store.New()
	const after = 400 * time.Millisecond
	rec := running(t, push.Options{Store: st, DebounceAfter: after, DebounceFirst: 30 * time.Millisecond})
	time.Sleep(after) // quiet since the start

	start := time.Now()
	st.Upsert(store.LayerFile, service("a"))
	st.Upsert(store.LayerFile, slice("a", "10.1.0.1")) // arrives with it, as a Service and its slice do
	req := rec.next(t, 2*time.Second)
	if took := time.Since(start); took >= after {
		t.Errorf("an isolated change waited %s, the whole debounce; want about the 30ms first-change period", took)
	}
	if len(req.ConfigsUpdated) != 2 {
		t.Errorf("push carries %d changes, want the Service and its slice together", len(req.ConfigsUpdated))
	}

	// Within DebounceAfter of the last change, a burst is under way: the usual quiet period applies.
	start = time.Now()
	st.Upsert(store.LayerFile, policy("p"))
	rec.next(t, 2*time.Second)
	if took := time.Since(start); took < after {
		t.Errorf("a change right after a push was pushed after %s, before the %s quiet period", took, after)
	}

	// Without DebounceFirst, every config change waits DebounceAfter.
	st2 := store.New()
	rec2 := running(t, push.Options{Store: st2, DebounceAfter: after})
	time.Sleep(after)
	start = time.Now()
	st2.Upsert(store.LayerFile, policy("q"))
	rec2.next(t, 2*time.Second)
	if took := time.Since(start); took < after {
		t.Errorf("with no first-change period, a change was pushed after %s, before the %s quiet period", took, after)
	}
}

// An endpoint change of a headless service that changes its addresses carries them in AddressesUpdated: the
// proxies that see the service need their listeners (one per endpoint address) pushed too.
func TestHeadlessAddressChangeIsInTheRequest(t *testing.T) {
	st := store.New()
	svc := service("db")
	svc.Spec.(*corev1.Service).Spec.ClusterIP = corev1.ClusterIPNone
	svc.Spec.(*corev1.Service).Spec.Ports = []corev1.ServicePort{{Name: "http", Port: 80, AppProtocol: ptr("tcp")}}
	st.Upsert(store.LayerFile, svc)
	st.Upsert(store.LayerFile, slice("db", "10.1.0.1"))
	rec := running(t, push.Options{Store: st, DebounceAfter: 10 * time.Millisecond})
	st.Upsert(store.LayerFile, slice("db", "10.1.0.1", "10.1.0.2"))
	req := rec.next(t, 2*time.Second)
	if _, ok := req.AddressesUpdated["ns/db.ns.svc.cluster.local"]; req.Full || !ok {
		t.Errorf("full %v, AddressesUpdated %v: want an incremental push naming the headless service", req.Full, req.AddressesUpdated)
	}
}

func ptr[T any](v T) *T { return &v }
