package e2e

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A binary built by go build inside the checkout says which commit it is, in `sextant version` and in its
// JSON form (what the server's /version answers).
func TestVersionNamesTheCommit(t *testing.T) {
	root := moduleRoot(t)
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	commit := strings.TrimSpace(string(head))
	bin := filepath.Join(t.TempDir(), "sextant")
	// -buildvcs=true: GOFLAGS may turn the stamp off, and this is the build that carries it.
	build := exec.Command("go", "build", "-buildvcs=true", "-o", bin, "./cmd/sextant")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil || !strings.Contains(string(out), "commit "+commit[:12]) {
		t.Fatalf("sextant version: %v\n%s\nwant commit %s", err, out, commit[:12])
	}
	out, err = exec.Command(bin, "version", "-o", "json").Output()
	var info struct{ Version, Revision, Time string }
	if err != nil || json.Unmarshal(out, &info) != nil || info.Revision != commit || info.Time == "" || info.Version == "" {
		t.Fatalf("sextant version -o json: %v\n%s", err, out)
	}
}
