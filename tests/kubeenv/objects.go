package kubeenv

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
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/yaml"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// Decode splits multi-document YAML into objects, skipping empty documents.
func Decode(r io.Reader) ([]*unstructured.Unstructured, error) {
	yr := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var out []*unstructured.Unstructured
	for {
		doc, err := yr.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}

// ReadFile decodes the multi-document YAML file at path.
func ReadFile(path string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	objs, err := Decode(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return objs, nil
}

// IstioCRDFile is the CRD manifest that ships with the istio.io/api module Sextant builds against.
func IstioCRDFile() (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "istio.io/api")
	cmd.Dir = RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m istio.io/api: %w", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "kubernetes", "customresourcedefinitions.gen.yaml"), nil
}

// InstallIstioCRDs creates the Istio CRDs and waits until each is Established and its first list
// answers (a new CRD's endpoint can 404 for a moment after it is Established). It returns how long that took.
func (s *Server) InstallIstioCRDs(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	file, err := IstioCRDFile()
	if err != nil {
		return 0, err
	}
	crds, err := ReadFile(file)
	if err != nil {
		return 0, err
	}
	for _, crd := range crds {
		if _, err := s.Dynamic.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
			return 0, fmt.Errorf("create CRD %s: %w", crd.GetName(), err)
		}
	}
	for _, crd := range crds {
		name := crd.GetName()
		if err := poll(30*time.Second, func() bool {
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
		}); err != nil {
			return 0, fmt.Errorf("CRD %s not Established: %w", name, err)
		}
		group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
		plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
		versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		for _, v := range versions {
			vm, _ := v.(map[string]any)
			if served, _ := vm["served"].(bool); !served {
				continue
			}
			version, _ := vm["name"].(string)
			gvr := schema.GroupVersionResource{Group: group, Version: version, Resource: plural}
			if err := poll(30*time.Second, func() bool {
				_, err := s.Dynamic.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
				return err == nil
			}); err != nil {
				return 0, fmt.Errorf("first list of %s: %w", gvr, err)
			}
		}
	}
	return time.Since(start), nil
}

// Resource is how the API server serves a kind.
type Resource struct {
	schema.GroupVersionResource
	Namespaced bool
	// Status: the resource has a status subresource (a create ignores status; it is written separately).
	Status bool
}

// ResourceFor finds the resource serving gvk, from the API server's discovery.
func ResourceFor(d discovery.DiscoveryInterface, gvk schema.GroupVersionKind) (Resource, error) {
	l, err := d.ServerResourcesForGroupVersion(gvk.GroupVersion().String())
	if err != nil {
		return Resource{}, err
	}
	for _, r := range l.APIResources {
		if r.Kind != gvk.Kind || strings.Contains(r.Name, "/") {
			continue
		}
		out := Resource{GroupVersionResource: gvk.GroupVersion().WithResource(r.Name), Namespaced: r.Namespaced}
		for _, sub := range l.APIResources {
			if sub.Name == r.Name+"/status" {
				out.Status = true
			}
		}
		return out, nil
	}
	return Resource{}, fmt.Errorf("kind %s not served", gvk)
}

// LoosenCRDSpec replaces the spec schema of every version of CRD name (e.g.
// "destinationrules.networking.istio.io") with an object that keeps any field, as a cluster with
// newer or hand-edited CRDs may have: the API server then stores specs that Sextant's types cannot
// decode. A CRD change takes a moment to reach the handlers; callers retry their first write.
func (s *Server) LoosenCRDSpec(ctx context.Context, name string) error {
	crd, err := s.Dynamic.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get CRD %s: %w", name, err)
	}
	versions, _, err := unstructured.NestedSlice(crd.Object, "spec", "versions")
	if err != nil {
		return fmt.Errorf("CRD %s: spec.versions: %w", name, err)
	}
	for i, v := range versions {
		vm, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("CRD %s: spec.versions[%d] is %T, not an object", name, i, v)
		}
		loose := map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}
		if err := unstructured.SetNestedField(vm, loose, "schema", "openAPIV3Schema", "properties", "spec"); err != nil {
			return fmt.Errorf("CRD %s: spec.versions[%d].schema: %w", name, i, err)
		}
	}
	if err := unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions"); err != nil {
		return fmt.Errorf("CRD %s: %w", name, err)
	}
	if _, err := s.Dynamic.Resource(crdGVR).Update(ctx, crd, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update CRD %s: %w", name, err)
	}
	return nil
}
