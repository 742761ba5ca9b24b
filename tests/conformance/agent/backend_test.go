package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	xdsgrpc "google.golang.org/grpc/xds"
)

const echoYAML = `apiVersion: v1
kind: Service
metadata:
  name: echo
  namespace: bookinfo
spec:
  clusterIP: 10.96.0.50
  selector:
    app: echo
  ports:
  - name: grpc
    port: 7070
    appProtocol: grpc
---
apiVersion: v1
kind: Pod
metadata:
  name: echo-1
  namespace: bookinfo
  labels:
    app: echo
spec:
  containers:
  - name: echo
    image: echo
status:
  phase: Running
  podIP: 127.0.0.1
  conditions:
  - type: Ready
    status: "True"
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: echo-1
  namespace: bookinfo
  labels:
    kubernetes.io/service-name: echo
addressType: IPv4
ports:
- name: grpc
  port: %s
endpoints:
- addresses: ["127.0.0.1"]
  conditions:
    ready: true
  targetRef:
    kind: Pod
    namespace: bookinfo
    name: echo-1
`

// TestGRPCClientBehindIstioAgentReachesABackend: grpc-go's xDS client, with the bootstrap Istio's agent
// wrote, resolves a service through the agent (and so through Sextant's secure port, with the pod's
// token) and calls its backend.
func TestGRPCClientBehindIstioAgentReachesABackend(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	backend := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo,
		h grpc.UnaryHandler) (any, error) {
		_ = grpc.SetHeader(ctx, metadata.Pairs("backend", "echo-1"))
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(backend, health.NewServer())
	go func() { _ = backend.Serve(lis) }()
	t.Cleanup(backend.Stop)
	_, port, _ := net.SplitHostPort(lis.Addr().String())

	configDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(configDir, "echo.yaml"), fmt.Appendf(nil, echoYAML, port), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startSextantWith(t, configDir)
	dir, _ := runIstioAgent(t, s, "productpage-token")
	bootstrap, err := os.ReadFile(filepath.Join(dir, "grpc-bootstrap.json"))
	if err != nil {
		t.Fatal(err)
	}
	var parsed struct {
		XDSServers []struct {
			ServerURI string `json:"server_uri"`
		} `json:"xds_servers"`
	}
	if err := json.Unmarshal(bootstrap, &parsed); err != nil || len(parsed.XDSServers) != 1 {
		t.Fatalf("bootstrap: %v, %s", err, bootstrap)
	}
	t.Logf("the agent's bootstrap points the client at %s", parsed.XDSServers[0].ServerURI)

	resolver, err := xdsgrpc.NewXDSResolverWithConfigForTesting(bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///echo.bookinfo.svc.cluster.local:7070", grpc.WithResolvers(resolver),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var hdr metadata.MD
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr),
		grpc.WaitForReady(true)); err != nil {
		t.Fatalf("call through xDS from the agent: %v", err)
	}
	if got := hdr.Get("backend"); len(got) != 1 || got[0] != "echo-1" {
		t.Errorf("reached %v, want echo-1", got)
	}
}
