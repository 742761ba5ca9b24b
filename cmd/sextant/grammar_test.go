package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/sextantmesh/sextant/pkg/buildinfo"
	"github.com/sextantmesh/sextant/tests/debugtest"
)

// Every command that takes a proxy takes it as POD.NAMESPACE or as its full node id, with the same answer.
func TestProxyArgumentForms(t *testing.T) {
	env, _, _ := debugtest.StartScenario(t)
	const bookinfo = "../../examples/bookinfo"
	cases := []struct {
		command       string
		podNS, nodeID string
		args          func(proxy string) []string
		want          string // in the output of both forms
	}{
		{command: "translate", podNS: "reviews-v1-0002.bookinfo",
			nodeID: "sidecar~10.1.0.30~reviews-v1-0002.bookinfo~bookinfo.svc.cluster.local",
			args:   func(p string) []string { return []string{"translate", bookinfo, "--proxy", p, "--type", "cds,lds"} },
			want:   `"name": "virtualInbound"`},
		{command: "proxy-status", podNS: "reviews-v1.bookinfo", nodeID: debugtest.SidecarNode("reviews-v1", "bookinfo"),
			args: func(p string) []string { return []string{"proxy-status", p, "--server", env.URL} },
			want: "reviews-v1.bookinfo   sidecar"},
		{command: "config-dump", podNS: "reviews-v1.bookinfo", nodeID: debugtest.SidecarNode("reviews-v1", "bookinfo"),
			args: func(p string) []string { return []string{"config-dump", p, "--server", env.URL, "--type", "cds"} },
			want: "proxy reviews-v1.bookinfo"},
	}
	for _, c := range cases {
		t.Run(c.command, func(t *testing.T) {
			byPod, err := run(t, c.args(c.podNS)...)
			if err != nil || !strings.Contains(byPod, c.want) {
				t.Fatalf("%s %s: %v\n%.2000s", c.command, c.podNS, err, byPod)
			}
			byNode, err := run(t, c.args(c.nodeID)...)
			if err != nil || byNode != byPod {
				t.Fatalf("%s with the node id: %v; output differs from POD.NAMESPACE's:\n%.2000s\n---\n%.2000s", c.command, err, byNode, byPod)
			}
		})
	}
}

// translate gives the pod's labels as the node metadata its agent would send: a Sidecar selecting the
// workload applies without --meta, and --meta LABELS replaces them.
func TestTranslatePodLabels(t *testing.T) {
	dir := t.TempDir()
	examples, err := filepath.Glob("../../examples/bookinfo/*.yaml")
	if err != nil || len(examples) == 0 {
		t.Fatalf("examples: %v", err)
	}
	for _, path := range examples {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		writeConfigFile(t, filepath.Join(dir, filepath.Base(path)), string(b))
	}
	// The namespace's Sidecar lets bookinfo see shop; this one, for app=reviews only, does not.
	writeConfigFile(t, filepath.Join(dir, "60-sidecar.yaml"), "apiVersion: networking.istio.io/v1\nkind: Sidecar\n"+
		"metadata: {name: reviews-only, namespace: bookinfo}\nspec:\n  workloadSelector: {labels: {app: reviews}}\n"+
		"  egress:\n  - hosts: [\"./*\"]\n")
	out, err := run(t, "translate", dir, "--proxy", "reviews-v1-0002.bookinfo", "--type", "cds")
	if err != nil || !strings.Contains(out, "reviews.bookinfo.svc.cluster.local") || strings.Contains(out, ".shop") {
		t.Fatalf("the pod's labels did not select its Sidecar: %v\n%.1000s", err, out)
	}
	out, err = run(t, "translate", dir, "--proxy", "reviews-v1-0002.bookinfo", "--type", "cds", "--meta", `{"LABELS":{}}`)
	if err != nil || !strings.Contains(out, ".shop") {
		t.Fatalf("--meta LABELS did not replace the pod's: %v", err)
	}
}

