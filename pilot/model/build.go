package model

import (
	"maps"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	networking "istio.io/api/networking/v1alpha3"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pkg/cowmap"
)

// Change is one config change a new snapshot must reflect. Old and New are the objects before and after
// (Old nil on add, New nil on delete); for merged changes Old is the first old value and New the last new one.
type Change struct {
	Key config.Key
	Old *config.Config
	New *config.Config
}

// UpdateResult says what a new snapshot means for proxies.
type UpdateResult struct {
	// Full is set when anything other than endpoints and workloads changed: proxies need a full push.
	Full bool
	// ServicesUpdated holds the keys (namespace/hostname) of services whose endpoints changed.
	ServicesUpdated map[string]struct{}
	// WorkloadsUpdated holds the uids of workloads added, changed or removed.
	WorkloadsUpdated map[string]struct{}
	// AddressesUpdated holds the keys of the services in ServicesUpdated that sidecars reach through a
	// listener per endpoint address (Service.ListensOnEndpoints) whose addresses on those ports changed:
	// their listeners change, not only their endpoints.
	AddressesUpdated map[string]struct{}
	// SecretsUpdated holds namespace/name of Secrets added, changed or removed: only SDS is pushed for them.
	SecretsUpdated map[string]struct{}
}

// Index names, reported in PushContext.Rebuilt.
const (
	IndexServices         = "services"
	IndexEndpoints        = "endpoints"
	IndexWorkloads        = "workloads"
	IndexNamespaces       = "namespaces"
	IndexDestinationRules = "destinationRules"
	IndexVirtualServices  = "virtualServices"
	IndexGateways         = "gateways"
	IndexSidecars         = "sidecars"
	IndexAuthorization    = "authorizationPolicies"
	IndexPeerAuthn        = "peerAuthentications"
	IndexRequestAuthn     = "requestAuthentications"
	IndexCredentials      = "credentials"
)

// Build makes the first snapshot from everything the reader holds.
func Build(reader ConfigReader, m *mesh.Config) *PushContext {
	start := time.Now()
	ingress := buildIngresses(reader, m, nil)
	ps := &PushContext{
		Version:           1,
		Mesh:              m,
		destinationRules:  buildDestinationRules(reader, m),
		virtualServices:   buildVirtualServices(ingress.reader(reader), m),
		gateways:          buildGateways(ingress.reader(reader)),
		ingress:           ingress,
		sidecars:          buildSidecars(reader),
		authorization:     buildNamespaced(reader, config.AuthorizationPolicy),
		peerAuthn:         buildPeerAuthentications(reader, m.RootNamespace, nil),
		requestAuthn:      buildRequestAuthn(reader),
		accounts:          &accountsGeneration{},
		endpointAddresses: &accountsGeneration{},
		credentials:       buildCredentials(reader),
		sortedServices:    &lazyServiceList{},
	}
	nsb := cowmap.New[*config.Config]().Edit()
	for _, c := range reader.List(config.Namespace) {
		nsb.Set(c.Name, c)
	}
	ps.namespaces = nsb.Map()

	wl := buildWorkloads(reader, m)
	workloads := wl.byUID.Map()
	workloadOf := func(k config.Key) *Workload { w, _ := workloads.Get(WorkloadUID(m.ClusterID, k)); return w }
	services := cowmap.New[[]*Service]().Edit()
	bySource := cowmap.New[[]*Service]().Edit()
	byNS := cowmap.New[[]*Service]().Edit()
	endpoints := cowmap.New[*ServiceEndpoints]().Edit()
	byService := cowmap.New[[]string]().Edit()
	podRefs := map[string][]string{}
	hostLists := map[string][]*Service{}
	nsLists := map[string][]*Service{}
	var all []*Service
	for _, kind := range []config.Kind{config.Service, config.ServiceEntry} {
		for _, c := range reader.ListUnsorted(kind) {
			svcs := convertServices(c, m, ps.namespaces.Get)
			bySource.Set(c.Key.String(), svcs)
			for _, s := range svcs {
				hostLists[s.Hostname] = append(hostLists[s.Hostname], s)
				nsLists[s.Namespace] = append(nsLists[s.Namespace], s)
				all = append(all, s)
			}
		}
	}
	// Several services share a key when ServiceEntries of one namespace name the same host; the oldest is
	// the one served (ServiceForHostname), so its endpoints and workloads are the key's.
	all = servedPerKey(all, hostLists)
	// Endpoints and selected workloads per service read only immutable inputs: compute them in parallel.
	type perService struct {
		eps  *ServiceEndpoints
		uids []string
	}
	computed := make([]perService, len(all))
	parallel(len(all), func() func(int) {
		wr := newResolver(reader, m)
		wr.workload = workloadOf
		return func(i int) {
			s := all[i]
			computed[i] = perService{computeEndpoints(s, wr), selectWorkloads(s, wl.byNS[s.Namespace], wl.byLabel[s.Namespace])}
		}
	})
	for i, s := range all {
		eps := computed[i].eps
		endpoints.Set(s.Key(), eps)
		for _, pod := range eps.podRefs {
			podRefs[s.Namespace+"/"+pod] = append(podRefs[s.Namespace+"/"+pod], s.Key())
		}
		if uids := computed[i].uids; len(uids) > 0 {
			byService.Set(s.Key(), uids)
		}
	}
	for h, list := range hostLists {
		slices.SortFunc(list, CompareServices)
		services.Set(h, list)
	}
	for ns, list := range nsLists {
		sortByHostname(list)
		byNS.Set(ns, list)
	}
	ps.services, ps.servicesBySource, ps.servicesByNamespace = services.Map(), bySource.Map(), byNS.Map()
	ps.endpoints = endpoints.Map()
	refs := cowmap.New[[]string]().Edit()
	for pod, keys := range podRefs {
		slices.Sort(keys)
		refs.Set(pod, slices.Compact(keys))
	}
	ps.podRefs = refs.Map()
	ps.workloads = &workloadIndex{byUID: workloads, byAddress: wl.byAddr.Map(), byService: byService.Map()}
	ps.BuiltAt = time.Now()
	ps.BuildDuration = time.Since(start)
	ps.Rebuilt = []string{IndexServices, IndexEndpoints, IndexWorkloads, IndexNamespaces, IndexDestinationRules,
		IndexVirtualServices, IndexGateways, IndexSidecars, IndexAuthorization, IndexPeerAuthn, IndexRequestAuthn}
	return ps
}

