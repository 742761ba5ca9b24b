package config_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/sextantmesh/sextant/pilot/config"
)

func proxyConfigDoc(spec string) string {
	return "apiVersion: networking.istio.io/v1beta1\nkind: ProxyConfig\nmetadata: {name: pc, namespace: shop}\nspec:\n" + spec
}

// istiod's validation of the kind: selector labels without empty keys or wildcards, concurrency not negative.
func TestValidateProxyConfig(t *testing.T) {
	for _, tc := range []struct{ spec, field, msg string }{
		{"  concurrency: -1\n", "spec.concurrency", "-1: must be greater than or equal to 0"},
		{"  selector: {matchLabels: {app: 'rev*'}}\n", "spec.selector.matchLabels", "wildcard is not supported"},
		{"  selector: {matchLabels: {'': x}}\n", "spec.selector.matchLabels", "empty key is not supported"},
	} {
		// Parse validates: the document is refused, naming the object and the field.
		_, err := config.Parse([]byte(proxyConfigDoc(tc.spec)), "f.yaml", 0, "shop")
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Kind != "ProxyConfig" || ce.Name != "pc" || ce.Field != tc.field || !strings.Contains(ce.Message, tc.msg) {
			t.Errorf("%q: got %v, want %s: %s", tc.spec, err, tc.field, tc.msg)
		}
	}
}

// Every field of the kind is agent-side: each one set is warned, saying so; an empty object warns nothing.
func TestProxyConfigWarnings(t *testing.T) {
	c, err := config.Parse([]byte(proxyConfigDoc("  selector: {matchLabels: {app: a}}\n  concurrency: 2\n"+
		"  environmentVariables: {A: b}\n  image: {imageType: debug}\n")), "f.yaml", 0, "shop")
	if err != nil {
		t.Fatal(err)
	}
	if err := config.Validate(c); err != nil {
		t.Fatal(err)
	}
	var fields []string
	for _, w := range config.Warnings(c) {
		if !strings.HasPrefix(w.Message, "agent-side: ") || !strings.Contains(w.Message, "Sextant runs no sidecar injector") {
			t.Errorf("%s: %s", w.Field, w.Message)
		}
		fields = append(fields, w.Field)
	}
	if want := []string{"spec.selector", "spec.concurrency", "spec.environmentVariables", "spec.image"}; !slices.Equal(fields, want) {
		t.Errorf("warned %v, want %v", fields, want)
	}
	empty, err := config.Parse([]byte(proxyConfigDoc("  {}\n")), "f.yaml", 0, "shop")
	if err != nil {
		t.Fatal(err)
	}
	if ws := config.Warnings(empty); len(ws) != 0 {
		t.Errorf("an empty ProxyConfig warns %v", ws)
	}
}
