package envoy

import (
	"strings"
	"testing"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
)

// envoyVirtualHost picks the virtual host Envoy would for a request's Host: an exact domain, else the
// longest "*." suffix wildcard, else the longest prefix wildcard, else "*".
func envoyVirtualHost(rc *route.RouteConfiguration, host string) string {
	host = strings.ToLower(host)
	best, bestLen, rank := "", -1, 0
	for _, vh := range rc.VirtualHosts {
		for _, d := range vh.Domains {
			d = strings.ToLower(d)
			r, n := 0, len(d)
			switch {
			case d == host:
				r = 4
			case d == "*":
				r, n = 1, 0
			case strings.HasPrefix(d, "*") && strings.HasSuffix(host, d[1:]) && len(host) > len(d)-1:
				r = 3
			case strings.HasSuffix(d, "*") && strings.HasPrefix(host, d[:len(d)-1]) && len(host) > len(d)-1:
				r = 2
			default:
				continue
			}
			if r > rank || r == rank && n > bestLen {
				best, bestLen, rank = vh.Name, n, r
			}
		}
	}
	return best
}

// A headless Service's virtual host also takes every name below its names, as istiod's: a StatefulSet pod's
// own DNS name (db-0.db.default.svc.cluster.local, or db-0.db from its namespace) is routed by the
// service's routes, not the catch-all. Neither a Service with a VIP nor a ServiceEntry of resolution NONE
// takes them. VHDS serves the same domains.
func TestHeadlessVirtualHostTakesPodNames(t *testing.T) {
	push := pushFromYAML(t, []byte(`
apiVersion: v1
kind: Service
metadata: {name: db, namespace: default}
spec:
  clusterIP: None
  ports: [{name: http-admin, port: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  clusterIP: 10.0.0.8
  ports: [{name: http, port: 8080}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ext, namespace: default}
spec:
  hosts: [ext.example.com]
  resolution: NONE
  ports: [{number: 8080, name: http, protocol: HTTP}]
`))
	rcs := generateRoutes(t, New(Options{}), envoyProxy("default", nil, false, 1, 36), push, wildcard(RouteType))
	var rc *route.RouteConfiguration
	for _, r := range rcs {
		if r.Name == "8080" {
			rc = r
		}
	}
	if rc == nil {
		t.Fatalf("no route configuration 8080 in %v", routeNames(rcs))
	}
	const db = "db.default.svc.cluster.local:8080"
	for host, want := range map[string]string{
		"db.default.svc.cluster.local":           db,
		"db-0.db.default.svc.cluster.local":      db,
		"db-0.db.default.svc.cluster.local:8080": db,
		"db-0.db.default.svc.cluster.local.":     db,
		"db-0.db.default.svc":                    db,
		"db-0.db.default:8080":                   db,
		"db-0.db":                                db,
		"x.web.default.svc.cluster.local":        AllowAnyVirtualHost,
		"x.ext.example.com":                      AllowAnyVirtualHost,
	} {
		if got := envoyVirtualHost(rc, host); got != want {
			t.Errorf("Host %s: virtual host %q, want %q", host, got, want)
		}
	}
	checkVHDSMatchesInline(t, push, "default", nil)
}
