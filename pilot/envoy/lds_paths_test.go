package envoy

import (
	"testing"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
)

// Every connection manager of sidecars and gateways normalises paths as the mesh says, as istiod does, so
// that a policy on /admin also governs /public/../admin.
func TestConnectionManagersNormalisePaths(t *testing.T) {
	type want struct {
		normalize, merge bool
		escaped          hcm.HttpConnectionManager_PathWithEscapedSlashesAction
	}
	for _, tc := range []struct {
		normalization string
		want          want
	}{
		{"", want{true, false, hcm.HttpConnectionManager_KEEP_UNCHANGED}},
		{mesh.PathNormalizationNone, want{false, false, hcm.HttpConnectionManager_KEEP_UNCHANGED}},
		{mesh.PathNormalizationBase, want{true, false, hcm.HttpConnectionManager_KEEP_UNCHANGED}},
		{mesh.PathNormalizationMergeSlashes, want{true, true, hcm.HttpConnectionManager_KEEP_UNCHANGED}},
		{mesh.PathNormalizationDecodeAndMergeSlashes, want{true, true, hcm.HttpConnectionManager_UNESCAPE_AND_FORWARD}},
	} {
		t.Run("normalization="+tc.normalization, func(t *testing.T) {
			m := mesh.Default()
			if tc.normalization != "" {
				m.PathNormalization.Normalization = tc.normalization
			}
			push := ldsPush(t, m)
			g := New(Options{})
			seen := map[string]int{}
			for _, proxy := range []*model.Proxy{ldsReviews, ldsGateway} {
				for _, l := range ldsGenerate(t, g, proxy, push, nil) {
					for _, fc := range l.FilterChains {
						for _, f := range fc.Filters {
							if f.Name != ldsHCMFilter {
								continue
							}
							hc := &hcm.HttpConnectionManager{}
							if err := f.GetTypedConfig().UnmarshalTo(hc); err != nil {
								t.Fatal(err)
							}
							got := want{hc.GetNormalizePath().GetValue(), hc.MergeSlashes, hc.PathWithEscapedSlashesAction}
							if hc.NormalizePath == nil || got != tc.want {
								t.Errorf("%s / %s: normalize_path %v (set %v), merge_slashes %v, escaped slashes %v; want %+v", l.Name, fc.Name,
									got.normalize, hc.NormalizePath != nil, got.merge, got.escaped, tc.want)
							}
							seen[direction(proxy, l)]++
						}
					}
				}
			}
			for _, d := range []string{"inbound", "outbound", "gateway"} {
				if seen[d] == 0 {
					t.Errorf("no %s connection manager was checked", d)
				}
			}
		})
	}
}

func direction(proxy *model.Proxy, l *listener.Listener) string {
	switch {
	case proxy.Type == model.Router:
		return "gateway"
	case l.Name == VirtualInboundListener:
		return "inbound"
	}
	return "outbound"
}

// virtualInbound must not hand connections on: with use_original_dst Envoy would give an inbound connection
// to the outbound listener of a service on the same port, bypassing the inbound mTLS and RBAC.
func TestVirtualInboundDoesNotHandOffConnections(t *testing.T) {
	push := ldsPush(t, nil)
	for _, l := range ldsGenerate(t, New(Options{}), ldsReviews, push, nil) {
		if l.Name == VirtualInboundListener && l.GetUseOriginalDst().GetValue() {
			t.Errorf("%s has use_original_dst", l.Name)
		}
	}
}

// A gateway's connection managers replace the X-Forwarded-Client-Cert a client sends with the details of its
// verified certificate, as istiod's (SANITIZE_SET): a client cannot forge the header.
func TestGatewayConnectionManagersSanitizeClientCert(t *testing.T) {
	push := ldsPush(t, nil)
	checked := 0
	for _, l := range ldsGenerate(t, New(Options{}), ldsGateway, push, nil) {
		for _, fc := range l.FilterChains {
			for _, f := range fc.Filters {
				if f.Name != ldsHCMFilter {
					continue
				}
				hc := &hcm.HttpConnectionManager{}
				if err := f.GetTypedConfig().UnmarshalTo(hc); err != nil {
					t.Fatal(err)
				}
				checked++
				d := hc.GetSetCurrentClientCertDetails()
				if hc.ForwardClientCertDetails != hcm.HttpConnectionManager_SANITIZE_SET || !d.GetSubject().GetValue() || !d.GetCert() ||
					!d.GetDns() || !d.GetUri() || !hc.GetUseRemoteAddress().GetValue() {
					t.Errorf("%s / %s: forward_client_cert %v, set_current_client_cert %v, use_remote_address %v; want SANITIZE_SET with "+
						"subject, cert, dns, uri, and the peer's address", l.Name, fc.Name, hc.ForwardClientCertDetails, d, hc.GetUseRemoteAddress())
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no gateway connection manager checked")
	}
}