// builtWorkloads are a first snapshot's workloads by UID and address, and grouped by namespace and label
// for selector matching.
type builtWorkloads struct {
	byUID   *cowmap.Builder[*Workload]
	byAddr  *cowmap.Builder[[]string]
	byLabel map[string]map[labelPair][]*Workload // namespace → label → workloads
	byNS    map[string][]*Workload
}

// buildWorkloads converts every Pod and WorkloadEntry the reader holds.
func buildWorkloads(reader ConfigReader, m *mesh.Config) builtWorkloads {
	wl := builtWorkloads{byUID: cowmap.New[*Workload]().Edit(), byAddr: cowmap.New[[]string]().Edit(),
		byLabel: map[string]map[labelPair][]*Workload{}, byNS: map[string][]*Workload{}}
	objects := append(reader.ListUnsorted(config.Pod), reader.ListUnsorted(config.WorkloadEntry)...)
	converted := make([]*Workload, len(objects))
	parallel(len(objects), func() func(int) {
		r := newResolver(reader, m) // per worker: its node cache is not shared
		return func(i int) { converted[i] = workloadFromConfig(objects[i], r) }
	})
	for _, w := range converted {
		if w == nil {
			continue
		}
		wl.byUID.Set(w.UID, w)
		for _, a := range w.Addresses {
			list, _ := wl.byAddr.Get(addressKey(w.Network, a))
			wl.byAddr.Set(addressKey(w.Network, a), insertSorted(list, w.UID))
		}
		wl.byNS[w.Namespace] = append(wl.byNS[w.Namespace], w)
		idx := wl.byLabel[w.Namespace]
		if idx == nil {
			idx = map[labelPair][]*Workload{}
			wl.byLabel[w.Namespace] = idx
		}
		for k, v := range w.Labels {
			idx[labelPair{k, v}] = append(idx[labelPair{k, v}], w)
		}
	}
	return wl
}

// parallel runs work(i) for i in [0, n) on one worker per CPU. newWorker makes each worker's function, so
// workers can own caches. Results must go to distinct slots.
func parallel(n int, newWorker func() func(int)) {
	workers := min(runtime.GOMAXPROCS(0), max(1, n/256))
	if workers <= 1 {
		work := newWorker()
		for i := range n {
			work(i)
		}
		return
	}
	var wg sync.WaitGroup
	chunk := (n + workers - 1) / workers
	for start := 0; start < n; start += chunk {
		end := min(start+chunk, n)
		work := newWorker()
		wg.Go(func() {
			for i := start; i < end; i++ {
				work(i)
			}
		})
	}
	wg.Wait()
}

// labelPair is one key=value of a workload's labels, for the selector index.
type labelPair struct{ key, value string }

