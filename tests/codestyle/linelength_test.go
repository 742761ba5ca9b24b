package codestyle

import (
	"bufio"
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// maxLineLength is golangci-lint's lll default: characters, not bytes, with a tab counting as one.
const maxLineLength = 140

// longLinesAllowed are files allowed longer lines for a while (being shortened); each must still hold one.
var longLinesAllowed = map[string]bool{}

// TestLineLength fails for every line over maxLineLength in a git-tracked Go file that is not generated
// (*.pb.go, or a "Code generated ... DO NOT EDIT." header).
func TestLineLength(t *testing.T) {
	root, files := trackedGoFiles(t)
	stillLong := map[string]bool{}
	for _, name := range files {
		if strings.HasSuffix(name, ".pb.go") {
			continue
		}
		src, err := os.ReadFile(filepath.Join(root, name))
		if os.IsNotExist(err) {
			continue // deleted in the work tree, not yet in the index
		}
		if err != nil {
			t.Fatal(err)
		}
		if generated(t, name, src) {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(src))
		sc.Buffer(nil, len(src)+1)
		for n := 1; sc.Scan(); n++ {
			length := utf8.RuneCount(sc.Bytes())
			if length <= maxLineLength {
				continue
			}
			if longLinesAllowed[name] {
				stillLong[name] = true
				continue
			}
			t.Errorf("%s:%d: %d characters, over %d", name, n, length, maxLineLength)
		}
	}
	for name := range longLinesAllowed {
		if !stillLong[name] {
			t.Errorf("%s has no line over %d characters any more: remove it from longLinesAllowed", name, maxLineLength)
		}
	}
}

// generated reports whether the file says it is generated, by Go's rule (go help generate).
func generated(t *testing.T, name string, src []byte) bool {
	f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.PackageClauseOnly|parser.ParseComments)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return ast.IsGenerated(f)
}

// trackedGoFiles returns the repository's root and the Go files git tracks in it.
func trackedGoFiles(t *testing.T) (string, []string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	root := strings.TrimSpace(string(out))
	ls := exec.Command("git", "ls-files", "-z", "--", "*.go")
	ls.Dir = root
	if out, err = ls.Output(); err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	files := strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
	if len(files) == 0 || files[0] == "" {
		t.Fatalf("git ls-files lists no Go file under %s", root)
	}
	return root, files
}
