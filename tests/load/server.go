package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// serverProc is Sextant running as its own process, so its CPU time and memory are its alone.
type serverProc struct {
	cmd      *exec.Cmd
	grpcAddr string
	// secureAddr is the secure port's address, "" unless -secure.
	secureAddr string
	httpAddr   string
	log        *os.File
	clkTck     float64
}

// buildServer compiles cmd/sextant into dir and returns the binary's path.
func buildServer(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "sextant")
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/sextant")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/sextant: %v\n%s", err, out)
	}
	return bin, nil
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside the module")
	}
	return filepath.Dir(mod), nil
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// startServer runs `sextant discovery` with sourceArgs (--config-dir DIR or --kubeconfig FILE) and waits
// until /ready answers.
func startServer(bin string, sourceArgs []string, logPath string, debounce, sendTimeout time.Duration,
	extra ...string) (*serverProc, error) {
	grpcAddr, err := freePort()
	if err != nil {
		return nil, err
	}
	httpAddr, err := freePort()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	args := append([]string{"discovery"}, sourceArgs...)
	// The secure port stays off unless -secure asks for it (extra, later, wins): a fixed :15012 would collide
	// with any other server on the machine.
	args = append(args, "--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--secure-grpc-addr", "")
	if debounce > 0 {
		args = append(args, "--debounce-after", debounce.String())
	}
	if sendTimeout > 0 {
		args = append(args, "--send-timeout", sendTimeout.String())
	}
	args = append(args, extra...)
	if !slices.ContainsFunc(extra, func(a string) bool { return strings.HasPrefix(a, "--log-level") }) {
		args = append(args, "--log-level", "warn")
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	s := &serverProc{cmd: cmd, grpcAddr: grpcAddr, httpAddr: httpAddr, log: logf, clkTck: 100}
	if out, err := exec.Command("getconf", "CLK_TCK").Output(); err == nil {
		if v, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64); err == nil && v > 0 {
			s.clkTck = v
		}
	}
	deadline := time.Now().Add(120 * time.Second)
	for {
		resp, err := http.Get("http://" + httpAddr + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("server not ready after 120s (log: %s)", logPath)
		}
		if cmd.ProcessState != nil {
			return nil, fmt.Errorf("server exited (log: %s)", logPath)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *serverProc) stop() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-done
		}
	}
	s.log.Close()
}

// procStats are the server's resource counters.
type procStats struct {
	CPUSeconds float64 // user + system
	RSS        int64   // bytes, now
	HWM        int64   // bytes, peak RSS since start
}

func (s *serverProc) stats() procStats {
	var st procStats
	pid := s.cmd.Process.Pid
	st.CPUSeconds = procCPUSeconds(strconv.Itoa(pid), s.clkTck)
	if f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := sc.Text()
			for key, dst := range map[string]*int64{"VmRSS:": &st.RSS, "VmHWM:": &st.HWM} {
				if strings.HasPrefix(line, key) {
					fields := strings.Fields(line[len(key):])
					if len(fields) > 0 {
						kb, _ := strconv.ParseInt(fields[0], 10, 64)
						*dst = kb * 1024
					}
				}
			}
		}
		f.Close()
	}
	return st
}

// procCPUSeconds is the user + system CPU time of process pid ("self" for the harness).
func procCPUSeconds(pid string, clkTck float64) float64 {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command name (which may hold spaces) start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) <= 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	stt, _ := strconv.ParseFloat(f[12], 64)
	return (ut + stt) / clkTck
}

// liveHeap is the server's heap after two forced collections (HeapAlloc from /debug/pprof/heap?gc=1): what
// it holds, without the garbage a heap-in-use figure counts. Two, because a sync.Pool keeps what it held
// through one collection: after one, gRPC's pooled encode buffers (over 100 MB after a cold start) still
// count. 0 when not served.
func (s *serverProc) liveHeap() int64 {
	var n int64
	for range 2 {
		if n = s.heapAfterGC(); n == 0 {
			return 0
		}
	}
	return n
}

func (s *serverProc) heapAfterGC() int64 {
	resp, err := http.Get("http://" + s.httpAddr + "/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# HeapAlloc = "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// heapProfile saves the server's heap profile.
func (s *serverProc) heapProfile(path string) error {
	return s.download(context.Background(), "/debug/pprof/heap", path)
}

// download saves what the server's HTTP port answers at urlPath into path.
func (s *serverProc) download(ctx context.Context, urlPath, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.httpAddr+urlPath, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", urlPath, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}

// tokenReviews reads from the server's /metrics how many tokens it sent to TokenReview and how many its
// cache answered (zero when it reviews none: no cluster, or no request for the metrics).
func (s *serverProc) tokenReviews() (reviews, cacheHits float64) {
	resp, err := http.Get("http://" + s.httpAddr + "/metrics")
	if err != nil {
		return 0, 0
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0
	}
	for line := range strings.SplitSeq(string(body), "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		switch name {
		case "sextant_token_reviews_total":
			reviews = v
		case "sextant_token_review_cache_hits_total":
			cacheHits = v
		}
	}
	return reviews, cacheHits
}
