// Package xds is the ADS transport: gRPC streams (state-of-the-world and delta), subscriptions, ACK/NACK and
// a fair push queue, for generators and per-type policies (model.TypePolicy) registered by type URL.
package xds
