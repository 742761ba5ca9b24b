package kube

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	networkingv1beta1 "istio.io/client-go/pkg/apis/networking/v1beta1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	kjson "sigs.k8s.io/json"

	"github.com/sextantmesh/sextant/pilot/config"
)

// crdTypes make the typed object of each Istio kind, with pointers to its metadata and its spec: the same
// types Istio's clientset returns, so toConfig and every layer above see what they always did.
var crdTypes = map[config.Kind]func() (runtime.Object, *metav1.ObjectMeta, any){
	config.ServiceEntry: func() (runtime.Object, *metav1.ObjectMeta, any) {
		o := &networkingv1.ServiceEntry{}
		return o, &o.ObjectMeta, &o.Spec
	},
	config.WorkloadEntry: func() (runtime.Object, *metav1.ObjectMeta, any) {
		o := &networkingv1.WorkloadEntry{}
		return o, &o.ObjectMeta, &o.Spec
	},
	config.DestinationRule: func() (runtime.Object, *metav1.ObjectMeta, any) {
		o := &networkingv1.DestinationRule{}
		return o, &o.ObjectMeta, &o.Spec
	},
	config.VirtualService: func() (runtime.Object, *metav1.ObjectMeta, any) {
		o := &networkingv1.VirtualService{}
		return o, &o.ObjectMeta, &o.Spec
	},
	config.Gateway: func() (runtime.Object, *metav1.ObjectMeta, any) {
		o := &networkingv1.Gateway{}
		return o, &o.ObjectMeta, &o.Spec
	},
	config.Sidecar: func() (runtime.Object, *metav1.ObjectMeta, any) {
		o := &networkingv1.Sidecar{}
		return o, &o.ObjectMeta, &o.Spec
	},
	config.AuthorizationPolicy: func() (runtime.Object, *metav1.ObjectMeta, any) {
		o := &securityv1.AuthorizationPolicy{}
		return o, &o.ObjectMeta, &o.Spec
	},
	config.PeerAuthentication: func() (runtime.Object, *metav1.ObjectMeta, any) {
		o := &securityv1.PeerAuthentication{}
		return o, &o.ObjectMeta, &o.Spec
	},
	config.RequestAuthentication: func() (runtime.Object, *metav1.ObjectMeta, any) {
		o := &securityv1.RequestAuthentication{}
		return o, &o.ObjectMeta, &o.Spec
	},
	config.WorkloadGroup: func() (runtime.Object, *metav1.ObjectMeta, any) {
		o := &networkingv1.WorkloadGroup{}
		return o, &o.ObjectMeta, &o.Spec
	},
	config.ProxyConfig: func() (runtime.Object, *metav1.ObjectMeta, any) {
		o := &networkingv1beta1.ProxyConfig{}
		return o, &o.ObjectMeta, &o.Spec
	},
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
	Kind config.Kind
	// the innermost field that fails to decode, e.g. spec.trafficPolicy.loadBalancer.simple; its parent when
	// only fields together fail
	Field string
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

// decodeCRD decodes u as kind's typed object, or returns an undecodable. Only the spec goes through JSON
// (each spec's UnmarshalJSON ignores unknown fields, as Istio's typed client does): the metadata, which the
// API server validated, is copied from the map, skipping the JSON round trip of managedFields and of
// kubectl's last-applied copy, which are dropped anyway. Of the status only the conditions of the kinds
// config.HasConditions names are read, type and status alone, leniently: a status Sextant cannot decode
// must not hide a good spec.
func decodeCRD(kind config.Kind, u *unstructured.Unstructured) runtime.Object {
	var m metav1.ObjectMeta
	m.Name, m.Namespace = u.GetName(), u.GetNamespace()
	m.UID, m.ResourceVersion, m.Generation = u.GetUID(), u.GetResourceVersion(), u.GetGeneration()
	m.CreationTimestamp, m.DeletionTimestamp = u.GetCreationTimestamp(), u.GetDeletionTimestamp()
	m.Labels, m.Annotations = u.GetLabels(), withoutLastApplied(u.GetAnnotations())
	m.OwnerReferences = u.GetOwnerReferences()

	spec := u.Object["spec"]
	out, meta, err := decodeSpec(kind, spec)
	if err == nil {
		*meta = m
		out.GetObjectKind().SetGroupVersionKind(u.GroupVersionKind())
		if we, ok := out.(*networkingv1.WorkloadEntry); ok && config.HasConditions(kind) {
			we.Status.Conditions = config.UnstructuredIstioStatus(u.Object).Conditions
		}
		return out
	}
	bad := &undecodable{TypeMeta: metav1.TypeMeta{APIVersion: u.GetAPIVersion(), Kind: u.GetKind()}, ObjectMeta: m, Kind: kind,
		Err: "cannot decode: " + err.Error()}
	fails := func(v any) bool {
		_, _, err := decodeSpec(kind, v)
		return err != nil
	}
	field, value := locate(spec, func(v any) any { return v }, fails, "spec")
	bad.Field = field
	// The decoder's error names Go types and its own view of the path; the value shows what to fix.
	if b, jerr := json.Marshal(value); jerr == nil && len(b) <= maxValueInError {
		bad.Err = "cannot decode " + string(b) + ": " + err.Error()
	}
	return bad
}

// maxValueInError bounds the bad value quoted in a rejection; a larger one is left to the object itself.
const maxValueInError = 200

// decodeSpec returns a new object of kind with spec decoded into it, and its metadata for the caller to fill.
func decodeSpec(kind config.Kind, spec any) (runtime.Object, *metav1.ObjectMeta, error) {
	newObj, ok := crdTypes[kind]
	if !ok {
		return nil, nil, fmt.Errorf("kind %s is not an Istio kind", kind)
	}
	out, meta, target := newObj()
	if spec != nil {
		data, err := json.Marshal(spec)
		if err != nil {
			return nil, nil, err
		}
		// Case-sensitive, with integers kept, as client-go's JSON serializer decodes.
		if err := kjson.UnmarshalCaseSensitivePreserveInts(data, target); err != nil {
			return nil, nil, err
		}
	}
	return out, meta, nil
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
