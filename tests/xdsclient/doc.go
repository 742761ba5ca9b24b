// Package xdsclient models how real xDS clients (Envoy over delta and state-of-the-world ADS, ztunnel over
// delta) subscribe, warm, ACK and NACK, so tests can check a live server leaves each one exactly in sync.
package xdsclient
