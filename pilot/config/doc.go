// Package config defines the config objects Sextant reads (Kubernetes core kinds and Istio's CRDs),
// their identity, and how one YAML or JSON document becomes a validated object.
package config
