package envoy

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files under testdata")

// golden compares messages, as a JSON array of protojson, with testdata/DIR/NAME.json (-update rewrites).
func golden[T proto.Message](t *testing.T, dir, name string, msgs []T) {
	t.Helper()
	parts := make([][]byte, 0, len(msgs))
	for _, m := range msgs {
		b, err := protojson.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, b)
	}
	goldenJSON(t, dir, name, append(append([]byte("["), bytes.Join(parts, []byte(","))...), ']'))
}

// goldenJSON compares JSON with testdata/DIR/NAME.json. protojson's spacing is deliberately unstable, so the
// JSON is compacted and re-indented first.
func goldenJSON(t *testing.T, dir, name string, js []byte) {
	t.Helper()
	var compact, got bytes.Buffer
	if err := json.Compact(&compact, js); err != nil {
		t.Fatal(err)
	}
	if err := json.Indent(&got, compact.Bytes(), "", "  "); err != nil {
		t.Fatal(err)
	}
	got.WriteByte('\n')
	path := filepath.Join("testdata", dir, name+".json")
	if *updateGolden {
		if err := os.WriteFile(path, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(want, got.Bytes()) {
		t.Errorf("%s differs from the generated configuration (run with -update to accept):\n%s", path, lineDiff(string(want), got.String()))
	}
}

// lineDiff shows the first differing line.
func lineDiff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := range max(len(wl), len(gl)) {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			return "line " + strconv.Itoa(i+1) + ":\n- " + w + "\n+ " + g
		}
	}
	return ""
}
