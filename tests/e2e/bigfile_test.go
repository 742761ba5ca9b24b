package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
)

const clusterType = "type.googleapis.com/envoy.config.cluster.v3.Cluster"

// editLatencyLimit is how long an edit to one config file may take to reach a connected proxy while a
// million-document file sits (and is rewritten) beside it.
const editLatencyLimit = 2 * time.Second

func serviceEntryYAML(name, host string, port int) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: %s
  namespace: default
spec:
  hosts:
  - %s
  location: MESH_EXTERNAL
  resolution: DNS
  ports:
  - number: %d
    name: http
    protocol: HTTP
`, name, host, port)
}

// A config dir holding a file of a million documents: the server starts, rejects that file for the document
// limit, and an edit to another file, made while the big file is being rewritten, reaches a proxy connected
// over ADS within editLatencyLimit.
func TestEditBesideMillionDocumentFileReachesProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server binary")
	}
	dir := t.TempDir()
	writeConfig(t, dir, "10-mesh.yaml", serviceEntryYAML("catalog", "catalog.example.com", 80))
	bigPath := writeConfig(t, dir, "90-big.yaml", strings.Repeat("{}\n---\n", 1_000_000))

	bin := buildSextant(t)
	// A file over the document limit cannot be told to hold no security objects, so by design it keeps a
	// starting server not ready; the flag lets it serve the rest, which is what is measured here.
	p := startSextant(t, bin, "--config-dir", dir, "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0",
		"--secure-grpc-addr", "127.0.0.1:0", "--log-level", "warn", "--ready-with-security-errors")

	cds := watchClusters(t, p.grpcAddr, "sidecar~10.0.0.9~client.default~default.svc.cluster.local")
	cds.await(t, 30*time.Second, "outbound|80||catalog.example.com")

	// The big file changes (its read and count start), then another file gets a new host.
	if err := os.WriteFile(bigPath, []byte(strings.Repeat("{}\n---\n", 1_000_001)), 0o644); err != nil {
		t.Fatal(err)
	}
	writeConfig(t, dir, "20-edit.yaml", serviceEntryYAML("orders", "orders.example.com", 8080))
	written := time.Now()
	got := cds.await(t, editLatencyLimit, "outbound|8080||orders.example.com")
	t.Logf("the edit beside the million-document file reached the proxy in %s", got.Sub(written).Round(time.Millisecond))

	e := configErrorFor(t, p.httpAddr, bigPath)
	if e == nil || !strings.Contains(e.Message, "limit of 10000 documents") {
		t.Errorf("/debug/config_errors for %s: %+v, want the rejection naming the limit of 10000 documents", bigPath, e)
	}
}

func writeConfig(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// cdsResponse is the cluster names of one CDS response and when it arrived.
type cdsResponse struct {
	names []string
	at    time.Time
}

// cdsWatch is a state-of-the-world ADS stream subscribed to every cluster, ACKing each response.
type cdsWatch struct {
	responses chan cdsResponse
	errs      chan error
}

func watchClusters(t *testing.T, addr, nodeID string) *cdsWatch {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := &core.Node{Id: nodeID, Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
		"NAMESPACE": structpb.NewStringValue("default")}}}
	if err := stream.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: clusterType}); err != nil {
		t.Fatal(err)
	}
	w := &cdsWatch{responses: make(chan cdsResponse, 64), errs: make(chan error, 1)}
	go w.read(ctx, stream)
	return w
}

// read receives responses, hands their cluster names on and ACKs them, until the stream ends.
func (w *cdsWatch) read(ctx context.Context, stream grpc.BidiStreamingClient[discovery.DiscoveryRequest, discovery.DiscoveryResponse]) {
	for {
		resp, err := stream.Recv()
		if err != nil {
			w.errs <- err // one error at most: the reader ends with it
			return
		}
		r := cdsResponse{at: time.Now()}
		for _, a := range resp.GetResources() {
			var c clusterpb.Cluster
			if err := a.UnmarshalTo(&c); err != nil {
				w.errs <- fmt.Errorf("CDS response version %s: resource %s: %w", resp.GetVersionInfo(), a.GetTypeUrl(), err)
				return
			}
			r.names = append(r.names, c.GetName())
		}
		select {
		case w.responses <- r:
		case <-ctx.Done():
			return
		}
		ack := &discovery.DiscoveryRequest{TypeUrl: clusterType, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}
		if err := stream.Send(ack); err != nil {
			w.errs <- err
			return
		}
	}
}

// await waits up to limit for a CDS response holding the cluster name and returns when it arrived.
func (w *cdsWatch) await(t *testing.T, limit time.Duration, name string) time.Time {
	t.Helper()
	timeout := time.After(limit)
	var last []string
	for {
		select {
		case r := <-w.responses:
			if slices.Contains(r.names, name) {
				return r.at
			}
			last = r.names
		case err := <-w.errs:
			t.Fatalf("ADS stream ended waiting for cluster %s: %v", name, err)
		case <-timeout:
			t.Fatalf("no CDS response with cluster %s within %s; the last held %v", name, limit, last)
		}
	}
}

// configError is one entry of /debug/config_errors.
type configError struct {
	File    string `json:"file"`
	Message string `json:"message"`
}

// configErrorFor returns the first /debug/config_errors entry for file, or nil.
func configErrorFor(t *testing.T, httpAddr, file string) *configError {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/debug/config_errors")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/debug/config_errors: %s", resp.Status)
	}
	var errs []configError
	if err := json.NewDecoder(resp.Body).Decode(&errs); err != nil {
		t.Fatalf("/debug/config_errors: %v", err)
	}
	for i := range errs {
		if errs[i].File == file {
			return &errs[i]
		}
	}
	t.Logf("/debug/config_errors: %+v", errs)
	return nil
}
