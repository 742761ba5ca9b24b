//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/tests/kubeenv"
)

// leastPrivilege applies manifests/ (the ClusterRole with only get/list/watch, bound to istio-system/sextant) and
// returns a client config and kubeconfig that authenticate as that service account with a TokenRequest token.
func leastPrivilege(t testing.TB, s *apiServer) (*rest.Config, string) {
	t.Helper()
	s.EnsureNamespace("istio-system")
	applyManifests(t, s, false)
	cfg := s.ServiceAccountConfig("istio-system", "sextant")
	return cfg, s.WriteKubeconfig(cfg, "sextant")
}

func istio(t testing.TB, cfg *rest.Config) istioclient.Interface {
	ic, err := istioclient.NewForConfig(cfg)
	must(t, err)
	return ic
}

// TestManifestsApply: every object in manifests/ passes the real API server's validation and admission
// (server-side apply, dry run), and the ClusterRole grants reading exactly what Sextant watches.
func TestManifestsApply(t *testing.T) {
	s := startAPIServer(t)
	s.EnsureNamespace("istio-system") // a dry-run Namespace is not there for the objects in it
	applied := applyManifests(t, s, true)
	t.Logf("dry-run applied: %s", strings.Join(applied, "; "))
	for _, want := range []string{"Deployment istio-system/sextant", "ClusterRole /sextant-read", "PodDisruptionBudget istio-system/sextant",
		"Service istio-system/sextant", "ConfigMap istio-system/sextant-mesh", "ServiceAccount istio-system/sextant"} {
		if !strings.Contains(strings.Join(applied, ";"), want) {
			t.Errorf("manifests lack %s", want)
		}
	}

	// For real now, then ask the server what the service account may do.
	_, _ = leastPrivilege(t, s)
	user := "system:serviceaccount:istio-system:sextant"
	allowed := func(group, resource, verb string) bool {
		r, err := s.Kube.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authzv1.SubjectAccessReview{
			Spec: authzv1.SubjectAccessReviewSpec{User: user, Groups: []string{"system:serviceaccounts", "system:authenticated"},
				ResourceAttributes: &authzv1.ResourceAttributes{Group: group, Resource: resource, Verb: verb}}}, metav1.CreateOptions{})
		must(t, err)
		return r.Status.Allowed
	}
	// The only writes: the WorkloadEntries VM auto-registration makes, updates and deletes, as istiod.
	writes := map[string]map[string]bool{"workloadentries": {"create": true, "update": true, "delete": true}}
	for _, ki := range config.Kinds() {
		verbs := []string{"get", "list", "watch"}
		if ki.Kind == "Secret" {
			verbs = verbs[1:] // the informer lists and watches; nothing gets a Secret by name cluster-wide
		}
		for _, verb := range verbs {
			if !allowed(ki.Group, ki.Plural, verb) {
				t.Errorf("ClusterRole does not allow %s %s.%s", verb, ki.Plural, ki.Group)
			}
		}
		for _, verb := range []string{"create", "update", "patch", "delete"} {
			if writes[ki.Plural][verb] != allowed(ki.Group, ki.Plural, verb) {
				t.Errorf("ClusterRole: %s %s.%s allowed %v; want %v", verb, ki.Plural, ki.Group, !writes[ki.Plural][verb],
					writes[ki.Plural][verb])
			}
		}
	}
	if !allowed("networking.istio.io", "workloadentries/status", "update") {
		t.Error("ClusterRole does not allow update workloadentries/status: the agents' health reports cannot be written")
	}
	for _, r := range [][2]string{{"", "configmaps"}, {"apps", "deployments"}} {
		if allowed(r[0], r[1], "list") {
			t.Errorf("ClusterRole allows list %s.%s, which Sextant does not read", r[1], r[0])
		}
	}
}

