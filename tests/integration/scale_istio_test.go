//go:build integration

package integration

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/source/kube"
	"github.com/sextantmesh/sextant/pilot/store"
)

// TestScaleIstioObjects lists 6,000 Istio objects (DestinationRules, VirtualServices, AuthorizationPolicies) with
// the least-privilege account: the source's initial sync time (median of three sources started one after the
// other) and its heap.
func TestScaleIstioObjects(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	s := startAPIServer(t)
	installIstioCRDs(t, s)
	cfg, _ := leastPrivilege(t, s)
	const nsCount, perKind = 10, 2000
	ctx := context.Background()
	for i := range nsCount {
		s.EnsureNamespace(fmt.Sprintf("istio-scale-%d", i))
	}
	nw, sec := istio(t, s.Admin).NetworkingV1(), istio(t, s.Admin).SecurityV1()
	start := time.Now()
	work := make(chan func() error, 100)
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 16 {
		wg.Go(func() {
			for f := range work {
				if err := f(); err != nil {
					failed.Store(err)
				}
			}
		})
	}
	for i := range perKind {
		ns := fmt.Sprintf("istio-scale-%d", i%nsCount)
		h := host(ns, fmt.Sprintf("svc-%d", i))
		work <- func() error {
			_, err := nw.DestinationRules(ns).Create(ctx, &networkingv1.DestinationRule{ObjectMeta: om(ns, fmt.Sprintf("dr-%d", i), nil),
				Spec: networking.DestinationRule{Host: h, TrafficPolicy: &networking.TrafficPolicy{
					LoadBalancer: &networking.LoadBalancerSettings{
						LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_LEAST_REQUEST}}},
					Subsets: []*networking.Subset{{Name: "v1", Labels: map[string]string{"version": "v1"}},
						{Name: "v2", Labels: map[string]string{"version": "v2"}}}}},
				metav1.CreateOptions{})
			return err
		}
		work <- func() error {
			_, err := nw.VirtualServices(ns).Create(ctx, &networkingv1.VirtualService{ObjectMeta: om(ns, fmt.Sprintf("vs-%d", i), nil),
				Spec: vsSpec(h)}, metav1.CreateOptions{})
			return err
		}
		work <- func() error {
			_, err := sec.AuthorizationPolicies(ns).Create(ctx, &securityv1.AuthorizationPolicy{ObjectMeta: om(ns, fmt.Sprintf("ap-%d", i), nil),
				Spec: security.AuthorizationPolicy{Action: security.AuthorizationPolicy_ALLOW, Rules: []*security.Rule{{
					From: []*security.Rule_From{{Source: &security.Source{Principals: []string{"cluster.local/ns/" + ns + "/sa/client"}}}}}}}},
				metav1.CreateOptions{})
			return err
		}
	}
	close(work)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	t.Logf("created %d Istio objects in %s", 3*perKind, time.Since(start).Round(time.Millisecond))

	var took []time.Duration
	var heap int64
	for run := range 3 {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		logger, _ := newLogger(t)
		st := store.New()
		// NewFromConfig: the clients production builds, so the decoding measured is the one that runs.
		src, err := kube.NewFromConfig(cfg, kube.Options{Store: st, Logger: logger})
		must(t, err)
		sctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		start := time.Now()
		go func() { src.Run(sctx); close(done) }()
		wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
		err = src.WaitForSync(wctx)
		wcancel()
		if err != nil {
			cancel()
			<-done
			t.Fatal(err)
		}
		took = append(took, time.Since(start))
		runtime.GC()
		runtime.ReadMemStats(&after)
		n := 0
		for _, k := range []config.Kind{config.DestinationRule, config.VirtualService, config.AuthorizationPolicy} {
			n += st.Count(k)
		}
		if n != 3*perKind {
			t.Fatalf("run %d: store holds %d Istio objects, want %d; rejected %d", run, n, 3*perKind, len(src.Rejected()))
		}
		if run == 0 {
			heap = int64(after.HeapAlloc) - int64(before.HeapAlloc)
		}
		cancel()
		<-done
	}
	sorted := slices.Clone(took)
	slices.Sort(sorted)
	t.Logf("RESULT istio-scale: %d Istio objects synced in %s (median of %v); source heap +%.1f MiB (live after GC, first run)",
		3*perKind, sorted[1].Round(time.Millisecond), took, float64(heap)/(1<<20))
}
