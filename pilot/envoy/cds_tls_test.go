package envoy

import (
	"testing"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
)

// upstreamTLSFor returns the TLS context of reviews' cluster under a DestinationRule with the given tls block.
func upstreamTLSFor(t *testing.T, tls string) *tlsv3.UpstreamTlsContext {
	t.Helper()
	cs := policyClusters(t, `
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: default}
spec:
  host: reviews
  trafficPolicy:
    tls: `+tls+`
`, map[string]string{"app": "sleep"})
	c := clusterByName(t, cs, reviewsCluster)
	ctx := &tlsv3.UpstreamTlsContext{}
	if err := c.GetTransportSocket().GetTypedConfig().UnmarshalTo(ctx); err != nil {
		t.Fatalf("transport socket: %v", err)
	}
	return ctx
}

// SIMPLE TLS without a CA checks the server against the system roots (with the SANs), as istiod does; before,
// it sent no validation context, so any certificate was accepted. insecureSkipVerify alone turns checking off.
func TestSimpleTLSWithoutCAVerifiesAgainstSystemRoots(t *testing.T) {
	ctx := upstreamTLSFor(t, `{mode: SIMPLE, subjectAltNames: [reviews.example.com]}`)
	combined := ctx.GetCommonTlsContext().GetCombinedValidationContext()
	if combined == nil || combined.GetValidationContextSdsSecretConfig().GetName() != "file-root:system" {
		t.Fatalf("validation = %v, want the system roots (file-root:system)", ctx.GetCommonTlsContext().GetValidationContextType())
	}
	if sans := combined.GetDefaultValidationContext().GetMatchSubjectAltNames(); len(sans) == 0 {
		t.Error("the SANs are not checked with the system roots")
	}

	ctx = upstreamTLSFor(t, `{mode: SIMPLE, caCertificates: /etc/certs/ca.pem}`)
	if got := ctx.GetCommonTlsContext().GetValidationContext().GetTrustedCa().GetFilename(); got != "/etc/certs/ca.pem" {
		t.Errorf("trusted CA = %q, want the DestinationRule's", got)
	}

	ctx = upstreamTLSFor(t, `{mode: MUTUAL, clientCertificate: /c.pem, privateKey: /k.pem}`)
	if ctx.GetCommonTlsContext().GetCombinedValidationContext().GetValidationContextSdsSecretConfig().GetName() != "file-root:system" {
		t.Errorf("MUTUAL without a CA: validation = %v, want the system roots", ctx.GetCommonTlsContext().GetValidationContextType())
	}

	ctx = upstreamTLSFor(t, `{mode: SIMPLE, insecureSkipVerify: true}`)
	if v := ctx.GetCommonTlsContext().GetValidationContextType(); v != nil {
		t.Errorf("insecureSkipVerify: validation = %v, want none", v)
	}
}
