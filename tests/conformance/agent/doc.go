// Package agent checks Sextant's secure port and CA against Istio's own clients: the sidecar agent and
// its CA client (citadel), run as they are from istio.io/istio, and a model of ztunnel's control-plane
// client written from ztunnel's source (ztunnel is Rust and cannot run here; see ztunnel_model_test.go).
package agent
