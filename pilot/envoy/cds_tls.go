package envoy

import (
	"strings"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rawbuffer "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/raw_buffer/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	meshconfig "istio.io/api/mesh/v1alpha1"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/sextantmesh/sextant/pilot/config"
)

// applyTLS configures upstream TLS from the DestinationRule, or, when it says nothing and the mesh config does
// not turn it off (enableAutoMtls), Istio's auto mTLS:
// mutual TLS to endpoints whose assignment carries tlsMode=istio (EDS drops it where the server's policy
// disables mTLS on the endpoint's port), plaintext to the rest, and plaintext to all when the server
// namespace's or the mesh's policy is DISABLE. Mesh mTLS accepts exactly the service's accounts.
func applyTLS(c *cluster.Cluster, tls *networking.ClientTLSSettings, k outboundClusterKey, h2 bool) {
	svc := k.svc
	accounts := splitAccounts(k.accounts)
	if tls == nil {
		if svc.MeshExternal || k.plaintextServer || k.plaintextEndpoint || !meshAutoMTLS(k.mesh) {
			return
		}
		if c.GetType() == cluster.Cluster_ORIGINAL_DST {
			// Envoy knows no metadata of an original destination, so no match can pick the endpoints with
			// sidecars: as istiod, mesh mTLS to every address (plaintextEndpoint said whether all have one).
			c.TransportSocket = tlsSocket(istioMutualTLS(c.Name, "", accounts, h2))
			return
		}
		c.TransportSocketMatches = []*cluster.Cluster_TransportSocketMatch{
			{
				Name:            "tlsMode-istio",
				Match:           &structpb.Struct{Fields: map[string]*structpb.Value{"tlsMode": structpb.NewStringValue("istio")}},
				TransportSocket: tlsSocket(istioMutualTLS(c.Name, "", accounts, h2)),
			},
			{
				Name:            "tlsMode-disabled",
				Match:           &structpb.Struct{},
				TransportSocket: rawBufferSocket(),
			},
		}
		return
	}
	switch tls.Mode {
	case networking.ClientTLSSettings_DISABLE:
	case networking.ClientTLSSettings_ISTIO_MUTUAL:
		// The rule's names, else the service's accounts; its SNI, else Istio's own.
		sans := tls.SubjectAltNames
		if len(sans) == 0 {
			sans = accounts
		}
		c.TransportSocket = tlsSocket(istioMutualTLS(c.Name, tls.Sni, sans, h2))
	case networking.ClientTLSSettings_SIMPLE, networking.ClientTLSSettings_MUTUAL:
		ctx := &tlsv3.UpstreamTlsContext{Sni: tls.Sni,
			CommonTlsContext: &tlsv3.CommonTlsContext{TlsParams: upstreamTLSParams(k.mesh.GetSpec().GetTlsDefaults())}}
		sans := tls.SubjectAltNames
		if len(sans) == 0 && svc.Source.Kind == config.ServiceEntry {
			sans = accounts // a ServiceEntry's subjectAltNames (and its endpoints' accounts), as istiod
		}
		if tls.Sni == "" {
			// As istiod: the SNI is each request's Host, and without names to check the certificate must
			// match that Host (unless checking is off).
			setUpstreamHTTPOptions(c, func(o *core.UpstreamHttpProtocolOptions) {
				o.AutoSni = true
				if len(sans) == 0 && !tls.GetInsecureSkipVerify().GetValue() {
					o.AutoSanValidation = true
				}
			})
		}
		common := ctx.CommonTlsContext
		switch {
		case tls.CredentialName != "":
			if tls.Mode == networking.ClientTLSSettings_MUTUAL {
				common.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{credentialSecret(tls.CredentialName, false)}
			}
			common.ValidationContextType = &tlsv3.CommonTlsContext_CombinedValidationContext{
				CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
					DefaultValidationContext:         &tlsv3.CertificateValidationContext{MatchSubjectAltNames: sanMatchers(sans)},
					ValidationContextSdsSecretConfig: credentialSecret(tls.CredentialName, true),
				}}
		default:
			if tls.Mode == networking.ClientTLSSettings_MUTUAL {
				common.TlsCertificates = []*tlsv3.TlsCertificate{{
					CertificateChain: fileSource(tls.ClientCertificate),
					PrivateKey:       fileSource(tls.PrivateKey),
				}}
			}
			vc := &tlsv3.CertificateValidationContext{MatchSubjectAltNames: sanMatchers(sans)}
			if tls.CaCrl != "" {
				vc.Crl = fileSource(tls.CaCrl) // certificates the CA revoked are refused, as istiod
			}
			switch {
			case tls.GetInsecureSkipVerify().GetValue():
				// Asked for in so many words: the server's certificate is not checked.
			case tls.CaCertificates != "":
				vc.TrustedCa = fileSource(tls.CaCertificates)
				common.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: vc}
			default:
				// No CA given: the system roots, which Istio's agent serves as file-root:system, as istiod
				// does. Without them the server's certificate would not be checked at all.
				common.ValidationContextType = &tlsv3.CommonTlsContext_CombinedValidationContext{
					CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
						DefaultValidationContext:         vc,
						ValidationContextSdsSecretConfig: sdsSecret("file-root:system"),
					}}
			}
		}
		if h2 {
			common.AlpnProtocols = []string{"h2"} // an HTTP/2 cluster says so, as istiod's do
		}
		c.TransportSocket = tlsSocket(ctx)
		// The connection managers' istio.alpn filter would replace this ALPN with Istio's own, which a
		// server outside the mesh does not know.
		noALPNOverride(c)
	}
}