// TestKubernetesSourceEveryKind runs the full discovery server as the least-privilege service account: initial
// sync of every kind, then create, update and delete of each kind, seen in the published PushContext and, for the
// kinds a sidecar sees as clusters, by a connected delta xDS client.
func TestKubernetesSourceEveryKind(t *testing.T) {
	s := startAPIServer(t)
	crdTook := installIstioCRDs(t, s)
	t.Logf("Istio CRDs established and listable in %s", crdTook.Round(time.Millisecond))
	_, kubeconfig := leastPrivilege(t, s)
	ctx := context.Background()
	kc, ic := s.Kube, istio(t, s.Admin)

	// Objects present before Sextant starts: the initial sync must bring them.
	s.EnsureNamespace("seed")
	createService(t, kc, "seed", "seed", 80)
	_, err := ic.NetworkingV1().VirtualServices("seed").Create(ctx, &networkingv1.VirtualService{ObjectMeta: om("seed", "seed", nil),
		Spec: vsSpec("seed")}, metav1.CreateOptions{})
	must(t, err)

	sx := startSextant(t, kubeconfig)
	t.Logf("discovery server synced and published its first snapshot in %s", sx.SyncTook.Round(time.Millisecond))
	st := sx.srv.Store
	if st.Get(config.Key{Kind: config.Service, Namespace: "seed", Name: "seed"}) == nil ||
		st.Get(config.Key{Kind: config.VirtualService, Namespace: "seed", Name: "seed"}) == nil {
		t.Fatal("initial sync lacks the seed objects")
	}
	ads := dialADS(t, sx.srv.GRPCAddr(), "seed")
	ads.waitCluster(outbound(80, "", host("seed", "seed")), true)

	const ns = "mesh"
	s.EnsureNamespace(ns)
	for _, c := range everyKind(t, kc, ic, ns) {
		t.Run(c.kind, func(t *testing.T) {
			steps := []struct {
				name string
				do   func(context.Context) error
				want string
				xds  string
			}{{"create", c.create, c.wantCreated, c.xdsCluster}, {"update", c.update, c.wantUpdated, c.xdsUpdated}, {"delete", c.delete, "", ""}}
			for _, step := range steps {
				start := time.Now()
				must(t, step.do(ctx))
				eventually(t, 20*time.Second, c.kind+" "+step.name+" in the PushContext", func() bool {
					got := c.probe(sx.current())
					if step.want == "" {
						return got == ""
					}
					return strings.Contains(got, step.want)
				})
				took := time.Since(start)
				if step.xds != "" {
					ads.waitCluster(step.xds, true)
				}
				if step.name == "delete" && c.xdsCluster != "" {
					ads.waitCluster(c.xdsCluster, false)
					ads.waitCluster(c.xdsUpdated, false)
				}
				if c.xdsCluster != "" {
					t.Logf("%s %s: in the PushContext after %s, at the xDS client after %s", c.kind, step.name,
						took.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
				} else {
					t.Logf("%s %s: in the PushContext after %s", c.kind, step.name, took.Round(time.Millisecond))
				}
			}
		})
		// The DestinationRule case uses the ServiceEntry's host, which its case deleted: recreate it for the DR.
		if c.kind == "ServiceEntry" {
			must(t, c.create(ctx))
			must(t, c.update(ctx))
		}
	}

	// EDS: a client watching the service's cluster gets its endpoints from an EndpointSlice.
	createService(t, kc, ns, "eds", 80)
	cl := outbound(80, "", host(ns, "eds"))
	ads.waitCluster(cl, true)
	ads.watchEndpoints(cl)
	_, err = kc.DiscoveryV1().EndpointSlices(ns).Create(ctx, newSlice(ns, "eds", "eds-1", "10.3.0.1", "10.3.0.2"), metav1.CreateOptions{})
	must(t, err)
	eventually(t, 20*time.Second, "EDS endpoints at the client", func() bool {
		return strings.Join(ads.endpointAddresses(cl), ",") == "10.3.0.1,10.3.0.2"
	})

	if r := sx.srv.Rejected(); len(r) > 0 {
		t.Errorf("rejected objects: %v", r)
	}
	if l := sx.log.lines("permission denied"); len(l) > 0 {
		t.Errorf("least-privilege role lacks a permission: %v", l)
	}
	t.Logf("pushes: %d (%d full); CDS responses %d", sx.Pushes.Load(), sx.Full.Load(),
		ads.responseCount("type.googleapis.com/envoy.config.cluster.v3.Cluster"))
}

// TestCRDInstalledAfterStart: Sextant starts on a cluster without the Istio CRDs, warns, and picks them up
// (and the objects in them) once they are installed.
func TestCRDInstalledAfterStart(t *testing.T) {
	s := startAPIServer(t)
	cfg, _ := leastPrivilege(t, s)
	src := startSource(t, cfg, 500*time.Millisecond)
	must(t, src.src.WaitForSync(context.Background()))
	istioKinds := 0
	for _, ki := range config.Kinds() {
		if strings.HasSuffix(ki.Group, ".istio.io") {
			istioKinds++
		}
	}
	if n := len(src.src.MissingCRDs()); n != istioKinds {
		t.Fatalf("missing CRDs = %v, want all %d Istio kinds", src.src.MissingCRDs(), istioKinds)
	}
	if len(src.log.lines("CRD not installed")) == 0 {
		t.Error("no warning about the missing CRDs")
	}
	installIstioCRDs(t, s)
	start := time.Now()
	s.EnsureNamespace("late")
	_, err := istio(t, s.Admin).NetworkingV1().VirtualServices("late").Create(context.Background(), &networkingv1.VirtualService{
		ObjectMeta: om("late", "vs", nil), Spec: vsSpec("late")}, metav1.CreateOptions{})
	must(t, err)
	eventually(t, 30*time.Second, "VirtualService from a CRD installed after start", func() bool {
		return src.store.Get(config.Key{Kind: config.VirtualService, Namespace: "late", Name: "vs"}) != nil
	})
	eventually(t, 10*time.Second, "no CRD missing", func() bool { return len(src.src.MissingCRDs()) == 0 })
	t.Logf("late CRD object seen %s after creation", time.Since(start).Round(time.Millisecond))
}

// TestAPIServerRestart restarts kube-apiserver under a running discovery server: the informers resume, changes
// made after the restart arrive, nothing is lost, and the restart itself causes no pushes.
func TestAPIServerRestart(t *testing.T) {
	s := startAPIServer(t)
	installIstioCRDs(t, s)
	_, kubeconfig := leastPrivilege(t, s)
	const ns, n = "restart", 50
	s.EnsureNamespace(ns)
	for i := range n {
		createService(t, s.Kube, ns, fmt.Sprintf("svc-%d", i), 80)
	}
	sx := startSextant(t, kubeconfig)
	ads := dialADS(t, sx.srv.GRPCAddr(), ns)
	ads.waitCluster(outbound(80, "", host(ns, fmt.Sprintf("svc-%d", n-1))), true)
	time.Sleep(time.Second) // let the connect push settle

	pushes, full, cds := sx.Pushes.Load(), sx.Full.Load(), ads.responseCount("type.googleapis.com/envoy.config.cluster.v3.Cluster")
	down := s.RestartAPIServer()
	time.Sleep(5 * time.Second) // informers re-watch (or relist) in this time
	during := sx.Pushes.Load() - pushes
	t.Logf("apiserver down and back in %s; pushes caused by the restart: %d (%d full); CDS responses: %d",
		down.Round(time.Millisecond), during, sx.Full.Load()-full, ads.responseCount("type.googleapis.com/envoy.config.cluster.v3.Cluster")-cds)
	if during != 0 {
		t.Errorf("the restart alone caused %d pushes, want 0", during)
	}

	// Changes after the restart reach the client.
	createService(t, s.Kube, ns, "after-restart", 80)
	must(t, s.Kube.CoreV1().Services(ns).Delete(context.Background(), "svc-0", metav1.DeleteOptions{}))
	ads.waitCluster(outbound(80, "", host(ns, "after-restart")), true)
	ads.waitCluster(outbound(80, "", host(ns, "svc-0")), false)
	if got := len(sx.srv.Store.ListNamespace(config.Service, ns)); got != n { // n - 1 + 1
		t.Errorf("store holds %d services, want %d", got, n)
	}
}

// TestWatchExpiredRelists breaks Sextant's watch with compaction: while Sextant cannot reach the API server,
// services are created, changed and deleted and etcd is compacted past Sextant's resource version; the
// API server runs with --watch-cache=false so the re-watch from the old version reaches etcd and fails with
// 410 Gone. The source must relist and end up with exactly the server's state.
func TestWatchExpiredRelists(t *testing.T) {
	s := startAPIServer(t, withAPIServerArgs("--watch-cache=false"))
	cfg, _ := leastPrivilege(t, s)
	const ns = "compact"
	s.EnsureNamespace(ns)
	for i := range 20 {
		createService(t, s.Kube, ns, fmt.Sprintf("svc-%d", i), 80)
	}
	p := newProxy(t, strings.TrimPrefix(s.URL, "https://"))
	viaProxy := rest.CopyConfig(cfg)
	viaProxy.Host = "https://" + p.addr
	viaProxy.TLSClientConfig.ServerName = "127.0.0.1"
	src := startSource(t, viaProxy, time.Hour)
	must(t, src.src.WaitForSync(context.Background()))
	svcs, err := s.Kube.CoreV1().Services(ns).List(context.Background(), metav1.ListOptions{})
	must(t, err)
	oldRV := svcs.ResourceVersion
	listsBefore := s.requestCount("LIST", "services")

	p.Pause()
	ctx := context.Background()
	for i := range 10 {
		must(t, s.Kube.CoreV1().Services(ns).Delete(ctx, fmt.Sprintf("svc-%d", i), metav1.DeleteOptions{}))
	}
	for i := range 30 {
		createService(t, s.Kube, ns, fmt.Sprintf("new-%d", i), 80)
	}
	must(t, updateServicePort(ctx, s.Kube, ns, "svc-19", 81))
	rev := s.EtcdRevision()
	s.EtcdCompact(rev)
	// What Sextant's informer will meet: a watch from its last version is gone.
	w, err := s.Kube.CoreV1().Services(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: oldRV})
	if err == nil {
		ev := <-w.ResultChan()
		w.Stop()
		if st, ok := ev.Object.(*metav1.Status); ok {
			err = &apierrors.StatusError{ErrStatus: *st}
		}
	}
	if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Fatalf("watch from compacted version %s: %v, want 410 Gone", oldRV, err)
	}
	t.Logf("etcd compacted at revision %d; a watch from %s now fails: %v", rev, oldRV, err)

	start := time.Now()
	p.Resume()
	want := map[string]bool{}
	cur, err := s.Kube.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	must(t, err)
	for _, svc := range cur.Items {
		want[svc.Name] = true
	}
	eventually(t, 60*time.Second, "the source to relist to the server's state", func() bool {
		got := src.store.ListNamespace(config.Service, ns)
		if len(got) != len(want) {
			return false
		}
		for _, c := range got {
			if !want[c.Name] {
				return false
			}
		}
		svc := src.store.Get(config.Key{Kind: config.Service, Namespace: ns, Name: "svc-19"})
		return svc != nil && svc.ResourceVersion != "" && strings.Contains(fmt.Sprint(svc.Spec), "81")
	})
	lists := s.requestCount("LIST", "services") - listsBefore
	t.Logf("relisted and converged %s after the network came back; LIST services requests since: %v",
		time.Since(start).Round(time.Millisecond), lists)
	if lists < 1 {
		t.Errorf("no LIST of services after the 410: the informer did not relist")
	}
}

