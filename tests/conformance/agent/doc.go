// Package agent checks Sextant's secure port and CA against Istio's own clients: the CA client the
// sidecar agent and ztunnel's peers use (citadel), run as they are from istio.io/istio.
package agent
