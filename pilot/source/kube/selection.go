package kube

import (
	"context"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/pager"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/store"
)

// namespaceSelection is the mesh config's discoverySelectors applied as istiod applies them: an object of a
// namespace no selector matches is not read (cluster-scoped kinds always are); selectors are ORed; none
// selects every namespace. Unlike istiod, whose informers keep every object and filter when handing them
// out, an unselected object is cut to its name at decode time (outsideSelection), so it costs no memory.
type namespaceSelection struct {
	selectors []labels.Selector // empty: every namespace

	mu       sync.RWMutex
	selected map[string]bool
}

// newNamespaceSelection parses the selectors; an invalid one is an error naming its position, as a
// selector that cannot be honoured must not silently select everything.
func newNamespaceSelection(in []metav1.LabelSelector) (*namespaceSelection, error) {
	n := &namespaceSelection{selected: map[string]bool{}}
	for i := range in {
		sel, err := metav1.LabelSelectorAsSelector(&in[i])
		if err != nil {
			return nil, fmt.Errorf("discoverySelectors[%d]: %w", i, err)
		}
		n.selectors = append(n.selectors, sel)
	}
	return n, nil
}

// all reports whether every namespace is selected (no selectors).
func (n *namespaceSelection) all() bool { return n == nil || len(n.selectors) == 0 }

// matches reports whether a namespace with these labels is selected.
func (n *namespaceSelection) matches(l map[string]string) bool {
	if n.all() {
		return true
	}
	for _, s := range n.selectors {
		if s.Matches(labels.Set(l)) {
			return true
		}
	}
	return false
}

// Selects reports whether objects of namespace ns are read; "" (cluster-scoped) always is.
func (n *namespaceSelection) Selects(ns string) bool {
	if n.all() || ns == "" {
		return true
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.selected[ns]
}

// set records ns's labels (nil: ns deleted) and reports whether its selection changed, and to what.
func (n *namespaceSelection) set(ns string, l map[string]string, deleted bool) (changed, selected bool) {
	selected = !deleted && n.matches(l)
	n.mu.Lock()
	defer n.mu.Unlock()
	was := n.selected[ns]
	if selected {
		n.selected[ns] = true
	} else {
		delete(n.selected, ns)
	}
	return was != selected && !deleted, selected
}

// cutIfOutside returns obj, or, when discoverySelectors leave its namespace out, a stand-in that keeps only
// its key and version for the informer's cache (a PartialObjectMetadata, which no watched kind decodes to).
func (n *namespaceSelection) cutIfOutside(obj any) any {
	m, ok := obj.(metav1.Object)
	if !ok || n.Selects(m.GetNamespace()) {
		return obj
	}
	if _, isNS := obj.(*corev1.Namespace); isNS {
		return obj
	}
	out := &metav1.PartialObjectMetadata{}
	out.Name, out.Namespace, out.ResourceVersion = m.GetName(), m.GetNamespace(), m.GetResourceVersion()
	return out
}

// isOutsideSelection reports whether obj is a stand-in of cutIfOutside.
func isOutsideSelection(obj any) bool {
	_, ok := obj.(*metav1.PartialObjectMetadata)
	return ok
}

// namespaceSelected reads, once a namespace becomes selected, every object of the watched kinds in it:
// the informers hold only stand-ins for them, and no watch event will bring them until they change.
func (s *Source) namespaceSelected(ctx context.Context, ns string) {
	for _, kind := range s.watchedNamespacedKinds() {
		objs, err := s.listNamespace(ctx, kind, ns)
		if err != nil {
			s.log.Error("cannot read a namespace that discoverySelectors now select", "namespace", ns, "kind", kind, "error", err)
			continue
		}
		for _, obj := range objs {
			s.upsert(kind, obj)
		}
	}
	s.log.Info("namespace selected by discoverySelectors: its objects are read", "namespace", ns)
}

// namespaceDeselected drops what the store holds of a namespace discoverySelectors no longer select.
func (s *Source) namespaceDeselected(ns string) {
	n := 0
	for _, kind := range s.watchedNamespacedKinds() {
		for _, c := range s.store.ListNamespace(kind, ns) {
			if s.store.GetLayer(store.LayerKube, c.Key) != nil {
				s.forget(c.Key)
				n++
			}
		}
	}
	s.log.Info("namespace no longer selected by discoverySelectors: its objects are dropped", "namespace", ns, "objects", n)
}

// watchedNamespacedKinds returns the namespaced kinds the source watches now.
func (s *Source) watchedNamespacedKinds() []config.Kind {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []config.Kind
	for k := range s.watched {
		if ki, ok := config.Info(k); ok && ki.Namespaced {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// listNamespace reads every object of kind in ns from the API server, a page at a time, decoded and slimmed
// as its informer would.
func (s *Source) listNamespace(ctx context.Context, kind config.Kind, ns string) ([]any, error) {
	list, decode, err := s.namespaceLister(kind, ns)
	if err != nil {
		return nil, err
	}
	var out []any
	err = pager.New(list).EachListItem(ctx, metav1.ListOptions{}, func(obj runtime.Object) error {
		d, err := decode(obj)
		if err == nil {
			out = append(out, d)
		}
		return err
	})
	return out, err
}

// namespaceLister returns how kind is listed in ns and how a listed object is decoded.
func (s *Source) namespaceLister(kind config.Kind, ns string) (pager.ListPageFunc, cache.TransformFunc, error) {
	if _, ok := crdTypes[kind]; ok {
		ki, _ := config.Info(kind)
		r := s.dynamic.Resource(crdGVR(ki)).Namespace(ns)
		return func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return r.List(ctx, o) },
			crdTransform(kind), nil
	}
	var list pager.ListPageFunc
	switch kind {
	case config.Service:
		list = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return s.client.CoreV1().Services(ns).List(ctx, o)
		}
	case config.Pod:
		list = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return s.client.CoreV1().Pods(ns).List(ctx, o)
		}
	case config.EndpointSlice:
		list = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return s.client.DiscoveryV1().EndpointSlices(ns).List(ctx, o)
		}
	case config.Secret:
		list = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = secretFieldSelector
			return s.client.CoreV1().Secrets(ns).List(ctx, o)
		}
	default:
		return nil, nil, fmt.Errorf("no lister for kind %s", kind)
	}
	// List items are values inside the page; each is copied out before it is slimmed and kept.
	return list, func(obj any) (any, error) { return transform(obj.(runtime.Object).DeepCopyObject()) }, nil
}

