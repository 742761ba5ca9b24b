// Package integration runs Sextant against a real kube-apiserver and etcd started on loopback.
// The tests carry the build tag "integration": run them with `make test-env test-integration`.
package integration
