package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/store"
)

// DefaultCRDPollInterval is how often missing Istio CRDs are looked for again.
const DefaultCRDPollInterval = 30 * time.Second

// Discovery is the part of the Kubernetes discovery client the source uses to tell whether a CRD is
// installed. discovery.DiscoveryInterface satisfies it.
type Discovery interface {
	ServerResourcesForGroupVersion(groupVersion string) (*metav1.APIResourceList, error)
}

// Options configures a Source.
type Options struct {
	KubeClient kubernetes.Interface
	// Dynamic reads the Istio kinds. They are decoded one object at a time (see crdTransform), so an
	// object Sextant's types cannot hold is rejected alone instead of failing its kind's whole list.
	Dynamic dynamic.Interface
	Store   *store.Store
	Logger  *slog.Logger // nil: slog.Default()
	// Discovery tells which Istio CRDs are installed; nil uses KubeClient.Discovery().
	Discovery Discovery
	// ResyncPeriod is the informers' resync period; 0 disables resync, which is safe because
	// the source keeps no state that could drift from the cache.
	ResyncPeriod time.Duration
	// CRDPollInterval is how often missing CRDs are looked for again (default 30s).
	CRDPollInterval time.Duration
	// DiscoverySelectors are the mesh config's: objects of namespaces none of them selects are not read
	// (empty: every namespace).
	DiscoverySelectors []metav1.LabelSelector
}

// RejectedObject is a cluster object that failed to decode or to validate. The store keeps its last good version, if any.
type RejectedObject struct {
	Kind            config.Kind `json:"kind"`
	Namespace       string      `json:"namespace,omitempty"`
	Name            string      `json:"name"`
	ResourceVersion string      `json:"resourceVersion,omitempty"`
	Field           string      `json:"field,omitempty"`
	Message         string      `json:"message"`
	Since           time.Time   `json:"since"`
}

// Key returns the config key of the rejected object.
func (r RejectedObject) Key() config.Key {
	return config.Key{Kind: r.Kind, Namespace: r.Namespace, Name: r.Name}
}

// Source mirrors a cluster into the store's kube layer.
type Source struct {
	log          *slog.Logger
	store        *store.Store
	discovery    Discovery
	pollInterval time.Duration
	kube         informers.SharedInformerFactory
	crds         dynamicinformer.DynamicSharedInformerFactory
	dynamic      dynamic.Interface
	client       kubernetes.Interface
	selection    *namespaceSelection
	// selectionLive: namespaces selected or deselected from now on are read or dropped at once; before it
	// (the first namespace list), the informers' own first lists read them.
	selectionLive atomic.Bool
	runCtx        context.Context

	running atomic.Bool
	synced  chan struct{} // closed once every informer started by Run has synced

	mu       sync.Mutex
	rejected map[config.Key]RejectedObject
	warnings map[config.Key]objectWarnings
	missing  map[config.Kind]bool // CRD kinds not watched because their CRD is not served
	watched  map[config.Kind]bool // kinds with an informer and the store's handlers
	unread   []UnreadCount        // kinds Sextant does not read, found in the cluster at start
}

// New returns a Source; nothing is watched until Run.
func New(opts Options) (*Source, error) {
	if opts.KubeClient == nil {
		return nil, errors.New("kube source: KubeClient is required")
	}
	if opts.Dynamic == nil {
		return nil, errors.New("kube source: Dynamic is required")
	}
	if opts.Store == nil {
		return nil, errors.New("kube source: Store is required")
	}
	selection, err := newNamespaceSelection(opts.DiscoverySelectors)
	if err != nil {
		return nil, fmt.Errorf("kube source: mesh config %w", err)
	}
	s := &Source{
		log:          opts.Logger,
		store:        opts.Store,
		discovery:    opts.Discovery,
		pollInterval: opts.CRDPollInterval,
		crds:         dynamicinformer.NewDynamicSharedInformerFactory(opts.Dynamic, opts.ResyncPeriod),
		dynamic:      opts.Dynamic,
		client:       opts.KubeClient,
		selection:    selection,
		synced:       make(chan struct{}),
		rejected:     map[config.Key]RejectedObject{},
		warnings:     map[config.Key]objectWarnings{},
		missing:      map[config.Kind]bool{},
		watched:      map[config.Kind]bool{},
	}
	s.kube = informers.NewSharedInformerFactoryWithOptions(opts.KubeClient, opts.ResyncPeriod,
		informers.WithTransform(func(obj any) (any, error) { return transform(selection.cutIfOutside(obj)) }))
	if s.log == nil {
		s.log = slog.Default()
	}
	s.log = s.log.With("source", "kube")
	if s.discovery == nil {
		s.discovery = opts.KubeClient.Discovery()
	}
	if s.pollInterval <= 0 {
		s.pollInterval = DefaultCRDPollInterval
	}
	return s, nil
}

