package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

// The commit, its time and a dirty checkout come from the vcs settings go build records.
func TestFromVCSSettings(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/sextantmesh/sextant", Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-12-01T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	got := From(bi)
	want := Info{Version: "(devel)", Revision: "0123456789abcdef0123456789abcdef01234567", Time: "2026-12-01T10:00:00Z", Modified: true,
		GoVersion: "go1.26.8"}
	if got != want {
		t.Fatalf("From = %+v, want %+v", got, want)
	}
	if s := got.String(); s != "(devel) commit 0123456789ab (2026-12-01T10:00:00Z, modified), go1.26.8" {
		t.Errorf("String = %q", s)
	}
	if s := From(&debug.BuildInfo{GoVersion: "go1.26.8"}).String(); !strings.Contains(s, "no commit recorded") {
		t.Errorf("a build without vcs info: %q", s)
	}
	tagged := From(&debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}})
	if s := tagged.String(); s != "v1.4.0" {
		t.Errorf("a release without vcs info: %q", s)
	}
}