// requestCount sums apiserver_request_total for verb and resource from the API server's metrics.
func (s *apiServer) requestCount(verb, resource string) float64 {
	s.t.Helper()
	b, err := s.Kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		s.t.Fatal(err)
	}
	var sum float64
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "apiserver_request_total{") && strings.Contains(l, `verb="`+verb+`"`) &&
			strings.Contains(l, `resource="`+resource+`"`) {
			var v float64
			fmt.Sscan(l[strings.LastIndexByte(l, ' ')+1:], &v)
			sum += v
		}
	}
	return sum
}

// TestPermissionDenied binds a role that lacks "list" and "watch" on pods: the source logs one clear error naming
// the verb and the resource, and never syncs.
func TestPermissionDenied(t *testing.T) {
	s := startAPIServer(t)
	installIstioCRDs(t, s)
	ctx := context.Background()
	role := &rbacv1.ClusterRole{ObjectMeta: om("", "sextant-no-pods", nil)}
	for _, ki := range config.Kinds() {
		verbs := []string{"get", "list", "watch"}
		if ki.Kind == config.Pod {
			// client-go's informers list with a streaming watch (WatchListClient) and fall back to a LIST:
			// without "list" alone they still sync, so this role lacks both.
			verbs = []string{"get"}
		}
		role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{ki.Group}, Resources: []string{ki.Plural}, Verbs: verbs})
	}
	_, err := s.Kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
	must(t, err)
	_, err = s.Kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: om("", "sextant-no-pods", nil),
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "limited", Name: "sextant"}}}, metav1.CreateOptions{})
	must(t, err)
	cfg := s.ServiceAccountConfig("limited", "sextant")

	src := startSource(t, cfg, time.Hour)
	eventually(t, 20*time.Second, "a permission error in the log", func() bool { return len(src.log.lines("permission denied")) > 0 })
	time.Sleep(3 * time.Second) // the informer retries meanwhile: the error must still be logged once
	lines := src.log.lines("permission denied")
	if len(lines) != 1 {
		t.Fatalf("%d permission errors logged, want 1:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	if !strings.Contains(lines[0], "verb=list") && !strings.Contains(lines[0], "verb=watch") {
		t.Errorf("error does not name the verb:\n%s", lines[0])
	}
	for _, want := range []string{"pods", "resource=pods", "system:serviceaccount:limited:sextant"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("error does not say %q:\n%s", want, lines[0])
		}
	}
	if src.src.HasSynced() {
		t.Error("source synced without permission to list pods")
	}
	t.Logf("the error: %s", lines[0])
}

