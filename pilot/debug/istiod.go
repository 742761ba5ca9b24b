package debug

import (
	"net/http"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sextantmesh/sextant/pkg/buildinfo"
)

// istiodPath is one of istiod's debug paths (pilot/pkg/xds/debug.go) that Sextant does not serve under that
// name: its answer is a 404 that names Sextant's view of the same thing, so an istiod user is not left
// guessing.
type istiodPath struct {
	Path string `json:"path"`
	// See is Sextant's equivalent path, empty when there is none.
	See  string `json:"see,omitempty"`
	Note string `json:"note"`
}

var istiodPaths = []istiodPath{
	{"/debug/connections", "/debug/adsz", "the connected proxies, with their subscriptions"},
	{"/debug/instancesz", "/debug/endpointz", "the endpoints (service instances) of every service; ?service=NAMESPACE/HOSTNAME"},
	{"/debug/endpointShardz", "/debug/endpointz", "the endpoints of every service; Sextant keeps no shards"},
	{"/debug/edsz", "/debug/config_dump", "a proxy's EDS as generated now: ?proxyID=POD.NAMESPACE&types=eds"},
	{"/debug/ecdsz", "/debug/config_dump", "a proxy's config as generated now: ?proxyID=POD.NAMESPACE (Sextant serves no ECDS)"},
	{"/debug/ndsz", "/debug/config_dump", "a proxy's config as generated now: ?proxyID=POD.NAMESPACE (Sextant serves no NDS)"},
	{"/debug/sidecarz", "/debug/config_dump", "what a proxy's Sidecar scope lets it see, as the config it gets: ?proxyID=POD.NAMESPACE"},
	{"/debug/resourcesz", "/debug/adsz", "each connection's subscriptions"},
	{"/debug/ambientz", "/debug/config_dump", "a ztunnel's workloads and policies: ?proxyID=POD.NAMESPACE&types=wds,authorization"},
	{"/debug/pushcontext", "/debug/push_status", "the current snapshot: version, counts, rebuilt indexes, rejected config"},
	{"/debug/krtz", "/debug/push_status", "Sextant has no krt collections; the snapshot's state is here"},
	{"/debug/cachez", "/debug/pushz", "Sextant's caches are not listed; recent pushes and their durations are here"},
	{"/debug/telemetryz", "/debug/configz", "the Telemetry objects as read: ?kind=Telemetry"},
	{"/debug/list", "/debug", "the list of debug views"},
	{"/debug/force_disconnect", "", "Sextant does not disconnect a proxy on request; proxies reconnect after --max-connection-age"},
	{"/debug/inject", "", "Sextant does not inject sidecars: use istiod's injector or istioctl kube-inject"},
	{"/debug/clusterz", "", "Sextant reads one cluster (--kubeconfig or in-cluster); it has no remote clusters"},
	{"/debug/networkz", "", "Sextant lists no cross-network gateways"},
	{"/debug/mcsz", "", "Sextant does not read Kubernetes MCS services"},
}

// handleIstiodPath answers one of istiod's paths with a pointer to Sextant's equivalent.
func handleIstiodPath(p istiodPath) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		msg := "istiod's " + p.Path + " is not served by Sextant"
		if p.See != "" {
			msg += "; see " + p.See + ": " + p.Note
		} else {
			msg += ": " + p.Note
		}
		writeJSON(w, http.StatusNotFound, map[string]string{"error": msg, "see": p.See})
	}
}

// handleMesh serves the mesh config in force, as istiod's /debug/mesh does: the MeshConfig as protojson,
// defaults applied.
func (d *Debug) handleMesh(w http.ResponseWriter, _ *http.Request) {
	m := d.src.Mesh
	if ps := d.src.Pipeline.Current(); ps != nil && ps.Mesh != nil {
		m = ps.Mesh
	}
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(m.GetSpec())
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(b, '\n'))
}

// handleVersion serves the build, as istiod's /version does, open like /metrics: the module version and the
// commit go build recorded.
func handleVersion(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, buildinfo.Read())
}
