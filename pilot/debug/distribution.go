package debug

import (
	"net/http"
	"slices"
	"strings"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/xds"
)

// Distribution states of one proxy for one object.
const (
	Acked   = "ACKED"   // every watched type runs a snapshot at or after the object's
	Pending = "PENDING" // not yet
	NACKed  = "NACKED"  // the proxy rejected config and runs something older
)

// ObjectRef names a config object.
type ObjectRef struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// ProxyDistribution is one relevant proxy's state for an object.
type ProxyDistribution struct {
	ID         string `json:"id"`
	Connection string `json:"connection"`
	Type       string `json:"type"`
	State      string `json:"state"`
	Reason     string `json:"reason,omitempty"`
}

// Distribution is /debug/distribution: how far an object's current generation has reached.
type Distribution struct {
	Object          ObjectRef `json:"object"`
	Exists          bool      `json:"exists"`
	Generation      int64     `json:"generation"`
	ResourceVersion string    `json:"resourceVersion"`
	// SnapshotVersion is the first snapshot containing this generation (or the deletion); 0 while the
	// change is still being debounced or built.
	SnapshotVersion uint64 `json:"snapshotVersion"`
	CurrentVersion  uint64 `json:"currentVersion"`
	// Proxies is a page (?offset=&limit=) of the relevant proxies, ProxiesPage says which; the counts
	// cover them all.
	Proxies     []ProxyDistribution `json:"proxies"`
	ProxiesPage Page                `json:"proxiesPage"`
	Acked       int                 `json:"acked"`
	Pending     int                 `json:"pending"`
	NACKed      int                 `json:"nacked"`
}