// RESTConfig loads the kubeconfig file at path, or the in-cluster config when path is empty.
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kube config: %w", err)
	}
	cfg.UserAgent = "sextant"
	return cfg, nil
}

// NewFromConfig builds the Kubernetes clientset and the dynamic client from restConfig and returns a Source on
// them, with opts for the rest (its clients are set here).
func NewFromConfig(restConfig *rest.Config, opts Options) (*Source, error) {
	// Built-in kinds come as protobuf: decoding Pods and EndpointSlices is most of a watch's cost, and
	// protobuf decodes several times faster than JSON (and costs the API server less to encode). Istio's
	// custom resources are served as JSON only.
	kubeConfig := rest.CopyConfig(restConfig)
	kubeConfig.ContentType = runtime.ContentTypeProtobuf
	kubeConfig.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	kc, err := kubernetes.NewForConfig(kubeConfig)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	dc, err := dynamic.NewForConfig(restConfig)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	opts.KubeClient, opts.Dynamic = kc, dc
	return New(opts)
}

// isCRD reports whether kind k comes from an Istio CRD, which may not be installed.
func isCRD(k config.KindInfo) bool {
	return !k.Builtin()
}

// Run watches until ctx is done, then stops the informers and returns. Call it once, usually with go.
func (s *Source) Run(ctx context.Context) {
	if !s.running.CompareAndSwap(false, true) {
		s.log.Error("Run called more than once; ignoring")
		return
	}
	var core, crds []config.KindInfo
	for _, ki := range config.Kinds() {
		if isCRD(ki) {
			crds = append(crds, ki)
		} else {
			core = append(core, ki)
		}
	}
	served, missing := s.servedCRDs(crds, true)

	s.runCtx = ctx
	var syncs []cache.InformerSynced
	if !s.selection.all() {
		// The namespaces' labels decide what the other informers keep, so they are listed first.
		reg, ok := s.startNamespaces(ctx)
		if !ok {
			<-ctx.Done()
			s.kube.Shutdown()
			return
		}
		syncs = append(syncs, reg.HasSynced)
	}
	for _, ki := range append(core, served...) {
		if ki.Kind == config.Namespace && !s.selection.all() {
			continue
		}
		reg, err := s.watch(ki.Kind)
		if err != nil {
			s.log.Error("cannot watch kind", "kind", ki.Kind, "error", err)
			continue
		}
		syncs = append(syncs, reg.HasSynced)
	}
	s.setMissing(missing)
	s.kube.Start(ctx.Done())
	s.crds.Start(ctx.Done())

	var wg sync.WaitGroup
	wg.Go(func() {
		start := time.Now()
		if cache.WaitForCacheSync(ctx.Done(), syncs...) {
			s.log.Info("informers synced", "kinds", len(syncs), "took", time.Since(start).Round(time.Millisecond))
			close(s.synced)
		}
	})
	if len(missing) > 0 {
		wg.Go(func() { s.pollCRDs(ctx, missing) })
	}
	wg.Go(func() { s.countUnread(ctx) })
	<-ctx.Done()
	wg.Wait()
	// Shutdown waits for the informers' goroutines, so none outlives Run.
	s.kube.Shutdown()
	s.crds.Shutdown()
}

