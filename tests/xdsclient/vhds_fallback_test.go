package xdsclient

import (
	"errors"
	"strings"
	"testing"
	"time"

	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// rejectVHDS NACKs a route configuration in the VHDS shape, as an Envoy that cannot take VHDS over ADS would.
func rejectVHDS(typeURL, _ string, a *anypb.Any) error {
	if typeURL != RouteType {
		return nil
	}
	rc := &routepb.RouteConfiguration{}
	if err := a.UnmarshalTo(rc); err != nil {
		return err
	}
	if rc.GetVhds() != nil {
		return errors.New("VHDS over ADS is not supported")
	}
	return nil
}

// An Envoy served VHDS that rejects it gets its virtual hosts inside its route configurations instead, on
// that stream and, without rejecting again, on the next one; it ends up holding exactly what the server
// generates for it, with every route.
func TestEnvoyRejectingVHDSFallsBackToInlineVirtualHosts(t *testing.T) {
	// The hosts are ServiceEntries': a Kubernetes Service's virtual host is in a route configuration of its
	// own (routes by service), never in the VHDS shape.
	files := baseFiles()
	files["alpha-reviews-entry.yaml"] = httpServiceEntry("alpha", "reviews.example.com")
	s := startServer(t, files)
	e := NewEnvoy(EnvoyOptions{Addr: s.addr(), NodeID: sidecarNode("alpha"), Delta: true, BuildVersion: [3]uint32{1, 38, 0},
		InitialFetchTimeout: testFetchTimeout, Reject: rejectVHDS})
	if err := e.Connect(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	if !waitFor(10*time.Second, func() bool { return inlineRoutesFor(e, "reviews.example.com") }) {
		t.Fatalf("no inline virtual host for reviews after the NACK; NACKs %d, routes %v", e.NACKs(), keys(e.Held(RouteType)))
	}
	settled(s, []*Envoy{e}, nil, 10*time.Second)
	report(t, e.NodeID(), checkEnvoy(s, e))
	nacks := e.NACKs()
	if nacks == 0 {
		t.Fatal("the Envoy never rejected anything: it was not served VHDS")
	}
	checkFallbackReported(t, s)

	// The next stream of the same node starts inline: nothing more to reject.
	e.Disconnect()
	s.put(t, "alpha-ratings-entry.yaml", httpServiceEntry("alpha", "ratings.example.com"))
	if err := e.Connect(); err != nil {
		t.Fatal(err)
	}
	if !waitFor(10*time.Second, func() bool { return inlineRoutesFor(e, "ratings.example.com") }) {
		t.Fatalf("no inline virtual host for ratings on the next stream; routes %v", keys(e.Held(RouteType)))
	}
	settled(s, []*Envoy{e}, nil, 10*time.Second)
	report(t, e.NodeID(), checkEnvoy(s, e))
	if e.NACKs() != nacks {
		t.Errorf("%d NACKs on the next stream, want none: it must not be served VHDS again", e.NACKs()-nacks)
	}
}

// checkFallbackReported checks that an operator can see the fallback: the proxy's notes in /debug/syncz (what
// proxy-status prints) and the metric.
func checkFallbackReported(t *testing.T, s *server) {
	t.Helper()
	var sync []struct {
		Notes []string `json:"notes"`
	}
	s.GetJSON(t, "/debug/syncz", &sync)
	if len(sync) != 1 || len(sync[0].Notes) != 1 || !strings.Contains(sync[0].Notes[0], "VHDS over ADS is not supported") {
		t.Errorf("syncz notes = %+v, want the one fallback with the proxy's message", sync)
	}
	_, metrics := s.Get(t, "/metrics")
	if !strings.Contains(string(metrics), "sextant_vhds_fallbacks_total 1") {
		t.Error("sextant_vhds_fallbacks_total is not 1 in /metrics")
	}
}

// inlineRoutesFor reports whether e holds a route configuration without VHDS with a virtual host for host.
func inlineRoutesFor(e *Envoy, host string) bool {
	for _, r := range e.Held(RouteType) {
		rc := &routepb.RouteConfiguration{}
		if r.Any.UnmarshalTo(rc) != nil || rc.GetVhds() != nil {
			continue
		}
		for _, vh := range rc.GetVirtualHosts() {
			for _, d := range vh.GetDomains() {
				if d == host {
					return true
				}
			}
		}
	}
	return false
}

// httpServiceEntry declares host, outside the cluster, on HTTP port 9080.
func httpServiceEntry(ns, host string) string {
	return `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: ` + strings.Split(host, ".")[0] + `
  namespace: ` + ns + `
spec:
  hosts: [` + host + `]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{number: 9080, name: http, protocol: HTTP}]
`
}