func (d *Debug) handleDistribution(w http.ResponseWriter, r *http.Request) {
	pq, err := parsePage(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	q := r.URL.Query()
	kind, name, ns := q.Get("kind"), q.Get("name"), q.Get("namespace")
	if kind == "" || name == "" {
		writeError(w, http.StatusBadRequest, "kind and name are required; namespace for namespaced kinds")
		return
	}
	ki, ok := lookupKind(kind)
	if !ok {
		writeError(w, http.StatusBadRequest, "unknown kind "+clip(kind))
		return
	}
	if !ki.Namespaced {
		ns = ""
	} else if ns == "" {
		ns = "default"
	}
	dist, ok := d.Distribution(config.Key{Kind: ki.Kind, Namespace: ns, Name: name})
	if !ok {
		writeError(w, http.StatusNotFound, "no such object: "+clip(config.Key{Kind: ki.Kind, Namespace: ns, Name: name}.String()))
		return
	}
	all := dist.Proxies
	dist.Proxies = []ProxyDistribution{}
	_, dist.ProxiesPage = pq.take(len(all), MaxResponseBytes-64<<10, func(i int) int {
		p := all[i]
		p.ID, p.Reason = clip(p.ID), clip(p.Reason)
		dist.Proxies = append(dist.Proxies, p)
		return encodedSize(p, 2)
	})
	dist.Proxies = dist.Proxies[:dist.ProxiesPage.Returned]
	setPageHeaders(w, r, dist.ProxiesPage)
	writeJSON(w, http.StatusOK, dist)
}

func lookupKind(s string) (config.KindInfo, bool) {
	for _, ki := range config.Kinds() {
		if strings.EqualFold(string(ki.Kind), s) || strings.EqualFold(ki.Plural, s) {
			return ki, true
		}
	}
	return config.KindInfo{}, false
}

// Distribution reports which connected proxies that depend on the object run its current generation. It
// returns false when the object neither exists nor was recently deleted.
func (d *Debug) Distribution(key config.Key) (Distribution, bool) {
	out := Distribution{Object: ObjectRef{Kind: string(key.Kind), Namespace: key.Namespace, Name: key.Name},
		Proxies: []ProxyDistribution{}}
	ps := d.src.Pipeline.Current()
	if ps != nil {
		out.CurrentVersion = ps.Version
	}
	cur := d.src.Store.Get(key)
	o, tracked := d.tracker.object(key)
	switch {
	case tracked:
	case cur != nil: // in the store before tracking began: part of the first snapshot
		o = objectState{key: key, exportTo: exportTo(cur), resourceVersion: cur.ResourceVersion, generation: cur.Generation, version: 1}
	default:
		return out, false
	}
	out.Exists = !o.deleted
	out.Generation, out.ResourceVersion, out.SnapshotVersion = o.generation, o.resourceVersion, o.version
	for _, c := range d.src.XDS.Connections() {
		if !d.dependsOn(c, key, o.exportTo, ps) {
			continue
		}
		pd := ProxyDistribution{ID: c.ProxyID, Connection: c.ID, Type: string(c.Type)}
		pd.State, pd.Reason = d.proxyState(c, o.version)
		switch pd.State {
		case Acked:
			out.Acked++
		case NACKed:
			out.NACKed++
		default:
			out.Pending++
		}
		out.Proxies = append(out.Proxies, pd)
	}
	slices.SortFunc(out.Proxies, func(a, b ProxyDistribution) int {
		if c := strings.Compare(a.ID, b.ID); c != 0 {
			return c
		}
		return strings.Compare(a.Connection, b.Connection)
	})
	return out, true
}

// proxyState decides whether a connection runs snapshot v or later for every type it watches. A type is
// current when the snapshot of its last ACKed response is at least v, or when no push between that snapshot
// and v concerned its subscription (the generator's PushFilter, else full pushes only).
func (d *Debug) proxyState(c xds.ConnectionStatus, v uint64) (string, string) {
	if v == 0 {
		return Pending, "the change is not in a snapshot yet"
	}
	tracked := d.tracker.connTypes(c.ID)
	proxy := d.tracker.proxy(c.ID)
	state, reasons := Acked, []string{}
	for i := range c.Watched {
		w := &c.Watched[i]
		gen := d.src.Generators[w.TypeURL]
		if gen == nil {
			continue // never served, never sent
		}
		ts := tracked[w.TypeURL]
		if ts.known && (ts.acked >= v || d.unaffected(proxy, gen, w, ts.acked, v)) {
			continue
		}
		if ts.nackReason != "" {
			state = NACKed
			reasons = append(reasons, ShortType(w.TypeURL)+": "+ts.nackReason)
			continue
		}
		if state == Acked {
			state = Pending
		}
	}
	if len(c.Watched) == 0 {
		return Pending, "no subscriptions yet"
	}
	return state, strings.Join(reasons, "; ")
}

// unaffected reports whether no push with a snapshot in (from, to] concerned w. A type that has never
// been ACKed (from == 0) is never unaffected.
func (d *Debug) unaffected(proxy *model.Proxy, gen model.Generator, w *model.WatchedResource, from, to uint64) bool {
	if from == 0 || proxy == nil {
		return false
	}
	reqs, complete := d.tracker.requestsBetween(from, to)
	if !complete {
		return false
	}
	filter, _ := gen.(model.PushFilter)
	for _, req := range reqs {
		if filter != nil {
			if filter.NeedsPush(proxy, w, req) {
				return false
			}
		} else if req.Full {
			return false
		}
	}
	return true
}

// ztunnelKinds are the kinds ztunnel's workload and authorization xDS is built from.
var ztunnelKinds = map[config.Kind]bool{
	config.Namespace: true, config.Service: true, config.Pod: true, config.Node: true, config.EndpointSlice: true,
	config.ServiceEntry: true, config.WorkloadEntry: true, config.AuthorizationPolicy: true, config.PeerAuthentication: true,
}

// dependsOn is the scope rule of distribution tracking. A proxy depends on an object when:
//   - it is a ztunnel and the object is of a kind ztunnel config is built from (ztunnel serves the node's
//     workloads in every namespace);
//   - the object is in the proxy's namespace or in the root namespace (mesh-wide config);
//   - the object is a Namespace and the proxy is in it, or a Node (localities reach everyone);
//   - the object is exported to the proxy's namespace: a Service or ServiceEntry whose services are
//     visible there, a VirtualService or DestinationRule whose exportTo includes it (default everywhere);
//   - the object is a Gateway and the proxy is a gateway (router).
//
// Over-approximating is harmless: a proxy no push concerned counts as ACKED at once (see proxyState).
func (d *Debug) dependsOn(c xds.ConnectionStatus, key config.Key, exportList []string, ps *model.PushContext) bool {
	root := d.src.Mesh.RootNamespace
	switch {
	case key.Kind == config.ProxyConfig:
		return false // agent-side only: no proxy's xDS depends on one
	case c.Type == model.Ztunnel:
		return ztunnelKinds[key.Kind]
	case key.Kind == config.Node:
		return true
	case key.Kind == config.Namespace:
		return key.Name == c.Namespace
	case key.Namespace == c.Namespace, key.Namespace == root:
		return true
	}
	switch key.Kind {
	case config.Gateway:
		return c.Type == model.Router
	case config.Service, config.ServiceEntry:
		if ps != nil {
			found := false
			for _, s := range ps.ServicesInNamespace(key.Namespace) {
				if s.Source == key {
					found = true
					if s.VisibleTo(c.Namespace) {
						return true
					}
				}
			}
			if found {
				return false
			}
		}
		return exportedTo(exportList, key.Namespace, c.Namespace)
	case config.VirtualService, config.DestinationRule:
		return exportedTo(exportList, key.Namespace, c.Namespace)
	case config.EndpointSlice, config.Pod, config.WorkloadEntry:
		return true // endpoints of services visible anywhere; EDS filtering settles who was concerned
	}
	return false
}

// exportTo returns a copy of cfg's export list, so that keeping it does not keep cfg.
func exportTo(cfg *config.Config) []string {
	if cfg == nil {
		return nil
	}
	switch s := cfg.Spec.(type) {
	case *networking.VirtualService:
		return slices.Clone(s.GetExportTo())
	case *networking.DestinationRule:
		return slices.Clone(s.GetExportTo())
	case *networking.ServiceEntry:
		return slices.Clone(s.GetExportTo())
	}
	if cfg.Kind != config.Service {
		return nil
	}
	if v := cfg.Annotations[model.ExportToAnnotation]; v != "" {
		return strings.Split(v, ",")
	}
	return nil
}

func exportedTo(list []string, owner, ns string) bool {
	if len(list) == 0 {
		return true
	}
	for _, e := range list {
		switch e = strings.TrimSpace(e); e {
		case "*", ns:
			return true
		case ".":
			if owner == ns {
				return true
			}
		}
	}
	return false
}
