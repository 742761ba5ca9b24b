package envoy

import (
	"slices"
	"testing"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
)

// gatewayServerTLS renders a gateway with one server on port 9443 holding tls, and returns its TLS context.
func gatewayServerTLS(t *testing.T, tls string) *tlsv3.DownstreamTlsContext {
	t.Helper()
	push := ldsPush(t, nil, `
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: tls, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 9443, name: https, protocol: HTTPS}
    hosts: ["*"]
    tls: `+tls+`
`)
	l := ldsFind(t, ldsGenerate(t, New(Options{}), ldsGateway, push, wildcard(ListenerType)), "0.0.0.0_9443")
	ctx := &tlsv3.DownstreamTlsContext{}
	if err := l.FilterChains[0].GetTransportSocket().GetTypedConfig().UnmarshalTo(ctx); err != nil {
		t.Fatal(err)
	}
	return ctx
}

// A server's TLS versions, ciphers and curves reach Envoy (invalid and repeated ciphers dropped, as istiod);
// before, Envoy's defaults applied whatever the Gateway said.
func TestGatewayServerTLSParameters(t *testing.T) {
	ctx := gatewayServerTLS(t, `{mode: SIMPLE, credentialName: cert, minProtocolVersion: TLSV1_3, maxProtocolVersion: TLSV1_3,
      cipherSuites: [ECDHE-RSA-AES256-GCM-SHA384, NO-SUCH-CIPHER, ECDHE-RSA-AES256-GCM-SHA384], ecdhCurves: [X25519]}`)
	p := ctx.GetCommonTlsContext().GetTlsParams()
	if p.GetTlsMinimumProtocolVersion() != tlsv3.TlsParameters_TLSv1_3 || p.GetTlsMaximumProtocolVersion() != tlsv3.TlsParameters_TLSv1_3 {
		t.Errorf("versions %v..%v, want TLSv1_3..TLSv1_3", p.GetTlsMinimumProtocolVersion(), p.GetTlsMaximumProtocolVersion())
	}
	if !slices.Equal(p.GetCipherSuites(), []string{"ECDHE-RSA-AES256-GCM-SHA384"}) || !slices.Equal(p.GetEcdhCurves(), []string{"X25519"}) {
		t.Errorf("ciphers %v, curves %v", p.GetCipherSuites(), p.GetEcdhCurves())
	}
	if p := gatewayServerTLS(t, `{mode: SIMPLE, credentialName: cert}`).GetCommonTlsContext().GetTlsParams(); p != nil {
		t.Errorf("no settings: TLS parameters %v, want Envoy's defaults", p)
	}
}

// MUTUAL with credentials: the SPKI and hash pins, insecureSkipVerify and caCertCredentialName are honoured;
// with several credentialNames every certificate is offered. Before, a pinned server accepted any client the
// CA signed.
func TestGatewayServerClientValidation(t *testing.T) {
	ctx := gatewayServerTLS(t, `{mode: MUTUAL, credentialNames: [rsa-cert, ecdsa-cert], caCertCredentialName: client-ca,
      verifyCertificateSpki: ["NvqYIYSbgK2vCJpQhObf77vv+bQWtc5ek5RIOwPiC9A="], `+
		`verifyCertificateHash: ["df6ff72fe9116521268f6f2dd4966f51df479883fe7037b39f75916ac3049d1a"]}`)
	common := ctx.GetCommonTlsContext()
	var certs []string
	for _, s := range common.GetTlsCertificateSdsSecretConfigs() {
		certs = append(certs, s.GetName())
	}
	if !slices.Equal(certs, []string{"kubernetes://rsa-cert", "kubernetes://ecdsa-cert"}) {
		t.Errorf("certificates %v, want both credentials", certs)
	}
	cv := common.GetCombinedValidationContext()
	if got := cv.GetValidationContextSdsSecretConfig().GetName(); got != "kubernetes://client-ca-cacert" {
		t.Errorf("client CA from %q, want the CA of Secret client-ca", got)
	}
	vc := cv.GetDefaultValidationContext()
	if len(vc.GetVerifyCertificateSpki()) != 1 || len(vc.GetVerifyCertificateHash()) != 1 {
		t.Errorf("pins: spki %v, hash %v", vc.GetVerifyCertificateSpki(), vc.GetVerifyCertificateHash())
	}
	if vc.GetTrustChainVerification() != tlsv3.CertificateValidationContext_VERIFY_TRUST_CHAIN {
		t.Errorf("trust chain %v without insecureSkipVerify", vc.GetTrustChainVerification())
	}
	ctx = gatewayServerTLS(t, `{mode: MUTUAL, credentialName: cert, insecureSkipVerify: true}`)
	vc = ctx.GetCommonTlsContext().GetCombinedValidationContext().GetDefaultValidationContext()
	if got := vc.GetTrustChainVerification(); got != tlsv3.CertificateValidationContext_ACCEPT_UNTRUSTED {
		t.Errorf("insecureSkipVerify: trust chain %v, want ACCEPT_UNTRUSTED", got)
	}
}

