// Package debug is the operator surface of the discovery server: /metrics, /debug/pprof/, the JSON debug
// views, the dashboard at /debug/ui, and distribution tracking (which proxies run an object's generation).
package debug
