//go:build integration

package integration

import (
	"context"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sextantmesh/sextant/tests/kubeenv"
)

// manifestFiles returns manifests/*.yaml in name order (the order kubectl applies them in).
func manifestFiles(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(kubeenv.RepoRoot(), "manifests", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	sort.Strings(files)
	return files
}

// applyManifests server-side applies every object in manifests/ with the admin client; with dryRun the
// server validates and admits them (schema, defaulting, admission) but stores nothing.
func applyManifests(t testing.TB, s *apiServer, dryRun bool) []string {
	t.Helper()
	ctx := context.Background()
	var applied []string
	for _, file := range manifestFiles(t) {
		objs, err := kubeenv.ReadFile(file)
		must(t, err)
		for _, obj := range objs {
			gvk := obj.GroupVersionKind()
			r, err := kubeenv.ResourceFor(s.Kube.Discovery(), gvk)
			if err != nil {
				t.Fatalf("%s: %s %s: %v", filepath.Base(file), gvk, obj.GetName(), err)
			}
			data, err := obj.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			opts := metav1.PatchOptions{FieldManager: "sextant-test", Force: new(true)}
			if dryRun {
				opts.DryRun = []string{metav1.DryRunAll}
			}
			ri := s.Dynamic.Resource(r.GroupVersionResource)
			var res interface {
				Patch(context.Context, string, types.PatchType, []byte, metav1.PatchOptions, ...string) (*unstructured.Unstructured, error)
			} = ri
			if r.Namespaced {
				res = ri.Namespace(obj.GetNamespace())
			}
			if _, err := res.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, opts); err != nil {
				t.Fatalf("apply %s %s/%s from %s: %v", gvk.Kind, obj.GetNamespace(), obj.GetName(), filepath.Base(file), err)
			}
			applied = append(applied, gvk.Kind+" "+obj.GetNamespace()+"/"+obj.GetName())
		}
	}
	return applied
}

// eventually polls cond every 20ms until it holds, failing the test after d.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestManifestsServeOnlyAuthenticatedXDS: a cluster installed from manifests/ must not expose the plaintext xDS
// port, where a client's node claims are believed; proxies reach Sextant on 15012 only.
func TestManifestsServeOnlyAuthenticatedXDS(t *testing.T) {
	var args []string
	var ports []int64
	for _, file := range manifestFiles(t) {
		objs, err := kubeenv.ReadFile(file)
		must(t, err)
		for _, obj := range objs {
			switch obj.GetKind() {
			case "Deployment":
				containers, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
				for _, c := range containers {
					a, _, _ := unstructured.NestedStringSlice(c.(map[string]any), "args")
					args = append(args, a...)
					cp, _, _ := unstructured.NestedSlice(c.(map[string]any), "ports")
					for _, p := range cp {
						n, _, _ := unstructured.NestedInt64(p.(map[string]any), "containerPort")
						ports = append(ports, n)
					}
				}
			case "Service":
				sp, _, _ := unstructured.NestedSlice(obj.Object, "spec", "ports")
				for _, p := range sp {
					n, _, _ := unstructured.NestedInt64(p.(map[string]any), "port")
					ports = append(ports, n)
				}
			}
		}
	}
	if !slices.Contains(args, "--grpc-addr=") {
		t.Errorf("the Deployment's args %q do not turn the plaintext xDS port off (--grpc-addr=)", args)
	}
	if !slices.Contains(args, "--secure-grpc-addr=:15012") {
		t.Errorf("the Deployment's args %q do not serve xDS on 15012", args)
	}
	if slices.Contains(ports, 15010) {
		t.Errorf("manifests expose port 15010 (plaintext, unauthenticated xDS): ports %v", ports)
	}
}
