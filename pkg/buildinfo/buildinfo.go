package buildinfo

import (
	"runtime/debug"
	"strings"
)

// Info is what the binary knows of its build.
type Info struct {
	// Version is the module's version: a release tag, a pseudo-version, or "(devel)" for a build from a
	// checkout (go build records no tag then; Revision says which commit).
	Version string `json:"version"`
	// Revision is the git commit the binary was built from, empty when built outside a checkout or with
	// -buildvcs=false.
	Revision string `json:"revision,omitempty"`
	// Time is the commit's time (RFC 3339).
	Time string `json:"time,omitempty"`
	// Modified says the checkout had uncommitted changes: the binary is not exactly Revision.
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"goVersion,omitempty"`
}

// Read returns the running binary's build info.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Version: "unknown"}
	}
	return From(bi)
}

// From extracts the Info of bi.
func From(bi *debug.BuildInfo) Info {
	info := Info{Version: bi.Main.Version, GoVersion: bi.GoVersion}
	if info.Version == "" {
		info.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Revision = s.Value
		case "vcs.time":
			info.Time = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	return info
}

// String is one line for people: "(devel) commit 0123456789ab (2026-12-01T10:00:00Z, modified), go1.26.8".
func (i Info) String() string {
	var b strings.Builder
	b.WriteString(i.Version)
	if i.Revision != "" {
		b.WriteString(" commit ")
		b.WriteString(i.Revision[:min(12, len(i.Revision))])
		var notes []string
		if i.Time != "" {
			notes = append(notes, i.Time)
		}
		if i.Modified {
			notes = append(notes, "modified")
		}
		if len(notes) > 0 {
			b.WriteString(" (" + strings.Join(notes, ", ") + ")")
		}
	}
	if i.Revision == "" && i.Version == "(devel)" {
		b.WriteString(", no commit recorded (built outside a git checkout, or with -buildvcs=false)")
	}
	if i.GoVersion != "" {
		b.WriteString(", " + i.GoVersion)
	}
	return b.String()
}