// HasSynced reports whether every informer Run started at first has delivered its initial list.
// CRDs that were missing at start do not hold it back.
func (s *Source) HasSynced() bool {
	select {
	case <-s.synced:
		return true
	default:
		return false
	}
}

// WaitForSync blocks until HasSynced or ctx is done.
func (s *Source) WaitForSync(ctx context.Context) error {
	select {
	case <-s.synced:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("kube source: waiting for informers to sync: %w", ctx.Err())
	}
}

// Rejected returns the objects currently rejected, because they failed to decode or to validate, sorted by key.
func (s *Source) Rejected() []RejectedObject {
	s.mu.Lock()
	out := make([]RejectedObject, 0, len(s.rejected))
	for _, r := range s.rejected {
		out = append(out, r)
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b RejectedObject) int { return config.CompareKeys(a.Key(), b.Key()) })
	return out
}

// UnreadCount is how many objects of a kind Sextant does not read the cluster held at start.
type UnreadCount struct {
	Kind       config.Kind `json:"kind"`
	APIVersion string      `json:"apiVersion"`
	Count      int         `json:"count"`
}

// Unread returns the kinds Sextant does not read (config.UnreadKinds) of which the cluster held objects at
// start, with their count. Their objects change nothing Sextant serves, so they are reported, never silent.
func (s *Source) Unread() []UnreadCount {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.unread)
}

// countUnread counts, once at start, the objects of each unread kind the cluster serves, and logs the kinds
// that have any. Counting once is enough to tell an operator what has no effect; watching them would cost
// informers for objects Sextant never uses.
func (s *Source) countUnread(ctx context.Context) {
	var found []UnreadCount
	lists := map[string]*metav1.APIResourceList{}
	for _, ki := range config.UnreadKinds() {
		for _, v := range ki.Versions {
			gv := ki.Group + "/" + v
			l, seen := lists[gv]
			if !seen {
				l, _ = s.discovery.ServerResourcesForGroupVersion(gv) // not served: nothing to count
				lists[gv] = l
			}
			if !hasResource(l, ki.Plural) {
				continue
			}
			n, err := s.countObjects(ctx, schema.GroupVersionResource{Group: ki.Group, Version: v, Resource: ki.Plural})
			if err != nil {
				if ctx.Err() == nil {
					attrs := []any{"kind", ki.Kind, "apiVersion", gv, "error", err}
					if apierrors.IsForbidden(err) {
						attrs = append(attrs, "hint", "grant list on "+ki.Plural+"."+ki.Group+" to have its objects reported")
					}
					s.log.Warn("cannot count objects of a kind Sextant does not read", attrs...)
				}
				break
			}
			if n > 0 {
				found = append(found, UnreadCount{Kind: ki.Kind, APIVersion: gv, Count: n})
				s.log.Warn("kind not read by Sextant found in the cluster: its objects have no effect",
					"kind", ki.Kind, "apiVersion", gv, "count", n)
			}
			break // one served version holds every object of the kind
		}
	}
	s.mu.Lock()
	s.unread = found
	s.mu.Unlock()
}

// countObjects lists gvr in every namespace, a page at a time, and returns how many objects it holds.
func (s *Source) countObjects(ctx context.Context, gvr schema.GroupVersionResource) (int, error) {
	n, cont := 0, ""
	for {
		l, err := s.dynamic.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 500, Continue: cont})
		if err != nil {
			return 0, err
		}
		n += len(l.Items)
		if cont = l.GetContinue(); cont == "" {
			return n, nil
		}
	}
}

// MissingCRDs returns the CRD kinds not watched (yet) because the cluster does not serve them.
func (s *Source) MissingCRDs() []config.Kind {
	s.mu.Lock()
	var out []config.Kind
	for k := range s.missing {
		out = append(out, k)
	}
	s.mu.Unlock()
	slices.Sort(out)
	return out
}

func (s *Source) setMissing(kinds []config.KindInfo) {
	s.mu.Lock()
	clear(s.missing)
	for _, ki := range kinds {
		s.missing[ki.Kind] = true
	}
	s.mu.Unlock()
}

