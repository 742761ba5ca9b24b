package kube

import (
	"fmt"
	"maps"

	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	networkingv1beta1 "istio.io/client-go/pkg/apis/networking/v1beta1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingk8s "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sextantmesh/sextant/pilot/config"
)

// SourceName is the value of config.Config.Source for objects from the cluster.
const SourceName = config.KubeSource

// lastApplied is kubectl's copy of the whole object: large, and never read.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// toConfig wraps an informer object. Kubernetes kinds keep the whole object as Spec; Istio kinds keep
// the istio.io/api message, so layers above see the same types as from the file source.
// The result shares memory with the informer cache, which no one mutates.
func toConfig(obj any) (*config.Config, error) {
	var (
		kind config.Kind
		meta *metav1.ObjectMeta
		spec any
		// conditions are kept for the kinds config.HasConditions names.
		conditions map[string]string
	)
	switch o := obj.(type) {
	case *corev1.Namespace:
		kind, meta, spec = config.Namespace, &o.ObjectMeta, o
	case *corev1.Service:
		kind, meta, spec = config.Service, &o.ObjectMeta, o
	case *corev1.Pod:
		kind, meta, spec = config.Pod, &o.ObjectMeta, o
	case *corev1.Node:
		kind, meta, spec = config.Node, &o.ObjectMeta, o
	case *discoveryv1.EndpointSlice:
		kind, meta, spec = config.EndpointSlice, &o.ObjectMeta, o
	case *corev1.Secret:
		kind, meta, spec = config.Secret, &o.ObjectMeta, o
	case *networkingk8s.Ingress:
		kind, meta, spec = config.Ingress, &o.ObjectMeta, o
	case *networkingk8s.IngressClass:
		kind, meta, spec = config.IngressClass, &o.ObjectMeta, o
	case *networkingv1.ServiceEntry:
		kind, meta, spec = config.ServiceEntry, &o.ObjectMeta, &o.Spec
	case *networkingv1.WorkloadEntry:
		kind, meta, spec = config.WorkloadEntry, &o.ObjectMeta, &o.Spec
		conditions = config.IstioConditions(&o.Status)
	case *networkingv1.DestinationRule:
		kind, meta, spec = config.DestinationRule, &o.ObjectMeta, &o.Spec
	case *networkingv1.VirtualService:
		kind, meta, spec = config.VirtualService, &o.ObjectMeta, &o.Spec
	case *networkingv1.Gateway:
		kind, meta, spec = config.Gateway, &o.ObjectMeta, &o.Spec
	case *networkingv1.Sidecar:
		kind, meta, spec = config.Sidecar, &o.ObjectMeta, &o.Spec
	case *securityv1.AuthorizationPolicy:
		kind, meta, spec = config.AuthorizationPolicy, &o.ObjectMeta, &o.Spec
	case *securityv1.PeerAuthentication:
		kind, meta, spec = config.PeerAuthentication, &o.ObjectMeta, &o.Spec
	case *securityv1.RequestAuthentication:
		kind, meta, spec = config.RequestAuthentication, &o.ObjectMeta, &o.Spec
	case *networkingv1.WorkloadGroup:
		kind, meta, spec = config.WorkloadGroup, &o.ObjectMeta, &o.Spec
	case *networkingv1beta1.ProxyConfig:
		kind, meta, spec = config.ProxyConfig, &o.ObjectMeta, &o.Spec
	default:
		return nil, fmt.Errorf("unexpected object type %T", obj)
	}
	return &config.Config{
		Key:               config.Key{Kind: kind, Namespace: meta.Namespace, Name: meta.Name},
		Labels:            meta.Labels,
		Annotations:       meta.Annotations,
		ResourceVersion:   meta.ResourceVersion,
		Generation:        meta.Generation,
		CreationTimestamp: meta.CreationTimestamp.Time,
		UID:               string(meta.UID),
		Source:            SourceName,
		Spec:              spec,
		Conditions:        conditions,
	}, nil
}

// transform runs on every object before the informer caches it, dropping what Sextant never reads
// so that large clusters cost less memory. It must be idempotent: an object may pass through twice.
func transform(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return slimPod(o), nil
	case *corev1.Node:
		return slimNode(o), nil
	case *corev1.Secret:
		return slimSecret(o), nil
	case metav1.Object:
		stripMeta(o)
	}
	// Anything else (a tombstone, say) passes through untouched.
	return obj, nil
}

