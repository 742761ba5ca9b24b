package main

import (
	"context"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/sextantmesh/sextant/tests/kubeenv"
)

// loadWorkers bounds the API calls in flight while the initial mesh is created and within one change.
const loadWorkers = 16

// kubeApplier creates, updates and deletes the units' objects through a kube-apiserver that
// `sextant discovery --kubeconfig` watches. It remembers what each unit holds, so a unit written again
// sends only the objects that changed (a pod added to a service: the Pod and its EndpointSlice).
type kubeApplier struct {
	ctx   context.Context
	dyn   dynamic.Interface
	meta  metadata.Interface // the trace's watch: resource versions only, as protobuf
	disc  discovery.DiscoveryInterface
	calls atomic.Int64 // API requests sent

	mu  sync.Mutex
	res map[schema.GroupVersionKind]kubeenv.Resource

	units map[string]map[objKey]*kubeObject // only the harness's goroutine uses it
	// docs holds the objects decoded from each YAML document seen, by its text: a unit written again
	// (a service with one pod more) decodes only the documents that changed, and the unchanged ones are
	// the very objects the unit holds, so no deep comparison either. Only the harness's goroutine uses it.
	docs map[string]*unstructured.Unstructured
	// lastSliceRV is the resource version the latest apply gave an EndpointSlice ("" if it wrote none).
	lastSliceRV string

	// sliceSeen holds when the harness's own watch saw each EndpointSlice resource version (see
	// watchSlices): the API server's part of a change's latency, on the path Sextant's informer takes.
	seenMu    sync.Mutex
	sliceSeen map[string]time.Time
}

// maxDocs bounds the document cache; past it, it starts over.
const maxDocs = 50000

type objKey struct {
	gvk      schema.GroupVersionKind
	ns, name string
}

func (k objKey) String() string { return k.gvk.Kind + " " + k.ns + "/" + k.name }

// kubeObject is an object as the harness last wrote it, and the resource version the server gave it.
type kubeObject struct {
	want *unstructured.Unstructured
	rv   string
}

// write is one object's part of a change: a create or update (want), or a delete (want nil).
type write struct {
	key  objKey
	want *unstructured.Unstructured
	have *kubeObject
	done *kubeObject
}

func newKubeApplier(ctx context.Context, admin *rest.Config) (*kubeApplier, error) {
	cfg := rest.CopyConfig(admin)
	cfg.QPS, cfg.Burst = 2000, 4000
	cfg.UserAgent = "sextant-load"
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &kubeApplier{ctx: ctx, dyn: dyn, meta: meta, disc: disc, res: map[schema.GroupVersionKind]kubeenv.Resource{},
		units: map[string]map[objKey]*kubeObject{}, docs: map[string]*unstructured.Unstructured{}}, nil
}

// decode returns the objects of a multi-document YAML unit. The objects are shared: never modify them.
func (k *kubeApplier) decode(content string) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for doc := range strings.SplitSeq(content, "\n---\n") {
		if o, ok := k.docs[doc]; ok {
			if o != nil {
				out = append(out, o)
			}
			continue
		}
		objs, err := kubeenv.Decode(strings.NewReader(doc))
		if err != nil {
			return nil, err
		}
		if len(objs) > 1 {
			out = append(out, objs...) // a document the split did not separate: not cached
			continue
		}
		var o *unstructured.Unstructured
		if len(objs) == 1 {
			o = objs[0]
			out = append(out, o)
		}
		if len(k.docs) >= maxDocs {
			clear(k.docs)
		}
		k.docs[doc] = o
	}
	return out, nil
}

func (k *kubeApplier) apply(name, content string, begin func()) error {
	objs, err := k.decode(content)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	ws, err := k.plan(name, objs)
	if err != nil {
		return err
	}
	if begin != nil {
		begin()
	}
	err = k.run(ws, loadWorkers)
	k.record(name, ws)
	k.lastSliceRV = ""
	for _, w := range ws {
		if w.key.gvk.Kind == "EndpointSlice" && w.done != nil {
			k.lastSliceRV = w.done.rv
		}
	}
	return err
}

