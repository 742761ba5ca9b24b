package discovery_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	adsv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sextantmesh/sextant/pilot/discovery"
)

const brokenPolicy = `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: deny-all-but-frontend
  namespace: bookinfo
spec:
  action: ALLOW
  rules:
  - from:
    - source:
        principals: 7
`

const fixedPolicy = `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: deny-all-but-frontend
  namespace: bookinfo
spec:
  action: ALLOW
  rules:
  - from:
    - source:
        principals: ["cluster.local/ns/bookinfo/sa/frontend"]
`

func startServer(t *testing.T, args discovery.Args) *discovery.Server {
	t.Helper()
	args.GRPCAddr, args.DebounceAfter = "127.0.0.1:0", 20*time.Millisecond
	if args.HTTPAddr == "" {
		args.HTTPAddr = "127.0.0.1:0"
	}
	srv, err := discovery.NewServer(args)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); srv.Wait() })
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return srv
}

func ready(t *testing.T, srv *discovery.Server) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + srv.HTTPAddr() + "/ready")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// adsError opens an ADS stream as a sidecar and returns the error that ends it, nil if it gets a response.
func adsError(t *testing.T, srv *discovery.Server) error {
	t.Helper()
	cc, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := adsv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	node := &core.Node{Id: "sidecar~10.1.0.9~productpage-v1-abc.bookinfo~bookinfo.svc.cluster.local"}
	// A stream the server already ended fails Send with io.EOF; its status comes from Recv.
	if err := stream.Send(&adsv3.DiscoveryRequest{Node: node, TypeUrl: "type.googleapis.com/envoy.config.cluster.v3.Cluster"}); err != nil &&
		err != io.EOF {
		return err
	}
	_, err = stream.Recv()
	return err
}