// servedCRDs splits kinds into those whose resource the cluster serves and those it does not.
// With warn, each missing kind is logged once, as a warning; later polls stay quiet.
func (s *Source) servedCRDs(kinds []config.KindInfo, warn bool) (served, missing []config.KindInfo) {
	lists := map[string]*metav1.APIResourceList{}
	errs := map[string]error{}
	for _, ki := range kinds {
		gv := ki.APIVersion()
		if _, done := lists[gv]; !done && errs[gv] == nil {
			l, err := s.discovery.ServerResourcesForGroupVersion(gv)
			if err != nil {
				errs[gv] = err
			} else {
				lists[gv] = l
			}
		}
		if hasResource(lists[gv], ki.Plural) {
			served = append(served, ki)
			continue
		}
		missing = append(missing, ki)
		if !warn {
			continue
		}
		attrs := []any{"kind", ki.Kind, "resource", ki.Plural + "." + ki.Group, "version", ki.Versions[0]}
		if err := errs[gv]; err != nil {
			attrs = append(attrs, "error", err)
		}
		s.log.Warn("CRD not installed; not watching it until it appears", attrs...)
	}
	return served, missing
}

func hasResource(l *metav1.APIResourceList, plural string) bool {
	if l == nil {
		return false
	}
	for _, r := range l.APIResources {
		if r.Name == plural {
			return true
		}
	}
	return false
}

// pollCRDs starts the informer of each missing CRD kind once the cluster serves it.
func (s *Source) pollCRDs(ctx context.Context, missing []config.KindInfo) {
	var wg sync.WaitGroup
	defer wg.Wait()
	t := time.NewTicker(s.pollInterval)
	defer t.Stop()
	for len(missing) > 0 {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		served, still := s.servedCRDs(missing, false)
		for _, ki := range served {
			reg, err := s.watch(ki.Kind)
			if err != nil {
				s.log.Error("cannot watch kind", "kind", ki.Kind, "error", err)
				continue
			}
			// Waiting here would stall the loop if this informer cannot list (RBAC, say).
			wg.Go(func() {
				if cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
					s.log.Info("CRD installed; now watching it", "kind", ki.Kind, "resource", ki.Plural+"."+ki.Group)
				}
			})
		}
		if len(served) > 0 {
			s.crds.Start(ctx.Done()) // starts only the informers not running yet
		}
		missing = still
		s.setMissing(missing)
	}
}

// watch registers the store handlers on kind's informer, creating the informer if needed.
func (s *Source) watch(kind config.Kind) (cache.ResourceEventHandlerRegistration, error) {
	inf := s.informer(kind)
	if inf == nil {
		return nil, fmt.Errorf("no informer for kind %s", kind)
	}
	// Both fail only if the informer already runs, which then keeps what it had.
	_ = inf.SetWatchErrorHandlerWithContext(s.watchErrorHandler(kind))
	if _, ok := crdTypes[kind]; ok {
		decode := crdTransform(kind)
		_ = inf.SetTransform(func(obj any) (any, error) { return decode(s.selection.cutIfOutside(obj)) })
	}
	s.mu.Lock()
	s.watched[kind] = true
	s.mu.Unlock()
	return inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { s.upsert(kind, obj) },
		UpdateFunc: func(oldObj, newObj any) {
			// A resync re-delivers what the store already has.
			// An empty version (some fakes) proves nothing, so such updates go through.
			if rv := resourceVersion(newObj); rv != "" && rv == resourceVersion(oldObj) {
				return
			}
			s.upsert(kind, newObj)
		},
		DeleteFunc: func(obj any) { s.remove(kind, obj) },
	})
}

// secretFieldSelector leaves out the two kinds of Secret that are both common and large and that no
// credentialName can name, as istiod does: Helm release records and service-account tokens.
var secretFieldSelector = fields.AndSelectors(
	fields.OneTermNotEqualSelector("type", "helm.sh/release.v1"),
	fields.OneTermNotEqualSelector("type", string(corev1.SecretTypeServiceAccountToken))).String()