func sortByHostname(list []*Service) { slices.SortFunc(list, compareByHostname) }

// compareByHostname orders a namespace's services: by hostname, then by the config that produced them.
func compareByHostname(a, b *Service) int {
	if c := strings.Compare(a.Hostname, b.Hostname); c != 0 {
		return c
	}
	return config.CompareKeys(a.Source, b.Source)
}

// selects reports whether s selects workloads, and w in particular.
func (s *Service) selects(w *Workload) bool {
	if s.Selector == nil || w.Namespace != s.Namespace {
		return false
	}
	if s.Source.Kind == config.Service && len(s.Selector) == 0 {
		return false // a Kubernetes Service without selector has manually managed endpoints
	}
	return labelsMatch(s.Selector, w.Labels)
}

// selectWorkloads returns the sorted uids of the workloads s selects, using the label index to avoid a
// scan of the namespace.
func selectWorkloads(s *Service, nsWorkloads []*Workload, byLabel map[labelPair][]*Workload) []string {
	if s.Selector == nil || (s.Source.Kind == config.Service && len(s.Selector) == 0) {
		return nil
	}
	candidates := nsWorkloads
	if byLabel != nil {
		for k, v := range s.Selector {
			if list := byLabel[labelPair{k, v}]; len(list) < len(candidates) {
				candidates = list
			}
		}
	}
	var uids []string
	for _, w := range candidates {
		if s.selects(w) {
			uids = append(uids, w.UID)
		}
	}
	slices.Sort(uids)
	return uids
}

// Update returns the snapshot after changes, sharing every index the changes do not touch with prev.
// Endpoint-only changes (EndpointSlice, Pod, WorkloadEntry, Node) rebuild no index: they replace the
// affected services' endpoints and workloads, and yield an incremental result.
func Update(prev *PushContext, reader ConfigReader, changes []Change) (*PushContext, UpdateResult) {
	start := time.Now()
	next := *prev
	next.Version = prev.Version + 1
	next.Rebuilt = nil
	res := UpdateResult{ServicesUpdated: map[string]struct{}{}, WorkloadsUpdated: map[string]struct{}{}}
	u := &updater{prev: prev, next: &next, reader: reader, m: prev.Mesh, affected: map[string]*Service{}, res: &res,
		nsEdits: map[string]*nsEdit{}}
	u.r = newResolver(reader, prev.Mesh)
	u.r.workload = u.workload

	rebuild := map[string]bool{}
	var vsChanged []config.Key
	ingressChanged := false
	for _, ch := range changes {
		ingressChanged = ingressChanged || prev.ingress.affectedBy(ch.Key)
		switch ch.Key.Kind {
		case config.Service, config.ServiceEntry:
			u.serviceChanged(ch.Key)
			res.Full = true
		case config.EndpointSlice:
			u.sliceChanged(ch)
		case config.Pod, config.WorkloadEntry:
			u.workloadChanged(ch)
		case config.Node:
			u.nodeChanged(ch.Key.Name)
		case config.Namespace:
			u.namespaceChanged(ch.Key.Name)
			res.Full = true
		case config.DestinationRule:
			rebuild[IndexDestinationRules] = true
		case config.VirtualService:
			rebuild[IndexVirtualServices] = true
			vsChanged = append(vsChanged, ch.Key)
		case config.Gateway:
			rebuild[IndexGateways] = true
		case config.Sidecar:
			rebuild[IndexSidecars] = true
		case config.AuthorizationPolicy:
			rebuild[IndexAuthorization] = true
		case config.PeerAuthentication:
			rebuild[IndexPeerAuthn] = true
		case config.RequestAuthentication, config.FetchedJWKS:
			rebuild[IndexRequestAuthn] = true
		case config.Secret:
			u.secretChanged(ch)
		}
	}
	if ingressChanged {
		next.ingress = buildIngresses(reader, next.Mesh, prev.ingress)
		if keys := changedIngressKeys(prev.ingress, next.ingress, config.VirtualService); len(keys) > 0 {
			rebuild[IndexVirtualServices] = true
			vsChanged = append(vsChanged, keys...)
		}
		if len(changedIngressKeys(prev.ingress, next.ingress, config.Gateway)) > 0 {
			rebuild[IndexGateways] = true
		}
	}
	if len(rebuild) > 0 {
		res.Full = true
	}
	derived := next.ingress.reader(reader)
	if rebuild[IndexDestinationRules] {
		next.destinationRules = buildDestinationRules(reader, next.Mesh)
	}
	if rebuild[IndexVirtualServices] {
		next.virtualServices = updateVirtualServices(prev.virtualServices, derived, next.Mesh, vsChanged)
	}
	if rebuild[IndexGateways] {
		next.gateways = buildGateways(derived)
	}
	if rebuild[IndexSidecars] {
		next.sidecars = buildSidecars(reader)
	}
	if rebuild[IndexAuthorization] {
		next.authorization = buildNamespaced(reader, config.AuthorizationPolicy)
	}
	if rebuild[IndexPeerAuthn] {
		next.peerAuthn = buildPeerAuthentications(reader, next.Mesh.RootNamespace, prev.peerAuthn)
	}
	if rebuild[IndexRequestAuthn] {
		next.requestAuthn = buildRequestAuthn(reader)
	}
	for name := range rebuild {
		next.Rebuilt = append(next.Rebuilt, name)
	}
	u.finish()
	slices.Sort(next.Rebuilt)
	next.BuiltAt = time.Now()
	next.BuildDuration = time.Since(start)
	return &next, res
}

