package autoregister

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	networking "istio.io/api/networking/v1alpha3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/sextantmesh/sextant/pilot/config"
)

// The API version entries are written in, and the WorkloadGroup's in an entry's owner reference.
const apiVersion = "networking.istio.io/v1"

var workloadEntries = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "workloadentries"}

// KubeEntries writes registered entries to the cluster's API server; the Kubernetes source reads them back
// like any WorkloadEntry. An entry is owned by its WorkloadGroup (deleting the group deletes its entries).
type KubeEntries struct {
	client dynamic.Interface
}

// NewKubeEntries returns Entries kept in the cluster c talks to.
func NewKubeEntries(c dynamic.Interface) *KubeEntries { return &KubeEntries{client: c} }

var _ Entries = (*KubeEntries)(nil)

func (k *KubeEntries) Get(ctx context.Context, key config.Key) (*config.Config, error) {
	u, err := k.client.Resource(workloadEntries).Namespace(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return fromUnstructured(u)
}

func (k *KubeEntries) Create(ctx context.Context, e, owner *config.Config) error {
	u, err := toUnstructured(e)
	if err != nil {
		return err
	}
	if owner != nil && owner.UID != "" {
		controller := true
		u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: apiVersion, Kind: string(config.WorkloadGroup), Name: owner.Name,
			UID: types.UID(owner.UID), Controller: &controller}})
	}
	_, err = k.client.Resource(workloadEntries).Namespace(e.Namespace).Create(ctx, u, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return ErrExists
	}
	return err
}

// Update writes e over the object as stored, so what e does not hold (owner references, status) is kept.
func (k *KubeEntries) Update(ctx context.Context, e *config.Config) error {
	res := k.client.Resource(workloadEntries).Namespace(e.Namespace)
	cur, err := res.Get(ctx, e.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || err == nil && cur.GetResourceVersion() != e.ResourceVersion {
		return ErrConflict
	}
	if err != nil {
		return err
	}
	u, err := toUnstructured(e)
	if err != nil {
		return err
	}
	cur.Object["spec"] = u.Object["spec"]
	cur.SetLabels(e.Labels)
	cur.SetAnnotations(e.Annotations)
	_, err = res.Update(ctx, cur, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return ErrConflict
	}
	return err
}

func (k *KubeEntries) Delete(ctx context.Context, key config.Key, resourceVersion string) error {
	err := k.client.Resource(workloadEntries).Namespace(key.Namespace).Delete(ctx, key.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &resourceVersion}})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err):
		return ErrConflict
	}
	return err
}

// SetHealth writes the Healthy condition through the status subresource, as istiod does, keeping the
// object's other conditions.
func (k *KubeEntries) SetHealth(ctx context.Context, key config.Key, h Health) error {
	res := k.client.Resource(workloadEntries).Namespace(key.Namespace)
	cur, err := res.Get(ctx, key.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ErrConflict
	}
	if err != nil {
		return err
	}
	conditions, _, _ := unstructured.NestedSlice(cur.Object, "status", "conditions")
	healthy := map[string]any{"type": conditionHealthy, "status": conditionStatus(h.Healthy),
		"lastProbeTime": h.At.UTC().Format(time.RFC3339Nano), "lastTransitionTime": h.At.UTC().Format(time.RFC3339Nano)}
	if !h.Healthy {
		healthy["message"] = h.Message
	}
	kept := []any{}
	for _, c := range conditions {
		if m, ok := c.(map[string]any); !ok || m["type"] != conditionHealthy {
			kept = append(kept, c)
		}
	}
	if err := unstructured.SetNestedSlice(cur.Object, append(kept, healthy), "status", "conditions"); err != nil {
		return err
	}
	_, err = res.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return ErrConflict
	}
	return err
}

// toUnstructured is e as the API server takes it; the spec in Istio's JSON (protobuf JSON names).
func toUnstructured(e *config.Config) (*unstructured.Unstructured, error) {
	b, err := protojson.Marshal(e.Spec.(*networking.WorkloadEntry))
	if err != nil {
		return nil, fmt.Errorf("WorkloadEntry %s/%s: %w", e.Namespace, e.Name, err)
	}
	var spec map[string]any
	if err := json.Unmarshal(b, &spec); err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": string(config.WorkloadEntry), "spec": spec}}
	u.SetNamespace(e.Namespace)
	u.SetName(e.Name)
	u.SetLabels(e.Labels)
	u.SetAnnotations(e.Annotations)
	return u, nil
}

func fromUnstructured(u *unstructured.Unstructured) (*config.Config, error) {
	b, err := json.Marshal(u.Object["spec"])
	if err != nil {
		return nil, err
	}
	spec := &networking.WorkloadEntry{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, spec); err != nil {
		return nil, fmt.Errorf("WorkloadEntry %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return &config.Config{
		Key:    config.Key{Kind: config.WorkloadEntry, Namespace: u.GetNamespace(), Name: u.GetName()},
		Labels: u.GetLabels(), Annotations: u.GetAnnotations(), ResourceVersion: u.GetResourceVersion(), UID: string(u.GetUID()),
		Source: config.KubeSource, Spec: spec, Conditions: config.IstioConditions(config.UnstructuredIstioStatus(u.Object)),
	}, nil
}
