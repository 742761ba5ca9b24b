// Package xds is the ADS transport: gRPC streams (state-of-the-world and delta), per-connection subscriptions,
// ACK/NACK, and a fair push queue. It knows nothing about Envoy config; generators are registered by type URL.
package xds
