package kube

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	kjson "sigs.k8s.io/json"

	"github.com/sextantmesh/sextant/pilot/config"
)

// crdTypes are the typed objects the Istio kinds decode into: the same types Istio's clientset returns, so
// toConfig and every layer above see what they always did.
var crdTypes = map[config.Kind]func() runtime.Object{
	config.ServiceEntry:        func() runtime.Object { return &networkingv1.ServiceEntry{} },
	config.WorkloadEntry:       func() runtime.Object { return &networkingv1.WorkloadEntry{} },
	config.DestinationRule:     func() runtime.Object { return &networkingv1.DestinationRule{} },
	config.VirtualService:      func() runtime.Object { return &networkingv1.VirtualService{} },
	config.Gateway:             func() runtime.Object { return &networkingv1.Gateway{} },
	config.Sidecar:             func() runtime.Object { return &networkingv1.Sidecar{} },
	config.AuthorizationPolicy: func() runtime.Object { return &securityv1.AuthorizationPolicy{} },
	config.PeerAuthentication:  func() runtime.Object { return &securityv1.PeerAuthentication{} },
}

func crdGVR(ki config.KindInfo) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: ki.Group, Version: ki.Versions[0], Resource: ki.Plural}
}

// undecodable stands in the informer cache for an object the API server holds but Sextant's types cannot:
// an enum value from newer Istio CRDs, a field of the wrong JSON type under a permissive schema. Keeping its
// metadata lets the source reject it by name and delete it on a delete event like any other object.
type undecodable struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Kind  config.Kind
	Field string // the innermost field that fails to decode, e.g. spec.trafficPolicy.loadBalancer.simple; empty if unknown
	Err   string // what is wrong, with the field's value when Field is known
}

func (u *undecodable) DeepCopyObject() runtime.Object {
	c := *u
	u.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return &c
}

// crdTransform turns what the dynamic informer lists and watches into the typed object of kind, or into an
// undecodable marker, before the informer caches it. One bad object thus no longer fails the decoding of the
// whole list or watch stream, which froze the kind's informer. Like transform, it is idempotent.
func crdTransform(kind config.Kind) cache.TransformFunc {
	return func(obj any) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return transform(obj)
		}
		typed := decodeCRD(kind, u)
		if m, ok := typed.(metav1.Object); ok {
			stripMeta(m)
		}
		return typed, nil
	}
}

// decodeCRD decodes u as kind's typed object, as Istio's typed client would have, or returns an undecodable.
// Status is dropped first: Sextant never reads it, and a status it cannot decode must not hide a good spec.
func decodeCRD(kind config.Kind, u *unstructured.Unstructured) runtime.Object {
	obj := u.Object
	if _, ok := obj["status"]; ok {
		obj = make(map[string]any, len(u.Object))
		for k, v := range u.Object {
			if k != "status" {
				obj[k] = v
			}
		}
	}
	out, err := decodeInto(kind, obj)
	if err == nil {
		return out
	}
	bad := &undecodable{Kind: kind, Err: "cannot decode: " + err.Error()}
	if field, value := badField(kind, obj); field != "" {
		bad.Field = field
		// The decoder's error names Go types and its own view of the path; the value shows what to fix.
		if b, jerr := json.Marshal(value); jerr == nil && len(b) <= maxValueInError {
			bad.Err = "cannot decode " + string(b) + ": " + err.Error()
		}
	}
	// The API server validated the metadata, so it reads back whatever the spec holds.
	bad.Name, bad.Namespace = u.GetName(), u.GetNamespace()
	bad.UID, bad.ResourceVersion, bad.Generation = u.GetUID(), u.GetResourceVersion(), u.GetGeneration()
	bad.Labels, bad.Annotations = u.GetLabels(), u.GetAnnotations()
	bad.CreationTimestamp = u.GetCreationTimestamp()
	return bad
}

// maxValueInError bounds the bad value quoted in a rejection; a larger one is left to the object itself.
const maxValueInError = 200

func decodeInto(kind config.Kind, obj map[string]any) (runtime.Object, error) {
	newObj, ok := crdTypes[kind]
	if !ok {
		return nil, fmt.Errorf("kind %s is not an Istio kind", kind)
	}
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	out := newObj()
	// Case-sensitive, with integers kept, as client-go's JSON serializer decodes; each spec's UnmarshalJSON
	// ignores unknown fields, as Istio's typed client does.
	if err := kjson.UnmarshalCaseSensitivePreserveInts(data, out); err != nil {
		return nil, err
	}
	return out, nil
}

// badField finds the innermost field of obj whose value alone fails to decode, and that value, by decoding
// one branch of the object at a time. It runs only for objects that failed, so its cost (a decode per
// level and sibling) is paid once per bad version.
func badField(kind config.Kind, obj map[string]any) (string, any) {
	fails := func(v any) bool {
		m, _ := v.(map[string]any)
		_, err := decodeInto(kind, m)
		return err != nil
	}
	return locate(obj, func(v any) any { return v }, fails, "")
}

// locate descends into v (which wrap puts back at its place in the object) while exactly the branch under
// one key or index fails on its own; path is where v is. A failure that needs two branches together stops
// the descent at their parent.
func locate(v any, wrap func(any) any, fails func(any) bool, path string) (string, any) {
	switch t := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			inner := func(x any) any { return wrap(map[string]any{k: x}) }
			if fails(inner(t[k])) {
				p := k
				if path != "" {
					p = path + "." + k
				}
				return locate(t[k], inner, fails, p)
			}
		}
	case []any:
		for i, e := range t {
			inner := func(x any) any { return wrap([]any{x}) }
			if fails(inner(e)) {
				return locate(e, inner, fails, path+"["+strconv.Itoa(i)+"]")
			}
		}
	}
	return path, v
}
