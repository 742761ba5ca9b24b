package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A real go test -json run of a small module with a passing, a failing and two skipped tests (one a
// subtest), read as make test reads the suite's.
func TestReportOfARealRun(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/m\n\ngo 1.22\n",
		"m_test.go": `package m

import "testing"

func TestPasses(t *testing.T) { t.Log("passing chatter") }

func TestFails(t *testing.T) { t.Log("the reason it failed") ; t.Fail() }

func TestSkipped(t *testing.T) { t.Skip("needs chromium") }

func TestParent(t *testing.T) {
	t.Run("child", func(t *testing.T) { t.Skipf("no %s here", "cluster") })
}
`,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "test", "-json", "-count=1", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
	stream, err := cmd.Output()
	if err == nil {
		t.Fatal("go test passed a package with a failing test")
	}
	var out bytes.Buffer
	r := newReader(&out)
	sc := bufio.NewScanner(bytes.NewReader(stream))
	for sc.Scan() {
		r.line(sc.Bytes())
	}
	r.summary()
	got := out.String()
	for _, want := range []string{
		"--- FAIL: TestFails",
		"the reason it failed",
		"FAIL\texample.com/m",
		"skipped (2):\n  example.com/m TestParent/child: m_test.go:12: no cluster here\n" +
			"  example.com/m TestSkipped: m_test.go:9: needs chromium\n",
		"failed (1):\n  example.com/m TestFails\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	for _, unwanted := range []string{"passing chatter", "=== RUN"} {
		if strings.Contains(got, unwanted) {
			t.Errorf("report holds %q, which go test without -v does not print:\n%s", unwanted, got)
		}
	}
}
