// Package kube is the Kubernetes source: it watches core objects and Istio's CRDs with shared informers
// and keeps the store's kube layer equal to what the cluster holds, minus objects that fail to decode or
// validate (each keeps its last good version, and is reported).
package kube
