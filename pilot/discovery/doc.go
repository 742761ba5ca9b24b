// Package discovery assembles the discovery server: sources, config store, push pipeline, the xDS gRPC
// listener and the HTTP listener, started and stopped together.
package discovery
