package config

import (
	"cmp"
	"fmt"
	"time"
)

// Key identifies one config object. Namespace is empty for cluster-scoped kinds.
type Key struct {
	Kind      Kind
	Namespace string
	Name      string
}

func (k Key) String() string {
	if k.Namespace == "" {
		return string(k.Kind) + "/" + k.Name
	}
	return string(k.Kind) + "/" + k.Namespace + "/" + k.Name
}

// NamespacedName returns "namespace/name" (or "name" when cluster-scoped).
func (k Key) NamespacedName() string {
	if k.Namespace == "" {
		return k.Name
	}
	return k.Namespace + "/" + k.Name
}

// CompareKeys orders keys by kind, namespace, name.
func CompareKeys(a, b Key) int {
	if c := cmp.Compare(a.Kind, b.Kind); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}

// KubeSource is the Source of objects read from a Kubernetes cluster.
const KubeSource = "kube"

// Config is one config object. It is immutable once handed to the store: a change is a new *Config.
//
// Spec holds the upstream Go type: for Kubernetes kinds the whole object (*corev1.Service, *corev1.Pod,
// *corev1.Node, *corev1.Namespace, *discoveryv1.EndpointSlice), for Istio kinds the istio.io/api message
// (*networking.VirtualService, *security.AuthorizationPolicy, ...).
type Config struct {
	Key
	Labels            map[string]string
	Annotations       map[string]string
	ResourceVersion   string
	Generation        int64
	CreationTimestamp time.Time
	UID               string
	// Source says where the object came from: "file:PATH#INDEX" or KubeSource.
	Source string
	Spec   any
	// Conditions are the object's status conditions (type → "True", "False", "Unknown"), kept for the kinds
	// HasConditions names.
	Conditions map[string]string
}

func (c *Config) String() string {
	return fmt.Sprintf("%s (from %s)", c.Key, c.Source)
}