// noALPNOverride sets the cluster metadata istio.alpn_override "false", which the istio.alpn filter reads
// to leave the cluster's ALPN as configured.
func noALPNOverride(c *cluster.Cluster) {
	if c.Metadata == nil {
		c.Metadata = &core.Metadata{}
	}
	if c.Metadata.FilterMetadata == nil {
		c.Metadata.FilterMetadata = map[string]*structpb.Struct{}
	}
	md := c.Metadata.FilterMetadata["istio"]
	if md == nil {
		md = &structpb.Struct{}
		c.Metadata.FilterMetadata["istio"] = md
	}
	if md.Fields == nil {
		md.Fields = map[string]*structpb.Value{}
	}
	md.Fields["alpn_override"] = structpb.NewStringValue("false")
}

// setUpstreamHTTPOptions edits the cluster's upstream HTTP options (auto SNI, SAN validation), adding the
// HTTP protocol options if the cluster has none: Envoy reads them for TCP proxying too.
func setUpstreamHTTPOptions(c *cluster.Cluster, edit func(*core.UpstreamHttpProtocolOptions)) {
	const key = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
	opts := &httpv3.HttpProtocolOptions{}
	if a := c.TypedExtensionProtocolOptions[key]; a != nil {
		if err := a.UnmarshalTo(opts); err != nil {
			opts = &httpv3.HttpProtocolOptions{}
		}
	}
	if opts.UpstreamProtocolOptions == nil {
		opts.UpstreamProtocolOptions = &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{
			ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
				ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{HttpProtocolOptions: &core.Http1ProtocolOptions{}}}}
	}
	if opts.UpstreamHttpProtocolOptions == nil {
		opts.UpstreamHttpProtocolOptions = &core.UpstreamHttpProtocolOptions{}
	}
	edit(opts.UpstreamHttpProtocolOptions)
	a, _ := anypb.New(opts)
	if c.TypedExtensionProtocolOptions == nil {
		c.TypedExtensionProtocolOptions = map[string]*anypb.Any{}
	}
	c.TypedExtensionProtocolOptions[key] = a
}

// sanMatchers checks the peer's certificate for one of the names, in a SAN of any type, as istiod's
// match_subject_alt_names does (an IP or email SAN matches too).
func sanMatchers(sans []string) []*matcher.StringMatcher {
	out := make([]*matcher.StringMatcher, 0, len(sans))
	for _, s := range sans {
		out = append(out, &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: s}})
	}
	return out
}

// joinAccounts and splitAccounts carry a service's accounts in a comparable cache key.
func joinAccounts(accounts []string) string { return strings.Join(accounts, "\n") }

func splitAccounts(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// istioMutualTLS is the client side of mesh mTLS: the workload certificate and the mesh root from SDS, and
// the server's identity checked against sans (none: any identity the mesh root signed, as istiod when a
// service has no known accounts). sni "" is Istio's own, outbound_.PORT_.SUBSET_.HOST, on which gateways in
// AUTO_PASSTHROUGH route.
func istioMutualTLS(clusterName, sni string, sans []string, h2 bool) *tlsv3.UpstreamTlsContext {
	alpn := []string{"istio-peer-exchange", "istio"}
	if h2 {
		alpn = append(alpn, "h2") // an HTTP/2 cluster says so, as istiod's do
	}
	if sni == "" {
		sni = strings.ReplaceAll(clusterName, "|", "_.")
	}
	return &tlsv3.UpstreamTlsContext{
		Sni: sni,
		CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsParams:                      upstreamTLSParams(nil),
			AlpnProtocols:                  alpn,
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{sdsSecret(sdsCert)},
			ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{
				CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
					DefaultValidationContext:         &tlsv3.CertificateValidationContext{MatchSubjectAltNames: sanMatchers(sans)},
					ValidationContextSdsSecretConfig: sdsSecret(sdsRoot),
				}},
		},
	}
}

func tlsSocket(ctx proto.Message) *core.TransportSocket {
	a, _ := anypb.New(ctx)
	return &core.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: a}}
}

func rawBufferSocket() *core.TransportSocket {
	a, _ := anypb.New(&rawbuffer.RawBuffer{})
	return &core.TransportSocket{Name: "envoy.transport_sockets.raw_buffer", ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: a}}
}

// upstreamTLSParams are the versions a client offers, as istiod's: TLS 1.2 to 1.3 (Envoy's client default
// stops at 1.2); defaults, the mesh config's tlsDefaults, adds its curves and ciphers (for SIMPLE and MUTUAL
// origination: mesh mTLS keeps Envoy's lists, and neither takes its minimum version, as istiod's).
func upstreamTLSParams(defaults *meshconfig.MeshConfig_TLSConfig) *tlsv3.TlsParameters {
	return &tlsv3.TlsParameters{
		TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_2,
		TlsMaximumProtocolVersion: tlsv3.TlsParameters_TLSv1_3,
		EcdhCurves:                defaults.GetEcdhCurves(),
		CipherSuites:              defaults.GetCipherSuites(),
	}
}
