// Package e2e runs Sextant as a whole against real xDS clients written by others (gRPC's proxyless
// client), over loopback.
package e2e
