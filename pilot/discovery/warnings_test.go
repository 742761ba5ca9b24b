package discovery

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/sextantmesh/sextant/pilot/source/kube"
)

// An EnvoyFilter in the cluster, a kind Sextant does not read, is a warning of the server with its count,
// so /debug/config_errors and the dashboard show it.
func TestWarningsListUnreadKinds(t *testing.T) {
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, false)
	s, err := NewServer(Args{ConfigDir: t.TempDir(), GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1alpha3", Resource: "envoyfilters"}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{gvr: "EnvoyFilterList"})
	ef := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{}}}
	ef.SetAPIVersion("networking.istio.io/v1alpha3")
	ef.SetKind("EnvoyFilter")
	ef.SetNamespace("shop")
	ef.SetName("lua")
	if err := dyn.Tracker().Create(gvr, ef, "shop"); err != nil {
		t.Fatal(err)
	}
	kc := kubefake.NewClientset()
	disc := kc.Discovery().(*fakediscovery.FakeDiscovery)
	disc.Resources = []*metav1.APIResourceList{{GroupVersion: "networking.istio.io/v1alpha3",
		APIResources: []metav1.APIResource{{Name: "envoyfilters", Kind: "EnvoyFilter", Namespaced: true}}}}
	src, err := kube.New(kube.Options{KubeClient: kc, Dynamic: dyn, Store: s.Store, Discovery: disc, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	s.kube = src
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { src.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	deadline := time.Now().Add(10 * time.Second)
	for len(src.Unread()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	ws := s.Warnings()
	if len(ws) != 1 || !ws[0].Warning || ws[0].Kind != "EnvoyFilter" ||
		!strings.Contains(ws[0].Message, "1 objects of kind EnvoyFilter (networking.istio.io/v1alpha3)") {
		t.Fatalf("warnings = %+v", ws)
	}
}
