package envoy

import (
	"os"
	"testing"

	"github.com/sextantmesh/sextant/pilot/model"
)

// A match's statPrefix names the route's own statistics, as istiod sets it; before, it was only warned.
func TestRouteStatPrefix(t *testing.T) {
	data, err := os.ReadFile("testdata/rds/mesh.yaml")
	if err != nil {
		t.Fatal(err)
	}
	data = append(data, []byte(`
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: stats, namespace: bookinfo}
spec:
  hosts: [productpage]
  http:
  - match: [{uri: {prefix: /a}, statPrefix: details-a}, {uri: {prefix: /b}}]
    route: [{destination: {host: productpage}}]
`)...)
	rcs := generateRoutes(t, newByPort(), &model.Proxy{Type: model.Sidecar, Namespace: "bookinfo"}, pushFromYAML(t, data),
		named(RouteType, "9080"))
	vh := virtualHost(t, rcs[0], "productpage.bookinfo.svc.cluster.local:9080")
	if len(vh.Routes) < 2 {
		t.Fatalf("routes %v", vh.Routes)
	}
	if got := vh.Routes[0].StatPrefix; got != "details-a" {
		t.Errorf("route for /a: stat prefix %q, want details-a", got)
	}
	if got := vh.Routes[1].StatPrefix; got != "" {
		t.Errorf("route for /b: stat prefix %q, want none", got)
	}
}
