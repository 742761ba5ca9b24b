// Package conformance renders the same Kubernetes and Istio YAML with istiod's own generator and with Sextant's,
// normalises both to what each proxy's clusters, endpoints and routes do, and reports where they differ.
package conformance
