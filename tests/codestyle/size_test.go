package codestyle

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Product code (everything but tests and the test harnesses under tests/) stays readable in one sitting:
// a file is at most maxFileLines long and a function at most maxFuncLines.
const (
	maxFileLines = 1000
	maxFuncLines = 120
)

// longFuncsAllowed are functions over maxFuncLines still to be broken into named steps, with their length
// today: the test fails when one grows, and when one is shortened without leaving the list.
var longFuncsAllowed = map[string]int{}

// TestProductCodeSize fails for a product file over maxFileLines or a function over maxFuncLines.
func TestProductCodeSize(t *testing.T) {
	root, files := productSources(t)
	fset := token.NewFileSet()
	seen := map[string]bool{}
	for _, name := range files {
		f, err := parser.ParseFile(fset, filepath.Join(root, name), nil, parser.SkipObjectResolution|parser.ParseComments)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if ast.IsGenerated(f) {
			continue
		}
		if n := fset.File(f.Pos()).LineCount(); n > maxFileLines {
			t.Errorf("%s: %d lines, over %d: split it by what it builds", name, n, maxFileLines)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			id := name + " " + fd.Name.Name
			if allowed, ok := longFuncsAllowed[id]; ok {
				seen[id] = true
				if n != allowed {
					t.Errorf("%s: %d lines, listed in longFuncsAllowed at %d: update or remove the entry", id, n, allowed)
				}
				continue
			}
			if n > maxFuncLines {
				t.Errorf("%s: %d lines, over %d: break it into named steps", id, n, maxFuncLines)
			}
		}
	}
	for id := range longFuncsAllowed {
		if !seen[id] {
			t.Errorf("longFuncsAllowed lists %s, which no longer exists", id)
		}
	}
}

// productSources returns the repository's root and its git-tracked Go files that are product code: not
// tests, not under tests/.
func productSources(t *testing.T) (string, []string) {
	t.Helper()
	root, tracked := trackedGoFiles(t)
	var files []string
	for _, name := range tracked {
		if strings.HasSuffix(name, "_test.go") || strings.HasPrefix(name, "tests/") {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, name)); err != nil {
			continue // deleted in the work tree, not yet in the index
		}
		files = append(files, name)
	}
	if len(files) == 0 {
		t.Fatalf("git ls-files lists no product Go file under %s", root)
	}
	return root, files
}