// TestScale lists 5,000 pods and 500 services with the least-privilege account: the informers' initial sync
// time, Sextant's heap and the API server's memory, and a paginated list (500 per page) for comparison.
func TestScale(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	s := startAPIServer(t)
	installIstioCRDs(t, s)
	cfg, kubeconfig := leastPrivilege(t, s)
	const nsCount, pods, services = 10, 5000, 500
	ctx := context.Background()
	for i := range nsCount {
		s.EnsureNamespace(fmt.Sprintf("scale-%d", i))
	}
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
	for i := range services {
		ns := fmt.Sprintf("scale-%d", i%nsCount)
		work <- func() error {
			_, err := s.Kube.CoreV1().Services(ns).Create(ctx, newService(ns, fmt.Sprintf("svc-%d", i), 80), metav1.CreateOptions{})
			return err
		}
	}
	for i := range pods {
		ns := fmt.Sprintf("scale-%d", i%nsCount)
		work <- func() error {
			_, err := s.Kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
				ObjectMeta: om(ns, fmt.Sprintf("pod-%d", i), map[string]string{"app": fmt.Sprintf("svc-%d", i%services)}),
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}, metav1.CreateOptions{})
			return err
		}
	}
	close(work)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	t.Logf("created %d pods and %d services in %s", pods, services, time.Since(start).Round(time.Millisecond))

	// A paginated list (500 per page), as a client that pages does it.
	kc, err := kubernetes.NewForConfig(cfg)
	must(t, err)
	start = time.Now()
	seen, pages := 0, 0
	for cont := ""; ; {
		list, err := kc.CoreV1().Pods("").List(ctx, metav1.ListOptions{Limit: 500, Continue: cont})
		must(t, err)
		seen += len(list.Items)
		pages++
		if cont = list.Continue; cont == "" {
			break
		}
	}
	listTook := time.Since(start)
	if seen != pods {
		t.Fatalf("paginated list saw %d pods, want %d", seen, pods)
	}
	t.Logf("paginated list of %d pods: %d pages of 500, %s", seen, pages, listTook.Round(time.Millisecond))

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	sx := startSextant(t, kubeconfig)
	syncTook := sx.SyncTook
	runtime.GC()
	runtime.ReadMemStats(&after)
	gotPods, gotServices := 0, 0
	for i := range nsCount {
		gotPods += len(sx.srv.Store.ListNamespace(config.Pod, fmt.Sprintf("scale-%d", i)))
		gotServices += len(sx.srv.Store.ListNamespace(config.Service, fmt.Sprintf("scale-%d", i)))
	}
	if gotPods != pods || gotServices != services {
		t.Fatalf("store holds %d pods and %d services, want %d and %d", gotPods, gotServices, pods, services)
	}
	heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("RESULT scale: %d pods + %d services synced and first snapshot published in %s; Sextant heap +%.1f MiB (live after GC); "+
		"kube-apiserver RSS %.0f MiB; test process RSS %.0f MiB",
		pods, services, syncTook.Round(time.Millisecond), float64(heap)/(1<<20), float64(s.RSS())/(1<<20),
		float64(kubeenv.RSS(os.Getpid()))/(1<<20))
	const limit = 60 * time.Second
	if syncTook > limit {
		t.Errorf("sync took %s, over the %s budget", syncTook, limit)
	}
	if heap > 400<<20 {
		t.Errorf("Sextant's heap grew %d MiB, over the 400 MiB budget", heap>>20)
	}
}

// vsSpec routes host to itself (Sextant rejects a VirtualService without routes).
func vsSpec(host string) networking.VirtualService {
	return networking.VirtualService{Hosts: []string{host}, Http: []*networking.HTTPRoute{{
		Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: host}}}}}}
}
