package debug_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/debug"
	"github.com/sextantmesh/sextant/pilot/push"
	"github.com/sextantmesh/sextant/pilot/store"
	"github.com/sextantmesh/sextant/pilot/xds"
	"github.com/sextantmesh/sextant/tests/debugtest"
)

// A change the pipeline publishes before the store's later handlers have run (its goroutine is quick, the
// store's slow under load) is placed in the snapshot that holds it, not left "not in a snapshot yet" until
// two more snapshots come.
func TestDistributionPlacesAChangePublishedAtOnce(t *testing.T) {
	st := store.New()
	p := push.New(push.Options{Store: st})
	// The pipeline winning that race, every time: each change is published before the next handler runs.
	st.AddHandler(func(store.Event) { p.Flush() })
	srv := xds.NewServer(xds.Options{Pipeline: p})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	d := debug.New(debug.Sources{Store: st, Pipeline: p, XDS: srv})
	key := config.Key{Kind: config.VirtualService, Namespace: "bookinfo", Name: "reviews"}
	vs := func(gen int64) *config.Config {
		return &config.Config{Key: key, Generation: gen, ResourceVersion: "rv" + string(rune('0'+gen)),
			Spec: &networking.VirtualService{Hosts: []string{"reviews"}}}
	}
	st.Upsert(store.LayerFile, vs(1))
	p.Initialize()
	st.Upsert(store.LayerFile, vs(2))

	current := p.Current().Version
	dist, ok := d.Distribution(key)
	if !ok || dist.Generation != 2 || dist.SnapshotVersion != current || current < 2 {
		t.Fatalf("distribution %+v (found %v), want generation 2 in snapshot %d, the one that has it", dist, ok, current)
	}
}

// A ProxyConfig object is agent-side: no connected proxy's configuration depends on it, so its distribution
// names none, even proxies of its namespace, and waiting for it does not wait on them.
func TestDistributionOfAProxyConfig(t *testing.T) {
	env, _, _ := debugtest.StartScenario(t)
	env.Write(t, "30-proxyconfig.yaml", "apiVersion: networking.istio.io/v1beta1\nkind: ProxyConfig\n"+
		"metadata: {name: workers, namespace: bookinfo}\nspec: {concurrency: 2}\n")
	path := "/debug/distribution?kind=ProxyConfig&name=workers&namespace=bookinfo"
	debugtest.Eventually(t, "the ProxyConfig to be read", func() bool {
		code, _ := env.Get(t, path)
		return code == http.StatusOK
	})
	var dist debug.Distribution
	env.GetJSON(t, path, &dist)
	if !dist.Exists || len(dist.Proxies) != 0 {
		t.Errorf("distribution %+v, want the object and no proxy", dist)
	}
}
