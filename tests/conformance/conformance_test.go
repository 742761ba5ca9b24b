package conformance

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

var writeAllowlist = flag.String("conformance.print", "",
	"write every difference found, allowlisted or not, to this file in allowlist form (reasons to be written by hand)")

var dumpDir = flag.String("conformance.dump", "",
	"write each proxy's normalised snapshot, per side, to DIR/CASE/PROXY.{istiod,sextant}.txt")

// TestConformance renders every case with istiod and Sextant and fails on each difference the allowlist
// does not accept, and on each allowlist entry that no longer matches a difference.
func TestConformance(t *testing.T) {
	cases, err := LoadCases("cases")
	if err != nil {
		t.Fatal(err)
	}
	allow, err := LoadAllowlist("allowlist.txt")
	if err != nil {
		t.Fatal(err)
	}
	// Subtests run one after the other (none calls t.Parallel), so ran, found and the allowlist's marks need
	// no lock.
	ran := map[string]bool{}
	var found []Difference
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			ran[c.Name] = true
			diffs := compareCase(t, c)
			found = append(found, diffs...)
			for _, d := range diffs {
				if !allow.Allows(d) {
					t.Errorf("difference not in allowlist.txt:\n  %s", d)
				}
			}
		})
	}
	for _, e := range allow.Stale(func(name string) bool { return ran[name] }, len(ran) == len(cases)) {
		t.Errorf("allowlist.txt:%d matches no difference any more (fixed? remove it): %s / %s / %s / %s",
			e.Line, e.Case, e.Proxy, e.Key, e.Field)
	}
	if *writeAllowlist != "" {
		if err := os.WriteFile(*writeAllowlist, []byte(allowlistText(found)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// compareCase renders one case on both sides and returns the differences of all its proxies.
func compareCase(t *testing.T, c *Case) []Difference {
	t.Helper()
	ist, err := RenderIstiod(t, c)
	if err != nil {
		t.Fatalf("istiod: %v", err)
	}
	sx, err := RenderSextant(c, t.TempDir())
	if err != nil {
		t.Fatalf("sextant: %v", err)
	}
	capture, err := CapturePortsOf(c.Mesh)
	if err != nil {
		t.Fatal(err)
	}
	var diffs []Difference
	for _, p := range c.Proxies {
		probes := ProbesWith(capture, ist[p.Name].Listeners, sx[p.Name].Listeners)
		istSnap, err := ist[p.Name].Normalise(p, probes)
		if err != nil {
			t.Fatalf("istiod %s: %v", p.Name, err)
		}
		snap, err := sx[p.Name].Normalise(p, probes)
		if err != nil {
			t.Fatalf("sextant %s: %v", p.Name, err)
		}
		if len(istSnap) == 0 {
			t.Fatalf("istiod gave proxy %s nothing to compare: the case does not exercise it", p.Name)
		}
		diffs = append(diffs, Compare(c.Name, p.Name, istSnap, snap)...)
		if *dumpDir != "" {
			dir := filepath.Join(*dumpDir, c.Name)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for side, s := range map[string]Snapshot{"istiod": istSnap, "sextant": snap} {
				if err := os.WriteFile(filepath.Join(dir, p.Name+"."+side+".txt"), []byte(s.Text()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return diffs
}

func allowlistText(diffs []Difference) string {
	lines := make([]string, 0, len(diffs))
	for _, d := range diffs {
		lines = append(lines, fmt.Sprintf("%s: TODO istiod=%q sextant=%q", d.ID(), d.Istiod, d.Sextant))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n") + "\n"
}
