//go:build integration

package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/source/kube"
)

var drGVR = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "destinationrules"}

// destinationRule is a DestinationRule as the API server stores it; spec may hold what Sextant cannot decode.
func destinationRule(ns, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.istio.io/v1", "kind": "DestinationRule",
		"metadata": map[string]any{"namespace": ns, "name": name},
		"spec":     spec,
	}}
}

func drSpec(host, lb string) map[string]any {
	return map[string]any{"host": host, "trafficPolicy": map[string]any{"loadBalancer": map[string]any{"simple": lb}}}
}

// TestUndecodableObjectIsRejectedAlone: with a DestinationRule CRD whose schema accepts anything in spec (as a
// cluster with newer Istio CRDs does), the API server stores DestinationRules that Sextant's types cannot decode:
// an enum value Sextant does not know and a field of the wrong JSON type. Each is rejected on its own, keeps its
// last good version and is reported; every other DestinationRule keeps flowing, both on the watch and in the
// initial list of a source started later; deleting the bad one deletes it.
func TestUndecodableObjectIsRejectedAlone(t *testing.T) {
	s := startAPIServer(t)
	installIstioCRDs(t, s)
	ctx := context.Background()
	must(t, s.LoosenCRDSpec(ctx, "destinationrules.networking.istio.io"))
	cfg, kubeconfig := leastPrivilege(t, s)
	const ns = "undecodable"
	s.EnsureNamespace(ns)
	drs := s.Dynamic.Resource(drGVR).Namespace(ns)
	h := host(ns, "reviews")

	// The CRD change reaches the API server's handlers a moment later; until then the enum is still checked.
	eventually(t, 30*time.Second, "the loosened CRD to accept an unknown enum value", func() bool {
		_, err := drs.Create(ctx, destinationRule(ns, "probe", drSpec(h, "FUTURE_LB")), metav1.CreateOptions{})
		return err == nil
	})
	must(t, drs.Delete(ctx, "probe", metav1.DeleteOptions{}))
	for _, name := range []string{"good-1", "good-2", "flip"} {
		_, err := drs.Create(ctx, destinationRule(ns, name, drSpec(h, "ROUND_ROBIN")), metav1.CreateOptions{})
		must(t, err)
	}

	src := startSource(t, cfg, time.Hour)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	must(t, src.src.WaitForSync(wctx))
	key := func(name string) config.Key {
		return config.Key{Kind: config.DestinationRule, Namespace: ns, Name: name}
	}
	flipGood := src.store.Get(key("flip"))
	if flipGood == nil || src.store.Get(key("good-1")) == nil || src.store.Get(key("good-2")) == nil {
		t.Fatal("initial sync lacks the DestinationRules")
	}

	// flip turns undecodable on the watch.
	flip, err := drs.Get(ctx, "flip", metav1.GetOptions{})
	must(t, err)
	must(t, unstructured.SetNestedField(flip.Object, "FUTURE_LB", "spec", "trafficPolicy", "loadBalancer", "simple"))
	flip, err = drs.Update(ctx, flip, metav1.UpdateOptions{})
	must(t, err)
	rejected := func(name, rv string) *kube.RejectedObject {
		for _, r := range src.src.Rejected() {
			if r.Key() == key(name) && (rv == "" || r.ResourceVersion == rv) {
				return &r
			}
		}
		return nil
	}
	eventually(t, 20*time.Second, "the undecodable update to be rejected",
		func() bool { return rejected("flip", flip.GetResourceVersion()) != nil })
	r := rejected("flip", "")
	t.Logf("rejected: %+v", *r)
	if r.Field != "spec.trafficPolicy.loadBalancer.simple" || !strings.Contains(r.Message, "FUTURE_LB") {
		t.Errorf("rejection does not name the field and the value: %+v", *r)
	}
	if c := src.store.Get(key("flip")); c == nil || c.ResourceVersion != flipGood.ResourceVersion {
		t.Errorf("store has %v for flip, want its last good version %s", c, flipGood.ResourceVersion)
	}

	// Every other DestinationRule still flows: create, update, delete after the bad one arrived.
	_, err = drs.Create(ctx, destinationRule(ns, "good-3", drSpec(h, "LEAST_REQUEST")), metav1.CreateOptions{})
	must(t, err)
	g1, err := drs.Get(ctx, "good-1", metav1.GetOptions{})
	must(t, err)
	must(t, unstructured.SetNestedField(g1.Object, "RANDOM", "spec", "trafficPolicy", "loadBalancer", "simple"))
	g1, err = drs.Update(ctx, g1, metav1.UpdateOptions{})
	must(t, err)
	must(t, drs.Delete(ctx, "good-2", metav1.DeleteOptions{}))
	// A wrong JSON type, arriving as a new object.
	_, err = drs.Create(ctx, destinationRule(ns, "wrong-type", map[string]any{"host": int64(42)}), metav1.CreateOptions{})
	must(t, err)
	eventually(t, 20*time.Second, "create, update and delete of other DestinationRules", func() bool {
		c1 := src.store.Get(key("good-1"))
		return src.store.Get(key("good-3")) != nil && c1 != nil && c1.ResourceVersion == g1.GetResourceVersion() &&
			src.store.Get(key("good-2")) == nil
	})
	eventually(t, 20*time.Second, "the wrong-type object to be rejected", func() bool { return rejected("wrong-type", "") != nil })
	if r := rejected("wrong-type", ""); r.Field != "spec.host" {
		t.Errorf("wrong-type rejection does not name spec.host: %+v", *r)
	}
	if src.store.Get(key("wrong-type")) != nil {
		t.Error("an object never decoded is in the store")
	}
	if n := len(src.log.lines("wrong-type")); n != 1 {
		t.Errorf("wrong-type logged %d times, want once", n)
	}

	// A source started now meets both in its initial list: it syncs, rejects them and stores the rest.
	later := startSource(t, cfg, time.Hour)
	wctx2, cancel2 := context.WithTimeout(ctx, 30*time.Second)
	defer cancel2()
	if err := later.src.WaitForSync(wctx2); err != nil {
		t.Fatalf("a source whose initial list holds undecodable objects did not sync: %v", err)
	}
	if later.store.Get(key("good-1")) == nil || later.store.Get(key("good-3")) == nil {
		t.Error("the initial list lost decodable DestinationRules")
	}
	if later.store.Get(key("flip")) != nil || later.store.Get(key("wrong-type")) != nil {
		t.Error("a source that never saw a good version stores an undecodable object")
	}
	if got := len(later.src.Rejected()); got != 2 {
		t.Errorf("later source rejected %v, want flip and wrong-type", later.src.Rejected())
	}

	// The discovery server reports them with the rest of its rejected config (/debug/config_errors, the
	// sextant_config_rejected gauge, startup readiness), naming the rejected version.
	sx := startSextant(t, kubeconfig)
	var reported []string
	for _, e := range sx.srv.Rejected() {
		reported = append(reported, e.Error())
	}
	if len(reported) != 2 || !strings.Contains(reported[0], "spec.trafficPolicy.loadBalancer.simple") ||
		!strings.Contains(reported[0], "(resourceVersion "+flip.GetResourceVersion()+")") {
		t.Errorf("discovery server reports %q", reported)
	}
	t.Logf("reported: %q", reported)

	// Deleting an undecodable object deletes it and clears its rejection.
	must(t, drs.Delete(ctx, "flip", metav1.DeleteOptions{}))
	eventually(t, 20*time.Second, "flip deleted and no longer rejected", func() bool {
		return src.store.Get(key("flip")) == nil && rejected("flip", "") == nil
	})
	// Fixing one makes it served.
	wt, err := drs.Get(ctx, "wrong-type", metav1.GetOptions{})
	must(t, err)
	must(t, unstructured.SetNestedField(wt.Object, h, "spec", "host"))
	_, err = drs.Update(ctx, wt, metav1.UpdateOptions{})
	must(t, err)
	eventually(t, 20*time.Second, "the fixed object served and no longer rejected", func() bool {
		return src.store.Get(key("wrong-type")) != nil && rejected("wrong-type", "") == nil
	})
}
