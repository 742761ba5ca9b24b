package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/sextantmesh/sextant/pilot/config"
)

// fuzzSeedFiles are the YAML files the parser is known to read: the shipped example and the generators'
// test meshes. Each document becomes a seed, and a small file a seed whole: the fuzzer minimizes every new
// input it keeps, and minimizing one of 8 KB took most of a minute.
var fuzzSeedFiles = []string{
	"../../examples/bookinfo/*.yaml",
	"../envoy/testdata/*/*.yaml",
}

// fuzzEdgeCases are small documents at the parser's edges: separators, JSON, null and wrong shapes,
// names at their length limits, and values protojson and the JSON decoder each read differently.
var fuzzEdgeCases = []string{
	"",
	"---\n---\n",
	"null\n",
	"[]\n",
	"42\n",
	"{\"apiVersion\": \"v1\", \"kind\": \"Service\", \"metadata\": {\"name\": \"a\"}, \"spec\": {\"ports\": [{\"port\": 80}]}}",
	"apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {ports: [{port: 0}]}\n",
	"apiVersion: v1\nkind: Service\nmetadata: {name: a, namespace: " + strings.Repeat("n", 64) + "}\n",
	"apiVersion: v1\nkind: Namespace\nmetadata: {name: " + strings.Repeat("a", 253) + "}\n",
	"apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: v}\n" +
		"spec: {hosts: [a], http: [{route: [{destination: {host: a}, weight: 1e3}]}]}\n",
	"apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: v}\n" +
		"spec: {http: [{route: [{destination: {host: a, port: {number: \"80\"}}}]}]}\n",
	"apiVersion: networking.istio.io/v1beta1\nkind: DestinationRule\nmetadata: {name: d}\n" +
		"spec: {host: a, subsets: [{name: v1, labels: {version: v1}}]}\nstatus: {}\n",
	"apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: p}\n" +
		"spec: {action: DENY, rules: [{from: [{source: {ipBlocks: [\"10.0.0.0/33\"]}}]}]}\n",
	"apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: p}\nspec: {mtls: {mode: 7}}\n",
	"apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: s}\n" +
		"spec: {hosts: [\"*.x\"], ports: [{number: 443, name: tls, protocol: TLS}], resolution: DNS, endpoints: [{address: \"\\u00e9.x\"}]}\n",
	"apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: e}\naddressType: IPv4\nendpoints: [{addresses: [\"::1\"]}]\n" +
		"ports: [{port: -1}]\n",
	"apiVersion: v1\nkind: Pod\nmetadata: {name: p, creationTimestamp: \"2026-13-01T00:00:00Z\"}\n",
	"apiVersion: v1\nkind: Service\nmetadata: &m {name: a}\nspec: {selector: *m}\n",
	"a: |\n  x\n  ---y\n---\nkind: Service\n",
}

const fuzzWholeFileSeed = 1 << 10

func FuzzParse(f *testing.F) {
	for _, pattern := range fuzzSeedFiles {
		files, err := filepath.Glob(pattern)
		if err != nil {
			f.Fatal(err)
		}
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			if len(data) <= fuzzWholeFileSeed {
				f.Add(data)
			}
			docs, err := config.SplitDocuments(data)
			if err != nil {
				f.Fatalf("%s: %v", file, err)
			}
			for _, d := range docs {
				if !config.IsEmptyDocument(d) {
					f.Add(d)
				}
			}
		}
	}
	for _, d := range validDocs {
		f.Add([]byte(d.doc))
	}
	for _, d := range fuzzEdgeCases {
		f.Add([]byte(d))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		docs, err := config.SplitDocuments(data)
		if err != nil && docs == nil {
			return
		}
		// Documents read before a split error are what the file source still loads: parse them too.
		for i, d := range docs {
			c, err := config.Parse(d, "fuzz.yaml", i, "fuzz-ns")
			if err != nil {
				checkParseError(t, i, c, err)
				continue
			}
			checkParsed(t, d, i, c)
		}
	})
}

// checkParseError holds a rejection to what the file source and the validate command show: an *Error that
// names the file and the document, with a message.
func checkParseError(t *testing.T, index int, c *config.Config, err error) {
	t.Helper()
	if c != nil {
		t.Fatalf("document %d: Parse returned both %v and an error: %v", index, c, err)
	}
	var e *config.Error
	if !errors.As(err, &e) {
		t.Fatalf("document %d: error %T is not a *config.Error: %v", index, err, err)
	}
	if e.File != "fuzz.yaml" || e.Index != index || e.Message == "" {
		t.Fatalf("document %d: error %+v does not name its file and document, or has no message", index, e)
	}
	if !strings.Contains(e.Error(), "fuzz.yaml: document ") {
		t.Fatalf("document %d: Error() = %q", index, e.Error())
	}
}

// checkParsed holds an accepted document to what the store relies on: a key that fits the kind's scope,
// a spec of the kind's type that validates again, and the same result from the same bytes.
func checkParsed(t *testing.T, doc []byte, index int, c *config.Config) {
	t.Helper()
	if c == nil || c.Spec == nil {
		t.Fatalf("document %d: Parse returned no error and config %v", index, c)
	}
	info, ok := config.Info(c.Kind)
	if !ok {
		t.Fatalf("document %d: unknown kind %q accepted", index, c.Kind)
	}
	if c.Name == "" {
		t.Fatalf("document %d: %s accepted without a name", index, c.Key)
	}
	if info.Namespaced != (c.Namespace != "") {
		t.Fatalf("document %d: %s: namespaced=%v but namespace %q", index, c.Key, info.Namespaced, c.Namespace)
	}
	if err := config.Validate(c); err != nil {
		t.Fatalf("document %d: %s accepted by Parse but Validate says: %v", index, c.Key, err)
	}
	again, err := config.Parse(doc, "fuzz.yaml", index, "fuzz-ns")
	if err != nil {
		t.Fatalf("document %d: accepted once, rejected the second time: %v", index, err)
	}
	if !sameConfig(c, again) {
		t.Fatalf("document %d: two parses of the same bytes differ:\n%+v\n%+v", index, c, again)
	}
}

// sameConfig compares two parses. Istio specs are protobuf messages, which reflect.DeepEqual cannot compare.
func sameConfig(a, b *config.Config) bool {
	sa, sb := a.Spec, b.Spec
	ac, bc := *a, *b
	ac.Spec, bc.Spec = nil, nil
	if !reflect.DeepEqual(ac, bc) {
		return false
	}
	if pa, ok := sa.(proto.Message); ok {
		pb, ok := sb.(proto.Message)
		return ok && proto.Equal(pa, pb)
	}
	return reflect.DeepEqual(sa, sb)
}