// newSecretInformer watches Secrets of every namespace but the types of secretFieldSelector; the
// factory's transform (slimSecret) keeps only the keys a certificate is read from.
func newSecretInformer(client kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
	return coreinformers.NewFilteredSecretInformer(client, metav1.NamespaceAll, resync,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
		func(o *metav1.ListOptions) { o.FieldSelector = secretFieldSelector })
}

var forbiddenVerb = regexp.MustCompile(`cannot (\w+) resource`)

// watchErrorHandler logs a denied permission once per kind, naming the verb and the resource, instead of
// client-go's log line on every retry. Other errors go to client-go's handler.
func (s *Source) watchErrorHandler(kind config.Kind) cache.WatchErrorHandlerWithContext {
	var logged atomic.Bool
	return func(ctx context.Context, r *cache.Reflector, err error) {
		if !apierrors.IsForbidden(err) {
			cache.DefaultWatchErrorHandler(ctx, r, err)
			return
		}
		if s.informer(kind).HasSynced() {
			// Allowed before: a restarting API server answers 403 until its authorizer is ready. Say so
			// without the permission error, which is kept for a denial that is real.
			s.log.Warn("watch denied after a successful sync; retrying (an API server restart causes this briefly)",
				"kind", kind, "error", err)
			return
		}
		if logged.Swap(true) {
			return
		}
		verb := "list"
		if m := forbiddenVerb.FindStringSubmatch(err.Error()); m != nil {
			verb = m[1]
		}
		resource := string(kind)
		if ki, ok := config.Info(kind); ok {
			resource = ki.Plural
			if ki.Group != "" {
				resource += "." + ki.Group
			}
		}
		s.log.Error("permission denied: cannot "+verb+" "+resource+
			"; Sextant's ClusterRole must allow get, list and watch on it (manifests/10-rbac.yaml)",
			"kind", kind, "verb", verb, "resource", resource, "error", err)
	}
}

func (s *Source) informer(kind config.Kind) cache.SharedIndexInformer {
	switch kind {
	case config.Namespace:
		return s.kube.Core().V1().Namespaces().Informer()
	case config.Service:
		return s.kube.Core().V1().Services().Informer()
	case config.Pod:
		return s.kube.Core().V1().Pods().Informer()
	case config.Node:
		return s.kube.Core().V1().Nodes().Informer()
	case config.EndpointSlice:
		return s.kube.Discovery().V1().EndpointSlices().Informer()
	case config.Secret:
		return s.kube.InformerFor(&corev1.Secret{}, newSecretInformer)
	case config.Ingress:
		return s.kube.Networking().V1().Ingresses().Informer()
	case config.IngressClass:
		return s.kube.Networking().V1().IngressClasses().Informer()
	}
	if _, ok := crdTypes[kind]; ok {
		ki, _ := config.Info(kind)
		return s.crds.ForResource(crdGVR(ki)).Informer()
	}
	return nil
}

func (s *Source) upsert(kind config.Kind, obj any) {
	if isOutsideSelection(obj) {
		return
	}
	if m, ok := obj.(metav1.Object); ok && !s.selection.Selects(m.GetNamespace()) {
		return // decoded before its namespace was deselected
	}
	if u, ok := obj.(*undecodable); ok {
		s.reject(RejectedObject{Kind: kind, Namespace: u.Namespace, Name: u.Name, ResourceVersion: u.ResourceVersion,
			Field: u.Field, Message: u.Err}, "rejected object that cannot be decoded; keeping the last good version")
		return
	}
	cfg, err := toConfig(obj)
	if err != nil {
		s.log.Error("cannot convert object", "kind", kind, "error", err)
		return
	}
	if err := config.Validate(cfg); err != nil {
		r := RejectedObject{Kind: cfg.Kind, Namespace: cfg.Namespace, Name: cfg.Name, ResourceVersion: cfg.ResourceVersion, Message: err.Error()}
		if fe, ok := errors.AsType[*config.FieldError](err); ok {
			r.Field, r.Message = fe.Field, fe.Message
		}
		s.reject(r, "rejected invalid object; keeping the last good version")
		return
	}
	s.accept(cfg.Key)
	s.warn(cfg)
	s.store.Upsert(store.LayerKube, cfg)
}

