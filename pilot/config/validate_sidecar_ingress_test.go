package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sextantmesh/sextant/pilot/config"
)

const sidecarHead = "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: s, namespace: shop}\nspec:\n  ingress:\n"

// Ingress listeners istiod's validation refuses, and those Sextant cannot serve as istiod would, are refused
// naming the field; the forms istiod serves load.
func TestSidecarIngressValidation(t *testing.T) {
	for _, tc := range []struct{ ingress, field, message string }{
		{"  - port: {number: 9080, protocol: HTTP, name: http}\n  - port: {number: 9080, protocol: TCP, name: tcp}\n",
			"spec.ingress[1].port.number", "another ingress listener"},
		{"  - port: {number: 15006, protocol: TCP, name: tcp}\n", "spec.ingress[0].port.number", "sidecar's own ports"},
		{"  - port: {number: 9080, protocol: h2c, name: http}\n", "spec.ingress[0].port.protocol", "unsupported protocol"},
		{"  - port: {number: 9080, protocol: UDP, name: udp}\n", "spec.ingress[0].port.protocol", "not implemented"},
		{"  - port: {number: 9080, protocol: HTTP, name: http}\n    bind: localhost\n", "spec.ingress[0].bind", "not an IP address"},
		{"  - port: {number: 9080, protocol: HTTP, name: http}\n    defaultEndpoint: 10.0.0.1:8080\n",
			"spec.ingress[0].defaultEndpoint", "must be 127.0.0.1:PORT"},
		{"  - port: {number: 9080, protocol: HTTP, name: http}\n    defaultEndpoint: 127.0.0.1\n",
			"spec.ingress[0].defaultEndpoint", "not HOST:PORT"},
		{"  - port: {number: 9080, protocol: HTTP, name: http}\n    defaultEndpoint: 127.0.0.1:0\n",
			"spec.ingress[0].defaultEndpoint", "not a port number"},
		{"  - port: {number: 9080, protocol: HTTP, name: http}\n    defaultEndpoint: unix://app.sock\n",
			"spec.ingress[0].defaultEndpoint", "absolute path"},
		{"  - port: {number: 9443, protocol: HTTPS, name: https}\n    tls: {mode: SIMPLE, credentialName: cert}\n",
			"spec.ingress[0].tls.credentialName", "not supported on a Sidecar"},
		{"  - port: {number: 9443, protocol: HTTPS, name: https}\n    tls: {mode: ISTIO_MUTUAL}\n", "spec.ingress[0].tls.mode", "cannot be set"},
		{"  - port: {number: 9080, protocol: HTTP, name: http}\n    tls: {mode: SIMPLE, serverCertificate: /c, privateKey: /k}\n",
			"spec.ingress[0].tls", "HTTPS or TLS port"},
	} {
		_, err := parseOne(t, sidecarHead+tc.ingress)
		var fe *config.Error
		if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(fe.Message, tc.message) {
			t.Errorf("%s: got %v, want an error at %s saying %q", tc.ingress, err, tc.field, tc.message)
		}
	}
	for _, ok := range []string{
		"  - port: {number: 9080, protocol: HTTP, name: http}\n    defaultEndpoint: 127.0.0.1:8080\n    bind: 10.1.0.1\n" +
			"    captureMode: IPTABLES\n",
		"  - port: {number: 9080}\n    defaultEndpoint: 0.0.0.0:8080\n  - port: {number: 9081, protocol: grpc-web}\n" +
			"    defaultEndpoint: '[::1]:8081'\n",
		"  - port: {number: 9080, protocol: TCP}\n    defaultEndpoint: unix:///var/run/app.sock\n" +
			"    connectionPool: {tcp: {maxConnections: 10}}\n",
		"  - port: {number: 9080, protocol: TCP}\n    defaultEndpoint: ':8080'\n  inboundConnectionPool: {tcp: {maxConnections: 10}}\n",
		// NONE binds a listener of its own on the port (lds_sidecar.go boundInboundListeners).
		"  - port: {number: 9080, protocol: HTTP, name: http}\n    defaultEndpoint: 127.0.0.1:8080\n    captureMode: NONE\n",
	} {
		c, err := parseOne(t, sidecarHead+ok)
		if err != nil {
			t.Errorf("%s: %v", ok, err)
			continue
		}
		if ws := config.Warnings(c); len(ws) != 0 {
			t.Errorf("%s: warns %v, though Sextant honours it", ok, ws)
		}
	}
}