type updater struct {
	prev, next *PushContext
	reader     ConfigReader
	m          *mesh.Config
	r          *resolver
	res        *UpdateResult

	services, bySource, byNS *cowmap.Builder[[]*Service]
	endpoints                *cowmap.Builder[*ServiceEndpoints]
	podRefs                  *cowmap.Builder[[]string]
	byUID                    *cowmap.Builder[*Workload]
	byAddr                   *cowmap.Builder[[]string]
	byService                *cowmap.Builder[[]string]
	namespaces               *cowmap.Builder[*config.Config]
	credentials              *cowmap.Builder[*Credential]

	// affected services need their endpoints recomputed.
	affected map[string]*Service
	// reselect services need their selected workloads recomputed from scratch.
	reselect []*Service
	// nsEdits are pending changes to servicesByNamespace, by namespace.
	nsEdits map[string]*nsEdit
	// allRemoved and allAdded are what changed sources produced before and produce now (some added
	// stale after a later change to the same source), for the sorted list of every service.
	allRemoved, allAdded []*Service
}

func (u *updater) editServices() {
	if u.services == nil {
		u.services, u.bySource, u.byNS = u.prev.services.Edit(), u.prev.servicesBySource.Edit(), u.prev.servicesByNamespace.Edit()
	}
}

func (u *updater) editEndpoints() {
	if u.endpoints == nil {
		u.endpoints, u.podRefs = u.prev.endpoints.Edit(), u.prev.podRefs.Edit()
	}
}

// setEndpoints replaces (or, with nil, removes) a service's endpoints and keeps the pod reference index in step.
func (u *updater) setEndpoints(key, ns string, eps *ServiceEndpoints) {
	var oldRefs, newRefs []string
	if old, ok := u.endpoints.Get(key); ok {
		oldRefs = old.podRefs
	}
	if eps == nil {
		u.endpoints.Delete(key)
	} else {
		u.endpoints.Set(key, eps)
		newRefs = eps.podRefs
	}
	for _, pod := range oldRefs {
		if _, still := slices.BinarySearch(newRefs, pod); !still {
			ref := ns + "/" + pod
			list, _ := u.podRefs.Get(ref)
			if list = removeSorted(list, key); len(list) == 0 {
				u.podRefs.Delete(ref)
			} else {
				u.podRefs.Set(ref, list)
			}
		}
	}
	for _, pod := range newRefs {
		if _, had := slices.BinarySearch(oldRefs, pod); !had {
			ref := ns + "/" + pod
			list, _ := u.podRefs.Get(ref)
			u.podRefs.Set(ref, insertSorted(list, key))
		}
	}
}

func (u *updater) editWorkloads() {
	if u.byUID == nil {
		u.byUID, u.byAddr, u.byService = u.prev.workloads.byUID.Edit(), u.prev.workloads.byAddress.Edit(), u.prev.workloads.byService.Edit()
	}
}

