//go:build integration

package integration

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// istioCRDFile is the CRD manifest that ships with the istio.io/api module Sextant builds against.
func istioCRDFile(t testing.TB) string {
	t.Helper()
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "istio.io/api")
	cmd.Dir = repoRoot()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -m istio.io/api: %v", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "kubernetes", "customresourcedefinitions.gen.yaml")
}

// readDocs splits multi-document YAML into objects, skipping empty documents.
func readDocs(t testing.TB, path string) []*unstructured.Unstructured {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := utilyaml.NewYAMLReader(bufio.NewReader(f))
	var out []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}

// installIstioCRDs creates the Istio CRDs and waits until each is Established and its first list
// answers (a new CRD's endpoint can 404 for a moment after it is Established).
func installIstioCRDs(t testing.TB, s *apiServer) time.Duration {
	t.Helper()
	start := time.Now()
	ctx := context.Background()
	crds := readDocs(t, istioCRDFile(t))
	for _, crd := range crds {
		if _, err := s.Dynamic.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create CRD %s: %v", crd.GetName(), err)
		}
	}
	for _, crd := range crds {
		name := crd.GetName()
		eventually(t, 30*time.Second, "CRD "+name+" Established", func() bool {
			got, err := s.Dynamic.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false
			}
			conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return true
				}
			}
			return false
		})
		group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
		plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
		versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		for _, v := range versions {
			vm, _ := v.(map[string]any)
			if served, _ := vm["served"].(bool); !served {
				continue
			}
			gvr := schema.GroupVersionResource{Group: group, Version: vm["name"].(string), Resource: plural}
			eventually(t, 30*time.Second, "first list of "+gvr.String(), func() bool {
				_, err := s.Dynamic.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
				return err == nil
			})
		}
	}
	return time.Since(start)
}

// manifestFiles returns manifests/*.yaml in name order (the order kubectl applies them in).
func manifestFiles(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot(), "manifests", "*.yaml"))
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
		for _, obj := range readDocs(t, file) {
			gvk := obj.GroupVersionKind()
			gvr, namespaced, err := resourceFor(s, gvk)
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
			ri := s.Dynamic.Resource(gvr)
			var res interface {
				Patch(context.Context, string, types.PatchType, []byte, metav1.PatchOptions, ...string) (*unstructured.Unstructured, error)
			} = ri
			if namespaced {
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

// resourceFor finds the resource serving gvk, from the API server's discovery.
func resourceFor(s *apiServer, gvk schema.GroupVersionKind) (schema.GroupVersionResource, bool, error) {
	l, err := s.Kube.Discovery().ServerResourcesForGroupVersion(gvk.GroupVersion().String())
	if err != nil {
		return schema.GroupVersionResource{}, false, err
	}
	for _, r := range l.APIResources {
		if r.Kind == gvk.Kind && !strings.Contains(r.Name, "/") {
			return gvk.GroupVersion().WithResource(r.Name), r.Namespaced, nil
		}
	}
	return schema.GroupVersionResource{}, false, fmt.Errorf("kind %s not served", gvk)
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
