package kubeenv

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
)

// RequireEnv, when set, turns missing binaries from a skip into a failure (CI sets it).
const RequireEnv = "SEXTANT_REQUIRE_APISERVER"

// RepoRoot is the repository root, found from this file's path.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// toolHash is what scripts/test-env.sh names a build directory: sha256(go.mod + go.sum), 16 hex digits.
func toolHash(module string) (string, error) {
	h := sha256.New()
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(RepoRoot(), "tools", module, f))
		if err != nil {
			return "", err
		}
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// ToolsDir is where scripts/test-env.sh caches the binaries (SEXTANT_TOOLS_DIR overrides it).
func ToolsDir() string {
	if d := os.Getenv("SEXTANT_TOOLS_DIR"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "sextant", "tools")
}

func binary(env, module, name string) (string, error) {
	if p := os.Getenv(env); p != "" {
		return p, nil
	}
	h, err := toolHash(module)
	if err != nil {
		return "", err
	}
	p := filepath.Join(ToolsDir(), name, h, name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s not built (%v); run make test-env", name, err)
	}
	return p, nil
}

// Binaries returns the etcd and kube-apiserver paths built by scripts/test-env.sh (make test-env);
// SEXTANT_ETCD and SEXTANT_KUBE_APISERVER override where they are looked for.
func Binaries() (etcd, apiserver string, err error) {
	if etcd, err = binary("SEXTANT_ETCD", "etcd", "etcd"); err != nil {
		return "", "", err
	}
	if apiserver, err = binary("SEXTANT_KUBE_APISERVER", "kube", "kube-apiserver"); err != nil {
		return "", "", err
	}
	return etcd, apiserver, nil
}

// TB is the part of testing.TB that SkipIfMissing needs (this package does not import testing).
type TB interface {
	Helper()
	Skipf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// SkipIfMissing skips the test when the binaries are missing, or fails it when RequireEnv is set.
func SkipIfMissing(t TB) {
	t.Helper()
	if _, _, err := Binaries(); err != nil {
		if os.Getenv(RequireEnv) != "" {
			t.Fatalf("%v (%s is set, so this fails instead of skipping)", err, RequireEnv)
		}
		t.Skipf("no real API server: %v", err)
	}
}