// serviceChanged replaces what one Service or ServiceEntry contributes.
func (u *updater) serviceChanged(key config.Key) {
	u.editServices()
	u.editEndpoints()
	u.editWorkloads()
	src := key.String()
	old, _ := u.bySource.Get(src)
	var fresh []*Service
	if c := u.reader.Get(key); c != nil {
		fresh = convertServices(c, u.m, u.namespace)
	}
	if len(fresh) > 0 {
		u.bySource.Set(src, fresh)
	} else {
		u.bySource.Delete(src)
	}
	touchedHosts := map[string]bool{}
	for _, s := range old {
		touchedHosts[s.Hostname] = true
	}
	for _, s := range fresh {
		touchedHosts[s.Hostname] = true
	}
	for h := range touchedHosts {
		list, _ := u.services.Get(h)
		list = slices.DeleteFunc(slices.Clone(list), func(s *Service) bool { return s.Source == key })
		for _, s := range fresh {
			if s.Hostname == h {
				list = append(list, s)
			}
		}
		if len(list) == 0 {
			u.services.Delete(h)
		} else {
			slices.SortFunc(list, CompareServices)
			u.services.Set(h, list)
		}
	}
	u.editNamespaceList(key, old, fresh)
	// A key's endpoints and workloads are those of the service served for it (servedPerKey): another
	// ServiceEntry of the namespace naming the same host neither replaces nor, when it goes, removes them.
	keys := map[string]string{} // key → namespace
	for _, s := range old {
		keys[s.Key()] = s.Namespace
	}
	for _, s := range fresh {
		keys[s.Key()] = s.Namespace
	}
	for key, ns := range keys {
		if served := u.serviceByKey(key); served != nil {
			u.affected[key] = served
			u.reselect = append(u.reselect, served)
			continue
		}
		u.setEndpoints(key, ns, nil)
		u.byService.Delete(key)
		delete(u.affected, key)
		u.res.ServicesUpdated[key] = struct{}{}
	}
	u.allRemoved = append(u.allRemoved, old...)
	u.allAdded = append(u.allAdded, fresh...)
	u.addRebuilt(IndexServices)
}

// nsEdit holds the pending changes to one namespace's service list. They are merged into the list once,
// when it is read or the snapshot is finished, so a batch costs one pass over the list, not a sort per change.
type nsEdit struct {
	removed []*Service // what changed sources produced before; some may be pending adds, not in the list
	added   []*Service // what they produce now; a later change to the same source makes some stale
}

// editNamespaceList records that source key now produces fresh instead of old.
func (u *updater) editNamespaceList(key config.Key, old, fresh []*Service) {
	e := u.nsEdits[key.Namespace]
	if e == nil {
		e = &nsEdit{}
		u.nsEdits[key.Namespace] = e
	}
	e.removed = append(e.removed, old...)
	e.added = append(e.added, fresh...)
}

// flushNamespace merges the pending edits of ns into its service list.
func (u *updater) flushNamespace(ns string) {
	e := u.nsEdits[ns]
	if e == nil {
		return
	}
	delete(u.nsEdits, ns)
	list, _ := u.byNS.Get(ns)
	out := replaceSorted(list, e.removed, u.current(e.added), compareByHostname)
	if len(out) == 0 {
		u.byNS.Delete(ns)
	} else {
		u.byNS.Set(ns, out)
	}
}

// current keeps the services whose source still produces them (a later change in the batch replaced the others).
func (u *updater) current(added []*Service) []*Service {
	return slices.DeleteFunc(added, func(s *Service) bool {
		cur, _ := u.bySource.Get(s.Source.String())
		return !slices.Contains(cur, s)
	})
}

// replaceSorted returns list, sorted by cmp, without removed and with added, in one pass that copies the
// runs between changes whole. Removed services missing from list are ignored. list is not modified; added
// is sorted in place.
func replaceSorted(list, removed, added []*Service, cmp func(a, b *Service) int) []*Service {
	drop := make([]int, 0, len(removed))
	for _, s := range removed {
		i, _ := slices.BinarySearchFunc(list, s, cmp)
		for ; i < len(list) && cmp(list[i], s) == 0; i++ {
			if list[i] == s {
				drop = append(drop, i)
				break
			}
		}
	}
	slices.Sort(drop)
	drop = slices.Compact(drop)
	slices.SortFunc(added, cmp)
	out := make([]*Service, 0, len(list)-len(drop)+len(added))
	next := 0
	copyUpTo := func(end int) {
		for len(drop) > 0 && drop[0] < end {
			out = append(out, list[next:drop[0]]...)
			next, drop = drop[0]+1, drop[1:]
		}
		out = append(out, list[next:end]...)
		next = end
	}
	for _, s := range added {
		i, _ := slices.BinarySearchFunc(list, s, cmp)
		copyUpTo(i)
		out = append(out, s)
	}
	copyUpTo(len(list))
	return out
}

// workload reads through pending workload edits.
func (u *updater) workload(k config.Key) *Workload {
	uid := WorkloadUID(u.m.ClusterID, k)
	if u.byUID != nil {
		w, _ := u.byUID.Get(uid)
		return w
	}
	w, _ := u.prev.workloads.byUID.Get(uid)
	return w
}

