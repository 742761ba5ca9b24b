package envoy

import (
	"slices"
	"testing"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/sextantmesh/sextant/pilot/mesh"
)

func meshOf(t *testing.T, yaml string) *mesh.Config {
	t.Helper()
	m := mesh.Default()
	if err := mesh.Parse([]byte(yaml), m); err != nil {
		t.Fatal(err)
	}
	return m
}

// The mesh config's meshMTLS sets the versions and ciphers of the inbound mesh mTLS, as istiod's; one set
// of generators serves each mesh config in turn.
func TestInboundMeshMTLSParams(t *testing.T) {
	g := New(Options{})
	params := func(m *mesh.Config) *tlsv3.TlsParameters {
		in := ldsFind(t, ldsGenerate(t, g, ldsFrontend, ldsPush(t, m), wildcard(ListenerType)), VirtualInboundListener)
		ctx := &tlsv3.DownstreamTlsContext{}
		if err := ldsChain(t, in, "inbound_0.0.0.0_8080_tls").GetTransportSocket().GetTypedConfig().UnmarshalTo(ctx); err != nil {
			t.Fatal(err)
		}
		return ctx.GetCommonTlsContext().GetTlsParams()
	}
	if p := params(mesh.Default()); p.GetTlsMinimumProtocolVersion() != tlsv3.TlsParameters_TLSv1_2 || !slices.Equal(p.GetCipherSuites(), ldsMeshCiphers) {
		t.Errorf("default mesh: %v, want TLS 1.2 and istiod's ciphers", p)
	}
	p := params(meshOf(t, "meshMTLS: {minProtocolVersion: TLSV1_3, cipherSuites: [ECDHE-RSA-AES256-GCM-SHA384]}\n"))
	if p.GetTlsMinimumProtocolVersion() != tlsv3.TlsParameters_TLSv1_3 || p.GetTlsMaximumProtocolVersion() != tlsv3.TlsParameters_TLSv1_3 ||
		!slices.Equal(p.GetCipherSuites(), []string{"ECDHE-RSA-AES256-GCM-SHA384"}) {
		t.Errorf("meshMTLS TLS 1.3: %v", p)
	}
}