// startNamespaces watches Namespaces, follows their selection, and waits for their first list; it reports
// false when ctx ended first.
func (s *Source) startNamespaces(ctx context.Context) (cache.ResourceEventHandlerRegistration, bool) {
	reg, err := s.watch(config.Namespace)
	if err != nil {
		s.log.Error("cannot watch kind", "kind", config.Namespace, "error", err)
		return nil, false
	}
	follow, err := s.informer(config.Namespace).AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.followSelection(obj, false) },
		UpdateFunc: func(_, obj any) { s.followSelection(obj, false) },
		DeleteFunc: func(obj any) { s.followSelection(obj, true) },
	})
	if err != nil {
		s.log.Error("cannot follow namespace selection", "error", err)
		return nil, false
	}
	s.kube.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), reg.HasSynced, follow.HasSynced) {
		return nil, false
	}
	s.selectionLive.Store(true)
	s.selection.mu.RLock()
	n := len(s.selection.selected)
	s.selection.mu.RUnlock()
	s.log.Info("discoverySelectors: objects of the other namespaces are not read", "selected namespaces", n)
	return reg, true
}

// followSelection records a namespace's labels; once the first list is in, a namespace newly selected is
// read and one deselected dropped. A deleted namespace's objects go with their own delete events.
func (s *Source) followSelection(obj any, deleted bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return
	}
	changed, selected := s.selection.set(ns.Name, ns.Labels, deleted)
	if !changed || !s.selectionLive.Load() {
		return
	}
	if selected {
		s.namespaceSelected(s.runCtx, ns.Name)
	} else {
		s.namespaceDeselected(ns.Name)
	}
}
