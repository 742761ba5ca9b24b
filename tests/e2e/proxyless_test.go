package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	xdsgrpc "google.golang.org/grpc/xds"

	"github.com/sextantmesh/sextant/pilot/discovery"
)

// backend is a gRPC server that names itself in a response header.
type backend struct {
	id   string
	addr string
	srv  *grpc.Server
}

func startBackend(t *testing.T, id, ip string) *backend {
	t.Helper()
	lis, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Skipf("cannot listen on %s (needs the loopback range): %v", ip, err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		_ = grpc.SetHeader(ctx, metadata.Pairs("backend", id))
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return &backend{id: id, addr: lis.Addr().String(), srv: srv}
}

const serviceYAML = `apiVersion: v1
kind: Service
metadata:
  name: echo
  namespace: default
spec:
  clusterIP: 10.96.0.50
  selector:
    app: echo
  ports:
  - name: grpc
    port: 7070
    appProtocol: grpc
`

func podAndSlice(name, version, ip string, port string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: echo-%[1]s
  namespace: default
  labels:
    app: echo
    version: %[2]s
spec:
  containers:
  - name: echo
    image: echo
status:
  phase: Running
  podIP: %[3]s
  conditions:
  - type: Ready
    status: "True"
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: echo-%[1]s
  namespace: default
  labels:
    kubernetes.io/service-name: echo
addressType: IPv4
ports:
- name: grpc
  port: %[4]s
endpoints:
- addresses: ["%[3]s"]
  conditions:
    ready: true
  targetRef:
    kind: Pod
    namespace: default
    name: echo-%[1]s
`, name, version, ip, port)
}

const routingYAML = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: echo
  namespace: default
spec:
  host: echo
  subsets:
  - name: v1
    labels:
      version: v1
  - name: v2
    labels:
      version: v2
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: echo
  namespace: default
spec:
  hosts:
  - echo.default.svc.cluster.local
  http:
  - match:
    - headers:
        x-user:
          exact: jason
    route:
    - destination:
        host: echo
        subset: v2
  - route:
    - destination:
        host: echo
        subset: v1
      weight: 80
    - destination:
        host: echo
        subset: v2
      weight: 20
`

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestProxylessGRPCClient drives google.golang.org/grpc/xds, a real xDS client, through Sextant: it
// resolves a service, honours a weighted split and a header match, and follows an endpoint removal.
func TestProxylessGRPCClient(t *testing.T) {
	v1 := startBackend(t, "v1", "127.0.0.1")
	v2 := startBackend(t, "v2", "127.0.0.2")
	dir := t.TempDir()
	write(t, dir, "service.yaml", serviceYAML)
	_, p1, _ := net.SplitHostPort(v1.addr)
	_, p2, _ := net.SplitHostPort(v2.addr)
	write(t, dir, "v1.yaml", podAndSlice("v1", "v1", "127.0.0.1", p1))
	write(t, dir, "v2.yaml", podAndSlice("v2", "v2", "127.0.0.2", p2))
	write(t, dir, "routing.yaml", routingYAML)

	srv, err := discovery.NewServer(discovery.Args{ConfigDir: dir, GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		DebounceAfter: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); srv.Wait() }()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}

	bootstrap := fmt.Sprintf(`{
  "xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
  "node": {"id": "sidecar~127.0.0.9~client.default~default.svc.cluster.local", "metadata": {"GENERATOR": "grpc", "NAMESPACE": "default"}}
}`, srv.GRPCAddr())
	resolver, err := xdsgrpc.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///echo.default.svc.cluster.local:7070", grpc.WithResolvers(resolver),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)

	call := func(user string) (string, error) {
		callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if user != "" {
			callCtx = metadata.AppendToOutgoingContext(callCtx, "x-user", user)
		}
		var hdr metadata.MD
		if _, err := client.Check(callCtx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr)); err != nil {
			return "", err
		}
		return strings.Join(hdr.Get("backend"), ","), nil
	}
	// The first call waits for LDS → RDS → CDS → EDS.
	if _, err := call(""); err != nil {
		t.Fatalf("first call through xDS: %v", err)
	}

	counts := map[string]int{}
	const calls = 1000
	for range calls {
		id, err := call("")
		if err != nil {
			t.Fatal(err)
		}
		counts[id]++
	}
	share := float64(counts["v1"]) / calls * 100
	t.Logf("80/20 split over %d calls: %v (v1 %.1f%%)", calls, counts, share)
	if share < 75 || share > 85 {
		t.Errorf("v1 got %.1f%% of calls, want 80±5", share)
	}

	for range 50 {
		id, err := call("jason")
		if err != nil {
			t.Fatal(err)
		}
		if id != "v2" {
			t.Fatalf("header match x-user=jason reached %s, want v2", id)
		}
	}

	// Without the VirtualService both endpoints serve the plain cluster; removing one moves all traffic.
	if err := os.Remove(filepath.Join(dir, "routing.yaml")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "both backends reachable without routing", func() bool {
		seen := map[string]bool{}
		for range 40 {
			if id, err := call(""); err == nil {
				seen[id] = true
			}
		}
		return seen["v1"] && seen["v2"]
	})
	if err := os.Remove(filepath.Join(dir, "v2.yaml")); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	waitFor(t, 2*time.Second, "all traffic on v1 after removing v2", func() bool {
		for range 20 {
			if id, err := call(""); err != nil || id != "v1" {
				return false
			}
		}
		return true
	})
	t.Logf("traffic moved to the remaining endpoint %s after the file was removed", time.Since(removed).Round(time.Millisecond))
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
