// Package kubeenv starts a real etcd and kube-apiserver on loopback (binaries from make test-env) and
// prepares them for Sextant: admin clients, kubeconfig files, the Istio CRDs. Used by tests/integration and tests/load.
package kubeenv
