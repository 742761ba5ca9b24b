package kube

import (
	"strings"
	"sync/atomic"
	"testing"

	networking "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/store"
)

func namespaceObj(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1", Labels: labels}}
}

// inNamespace returns a Service and a DestinationRule named name in namespace n.
func inNamespace(n, name string) []runtime.Object {
	svc := newService(name, "1")
	svc.Namespace = n
	dr := &networkingv1.DestinationRule{ObjectMeta: meta(name, "1"), Spec: networking.DestinationRule{Host: name}}
	dr.Namespace = n
	return []runtime.Object{svc, dr}
}

func selectionHarness(t *testing.T) *harness {
	kube := []runtime.Object{namespaceObj("prod", map[string]string{"env": "prod"}), namespaceObj("dev", nil)}
	var istio []runtime.Object
	for _, n := range []string{"prod", "dev"} {
		objs := inNamespace(n, "reviews")
		kube, istio = append(kube, objs[0]), append(istio, objs[1])
	}
	return newHarness(t, harnessOpts{kube: kube, istio: istio,
		selectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"env": "prod"}}}})
}

func TestDiscoverySelectorsLeaveOtherNamespacesUnread(t *testing.T) {
	h := selectionHarness(t)
	for _, kind := range []config.Kind{config.Service, config.DestinationRule} {
		if h.get(kind, "prod", "reviews") == nil {
			t.Errorf("%s prod/reviews not read", kind)
		}
		if h.get(kind, "dev", "reviews") != nil {
			t.Errorf("%s dev/reviews read although no selector selects dev", kind)
		}
	}
	if h.get(config.Namespace, "", "dev") == nil {
		t.Error("namespace dev itself not read: cluster-scoped kinds are always read")
	}
	// The informers keep a stand-in with the key only, not the object.
	for _, kind := range []config.Kind{config.Service, config.DestinationRule} {
		for _, obj := range h.src.informer(kind).GetStore().List() {
			m := obj.(metav1.Object)
			if m.GetNamespace() == "dev" && !isOutsideSelection(obj) {
				t.Errorf("%s informer holds dev/%s as %T, want a stand-in", kind, m.GetName(), obj)
			}
		}
	}
}

func TestDiscoverySelectorsIgnoreChangesOutside(t *testing.T) {
	h := selectionHarness(t)
	var events atomic.Int32
	h.store.AddHandler(func(store.Event) { events.Add(1) })
	svc := newService("reviews", "2")
	svc.Namespace = "dev"
	svc.Spec.Ports[0].Port = 9999
	if _, err := h.kube.CoreV1().Services("dev").Update(h.ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A change inside, after the one outside: once it is in, the one outside was handled too.
	in := newService("ratings", "1")
	in.Namespace = "prod"
	if _, err := h.kube.CoreV1().Services("prod").Create(h.ctx, in, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually("prod/ratings", func() bool { return h.get(config.Service, "prod", "ratings") != nil })
	if n := events.Load(); n != 1 {
		t.Errorf("%d store events, want 1 (the change in prod only)", n)
	}
}

func TestNamespaceSelectedLaterIsReadAndDeselectedIsDropped(t *testing.T) {
	h := selectionHarness(t)
	dev := namespaceObj("dev", map[string]string{"env": "prod"})
	dev.ResourceVersion = "2"
	if _, err := h.kube.CoreV1().Namespaces().Update(h.ctx, dev, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []config.Kind{config.Service, config.DestinationRule} {
		h.eventually(string(kind)+" dev/reviews read once dev is selected", func() bool { return h.get(kind, "dev", "reviews") != nil })
	}
	dev.Labels, dev.ResourceVersion = nil, "3"
	if _, err := h.kube.CoreV1().Namespaces().Update(h.ctx, dev, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []config.Kind{config.Service, config.DestinationRule} {
		h.eventually(string(kind)+" dev/reviews dropped once dev is deselected", func() bool { return h.get(kind, "dev", "reviews") == nil })
	}
	if h.get(config.Service, "prod", "reviews") == nil {
		t.Error("prod/reviews dropped with dev")
	}
}

func TestInvalidDiscoverySelectorIsRefused(t *testing.T) {
	_, err := New(Options{KubeClient: kubefake.NewClientset(), Dynamic: newDynamicFake(), Store: store.New(),
		DiscoverySelectors: []metav1.LabelSelector{{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: "Near"}}}}})
	if err == nil || !strings.Contains(err.Error(), "discoverySelectors[0]") {
		t.Fatalf("err = %v, want one naming discoverySelectors[0]", err)
	}
}
