package envoy

import (
	"google.golang.org/protobuf/types/known/durationpb"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	meshconfig "istio.io/api/mesh/v1alpha1"

	"github.com/sextantmesh/sextant/pilot/mesh"
)

// meshMTLSParams are the TLS parameters of inbound mesh mTLS, as istiod's BuildInboundTLS: from TLS 1.2 (1.3
// when meshMTLS.minProtocolVersion says TLSV1_3) to 1.3, meshMTLS.cipherSuites else istiod's ECDHE and
// AES-GCM list. meshMTLS.ecdhCurves is not read: istiod's mesh mTLS does not respect them either.
func meshMTLSParams(m *mesh.Config) *tlsv3.TlsParameters {
	mt := m.GetSpec().GetMeshMTLS()
	params := &tlsv3.TlsParameters{
		CipherSuites:              ldsMeshCiphers,
		TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_2,
		TlsMaximumProtocolVersion: tlsv3.TlsParameters_TLSv1_3,
	}
	if len(mt.GetCipherSuites()) > 0 {
		params.CipherSuites = mt.GetCipherSuites()
	}
	if mt.GetMinProtocolVersion() == meshconfig.MeshConfig_TLSConfig_TLSV1_3 {
		params.TlsMinimumProtocolVersion = tlsv3.TlsParameters_TLSv1_3
	}
	return params
}

// meshDetectionTimeout is how long the listener filters that wait for a client's first bytes (the
// http_inspector) wait: the mesh config's protocolDetectionTimeout, istiod's default 0 (no limit), after
// which the connection goes on undetected (continue_on_listener_filters_timeout), as istiod's.
func meshDetectionTimeout(m *mesh.Config) *durationpb.Duration {
	if d := m.GetSpec().GetProtocolDetectionTimeout(); d != nil {
		return durationpb.New(d.AsDuration())
	}
	return durationpb.New(0)
}
