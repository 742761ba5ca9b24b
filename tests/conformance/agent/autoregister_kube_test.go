package agent

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/sextantmesh/sextant/pilot/autoregister"
	"github.com/sextantmesh/sextant/pilot/discovery"
	"github.com/sextantmesh/sextant/tests/kubeenv"
)

var (
	workloadGroupsGVR  = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "workloadgroups"}
	workloadEntriesGVR = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "workloadentries"}
)

// TestIstioAgentRegistersAVMInTheCluster: with a real API server, the WorkloadGroup read from the cluster,
// the agent's token reviewed by it: the registered WorkloadEntry is written to the cluster, owned by its
// group and naming the replica that holds the agent's connection, read back by the Kubernetes source and
// served to a sidecar; the agent going marks it disconnected and deletes it after the grace period.
func TestIstioAgentRegistersAVMInTheCluster(t *testing.T) {
	api, kubeconfig, vmToken, group := clusterWithVMGroup(t)
	ctx := context.Background()
	s := startSextantArgs(t, discovery.Args{ConfigDir: vmConfigDir(t, false), Kubeconfig: kubeconfig, WorkloadEntryGracePeriod: vmGrace})
	eds := watchEDS(t, s.srv.GRPCAddr(), vmCluster)
	dir, node, stop := runVMAgent(t, s, vmToken, "vmapp")
	if err, _ := connectThroughAgent(t, dir, node); err != nil {
		t.Fatalf("xDS through the VM's agent: %v", err)
	}
	eds.waitFor(t, "the VM registered", 20*time.Second, func(a []string) bool { return slices.Contains(a, vmIP+":8081") })

	entries := api.Dynamic.Resource(workloadEntriesGVR).Namespace("bookinfo")
	e, err := entries.Get(ctx, "vmapp-"+vmIP, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a := e.GetAnnotations()
	if a[autoregister.AnnotationGroup] != "vmapp" || a[autoregister.AnnotationController] == "" ||
		a[autoregister.AnnotationConnectedAt] == "" {
		t.Errorf("annotations %v", a)
	}
	if refs := e.GetOwnerReferences(); len(refs) != 1 || refs[0].Kind != "WorkloadGroup" || refs[0].UID != group.GetUID() ||
		refs[0].Controller == nil || !*refs[0].Controller {
		t.Errorf("owner references %v, want the WorkloadGroup as controller", refs)
	}
	if addr, _, _ := unstructuredString(e.Object, "spec", "address"); addr != vmIP {
		t.Errorf("spec.address %q", addr)
	}

	stop()
	eds.waitFor(t, "the VM gone", 20*time.Second, func(a []string) bool { return !hasVM(a) })
	if _, err := entries.Get(ctx, "vmapp-"+vmIP, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the entry after the grace period: %v, want it deleted from the cluster", err)
	}
}

// With the real API server, the agent's health is written to the entry's status as istiod writes it, read
// back by the Kubernetes source, and gates the VM's endpoint.
func TestIstioAgentHealthWrittenToTheCluster(t *testing.T) {
	api, kubeconfig, vmToken, _ := clusterWithVMGroup(t)
	app, probe := probedApp(t)
	s := startSextantArgs(t, discovery.Args{ConfigDir: vmConfigDir(t, false), Kubeconfig: kubeconfig, WorkloadEntryGracePeriod: vmGrace})
	eds := watchEDS(t, s.srv.GRPCAddr(), vmCluster)
	dir, node, _ := runVMAgent(t, s, vmToken, "vmapp", probe)
	if err, _ := connectThroughAgent(t, dir, node); err != nil {
		t.Fatalf("xDS through the VM's agent: %v", err)
	}
	eds.waitFor(t, "the VM ready", 20*time.Second, hasVM)
	entries := api.Dynamic.Resource(workloadEntriesGVR).Namespace("bookinfo")
	if got := healthyCondition(t, entries.Get); got["status"] != "True" || got["lastProbeTime"] == nil {
		t.Errorf("status condition Healthy %v, want True with its probe time", got)
	}
	app.Close()
	eds.waitFor(t, "the VM not ready", 20*time.Second, func(a []string) bool { return !hasVM(a) })
	if got := healthyCondition(t, entries.Get); got["status"] != "False" || got["message"] == "" {
		t.Errorf("status condition Healthy %v, want False with the probe's failure", got)
	}
}

// clusterWithVMGroup starts the API server with Istio's CRDs and the VM's WorkloadGroup, and returns it, its
// kubeconfig, the token of the group's service account and the group as created.
func clusterWithVMGroup(t *testing.T) (*kubeenv.Server, string, string, *unstructured.Unstructured) {
	t.Helper()
	api, kubeconfig := startAPIServer(t)
	ctx := context.Background()
	if _, err := api.InstallIstioCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	vmToken := token(t, api, "bookinfo", "vmapp")
	groups, err := kubeenv.Decode(strings.NewReader(vmGroupYAML))
	if err != nil {
		t.Fatal(err)
	}
	group, err := api.Dynamic.Resource(workloadGroupsGVR).Namespace("bookinfo").Create(ctx, groups[0], metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return api, kubeconfig, vmToken, group
}

// healthyCondition reads the entry's Healthy status condition from the cluster.
func healthyCondition(t *testing.T, get func(context.Context, string, metav1.GetOptions, ...string) (*unstructured.Unstructured,
	error)) map[string]any {
	t.Helper()
	e, err := get(context.Background(), "vmapp-"+vmIP, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	conditions, _, _ := unstructured.NestedSlice(e.Object, "status", "conditions")
	for _, c := range conditions {
		if m, ok := c.(map[string]any); ok && m["type"] == "Healthy" {
			return m
		}
	}
	return nil
}

func unstructuredString(obj map[string]any, path ...string) (string, bool, error) {
	for _, p := range path[:len(path)-1] {
		m, ok := obj[p].(map[string]any)
		if !ok {
			return "", false, nil
		}
		obj = m
	}
	v, ok := obj[path[len(path)-1]].(string)
	return v, ok, nil
}