// A proxy that matches no pod is still translated, with a warning on stderr naming it.
func TestTranslateWarnsWithoutPod(t *testing.T) {
	for _, proxy := range []string{"nobody.bookinfo", "sidecar~10.9.9.9~nobody.bookinfo~bookinfo.svc.cluster.local"} {
		cmd := translateCommand()
		var out, errOut bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&errOut)
		cmd.SetArgs([]string{"../../examples/bookinfo", "--proxy", proxy, "--type", "cds"})
		if err := cmd.Execute(); err != nil || !json.Valid(out.Bytes()) {
			t.Fatalf("%s: %v", proxy, err)
		}
		if want := "warning: proxy " + proxy + " matches no pod"; !strings.Contains(errOut.String(), want) {
			t.Errorf("%s: stderr %q, want %q", proxy, errOut.String(), want)
		}
	}
	cmd := translateCommand()
	var errOut bytes.Buffer
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&errOut)
	cmd.SetArgs([]string{"../../examples/bookinfo", "--proxy", "reviews-v1-0002.bookinfo", "--type", "cds"})
	if err := cmd.Execute(); err != nil || strings.Contains(errOut.String(), "matches no pod") {
		t.Errorf("a proxy with its pod: %v %s", err, errOut.String())
	}
}

// validate and translate take the config directory as an argument, as -f does.
func TestConfigDirectoryArgument(t *testing.T) {
	for _, args := range [][]string{
		{"validate", "../../examples/bookinfo"},
		{"translate", "../../examples/bookinfo", "--proxy", "reviews-v1-0002.bookinfo", "--type", "cds"},
	} {
		positional, err := run(t, args...)
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, positional)
		}
		withFlag, err := run(t, append([]string{args[0], "-f"}, args[1:]...)...)
		if err != nil || withFlag != positional || positional == "" {
			t.Errorf("%s with -f: %v; differs:\n%.500s\n---\n%.500s", args[0], err, withFlag, positional)
		}
	}
	if _, err := run(t, "translate", "--proxy", "a.b"); err == nil || !strings.Contains(err.Error(), "no config directory") {
		t.Errorf("translate without a directory: %v", err)
	}
	if _, err := run(t, "translate", "../../examples", "-f", "../../examples/bookinfo", "--proxy", "a.b"); err == nil {
		t.Error("translate with two directories accepted")
	}
}

// One object, one document, one warning: singular. A rejection exits 1 without repeating the count.
func TestValidateCountsInWords(t *testing.T) {
	got := counted(1, "document") + ", " + counted(2, "document") + ", " + counted(0, "warning")
	if got != "1 document, 2 documents, 0 warnings" {
		t.Errorf("counted: %q", got)
	}
	dir := t.TempDir()
	writeConfigFile(t, filepath.Join(dir, "bad.yaml"), "apiVersion: networking.istio.io/v1\nkind: DestinationRule\n"+
		"metadata: {name: dr, namespace: shop}\n"+
		"spec:\n  host: cart\n  trafficPolicy: {loadBalancer: {simple: SOMETIMES}}\n")
	out, err := run(t, "validate", dir)
	if !strings.HasSuffix(strings.TrimSpace(out), "0 objects accepted, 1 document rejected") {
		t.Errorf("validate:\n%s", out)
	}
	var stderr bytes.Buffer
	if code := exitCode(err, &stderr); code != 1 || stderr.Len() != 0 {
		t.Errorf("exit status %d, stderr %q: want 1 and nothing more", code, stderr.String())
	}
	if code := exitCode(errors.New("boom"), &stderr); code != 1 || stderr.String() != "error: boom\n" {
		t.Errorf("another error: %d %q", code, stderr.String())
	}
}

func writeConfigFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// version prints the commit go build recorded.
func TestVersionPrintsTheCommit(t *testing.T) {
	defer func(f func() buildinfo.Info) { readBuildInfo = f }(readBuildInfo)
	readBuildInfo = func() buildinfo.Info {
		return buildinfo.From(&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261201100000-0123456789ab"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
				{Key: "vcs.time", Value: "2026-12-01T10:00:00Z"}}})
	}
	out, err := run(t, "version")
	if err != nil || out != "sextant v0.0.0-20261201100000-0123456789ab commit 0123456789ab (2026-12-01T10:00:00Z), go1.26.8\n" {
		t.Errorf("version: %v %q", err, out)
	}
	out, err = run(t, "version", "-o", "json")
	var info buildinfo.Info
	if err != nil || json.Unmarshal([]byte(out), &info) != nil || info.Revision != "0123456789abcdef0123456789abcdef01234567" {
		t.Errorf("version -o json: %v %s", err, out)
	}
}