func stripMeta(m metav1.Object) {
	m.SetManagedFields(nil)
	m.SetAnnotations(withoutLastApplied(m.GetAnnotations()))
}

// withoutLastApplied copies rather than edits, so a map shared with a caller's object stays as it was.
func withoutLastApplied(a map[string]string) map[string]string {
	if _, ok := a[lastApplied]; !ok {
		return a
	}
	out := maps.Clone(a)
	delete(out, lastApplied)
	if len(out) == 0 {
		return nil
	}
	return out
}

// slimMeta keeps identity, labels and annotations; owner references name a pod's workload and the
// deletion timestamp marks a terminating pod.
func slimMeta(m *metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:              m.Name,
		Namespace:         m.Namespace,
		UID:               m.UID,
		ResourceVersion:   m.ResourceVersion,
		Generation:        m.Generation,
		CreationTimestamp: m.CreationTimestamp,
		DeletionTimestamp: m.DeletionTimestamp,
		Labels:            m.Labels,
		Annotations:       withoutLastApplied(m.Annotations),
		OwnerReferences:   m.OwnerReferences,
	}
}

// slimPod keeps what workload and endpoint building read: placement, identity, ports and readiness.
// Env, volumes, images, probes and the like are the bulk of a pod and are never read.
func slimPod(p *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{
		TypeMeta:   p.TypeMeta,
		ObjectMeta: slimMeta(&p.ObjectMeta),
		Spec: corev1.PodSpec{
			NodeName:           p.Spec.NodeName,
			ServiceAccountName: p.Spec.ServiceAccountName,
			HostNetwork:        p.Spec.HostNetwork,
		},
		Status: corev1.PodStatus{
			Phase:      p.Status.Phase,
			Conditions: p.Status.Conditions,
			HostIP:     p.Status.HostIP,
			HostIPs:    p.Status.HostIPs,
			PodIP:      p.Status.PodIP,
			PodIPs:     p.Status.PodIPs,
		},
	}
	if len(p.Spec.Containers) > 0 {
		out.Spec.Containers = make([]corev1.Container, len(p.Spec.Containers))
		for i, c := range p.Spec.Containers {
			var ports []corev1.ContainerPort
			for _, cp := range c.Ports {
				ports = append(ports, corev1.ContainerPort{Name: cp.Name, ContainerPort: cp.ContainerPort, Protocol: cp.Protocol})
			}
			out.Spec.Containers[i] = corev1.Container{Name: c.Name, Ports: ports}
		}
	}
	return out
}

// secretKeys are the Secret entries a certificate, its key, a CA bundle, a CRL or an OCSP staple are read
// from (istiod's layouts: kubernetes.io/tls and generic).
var secretKeys = map[string]bool{"tls.crt": true, "tls.key": true, "ca.crt": true, "ca.crl": true, "tls.ocsp-staple": true,
	"cert": true, "key": true, "cacert": true, "crl": true}

// slimSecret keeps the entries of secretKeys; the names of the others stay, without their values, so a
// Secret that holds no certificate can be reported with what it does hold. Any Secret in the cluster may
// be large (a kubeconfig, a bundle of files) and only those entries are ever served.
func slimSecret(s *corev1.Secret) *corev1.Secret {
	out := &corev1.Secret{TypeMeta: s.TypeMeta, ObjectMeta: slimMeta(&s.ObjectMeta), Type: s.Type}
	out.Annotations = nil // never read; kubectl's copy of the whole Secret would hold its data
	if len(s.Data) > 0 {
		out.Data = make(map[string][]byte, len(s.Data))
		for k, v := range s.Data {
			if secretKeys[k] {
				out.Data[k] = v
			} else {
				out.Data[k] = nil
			}
		}
	}
	return out
}

// slimNode keeps labels (topology: region, zone) and annotations; a node's status is large and churns.
func slimNode(n *corev1.Node) *corev1.Node {
	return &corev1.Node{TypeMeta: n.TypeMeta, ObjectMeta: slimMeta(&n.ObjectMeta)}
}
