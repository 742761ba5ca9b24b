package debug

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/envoy"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/push"
	"github.com/sextantmesh/sextant/pilot/store"
	"github.com/sextantmesh/sextant/pilot/xds"
	"github.com/sextantmesh/sextant/pilot/ztunnel"
	"github.com/sextantmesh/sextant/pkg/loglimit"
)

// Sources are the parts of the discovery server the views read. Only Store, Pipeline and XDS are required.
type Sources struct {
	Store    *store.Store
	Pipeline *push.Pipeline
	XDS      *xds.Server
	// Generators by type URL, as registered with XDS: config_dump runs them.
	Generators map[string]model.Generator
	Mesh       *mesh.Config
	// Rejected returns every rejected config document or object.
	Rejected func() []*config.Error
	// Warnings returns every accepted field Sextant does not implement, each marked Warning (optional).
	Warnings func() []*config.Error
	// Collectors are further metrics of the server's parts, registered with the rest (optional).
	Collectors []prometheus.Collector
	Logger     *slog.Logger
	// Access guards /debug/* (nil: open to every caller, for tests that need no guard).
	Access *Access
}

// Debug serves /metrics, /debug/pprof/ and the JSON debug views, and tracks distribution.
type Debug struct {
	src      Sources
	metrics  *metrics
	tracker  *tracker
	registry *prometheus.Registry
}

// New creates the views and hooks them up: it becomes the XDS server's Observer and subscribes to the
// pipeline and the store. Call it before the sources load and before XDS serves streams.
func New(src Sources) *Debug {
	if src.Logger == nil {
		src.Logger = slog.Default()
	}
	if src.Mesh == nil {
		src.Mesh = mesh.Default()
	}
	if src.Rejected == nil {
		src.Rejected = func() []*config.Error { return nil }
	}
	m := newMetrics()
	d := &Debug{src: src, metrics: m, tracker: newTracker(m)}
	d.registry = newRegistry(m, src)
	src.XDS.SetObserver(d.tracker)
	src.Pipeline.Subscribe(d.tracker.onPush)
	// Through the pipeline, not a store handler of its own: a handler after the pipeline's that asked for
	// the current snapshot could be handed the one with the change, under load, and the change then waited
	// for two more snapshots to be placed in one.
	src.Pipeline.WatchChanges(d.tracker.onStoreEvent)
	return d
}

type endpoint struct {
	Path        string `json:"path"`
	Description string `json:"description"`
	handler     http.HandlerFunc
}

func (d *Debug) endpoints() []endpoint {
	// Every JSON view is bounded (MaxResponseBytes); lists are paged with ?offset=&limit= (page.go).
	return []endpoint{
		{"/debug/syncz", "each connected proxy: per type the last sent and ACKed version and nonce, and the NACK reason", d.handleSyncz},
		{"/debug/adsz", "connections and their subscriptions", d.handleAdsz},
		{"/debug/configz", "every config object with its source and resourceVersion; ?kind=&namespace=", d.handleConfigz},
		{"/debug/registryz", "services in the current snapshot", d.handleRegistryz},
		{"/debug/endpointz", "endpoints by service; ?service=NAMESPACE/HOSTNAME", d.handleEndpointz},
		{"/debug/push_status",
			"the current snapshot: version, build time, counts, rebuilt indexes, a page (?offset=&limit=) of rejected config and warnings",
			d.handlePushStatus},
		{"/debug/pushz", "recent pushes with durations, and the convergence histogram", d.handlePushz},
		{"/debug/config_dump",
			"generated config for a connected proxy; ?proxyID=POD.NAMESPACE&types=cds,lds; paged over resources: ?offset=&limit=",
			d.handleConfigDump},
		{"/debug/authorizationz", "authorization policies per namespace", d.handleAuthorizationz},
		{"/debug/config_errors", "rejected config, then fields accepted but not implemented (warning: true), with file, object and field; " +
			"paged: ?offset=&limit=, X-Total-Count and X-Next-Offset headers", d.handleConfigErrors},
		{"/debug/distribution", "which proxies run an object's current generation; ?kind=&name=&namespace=", d.handleDistribution},
		{"/debug/mesh", "the mesh config in force (MeshConfig, defaults applied), as istiod's /debug/mesh", d.handleMesh},
		{"/debug/ui", "dashboard (HTML)", d.handleUI},
		{"/debug/pprof/", "Go profiles", pprof.Index},
		{"/metrics", "Prometheus metrics", nil},
	}
}

// Register adds every handler to mux: /metrics and /version open, every /debug path behind Sources.Access;
// istiod's debug paths that Sextant serves under another name answer 404 naming it.
func (d *Debug) Register(mux *http.ServeMux) {
	mux.Handle("/metrics", promhttp.HandlerFor(d.registry, promhttp.HandlerOpts{Registry: d.registry}))
	guard := func(path string, h http.HandlerFunc) { mux.Handle(path, d.src.Access.wrap(h)) }
	for _, e := range d.endpoints() {
		if e.handler != nil {
			guard(e.Path, e.handler)
		}
	}
	guard("/debug/pprof/cmdline", pprof.Cmdline)
	guard("/debug/pprof/profile", pprof.Profile)
	guard("/debug/pprof/symbol", pprof.Symbol)
	guard("/debug/pprof/trace", pprof.Trace)
	guard("/debug", d.handleIndex)
	guard("/debug/{$}", d.handleIndex)
	for _, p := range istiodPaths {
		guard(p.Path, handleIstiodPath(p))
	}
	// Any other /debug path answers 404 to the authorized only, so the guard says first what it needs.
	guard("/debug/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no debug view "+loglimit.Text(r.URL.Path)+"; GET /debug lists them")
	})
	mux.HandleFunc("/version", handleVersion)
}

func (d *Debug) handleIndex(w http.ResponseWriter, _ *http.Request) {
	eps := d.endpoints()
	slices.SortFunc(eps, func(a, b endpoint) int { return strings.Compare(a.Path, b.Path) })
	writeJSON(w, http.StatusOK, map[string]any{"endpoints": eps})
}

// writeJSON writes v indented. Maps are sorted by encoding/json and every list is sorted by its builder,
// so the output is stable.
func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

var shortTypes = map[string]string{
	envoy.ClusterType:         "cds",
	envoy.EndpointType:        "eds",
	envoy.ListenerType:        "lds",
	envoy.RouteType:           "rds",
	envoy.VirtualHostType:     "vhds",
	envoy.SecretType:          "sds",
	ztunnel.AddressType:       "wds",
	ztunnel.AuthorizationType: "authorization",
}

// ShortType names a type URL as operators do: cds, eds, lds, rds, vhds, sds, wds (istio.workload.Address),
// authorization; other types keep their URL.
func ShortType(typeURL string) string {
	if s, ok := shortTypes[typeURL]; ok {
		return s
	}
	return typeURL
}

// TypeURL resolves a short name (or a type URL) to a type URL.
func TypeURL(name string) string {
	for url, s := range shortTypes {
		if strings.EqualFold(s, name) {
			return url
		}
	}
	return name
}
