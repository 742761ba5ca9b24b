package envoy

import (
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"

	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/xds"
)

// envoyProxy is a sidecar as an Envoy of the given version connects on a delta (or SotW) stream.
func envoyProxy(ns string, labels map[string]string, delta bool, major, minor uint32) *xds.Proxy {
	return &xds.Proxy{Type: xds.Sidecar, Namespace: ns, Labels: labels, Delta: delta,
		Node: &core.Node{UserAgentName: "envoy"}, BuildVersion: [3]uint32{major, minor, 0}}
}

// generateVirtualHosts runs VHDS and decodes the result, checking ValidateAll and that each resource is
// named as the virtual host it holds, ROUTE_CONFIG/NAME.
func generateVirtualHosts(t *testing.T, g *Generators, proxy *xds.Proxy, push *model.PushContext) []*route.VirtualHost {
	t.Helper()
	res, err := g.ByTypeURL()[xds.VirtualHostType].Generate(proxy, push, wildcard(xds.VirtualHostType), nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []*route.VirtualHost
	for _, r := range res {
		vh := &route.VirtualHost{}
		if err := r.Any.UnmarshalTo(vh); err != nil {
			t.Fatal(err)
		}
		if err := vh.ValidateAll(); err != nil {
			t.Errorf("virtual host %s: ValidateAll: %v", vh.Name, err)
		}
		if vh.Name != r.Name || xds.RouteConfigOfVirtualHost(r.Name) == "" {
			t.Errorf("resource %q holds virtual host %q; want both ROUTE_CONFIG/NAME", r.Name, vh.Name)
		}
		out = append(out, vh)
	}
	return out
}

// A VHDS sidecar gets route configurations holding only the catch-all, and virtual hosts that rebuild exactly
// the table a sidecar without VHDS gets, sourceLabels included.
func TestVHDSMatchesInlineRoutes(t *testing.T) {
	push := rdsPush(t)
	for _, labels := range []map[string]string{{"app": "productpage"}, {"app": "reviews"}} {
		g := New(Options{})
		vhdsProxy := envoyProxy("bookinfo", labels, true, 1, 38)
		inline := generateRoutes(t, g, envoyProxy("bookinfo", labels, false, 1, 38), push, wildcard(xds.RouteType))
		withVHDS := generateRoutes(t, g, vhdsProxy, push, wildcard(xds.RouteType))
		if len(inline) == 0 || len(inline) != len(withVHDS) {
			t.Fatalf("route configurations: %d inline, %d with VHDS", len(inline), len(withVHDS))
		}
		byRC := map[string][]*route.VirtualHost{}
		for _, vh := range generateVirtualHosts(t, g, vhdsProxy, push) {
			rc := xds.RouteConfigOfVirtualHost(vh.Name)
			byRC[rc] = append(byRC[rc], vh)
		}
		for i, rc := range withVHDS {
			if rc.Vhds.GetConfigSource().GetAds() == nil || len(rc.VirtualHosts) != 1 || rc.VirtualHosts[0].Name != AllowAnyVirtualHost {
				t.Errorf("%s: want an ADS vhds source and only %s inline, got vhds %v and %d virtual hosts",
					rc.Name, AllowAnyVirtualHost, rc.Vhds, len(rc.VirtualHosts))
			}
			var want []*route.VirtualHost
			for _, vh := range inline[i].VirtualHosts {
				if vh.Name == AllowAnyVirtualHost {
					continue
				}
				vh = proto.Clone(vh).(*route.VirtualHost)
				vh.Name = rc.Name + "/" + vh.Name
				want = append(want, vh)
			}
			got := byRC[rc.Name]
			if len(got) != len(want) {
				t.Fatalf("%v %s: %d virtual hosts over VHDS, %d inline", labels, rc.Name, len(got), len(want))
			}
			for j := range want {
				if !proto.Equal(got[j], want[j]) {
					t.Errorf("%v %s: virtual host %d differs:\nVHDS   %v\ninline %v", labels, rc.Name, j, got[j], want[j])
				}
			}
		}
	}
	golden(t, "rds", "vhds-productpage", generateVirtualHosts(t, New(Options{}), envoyProxy("bookinfo", map[string]string{"app": "productpage"}, true, 1, 38), push))
}

// VHDS only for Envoy sidecars that can take it: delta stream, Envoy ≥ the configured minimum, not disabled.
func TestVHDSOnlyWhereSupported(t *testing.T) {
	push := rdsPush(t)
	cases := []struct {
		name  string
		opts  Options
		proxy *xds.Proxy
		want  bool
	}{
		{"delta envoy 1.38", Options{}, envoyProxy("bookinfo", nil, true, 1, 38), true},
		{"delta envoy 2.0", Options{}, envoyProxy("bookinfo", nil, true, 2, 0), true},
		{"delta envoy 1.37", Options{}, envoyProxy("bookinfo", nil, true, 1, 37), false},
		{"sotw envoy 1.38", Options{}, envoyProxy("bookinfo", nil, false, 1, 38), false},
		{"disabled", Options{VHDSMinEnvoy: "off"}, envoyProxy("bookinfo", nil, true, 1, 38), false},
		{"lowered minimum", Options{VHDSMinEnvoy: "1.30"}, envoyProxy("bookinfo", nil, true, 1, 37), true},
		{"no user agent", Options{}, &xds.Proxy{Type: xds.Sidecar, Namespace: "bookinfo", Delta: true, BuildVersion: [3]uint32{1, 38, 0}}, false},
		{"proxyless gRPC", Options{}, &xds.Proxy{Type: xds.GRPC, Namespace: "bookinfo", Delta: true}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := New(tc.opts)
			vhosts := generateVirtualHosts(t, g, tc.proxy, push)
			rcs := generateRoutes(t, g, tc.proxy, push, named(xds.RouteType, "9080"))
			if tc.proxy.Type == xds.GRPC {
				rcs = nil
			}
			for _, rc := range rcs {
				if got := rc.Vhds != nil; got != tc.want {
					t.Errorf("%s: vhds set %v, want %v", rc.Name, got, tc.want)
				}
			}
			if got := len(vhosts) > 0; got != tc.want {
				t.Errorf("%d virtual hosts over VHDS, want some: %v", len(vhosts), tc.want)
			}
		})
	}
	for _, bad := range []string{"1", "x.y", "1.38.0", "on"} {
		if _, _, err := ParseVHDSMinEnvoy(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("ParseVHDSMinEnvoy(%q): %v", bad, err)
		}
	}
}
