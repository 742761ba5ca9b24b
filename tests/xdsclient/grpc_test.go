package xdsclient

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	xdsgrpc "google.golang.org/grpc/xds"
)

// echo is a gRPC service whose pods really listen, on loopback addresses, so grpc-go's own xDS client
// (proxyless, as tests/e2e uses it) can be checked by where its calls land.
type echo struct {
	backends []*backend // v1 on 127.0.0.1, v2 on 127.0.0.2
	up       map[int]bool
	client   healthpb.HealthClient
}

type backend struct {
	id, ip string
	port   int
}

const echoFile = "svc-alpha-echo.yaml"

func startEcho(t *testing.T) *echo {
	t.Helper()
	e := &echo{up: map[int]bool{0: true, 1: true}}
	for i, ip := range []string{"127.0.0.1", "127.0.0.2"} {
		lis, err := net.Listen("tcp", ip+":0")
		if err != nil {
			t.Skipf("cannot listen on %s: %v", ip, err)
		}
		id := fmt.Sprintf("v%d", i+1)
		srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo,
			h grpc.UnaryHandler) (any, error) {
			_ = grpc.SetHeader(ctx, metadata.Pairs("backend", id))
			return h(ctx, req)
		}))
		healthpb.RegisterHealthServer(srv, health.NewServer())
		go func() { _ = srv.Serve(lis) }()
		t.Cleanup(srv.Stop)
		e.backends = append(e.backends, &backend{id: id, ip: ip, port: lis.Addr().(*net.TCPAddr).Port})
	}
	return e
}

// yaml is the echo Service with a Pod and an EndpointSlice per backend that is up.
func (e *echo) yaml() string {
	var b strings.Builder
	b.WriteString(`apiVersion: v1
kind: Service
metadata:
  name: echo
  namespace: alpha
spec:
  clusterIP: 10.96.0.50
  selector:
    app: echo
  ports:
  - name: grpc
    port: 7070
`)
	for i, be := range e.backends {
		if !e.up[i] {
			continue
		}
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Pod
metadata:
  name: echo-%[1]s
  namespace: alpha
  labels:
    app: echo
    version: %[1]s
spec:
  nodeName: node-a
  containers:
  - name: echo
    image: echo
status:
  phase: Running
  podIP: %[2]s
  conditions:
  - type: Ready
    status: "True"
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: echo-%[1]s
  namespace: alpha
  labels:
    kubernetes.io/service-name: echo
addressType: IPv4
ports:
- name: grpc
  port: %[3]d
endpoints:
- addresses: ["%[2]s"]
  conditions:
    ready: true
  nodeName: node-a
  targetRef:
    kind: Pod
    namespace: alpha
    name: echo-%[1]s
`, be.id, be.ip, be.port)
	}
	return b.String()
}

// dial starts grpc-go's xDS client against s for xds:///echo.alpha.svc.cluster.local:7070.
func (e *echo) dial(t *testing.T, s *server) {
	t.Helper()
	bootstrap := fmt.Sprintf(`{
  "xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
  "node": {"id": "sidecar~127.0.0.9~client.alpha~alpha.svc.cluster.local", "metadata": {"GENERATOR": "grpc", "NAMESPACE": "alpha"}}
}`, s.addr())
	resolver, err := xdsgrpc.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///echo.alpha.svc.cluster.local:7070", grpc.WithResolvers(resolver),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	e.client = healthpb.NewHealthClient(conn)
}

// reached returns the backends 20 calls landed on, and the last error.
func (e *echo) reached() (map[string]bool, error) {
	seen := map[string]bool{}
	var last error
	for range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		var hdr metadata.MD
		_, err := e.client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
		cancel()
		if err != nil {
			last = err
			continue
		}
		seen[strings.Join(hdr.Get("backend"), ",")] = true
	}
	return seen, last
}

// check says whether the calls reach exactly the backends that are up (none up: every call fails).
func (e *echo) check() []string {
	want := map[string]bool{}
	for i, be := range e.backends {
		if e.up[i] {
			want[be.id] = true
		}
	}
	var got map[string]bool
	var err error
	if waitFor(5*time.Second, func() bool { got, err = e.reached(); return maps.Equal(got, want) }) {
		return nil
	}
	return []string{fmt.Sprintf("proxyless gRPC calls reached %v, want %v (last error: %v)", slices.Sorted(maps.Keys(got)),
		slices.Sorted(maps.Keys(want)), err)}
}