// watchSlices watches every EndpointSlice from now until ctx is done, noting when each resource version
// arrives. Metadata only: the watch is the harness's, and full objects as JSON cost the API server and the
// harness CPU the server under test would otherwise have.
func (k *kubeApplier) watchSlices(ctx context.Context) error {
	gvr := schema.GroupVersionResource{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}
	list, err := k.meta.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return err
	}
	w, err := k.meta.Resource(gvr).Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
	if err != nil {
		return err
	}
	k.sliceSeen = map[string]time.Time{}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			if o, ok := ev.Object.(*metav1.PartialObjectMetadata); ok {
				now := time.Now()
				k.seenMu.Lock()
				k.sliceSeen[o.GetResourceVersion()] = now
				k.seenMu.Unlock()
			}
		}
	}()
	return nil
}

// sliceSeenAt is when the watch saw EndpointSlice resource version rv.
func (k *kubeApplier) sliceSeenAt(rv string) (time.Time, bool) {
	k.seenMu.Lock()
	defer k.seenMu.Unlock()
	t, ok := k.sliceSeen[rv]
	return t, ok
}

func (k *kubeApplier) remove(name string) error {
	ws, err := k.plan(name, nil)
	if err != nil {
		return err
	}
	err = k.run(ws, loadWorkers)
	k.record(name, ws)
	delete(k.units, name)
	return err
}

func (k *kubeApplier) load(units []unit) error {
	plans := make([][]*write, len(units))
	var rest []*write
	for i, u := range units {
		objs, err := kubeenv.Decode(strings.NewReader(u.content))
		if err != nil {
			return fmt.Errorf("%s: %w", u.name, err)
		}
		if plans[i], err = k.plan(u.name, objs); err != nil {
			return err
		}
		if i > 0 {
			rest = append(rest, plans[i]...)
		}
	}
	if len(plans) > 0 {
		if err := k.run(plans[0], 1); err != nil { // Namespaces first
			return err
		}
	}
	err := k.run(rest, loadWorkers)
	for i, u := range units {
		k.record(u.name, plans[i])
	}
	return err
}

// plan lists the writes that take unit name from what it holds to objs; unchanged objects are left alone.
func (k *kubeApplier) plan(name string, objs []*unstructured.Unstructured) ([]*write, error) {
	have := k.units[name]
	seen := map[objKey]bool{}
	var ws []*write
	for _, o := range objs {
		key := objKey{gvk: o.GroupVersionKind(), ns: o.GetNamespace(), name: o.GetName()}
		if seen[key] {
			return nil, fmt.Errorf("%s: %s twice", name, key)
		}
		seen[key] = true
		h := have[key]
		if h != nil && (h.want == o || reflect.DeepEqual(h.want.Object, o.Object)) {
			continue
		}
		ws = append(ws, &write{key: key, want: o, have: h})
	}
	for key, h := range have {
		if !seen[key] {
			ws = append(ws, &write{key: key, have: h})
		}
	}
	return ws, nil
}

// record notes what the unit holds after ws (a failed write keeps the old state).
func (k *kubeApplier) record(name string, ws []*write) {
	m := k.units[name]
	if m == nil {
		m = map[objKey]*kubeObject{}
		k.units[name] = m
	}
	for _, w := range ws {
		switch {
		case w.done != nil:
			m[w.key] = w.done
		case w.want == nil && w.have != nil:
			delete(m, w.key)
		}
	}
}

// run performs ws with at most workers at a time.
func (k *kubeApplier) run(ws []*write, workers int) error {
	if len(ws) == 1 {
		return k.do(ws[0])
	}
	next := make(chan *write)
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for range min(workers, len(ws)) {
		wg.Go(func() {
			for w := range next {
				if err := k.do(w); err != nil {
					once.Do(func() { first = err })
				}
			}
		})
	}
	for _, w := range ws {
		next <- w
	}
	close(next)
	wg.Wait()
	return first
}

