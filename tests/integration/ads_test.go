//go:build integration

package integration

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/sextantmesh/sextant/pilot/envoy"
)

// adsClient is a delta ADS client, like a sidecar's Envoy: a wildcard CDS subscription plus EDS for the
// cluster names it is told to watch. Every response is validated (ValidateAll) and ACKed.
type adsClient struct {
	t      testing.TB
	stream grpc.BidiStreamingClient[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]

	mu        sync.Mutex
	clusters  map[string]*cluster.Cluster
	endpoints map[string]*endpoint.ClusterLoadAssignment
	responses map[string]int // per type URL
	err       error
}

// dialADS connects to addr as a sidecar in namespace ns and subscribes to every cluster.
func dialADS(t testing.TB, addr, ns string) *adsClient {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); _ = cc.Close() })
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := &adsClient{t: t, stream: stream, clusters: map[string]*cluster.Cluster{},
		endpoints: map[string]*endpoint.ClusterLoadAssignment{}, responses: map[string]int{}}
	node := &core.Node{Id: "sidecar~10.1.0.1~client." + ns + "~" + ns + ".svc.cluster.local"}
	if err := stream.Send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: envoy.ClusterType,
		ResourceNamesSubscribe: []string{"*"}}); err != nil {
		t.Fatal(err)
	}
	go c.read()
	return c
}

func (c *adsClient) read() {
	for {
		r, err := c.stream.Recv()
		if err != nil {
			c.mu.Lock()
			if c.err == nil {
				c.err = err
			}
			c.mu.Unlock()
			return
		}
		ack := &discovery.DeltaDiscoveryRequest{TypeUrl: r.TypeUrl, ResponseNonce: r.Nonce}
		c.mu.Lock()
		c.responses[r.TypeUrl]++
		for _, res := range r.Resources {
			switch r.TypeUrl {
			case envoy.ClusterType:
				var cl cluster.Cluster
				err := proto.Unmarshal(res.Resource.Value, &cl)
				if err == nil {
					err = cl.ValidateAll()
				}
				if err != nil && c.err == nil {
					c.err = err
				}
				c.clusters[res.Name] = &cl
			case envoy.EndpointType:
				var cla endpoint.ClusterLoadAssignment
				_ = proto.Unmarshal(res.Resource.Value, &cla)
				if err := cla.ValidateAll(); err != nil && c.err == nil {
					c.err = err
				}
				c.endpoints[res.Name] = &cla
			}
		}
		for _, name := range r.RemovedResources {
			delete(c.clusters, name)
			delete(c.endpoints, name)
		}
		c.mu.Unlock()
		_ = c.stream.Send(ack)
	}
}

// watchEndpoints subscribes to the EDS resources of the named clusters.
func (c *adsClient) watchEndpoints(names ...string) {
	c.t.Helper()
	if err := c.stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: envoy.EndpointType, ResourceNamesSubscribe: names}); err != nil {
		c.t.Fatal(err)
	}
}

func (c *adsClient) hasCluster(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.clusters[name]
	return ok
}

// endpointAddresses returns the addresses the client holds for cluster name.
func (c *adsClient) endpointAddresses(name string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	if cla := c.endpoints[name]; cla != nil {
		for _, l := range cla.Endpoints {
			for _, e := range l.LbEndpoints {
				out = append(out, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
			}
		}
	}
	sort.Strings(out)
	return out
}

func (c *adsClient) responseCount(typeURL string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.responses[typeURL]
}

func (c *adsClient) check() {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		c.t.Fatalf("xDS client: %v", c.err)
	}
}

// waitCluster waits until the client holds (want) or does not hold (!want) cluster name.
func (c *adsClient) waitCluster(name string, want bool) time.Duration {
	c.t.Helper()
	start := time.Now()
	eventually(c.t, 20*time.Second, "xDS client to see cluster "+name+map[bool]string{true: " added", false: " removed"}[want],
		func() bool { c.check(); return c.hasCluster(name) == want })
	return time.Since(start)
}