// Files: every tlsCertificates pair is served, and caCrl refuses revoked client certificates (also on
// ISTIO_MUTUAL, against the mesh root).
func TestGatewayServerFilesAndCRL(t *testing.T) {
	ctx := gatewayServerTLS(t, `{mode: MUTUAL, caCertificates: /etc/ca.pem, caCrl: /etc/ca.crl,
      tlsCertificates: [{serverCertificate: /etc/rsa.pem, privateKey: /etc/rsa.key}, `+
		`{serverCertificate: /etc/ec.pem, privateKey: /etc/ec.key}]}`)
	var chains []string
	for _, c := range ctx.GetCommonTlsContext().GetTlsCertificates() {
		chains = append(chains, c.GetCertificateChain().GetFilename())
	}
	if !slices.Equal(chains, []string{"/etc/rsa.pem", "/etc/ec.pem"}) {
		t.Errorf("certificates %v, want both files", chains)
	}
	if got := ctx.GetCommonTlsContext().GetValidationContext().GetCrl().GetFilename(); got != "/etc/ca.crl" {
		t.Errorf("file MUTUAL: CRL %q", got)
	}
	ctx = gatewayServerTLS(t, `{mode: ISTIO_MUTUAL, caCrl: /etc/ca.crl}`)
	vc := ctx.GetCommonTlsContext().GetCombinedValidationContext().GetDefaultValidationContext()
	if got := vc.GetCrl().GetFilename(); got != "/etc/ca.crl" {
		t.Errorf("ISTIO_MUTUAL: CRL %q", got)
	}
}

// A DestinationRule's caCrl refuses revoked server certificates.
func TestDestinationRuleTLSCRL(t *testing.T) {
	for _, tls := range []string{`{mode: SIMPLE, caCertificates: /etc/ca.pem, caCrl: /etc/ca.crl}`, `{mode: SIMPLE, caCrl: /etc/ca.crl}`} {
		common := upstreamTLSFor(t, tls).GetCommonTlsContext()
		vc := common.GetValidationContext()
		if vc == nil {
			vc = common.GetCombinedValidationContext().GetDefaultValidationContext()
		}
		if got := vc.GetCrl().GetFilename(); got != "/etc/ca.crl" {
			t.Errorf("%s: CRL %q, want /etc/ca.crl", tls, got)
		}
	}
}

// SIMPLE with subjectAltNames: no SAN-only validation context, which Envoy refuses (it wants a CA with SANs);
// the names check nothing on a server that asks for no client certificate, and Warnings says so.
func TestGatewaySimpleServerSANsNeedNoValidation(t *testing.T) {
	ctx := gatewayServerTLS(t, `{mode: SIMPLE, credentialName: cert, subjectAltNames: [client.example]}`)
	if vc := ctx.GetCommonTlsContext().GetValidationContextType(); vc != nil {
		t.Errorf("validation context %v on a SIMPLE server", vc)
	}
	if ctx.GetRequireClientCertificate().GetValue() {
		t.Error("a SIMPLE server requires a client certificate")
	}
}

// Pins and the CRL hold whatever the CA's source: files and the mesh root too, where istiod drops the pins.
func TestGatewayServerPinsWithFiles(t *testing.T) {
	ctx := gatewayServerTLS(t, `{mode: MUTUAL, serverCertificate: /etc/s.pem, privateKey: /etc/s.key, caCertificates: /etc/ca.pem,
      verifyCertificateSpki: ["NvqYIYSbgK2vCJpQhObf77vv+bQWtc5ek5RIOwPiC9A="]}`)
	if got := ctx.GetCommonTlsContext().GetValidationContext().GetVerifyCertificateSpki(); len(got) != 1 {
		t.Errorf("file MUTUAL: SPKI pins %v", got)
	}
	ctx = gatewayServerTLS(t, `{mode: MUTUAL, credentialName: cert, caCrl: /etc/ca.crl}`)
	vc := ctx.GetCommonTlsContext().GetCombinedValidationContext().GetDefaultValidationContext()
	if got := vc.GetCrl().GetFilename(); got != "/etc/ca.crl" {
		t.Errorf("credential MUTUAL: CRL %q", got)
	}
}
