package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/sextantmesh/sextant/pilot/config"
)

// readmeFlagRow matches a row of the README's flag table: | `--name` | default | meaning |.
var readmeFlagRow = regexp.MustCompile("^\\| `--([a-z0-9-]+)` \\|([^|]*)\\|")

func readme(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// readmeFlagDefaults returns the README's discovery flag table: flag name → the default cell's first
// backquoted value ("" for an empty cell).
func readmeFlagDefaults(t *testing.T) map[string]string {
	t.Helper()
	rows := map[string]string{}
	in := false
	for line := range strings.SplitSeq(readme(t), "\n") {
		if strings.HasPrefix(line, "| flag | default | meaning |") {
			in = true
			continue
		}
		if in && !strings.HasPrefix(line, "|") {
			break
		}
		m := readmeFlagRow.FindStringSubmatch(line)
		if !in || m == nil {
			continue
		}
		if _, dup := rows[m[1]]; dup {
			t.Errorf("README: --%s has two rows", m[1])
		}
		def := ""
		if _, after, ok := strings.Cut(m[2], "`"); ok {
			def, _, _ = strings.Cut(after, "`")
		}
		rows[m[1]] = def
	}
	if len(rows) == 0 {
		t.Fatal("README: no flag table (| flag | default | meaning |)")
	}
	return rows
}

// sameDefault reports whether the README's default text means the flag's default.
func sameDefault(f *pflag.Flag, readme string) bool {
	switch f.Value.Type() {
	case "duration":
		want, err1 := time.ParseDuration(f.DefValue)
		got, err2 := time.ParseDuration(readme)
		return err1 == nil && err2 == nil && want == got
	case "stringSlice":
		return strings.Trim(f.DefValue, "[]") == readme
	}
	return f.DefValue == readme
}

// The README's flag table lists exactly the flags discovery --help lists, each with its default.
func TestReadmeFlagTableMatchesDiscoveryHelp(t *testing.T) {
	rows := readmeFlagDefaults(t)
	cmd := discoveryCommand()
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		def, ok := rows[f.Name]
		switch {
		case !ok:
			t.Errorf("README's flag table lacks --%s (default %q): %s", f.Name, f.DefValue, f.Usage)
		case !sameDefault(f, def):
			t.Errorf("README: --%s defaults to %q; discovery --help says %q", f.Name, def, f.DefValue)
		}
		delete(rows, f.Name)
	})
	for name := range rows {
		t.Errorf("README's flag table has --%s, which discovery does not have", name)
	}
}

// The README's "Config it reads", the one list of the kinds read that the other docs link to, names every
// kind the sources read.
func TestReadmeListsEveryKindRead(t *testing.T) {
	_, section, ok := strings.Cut(readme(t), "### Config it reads\n\n")
	if !ok {
		t.Fatal(`README: no "### Config it reads" section`)
	}
	list, _, _ := strings.Cut(section, "\n\n")
	for _, k := range config.Kinds() {
		if !regexp.MustCompile("\\b" + string(k.Kind) + "`").MatchString(list) {
			t.Errorf("README's list of the kinds read lacks %s (%s)", k.Kind, k.APIVersion())
		}
	}
}