func waitReady(t *testing.T, srv *discovery.Server, want int) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, body := ready(t, srv)
		if code == want {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("/ready = %d %q, want %d", code, body, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A security object rejected at startup keeps the server not ready, and proxies unserved, until it is fixed;
// once ready, a later rejection keeps the last good policy and readiness.
func TestInvalidSecurityObjectAtStartupKeepsServerNotReady(t *testing.T) {
	dir := copyDir(t, "../../examples/bookinfo")
	policy := filepath.Join(dir, "35-policy.yaml")
	if err := os.WriteFile(policy, []byte(brokenPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, discovery.Args{ConfigDir: dir})
	time.Sleep(300 * time.Millisecond) // a gate that opened by mistake would have opened by now
	code, body := ready(t, srv)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "AuthorizationPolicy bookinfo/deny-all-but-frontend") ||
		!strings.Contains(body, "principals") {
		t.Fatalf("/ready = %d %q, want 503 naming the policy and its field", code, body)
	}
	err := adsError(t, srv)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "deny-all-but-frontend") {
		t.Fatalf("ADS stream while not ready ended with %v, want Unavailable naming the policy", err)
	}

	if err := os.WriteFile(policy, []byte(fixedPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	waitReady(t, srv, http.StatusOK)
	if err := adsError(t, srv); err != nil {
		t.Fatalf("ADS stream once ready: %v", err)
	}

	// Broken again while serving: the fixed policy stays served and the server stays ready.
	if err := os.WriteFile(policy, []byte(brokenPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for len(srv.Rejected()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the policy broken at runtime is not reported")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, body := ready(t, srv); code != http.StatusOK {
		t.Errorf("/ready after a runtime rejection = %d %q, want 200", code, body)
	}
	if n := srv.Store.Count("AuthorizationPolicy"); n == 0 {
		t.Error("the last good policy was withdrawn")
	}
}

// A file that cannot be read at startup may hold policies, so it holds readiness too; the flag lets an
// operator start anyway. A FIFO where a file was expected never held config and is only reported.
func TestUnreadableFileAtStartupKeepsServerNotReady(t *testing.T) {
	dir := copyDir(t, "../../examples/bookinfo")
	if err := os.Symlink(filepath.Join(dir, "gone", "policy.yaml"), filepath.Join(dir, "36-link.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "37-pipe.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	big := fixedPolicy + "# " + strings.Repeat("x", 64<<10) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "38-big.yaml"), []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, discovery.Args{ConfigDir: dir, ConfigMaxFileBytes: 32 << 10})
	body := waitReady(t, srv, http.StatusServiceUnavailable)
	for _, want := range []string{"36-link.yaml", "38-big.yaml", "--ready-with-security-errors"} {
		if !strings.Contains(body, want) {
			t.Errorf("/ready = %q, want %s named", body, want)
		}
	}
	if strings.Contains(body, "37-pipe.yaml") {
		t.Errorf("/ready = %q, the FIFO holds readiness", body)
	}
	if len(srv.Rejected()) != 3 {
		t.Errorf("rejected = %v, want the link, the FIFO and the large file", srv.Rejected())
	}

	dir2 := copyDir(t, "../../examples/bookinfo")
	if err := os.Symlink(filepath.Join(dir2, "gone", "policy.yaml"), filepath.Join(dir2, "36-link.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir2, "35-policy.yaml"), []byte(brokenPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	srv2 := startServer(t, discovery.Args{ConfigDir: dir2, ReadyWithSecurityErrors: true})
	waitReady(t, srv2, http.StatusOK)
	if len(srv2.Rejected()) != 2 {
		t.Errorf("rejected = %v, want the link and the policy", srv2.Rejected())
	}
}

// A FIFO alone is reported and does not hold readiness.
func TestFIFOAtStartupDoesNotHoldReadiness(t *testing.T) {
	dir := copyDir(t, "../../examples/bookinfo")
	if err := syscall.Mkfifo(filepath.Join(dir, "37-pipe.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, discovery.Args{ConfigDir: dir})
	waitReady(t, srv, http.StatusOK)
	if r := srv.Rejected(); len(r) != 1 || !strings.Contains(r[0].Message, "named pipe") {
		t.Errorf("rejected = %v, want the FIFO", r)
	}
}

// Other kinds rejected at startup are reported but do not hold readiness: losing them opens nothing.
func TestRejectedServiceAtStartupDoesNotHoldReadiness(t *testing.T) {
	dir := copyDir(t, "../../examples/bookinfo")
	broken := "apiVersion: v1\nkind: Service\nmetadata:\n  name: broken\n  namespace: bookinfo\nspec:\n  ports: 7\n"
	if err := os.WriteFile(filepath.Join(dir, "60-broken.yaml"), []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, discovery.Args{ConfigDir: dir})
	waitReady(t, srv, http.StatusOK)
	if len(srv.Rejected()) != 1 {
		t.Errorf("rejected = %v, want the broken Service", srv.Rejected())
	}
}

// Why the server is not ready names policy files and objects: only a loopback caller is told; a caller from
// another address gets the status and a terse body.
func TestNotReadyReasonIsForLoopbackCallersOnly(t *testing.T) {
	ip := nonLoopbackIP(t)
	dir := copyDir(t, "../../examples/bookinfo")
	if err := os.WriteFile(filepath.Join(dir, "35-policy.yaml"), []byte(brokenPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, discovery.Args{ConfigDir: dir, HTTPAddr: net.JoinHostPort(ip, "0")})
	body := waitReady(t, srv, http.StatusServiceUnavailable) // from ip: the listener is bound to it alone
	if body != "not ready\n" {
		t.Errorf("/ready from %s = %q, want only \"not ready\"", ip, body)
	}

	both := startServer(t, discovery.Args{ConfigDir: dir, HTTPAddr: ":0"})
	_, port, _ := net.SplitHostPort(both.HTTPAddr())
	for host, detailed := range map[string]bool{ip: false, "127.0.0.1": true} {
		resp, err := http.Get("http://" + net.JoinHostPort(host, port) + "/ready")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || strings.Contains(string(b), "deny-all-but-frontend") != detailed {
			t.Errorf("/ready from %s = %d %q, want 503 with the reason %v", host, resp.StatusCode, b, detailed)
		}
	}
}