func (u *updater) servicesFromSource(key config.Key) []*Service {
	if u.bySource != nil {
		s, _ := u.bySource.Get(key.String())
		return s
	}
	s, _ := u.prev.servicesBySource.Get(key.String())
	return s
}

func (u *updater) servicesInNamespace(ns string) []*Service {
	if u.byNS != nil {
		u.flushNamespace(ns)
		s, _ := u.byNS.Get(ns)
		return s
	}
	s, _ := u.prev.servicesByNamespace.Get(ns)
	return s
}

func (u *updater) sliceChanged(ch Change) {
	for _, c := range []*config.Config{ch.Old, ch.New} {
		if c == nil {
			continue
		}
		name := c.Spec.(*discoveryv1.EndpointSlice).Labels[discoveryv1.LabelServiceName]
		for _, s := range u.servicesFromSource(config.Key{Kind: config.Service, Namespace: c.Namespace, Name: name}) {
			if served := u.serviceByKey(s.Key()); served != nil {
				u.affected[s.Key()] = served
			}
		}
	}
}

// workloadChanged handles a Pod or WorkloadEntry: its workload entry, and the services that select it
// before or after the change.
func (u *updater) workloadChanged(ch Change) {
	u.editWorkloads()
	uid := WorkloadUID(u.m.ClusterID, ch.Key)
	oldW, _ := u.byUID.Get(uid)
	var newW *Workload
	if c := u.reader.Get(ch.Key); c != nil {
		newW = workloadFromConfig(c, u.r)
	}
	u.replaceWorkload(uid, oldW, newW)
	// Services selecting the object before or after (by labels of the config objects, since a pod without IP
	// has no workload but may still have been one).
	var labelSets []map[string]string
	for _, c := range []*config.Config{ch.Old, ch.New} {
		if c != nil {
			labelSets = append(labelSets, workloadLabels(c))
		}
	}
	if ch.Key.Kind == config.Pod {
		refs, _ := u.prev.podRefs.Get(ch.Key.Namespace + "/" + ch.Key.Name)
		if u.podRefs != nil {
			refs, _ = u.podRefs.Get(ch.Key.Namespace + "/" + ch.Key.Name)
		}
		for _, key := range refs {
			if svc := u.serviceByKey(key); svc != nil {
				u.affected[key] = svc
			}
		}
	}
	for _, s := range u.servicesInNamespace(ch.Key.Namespace) {
		if s.Selector == nil || (s.Source.Kind == config.Service && len(s.Selector) == 0) {
			continue
		}
		for _, l := range labelSets {
			if labelsMatch(s.Selector, l) {
				if u.serviceByKey(s.Key()) != s {
					break // another service of the namespace is served for its host (servedPerKey)
				}
				u.affected[s.Key()] = s
				u.updateMembership(s, uid, newW)
				break
			}
		}
	}
}

func workloadLabels(c *config.Config) map[string]string {
	if we, ok := c.Spec.(*networking.WorkloadEntry); ok {
		return workloadEntryLabels(c, we)
	}
	return c.Labels
}

func (u *updater) replaceWorkload(uid string, oldW, newW *Workload) {
	if oldW != nil {
		for _, a := range oldW.Addresses {
			key := addressKey(oldW.Network, a)
			list, _ := u.byAddr.Get(key)
			if list = removeSorted(list, uid); len(list) == 0 {
				u.byAddr.Delete(key)
			} else {
				u.byAddr.Set(key, list)
			}
		}
	}
	if newW == nil {
		if oldW != nil {
			u.byUID.Delete(uid)
			u.res.WorkloadsUpdated[uid] = struct{}{}
		}
		return
	}
	u.byUID.Set(uid, newW)
	for _, a := range newW.Addresses {
		list, _ := u.byAddr.Get(addressKey(newW.Network, a))
		u.byAddr.Set(addressKey(newW.Network, a), insertSorted(list, uid))
	}
	if oldW == nil || !reflect.DeepEqual(oldW, newW) {
		u.res.WorkloadsUpdated[uid] = struct{}{}
	}
}

func (u *updater) updateMembership(s *Service, uid string, w *Workload) {
	list, _ := u.byService.Get(s.Key())
	if w != nil && s.selects(w) {
		list = insertSorted(list, uid)
	} else {
		list = removeSorted(list, uid)
	}
	if len(list) == 0 {
		u.byService.Delete(s.Key())
	} else {
		u.byService.Set(s.Key(), list)
	}
}

