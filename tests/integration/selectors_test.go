//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sextantmesh/sextant/pilot/config"
)

// TestDiscoverySelectorsHoldOnlySelectedNamespaces: with discoverySelectors choosing 2 of 10 namespaces, the
// other 8 namespaces' objects are neither in the store nor in memory, and their changes cause no push.
func TestDiscoverySelectorsHoldOnlySelectedNamespaces(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	s := startAPIServer(t)
	installIstioCRDs(t, s)
	_, kubeconfig := leastPrivilege(t, s)
	const nsCount, pods, services = 10, 3000, 300
	ctx := context.Background()
	for i := range nsCount {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("sel-%d", i)}}
		if i < 2 {
			ns.Labels = map[string]string{"mesh": "on"}
		}
		_, err := s.Kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
		must(t, err)
	}
	createInParallel(t, services+pods, func(i int) error {
		if i < services {
			ns := fmt.Sprintf("sel-%d", i%nsCount)
			_, err := s.Kube.CoreV1().Services(ns).Create(ctx, newService(ns, fmt.Sprintf("svc-%d", i), 80), metav1.CreateOptions{})
			return err
		}
		i -= services
		ns := fmt.Sprintf("sel-%d", i%nsCount)
		_, err := s.Kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: om(ns, fmt.Sprintf("pod-%d", i), map[string]string{"app": fmt.Sprintf("svc-%d", i%services)}),
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}, metav1.CreateOptions{})
		return err
	})

	meshFile := filepath.Join(t.TempDir(), "mesh.yaml")
	must(t, os.WriteFile(meshFile, []byte("discoverySelectors:\n- matchLabels: {mesh: \"on\"}\n"), 0o600))
	allHeap, all := heapOfStart(t, kubeconfig, "")
	all.cancel()
	all.srv.Wait()
	selHeap, sx := heapOfStart(t, kubeconfig, meshFile)

	for i := range nsCount {
		ns := fmt.Sprintf("sel-%d", i)
		gotPods, gotServices := len(sx.srv.Store.ListNamespace(config.Pod, ns)), len(sx.srv.Store.ListNamespace(config.Service, ns))
		wantPods, wantServices := pods/nsCount, services/nsCount
		if i >= 2 {
			wantPods, wantServices = 0, 0
		}
		if gotPods != wantPods || gotServices != wantServices {
			t.Errorf("%s: store holds %d pods and %d services, want %d and %d", ns, gotPods, gotServices, wantPods, wantServices)
		}
	}
	t.Logf("RESULT discoverySelectors: %d pods + %d services in %d namespaces; heap after start (live, after GC): every "+
		"namespace +%.1f MiB, 2 of %d selected +%.1f MiB", pods, services, nsCount, float64(allHeap)/(1<<20), nsCount,
		float64(selHeap)/(1<<20))
	if selHeap*2 > allHeap {
		t.Errorf("with 2 of %d namespaces selected the heap grew %d KiB, over half of the %d KiB with every namespace",
			nsCount, selHeap>>10, allHeap>>10)
	}

	// Changes outside the selection: no push.
	before := sx.Pushes.Load()
	svc, err := s.Kube.CoreV1().Services("sel-5").Get(ctx, "svc-5", metav1.GetOptions{})
	must(t, err)
	svc.Spec.Ports[0].Port = 8080
	_, err = s.Kube.CoreV1().Services("sel-5").Update(ctx, svc, metav1.UpdateOptions{})
	must(t, err)
	_, err = s.Kube.CoreV1().Services("sel-7").Create(ctx, newService("sel-7", "new", 80), metav1.CreateOptions{})
	must(t, err)
	time.Sleep(time.Second) // many times the 50 ms debounce
	if n := sx.Pushes.Load() - before; n != 0 {
		t.Errorf("%d pushes after changes in namespaces outside discoverySelectors, want 0", n)
	}
	// A change inside is pushed: the count above could see one.
	_, err = s.Kube.CoreV1().Services("sel-1").Create(ctx, newService("sel-1", "new", 80), metav1.CreateOptions{})
	must(t, err)
	deadline := time.Now().Add(10 * time.Second)
	for sx.Pushes.Load() == before {
		if time.Now().After(deadline) {
			t.Fatal("a service added in a selected namespace was not pushed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// heapOfStart starts Sextant with meshConfig and returns how much its start grew the live heap.
func heapOfStart(t *testing.T, kubeconfig, meshConfig string) (int64, *sextant) {
	t.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	sx := startSextantWithMesh(t, kubeconfig, meshConfig)
	runtime.GC()
	runtime.ReadMemStats(&after)
	return int64(after.HeapAlloc) - int64(before.HeapAlloc), sx
}

// createInParallel runs create(0..n-1) on 16 writers and fails t on the first error.
func createInParallel(t *testing.T, n int, create func(i int) error) {
	t.Helper()
	work := make(chan int, 100)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range 16 {
		wg.Go(func() {
			for i := range work {
				if err := create(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	must(t, first)
}