// objectWarnings are the unimplemented fields of one served object, as of its metadata.generation.
type objectWarnings struct {
	generation int64
	list       []*config.Error
}

// warn records cfg's unimplemented fields and logs them once per generation: a resync or a status or label
// change (same generation) stays quiet; a spec change logs what still applies.
func (s *Source) warn(cfg *config.Config) {
	list := config.ObjectWarnings(cfg, "kube", 0)
	s.mu.Lock()
	prev, seen := s.warnings[cfg.Key]
	if len(list) == 0 {
		delete(s.warnings, cfg.Key)
	} else {
		s.warnings[cfg.Key] = objectWarnings{generation: cfg.Generation, list: list}
	}
	s.mu.Unlock()
	if seen && prev.generation == cfg.Generation && len(prev.list) == len(list) {
		return
	}
	for _, w := range list {
		s.log.Warn("config field not implemented", "kind", cfg.Kind, "namespace", cfg.Namespace, "name", cfg.Name,
			"generation", cfg.Generation, "field", w.Field, "warning", w.Message)
	}
}

// Warnings returns the fields of served objects that Sextant accepts but does not implement, sorted by key and field.
func (s *Source) Warnings() []*config.Error {
	s.mu.Lock()
	var out []*config.Error
	for _, w := range s.warnings {
		out = append(out, w.list...)
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b *config.Error) int {
		if c := config.CompareKeys(config.Key{Kind: config.Kind(a.Kind), Namespace: a.Namespace, Name: a.Name},
			config.Key{Kind: config.Kind(b.Kind), Namespace: b.Namespace, Name: b.Name}); c != 0 {
			return c
		}
		return strings.Compare(a.Field, b.Field)
	})
	return out
}

func (s *Source) remove(kind config.Kind, obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		// The watch missed the delete; the tombstone's key is all that is sure to be there.
		ns, name, err := cache.SplitMetaNamespaceKey(t.Key)
		if err != nil {
			s.log.Error("bad tombstone key", "kind", kind, "key", t.Key, "error", err)
			return
		}
		s.forget(config.Key{Kind: kind, Namespace: ns, Name: name})
		return
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		s.log.Error("deleted object has no metadata", "kind", kind, "type", fmt.Sprintf("%T", obj))
		return
	}
	s.forget(config.Key{Kind: kind, Namespace: m.GetNamespace(), Name: m.GetName()})
}

func (s *Source) forget(key config.Key) {
	s.mu.Lock()
	delete(s.rejected, key)
	delete(s.warnings, key)
	s.mu.Unlock()
	s.store.Delete(store.LayerKube, key)
}

// reject records r, keeping whatever the store holds for it; msg is the log line's message.
func (s *Source) reject(r RejectedObject, msg string) {
	r.Since = time.Now()
	key := r.Key()
	s.mu.Lock()
	prev, seen := s.rejected[key]
	s.mu.Unlock()
	same := seen && prev.Field == r.Field && prev.Message == r.Message
	if same {
		r.Since = prev.Since
	}
	// Log a problem once, not on every new version that still has it; and before Rejected shows it, so
	// whoever sees a rejection finds its log line. One informer's handler runs one event at a time, so
	// nothing changes the key between the two locks.
	if !same {
		s.log.Warn(msg, "kind", r.Kind, "namespace", r.Namespace, "name", r.Name,
			"resourceVersion", r.ResourceVersion, "field", r.Field, "error", r.Message)
	}
	s.mu.Lock()
	s.rejected[key] = r
	s.mu.Unlock()
}

func (s *Source) accept(key config.Key) {
	s.mu.Lock()
	_, was := s.rejected[key]
	delete(s.rejected, key)
	s.mu.Unlock()
	if was {
		s.log.Info("previously rejected object is valid again", "kind", key.Kind, "namespace", key.Namespace, "name", key.Name)
	}
}

func resourceVersion(obj any) string {
	if m, ok := obj.(metav1.Object); ok {
		return m.GetResourceVersion()
	}
	return ""
}