// nodeChanged refreshes the locality of the workloads on a node. It scans workloads: node label changes are rare.
func (u *updater) nodeChanged(node string) {
	u.editWorkloads()
	var onNode []*Workload
	for _, w := range u.prev.workloads.byUID.All() {
		if w.NodeName == node {
			onNode = append(onNode, w)
		}
	}
	for _, w := range onNode {
		c := u.reader.Get(w.Source)
		if c == nil {
			continue
		}
		u.workloadChanged(Change{Key: w.Source, Old: c, New: c})
	}
	// Endpoints that name the node without a known pod take their locality from it too.
	for key, se := range u.prev.endpoints.All() {
		if _, done := u.affected[key]; done {
			continue
		}
	ports:
		for _, eps := range se.ByPort {
			for _, ep := range eps {
				if ep.NodeName == node {
					if svc := u.serviceByKey(key); svc != nil {
						u.affected[key] = svc
					}
					break ports
				}
			}
		}
	}
}

// serviceByKey finds a service by namespace/hostname as of the snapshot being built.
func (u *updater) serviceByKey(key string) *Service {
	ns, host, _ := strings.Cut(key, "/")
	var list []*Service
	if u.services != nil {
		list, _ = u.services.Get(host)
	} else {
		list, _ = u.prev.services.Get(host)
	}
	for _, s := range list {
		if s.Namespace == ns {
			return s
		}
	}
	return nil
}

func (u *updater) namespaceChanged(name string) {
	if u.namespaces == nil {
		u.namespaces = u.prev.namespaces.Edit()
	}
	if c := u.reader.Get(config.Key{Kind: config.Namespace, Name: name}); c != nil {
		u.namespaces.Set(name, c)
	} else {
		u.namespaces.Delete(name)
	}
	u.addRebuilt(IndexNamespaces)
	u.reconvertServiceEntries(name)
}

func (u *updater) addRebuilt(name string) {
	if !slices.Contains(u.next.Rebuilt, name) {
		u.next.Rebuilt = append(u.next.Rebuilt, name)
	}
}

// finish recomputes endpoints of affected services and publishes the edited maps.
func (u *updater) finish() {
	// The workloads of a namespace and their label index are gathered once per namespace, not per service.
	type nsIndex struct {
		workloads []*Workload
		byLabel   map[labelPair][]*Workload
	}
	namespaces := map[string]*nsIndex{}
	for _, s := range u.reselect {
		u.editWorkloads()
		idx := namespaces[s.Namespace]
		if idx == nil {
			idx = &nsIndex{byLabel: map[labelPair][]*Workload{}}
			for _, kind := range []config.Kind{config.Pod, config.WorkloadEntry} {
				for _, c := range u.reader.ListNamespace(kind, s.Namespace) {
					if w, ok := u.byUID.Get(WorkloadUID(u.m.ClusterID, c.Key)); ok {
						idx.workloads = append(idx.workloads, w)
						for k, v := range w.Labels {
							idx.byLabel[labelPair{k, v}] = append(idx.byLabel[labelPair{k, v}], w)
						}
					}
				}
			}
			namespaces[s.Namespace] = idx
		}
		if uids := selectWorkloads(s, idx.workloads, idx.byLabel); len(uids) > 0 {
			u.byService.Set(s.Key(), uids)
		} else {
			u.byService.Delete(s.Key())
		}
	}
	if len(u.affected) > 0 {
		u.editEndpoints()
		// Endpoints read only the store and the workload edits, which no longer change: compute them in
		// parallel, as a full build does, then apply them one by one.
		affected := slices.Collect(maps.Values(u.affected))
		computed := make([]*ServiceEndpoints, len(affected))
		parallel(len(affected), func() func(int) {
			r := newResolver(u.reader, u.m)
			r.workload = u.workload
			return func(i int) { computed[i] = computeEndpoints(affected[i], r) }
		})
		accountsChanged := false
		for i, s := range affected {
			key, eps := s.Key(), computed[i]
			old, ok := u.endpoints.Get(key)
			if !ok || !slices.Equal(old.ServiceAccounts, eps.ServiceAccounts) {
				accountsChanged = true
			}
			if ok && endpointsEqual(old, eps) {
				if !slices.Equal(old.podRefs, eps.podRefs) || !slices.Equal(old.WaitingForPods, eps.WaitingForPods) {
					// Only the pods it waits for changed (a cluster's slice named a pod not yet known):
					// recorded, so the pod's arrival refreshes the service; nothing to push now.
					u.setEndpoints(key, s.Namespace, eps)
				}
				continue
			}
			u.setEndpoints(key, s.Namespace, eps)
			u.res.ServicesUpdated[key] = struct{}{}
			var wasMesh map[uint32]bool
			if ok {
				wasMesh = old.meshPorts
			}
			if s.Resolution == Passthrough && !s.MeshExternal && !maps.Equal(wasMesh, eps.meshPorts) {
				// Whether every endpoint accepts mTLS decides the TLS of the service's original-destination
				// clusters, which carry no endpoints: their proxies need CDS, not an endpoint update.
				u.res.Full = true
			}
			if s.ListensOnEndpoints() && !sameListenerAddresses(s, old, eps) {
				if u.res.AddressesUpdated == nil {
					u.res.AddressesUpdated = map[string]struct{}{}
					u.next.endpointAddresses = &accountsGeneration{}
				}
				u.res.AddressesUpdated[key] = struct{}{}
			}
		}
		if accountsChanged {
			// Clients check the servers' identities against these (SANs in their clusters): as in istiod,
			// a change is a full push, not an endpoint update.
			u.next.accounts = &accountsGeneration{}
			u.res.Full = true
		}
	}
	if u.services != nil {
		for ns := range u.nsEdits {
			u.flushNamespace(ns)
		}
		// The sorted list of every service is derived from the previous one if that was computed.
		u.next.sortedServices = &lazyServiceList{}
		if prev := u.prev.sortedServices; prev.ready.Load() {
			u.next.sortedServices.fromBase, u.next.sortedServices.base = true, prev.list
			u.next.sortedServices.removed, u.next.sortedServices.added = u.allRemoved, u.current(u.allAdded)
		}
		u.next.services, u.next.servicesBySource, u.next.servicesByNamespace = u.services.Map(), u.bySource.Map(), u.byNS.Map()
	}
	if u.endpoints != nil {
		u.next.endpoints, u.next.podRefs = u.endpoints.Map(), u.podRefs.Map()
	}
	if u.byUID != nil {
		u.next.workloads = &workloadIndex{byUID: u.byUID.Map(), byAddress: u.byAddr.Map(), byService: u.byService.Map()}
	}
	if u.namespaces != nil {
		u.next.namespaces = u.namespaces.Map()
	}
	if u.credentials != nil {
		u.next.credentials = u.credentials.Map()
	}
}