func (k *kubeApplier) resource(gvk schema.GroupVersionKind) (kubeenv.Resource, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if r, ok := k.res[gvk]; ok {
		return r, nil
	}
	r, err := kubeenv.ResourceFor(k.disc, gvk)
	if err != nil {
		return r, err
	}
	k.res[gvk] = r
	return r, nil
}

// do performs one write. An object whose status the server keeps apart (a Pod's IP and readiness) gets it
// with a second request, as the kubelet would write it.
func (k *kubeApplier) do(w *write) error {
	r, err := k.resource(w.key.gvk)
	if err != nil {
		return fmt.Errorf("%s: %w", w.key, err)
	}
	var ri dynamic.ResourceInterface = k.dyn.Resource(r.GroupVersionResource)
	if r.Namespaced {
		ri = k.dyn.Resource(r.GroupVersionResource).Namespace(w.key.ns)
	}
	ctx := k.ctx
	if w.want == nil {
		k.calls.Add(1)
		err := ri.Delete(ctx, w.key.name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s: %w", w.key, err)
		}
		return nil
	}
	status, hasStatus := w.want.Object["status"]
	var got *unstructured.Unstructured
	if w.have == nil {
		k.calls.Add(1)
		got, err = ri.Create(ctx, w.want, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create %s: %w", w.key, err)
		}
	} else {
		obj := w.want.DeepCopy()
		obj.SetResourceVersion(w.have.rv)
		k.calls.Add(1)
		got, err = ri.Update(ctx, obj, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) { // changed behind our back: take the server's version and write again
			var cur *unstructured.Unstructured
			if cur, err = ri.Get(ctx, w.key.name, metav1.GetOptions{}); err == nil {
				obj.SetResourceVersion(cur.GetResourceVersion())
				k.calls.Add(2)
				got, err = ri.Update(ctx, obj, metav1.UpdateOptions{})
			}
		}
		if err != nil {
			return fmt.Errorf("update %s: %w", w.key, err)
		}
	}
	if r.Status && hasStatus && (w.have == nil || !reflect.DeepEqual(w.have.want.Object["status"], status)) {
		got.Object["status"] = status
		k.calls.Add(1)
		if got, err = ri.UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("status of %s: %w", w.key, err)
		}
	}
	w.done = &kubeObject{want: w.want, rv: got.GetResourceVersion()}
	return nil
}

// startKube starts etcd and kube-apiserver under dir, installs the Istio CRDs, and returns the server, an
// applier on it and a kubeconfig for Sextant (the admin's client certificate).
func startKube(ctx context.Context, dir string, out io.Writer) (*kubeenv.Server, *kubeApplier, string, error) {
	// The mesh's Services have fixed cluster IPs from 172.20.0.0 up (see newService).
	env, err := kubeenv.Start(kubeenv.Options{Dir: dir, ServiceCIDR: "172.16.0.0/12"})
	if err != nil {
		return nil, nil, "", fmt.Errorf("kube-apiserver: %w", err)
	}
	crds, err := env.InstallIstioCRDs(ctx)
	if err != nil {
		env.Stop()
		return nil, nil, "", err
	}
	kubeconfig, err := env.WriteKubeconfig(env.Admin, "sextant")
	if err != nil {
		env.Stop()
		return nil, nil, "", err
	}
	ka, err := newKubeApplier(ctx, env.Admin)
	if err != nil {
		env.Stop()
		return nil, nil, "", err
	}
	fmt.Fprintf(out, "etcd and kube-apiserver ready in %.1f s at %s, Istio CRDs in %.1f s\n", env.StartTook.Seconds(), env.URL, crds.Seconds())
	return env, ka, kubeconfig, nil
}
