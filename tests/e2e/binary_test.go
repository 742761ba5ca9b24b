package e2e

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// process is `sextant discovery` run as its own process, so its memory is its alone.
type process struct {
	cmd                         *exec.Cmd
	httpAddr, grpcAddr, secAddr string
}

// buildSextant compiles cmd/sextant into a temporary directory and returns the binary's path.
func buildSextant(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sextant")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/sextant")
	cmd.Dir = moduleRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/sextant: %v\n%s", err, out)
	}
	return bin
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	return root
}

// startSextant runs the binary with args (every listener on 127.0.0.1:0), reads the addresses it prints and
// waits until /ready answers 200. The process is interrupted when the test ends.
func startSextant(t *testing.T, bin string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"discovery"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "sextant.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logf.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("server log (last 4 KiB):\n%s", tail(b, 4<<10))
			}
		}
	})
	p.readAddrs(t, stdout)
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + p.httpAddr + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("server not ready after 60s (log %s)", logPath)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readAddrs takes the listeners' addresses from the lines the server prints on start, then drains the rest.
func (p *process) readAddrs(t *testing.T, stdout io.Reader) {
	t.Helper()
	lines := bufio.NewScanner(stdout)
	for (p.httpAddr == "" || p.grpcAddr == "" || p.secAddr == "") && lines.Scan() {
		line := lines.Text()
		addr := line[strings.LastIndex(line, " ")+1:]
		switch {
		case strings.HasPrefix(line, "HTTP "):
			p.httpAddr = addr
		case strings.HasPrefix(line, "xDS (gRPC, plaintext"):
			p.grpcAddr = addr
		case strings.HasPrefix(line, "xDS and CA"):
			p.secAddr = addr
		}
	}
	if p.httpAddr == "" || p.grpcAddr == "" || p.secAddr == "" {
		t.Fatalf("server printed no addresses (http %q, plaintext %q, secure %q)", p.httpAddr, p.grpcAddr, p.secAddr)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
}

// peakRSS is the process's peak resident set (VmHWM), in bytes.
func (p *process) peakRSS(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/status")
	if err != nil {
		t.Skipf("no /proc status to read the peak RSS from: %v", err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q: %v", rest, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/PID/status")
	return 0
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