// sameListenerAddresses reports whether a and b (nil: none) hold the same addresses on every port of svc that
// gets a listener per endpoint address: all a sidecar's listeners read of them. Health, weights and labels
// change endpoints only.
func sameListenerAddresses(svc *Service, a, b *ServiceEndpoints) bool {
	for _, p := range svc.Ports {
		if !svc.ListensOnEndpointPort(p) {
			continue
		}
		var ea, eb []*Endpoint
		if a != nil {
			ea = a.ByPort[p.Port]
		}
		if b != nil {
			eb = b.ByPort[p.Port]
		}
		if !slices.EqualFunc(ea, eb, func(x, y *Endpoint) bool { return x.Address == y.Address }) {
			return false
		}
	}
	return true
}

// endpointsEqual reports whether a and b serve the same endpoints (the pods they refer to aside).
func endpointsEqual(a, b *ServiceEndpoints) bool {
	if len(a.ByPort) != len(b.ByPort) || !slices.Equal(a.ServiceAccounts, b.ServiceAccounts) {
		return false
	}
	for port, ea := range a.ByPort {
		eb, ok := b.ByPort[port]
		if !ok || len(ea) != len(eb) {
			return false
		}
		for i := range ea {
			x, y := ea[i], eb[i]
			if x.Address != y.Address || x.Port != y.Port || x.Health != y.Health || x.Weight != y.Weight ||
				x.Locality != y.Locality || x.Network != y.Network || x.TLSMode != y.TLSMode ||
				x.ServiceAccount != y.ServiceAccount || x.NodeName != y.NodeName || !maps.Equal(x.Labels, y.Labels) {
				return false
			}
		}
	}
	return true
}

// servedPerKey returns, of services, the one served for each key (namespace/hostname): the first in
// CompareServices order. byHost lists the same services by hostname. services itself when no two share a key.
func servedPerKey(services []*Service, byHost map[string][]*Service) []*Service {
	var hidden map[*Service]bool
	for _, list := range byHost {
		if len(list) < 2 {
			continue
		}
		first := map[string]*Service{}
		for _, s := range list {
			cur, ok := first[s.Namespace]
			if !ok {
				first[s.Namespace] = s
				continue
			}
			if hidden == nil {
				hidden = map[*Service]bool{}
			}
			if CompareServices(s, cur) < 0 {
				first[s.Namespace] = s
				hidden[cur] = true
			} else {
				hidden[s] = true
			}
		}
	}
	if hidden == nil {
		return services
	}
	return slices.DeleteFunc(services, func(s *Service) bool { return hidden[s] })
}
