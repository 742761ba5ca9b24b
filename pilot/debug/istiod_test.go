package debug_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/sextantmesh/sextant/tests/debugtest"
)

// istiod's debug paths that Sextant does not serve answer 404 naming Sextant's view of the same thing, which
// it serves; /debug/mesh and /version are served; another unknown path points at the index.
func TestIstiodPathsPointToSextantViews(t *testing.T) {
	env := debugtest.Start(t, debugtest.Scenario())
	var index struct{ Endpoints []struct{ Path string } }
	env.GetJSON(t, "/debug", &index)
	served := map[string]bool{"/debug": true}
	for _, e := range index.Endpoints {
		served[e.Path] = true
	}
	// istiod's debug paths (pilot/pkg/xds/debug.go), less pprof's.
	istiod := []string{"/debug/force_disconnect", "/debug/ecdsz", "/debug/edsz", "/debug/ndsz", "/debug/adsz", "/debug/syncz",
		"/debug/registryz", "/debug/endpointz", "/debug/endpointShardz", "/debug/cachez", "/debug/configz", "/debug/sidecarz",
		"/debug/resourcesz", "/debug/instancesz", "/debug/ambientz", "/debug/krtz", "/debug/authorizationz", "/debug/telemetryz",
		"/debug/config_dump", "/debug/push_status", "/debug/pushcontext", "/debug/connections", "/debug/inject", "/debug/mesh",
		"/debug/clusterz", "/debug/networkz", "/debug/mcsz", "/debug/list"}
	for _, path := range istiod {
		if served[path] {
			continue
		}
		code, body := env.Get(t, path)
		var answer struct{ Error, See string }
		if code != http.StatusNotFound || json.Unmarshal(body, &answer) != nil || !strings.Contains(answer.Error, "istiod's "+path) {
			t.Errorf("GET %s = %d %s, want a 404 that says what Sextant has instead", path, code, body)
			continue
		}
		if answer.See != "" && (!served[answer.See] || !strings.Contains(answer.Error, "see "+answer.See)) {
			t.Errorf("%s points to %s, which Sextant does not serve, or does not say so: %s", path, answer.See, body)
		}
		if path == "/debug/connections" && answer.See != "/debug/adsz" || path == "/debug/instancesz" && answer.See != "/debug/endpointz" {
			t.Errorf("%s points to %q", path, answer.See)
		}
	}

	var m struct {
		RootNamespace string
		TrustDomain   string
	}
	env.GetJSON(t, "/debug/mesh", &m)
	if m.RootNamespace != "istio-system" || m.TrustDomain != "cluster.local" {
		t.Errorf("/debug/mesh = %+v", m)
	}
	var v struct{ Version, GoVersion string }
	env.GetJSON(t, "/version", &v)
	if v.Version == "" || !strings.HasPrefix(v.GoVersion, "go") {
		t.Errorf("/version = %+v", v)
	}
	if code, body := env.Get(t, "/debug/nonesuch"); code != http.StatusNotFound || !strings.Contains(string(body), "GET /debug lists them") {
		t.Errorf("an unknown path: %d %s", code, body)
	}
}
