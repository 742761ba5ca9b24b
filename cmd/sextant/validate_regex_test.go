package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/debug"
	"github.com/sextantmesh/sextant/pilot/envoy"
	"github.com/sextantmesh/sextant/tests/debugtest"
)

// guardedRouting is the reviews VirtualService with a first route refusing /admin (a fault abort) ahead of
// the catch-all, its uri matched by the regex given.
func guardedRouting(regex string) string {
	return `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: reviews
  namespace: bookinfo
spec:
  exportTo: ["."]
  hosts: [reviews]
  http:
  - name: admin-guard
    match: [{uri: {regex: "` + regex + `"}}]
    fault: {abort: {httpStatus: 403, percentage: {value: 100}}}
    route: [{destination: {host: reviews}}]
  - name: all
    route: [{destination: {host: reviews}}]
`
}

const (
	goodGuard = `/admin(/.*)?`
	badGuard  = `(?=/admin).*` // a lookahead: RE2 has none
)

// validate refuses a guarding route whose regex RE2 cannot compile, naming the file, the object and the field.
func TestValidateRefusesBadRouteRegex(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "vs.yaml"), []byte(guardedRouting(badGuard)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "validate", "-f", dir)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err == nil || len(lines) != 2 || !strings.Contains(lines[0], "VirtualService bookinfo/reviews") ||
		!strings.Contains(lines[0], "spec.http[0].match[0].uri.regex") || !strings.Contains(lines[0], "not an RE2 regex") ||
		lines[1] != "0 objects accepted, 1 document rejected" {
		t.Errorf("validate: %v\n%s", err, out)
	}
}

// The server refuses the same document, reports it in /debug/config_errors as validate does, and keeps
// serving the last good VirtualService: the guard stays ahead of the catch-all.
func TestServerKeepsGuardOnBadRouteRegex(t *testing.T) {
	files := debugtest.Scenario()
	files["20-routing.yaml"] = guardedRouting(goodGuard)
	env := debugtest.Start(t, files)
	p := env.Connect(t, debugtest.SidecarNode("reviews-v1", "bookinfo"))
	p.Subscribe(envoy.ListenerType)
	p.Subscribe(envoy.RouteType, "reviews.bookinfo.svc.cluster.local:9080")
	env.WaitStatus(t, debugtest.ReviewsProxy, "rds", debug.Synced)
	checkGuard(t, env)

	env.Write(t, "20-routing.yaml", guardedRouting(badGuard))
	type configError struct {
		config.Error
		Text string `json:"error"`
	}
	var refused configError
	debugtest.Eventually(t, "the refusal in /debug/config_errors", func() bool {
		var errs []configError
		env.GetJSON(t, "/debug/config_errors", &errs)
		for _, e := range errs {
			if e.Name == "reviews" && !e.Warning {
				refused = e
				return true
			}
		}
		return false
	})
	if refused.Kind != "VirtualService" || refused.Namespace != "bookinfo" || refused.Field != "spec.http[0].match[0].uri.regex" ||
		!strings.Contains(refused.Message, "not an RE2 regex") {
		t.Errorf("config_errors entry = %+v", refused)
	}
	checkGuard(t, env)

	out, _ := run(t, "validate", "-f", filepath.Join(env.Dir, "20-routing.yaml"))
	if first, _, _ := strings.Cut(out, "\n"); first != refused.Text {
		t.Errorf("validate says\n  %s\nthe server says\n  %s", first, refused.Text)
	}
}

// checkGuard asserts that the route configuration of reviews' own listener (routes by service) starts the
// reviews virtual host with the admin guard (the good regex, a fault abort) and ends it with the catch-all.
func checkGuard(t *testing.T, env *debugtest.Env) {
	t.Helper()
	out, err := run(t, "config-dump", debugtest.ReviewsProxy, "--server", env.URL, "--type", "rds", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var dump debug.ConfigDump
	if err := json.Unmarshal([]byte(out), &dump); err != nil || len(dump.Configs) != 1 || len(dump.Configs[0].Resources) != 1 {
		t.Fatalf("config-dump: %v\n%s", err, out)
	}
	var a anypb.Any
	rc := &route.RouteConfiguration{}
	if err := protojson.Unmarshal(dump.Configs[0].Resources[0], &a); err != nil {
		t.Fatal(err)
	}
	if err := a.UnmarshalTo(rc); err != nil {
		t.Fatal(err)
	}
	for _, vh := range rc.VirtualHosts {
		if !strings.HasPrefix(vh.Name, "reviews.bookinfo.svc.cluster.local") {
			continue
		}
		if len(vh.Routes) != 2 {
			t.Fatalf("reviews routes = %v", vh.Routes)
		}
		guard := vh.Routes[0]
		if guard.Name != "admin-guard" || guard.GetMatch().GetSafeRegex().GetRegex() != goodGuard ||
			guard.TypedPerFilterConfig[envoy.FaultFilterName] == nil || vh.Routes[1].Name != "all" {
			t.Errorf("reviews routes: want the admin guard on %s with its fault first, got %v", goodGuard, vh.Routes)
		}
		return
	}
	t.Fatalf("no reviews virtual host in %s", rc.Name)
}
