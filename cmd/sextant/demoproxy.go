package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/spf13/cobra"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sextantmesh/sextant/pilot/envoy"
)

// demoPod is the example mesh's productpage pod (examples/bookinfo/10-bookinfo.yaml), the sidecar the
// demo proxy speaks for by default: productpage calls reviews and details, so edits to them reach it.
var demoPod = demoProxyOptions{Pod: "productpage-v1-0000", Namespace: "bookinfo", IP: "10.1.0.10",
	ServiceAccount: "bookinfo-productpage",
	Labels:         map[string]string{"app": "productpage", "version": "v1", "security.istio.io/tlsMode": "istio"}}

// demoProxyOptions say which sidecar the demo proxy is and where its server is.
type demoProxyOptions struct {
	Addr, Pod, Namespace, IP, ServiceAccount string
	Labels                                   map[string]string
	// Retry is the pause before connecting again after a stream ends or cannot start.
	Retry time.Duration
}

// nodeID is the id Istio's agent gives the pod's sidecar: sidecar~IP~POD.NAMESPACE~NAMESPACE.svc.cluster.local.
func (o demoProxyOptions) nodeID() string {
	return "sidecar~" + o.IP + "~" + o.Pod + "." + o.Namespace + "~" + o.Namespace + ".svc.cluster.local"
}

// setProxy takes the proxy as the other commands name one: POD.NAMESPACE, or a sidecar's node id, whose IP
// it takes too.
func (o *demoProxyOptions) setProxy(arg string) error {
	id := arg
	if parts := strings.Split(arg, "~"); len(parts) == 4 && parts[0] == "sidecar" && parts[1] != "" {
		id, o.IP = parts[2], parts[1]
	} else if len(parts) > 1 {
		return fmt.Errorf("proxy %q: want POD.NAMESPACE or a sidecar's node id sidecar~IP~POD.NAMESPACE~NAMESPACE.svc.cluster.local", arg)
	}
	i := strings.LastIndexByte(id, '.')
	if i <= 0 || i == len(id)-1 {
		return fmt.Errorf("proxy %q: want POD.NAMESPACE or a sidecar's node id sidecar~IP~POD.NAMESPACE~NAMESPACE.svc.cluster.local", arg)
	}
	o.Pod, o.Namespace = id[:i], id[i+1:]
	return nil
}

func demoProxyCommand() *cobra.Command {
	opts := demoPod
	opts.Retry = time.Second
	cmd := &cobra.Command{
		Use:   "demo-proxy [POD.NAMESPACE|NODE_ID]",
		Short: "Connect a stand-in sidecar of the example mesh to a server, so its views show a proxy",
		Long: `Connect to the server's plaintext xDS port as the sidecar of one pod (by default productpage-v1-0000
in examples/bookinfo) and stay connected. It speaks delta ADS as Envoy does: it subscribes to every
cluster and listener, then to the load assignments and route configurations they name, and ACKs each
response (a resource it cannot decode is NACKed). It reconnects when the stream ends. It routes no traffic:
it lets proxy-status, config-dump, wait --for distribution and the dashboard show a proxy at once.
make run starts it beside the server. The proxy is named as every command names one: POD.NAMESPACE (the
flags give the rest) or a sidecar's node id sidecar~IP~POD.NAMESPACE~NAMESPACE.svc.cluster.local.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				if err := opts.setProxy(args[0]); err != nil {
					return err
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runDemoProxy(ctx, opts, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Addr, "xds-addr", "127.0.0.1:15010", "the server's plaintext xDS address (discovery --grpc-addr)")
	f.StringVar(&opts.Pod, "pod", opts.Pod, "the pod whose sidecar this is")
	f.StringVar(&opts.Namespace, "namespace", opts.Namespace, "the pod's namespace")
	f.StringVar(&opts.IP, "ip", opts.IP, "the pod's IP")
	f.StringVar(&opts.ServiceAccount, "service-account", opts.ServiceAccount, "the pod's service account")
	f.StringToStringVar(&opts.Labels, "labels", opts.Labels, "the pod's labels, sent as the node's LABELS metadata")
	return cmd
}

// runDemoProxy keeps a stream open until ctx ends, connecting again after each failure.
func runDemoProxy(ctx context.Context, opts demoProxyOptions, out io.Writer) error {
	cc, err := grpc.NewClient("passthrough:///"+opts.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	node, err := demoNode(opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "demo-proxy: connecting to %s as %s\n", opts.Addr, node.Id)
	var lastErr string
	for ctx.Err() == nil {
		s := &demoStream{node: node, out: out}
		err := s.run(ctx, discovery.NewAggregatedDiscoveryServiceClient(cc))
		if ctx.Err() != nil {
			break
		}
		// Say why once, not every second while the server is starting or away.
		if msg := demoStreamError(err); msg != lastErr {
			fmt.Fprintf(out, "demo-proxy: %s; trying again every %v\n", msg, opts.Retry)
			lastErr = msg
		}
		if s.responses > 0 {
			lastErr = ""
		}
		select {
		case <-ctx.Done():
		case <-time.After(opts.Retry):
		}
	}
	return nil
}

func demoStreamError(err error) string {
	if st, ok := status.FromError(err); ok && st.Code() == codes.Unavailable {
		return "server not reachable or not ready: " + st.Message()
	}
	return "stream ended: " + err.Error()
}

func demoNode(opts demoProxyOptions) (*core.Node, error) {
	labels := map[string]any{}
	for k, v := range opts.Labels {
		labels[k] = v
	}
	md, err := structpb.NewStruct(map[string]any{"NAMESPACE": opts.Namespace, "SERVICE_ACCOUNT": opts.ServiceAccount,
		"LABELS": labels, "CLUSTER_ID": "Kubernetes"})
	if err != nil {
		return nil, err
	}
	return &core.Node{Id: opts.nodeID(), Cluster: opts.Labels["app"] + "." + opts.Namespace, Metadata: md,
		UserAgentName: "sextant-demo-proxy"}, nil
}

// demoStream is one delta ADS stream and what was received on it. A new stream starts from nothing, as a
// restarted Envoy would.
type demoStream struct {
	node   *core.Node
	out    io.Writer
	stream grpc.BidiStreamingClient[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]
	// held is type URL → resource name → version.
	held map[string]map[string]string
	// wanted are the names subscribed explicitly, by type (load assignments and route configurations).
	wanted map[string]map[string]bool
	// refs is type URL → resource name → the names it needs of the next type (clusters their load
	// assignments, listeners their route configurations).
	refs      map[string]map[string][]string
	listeners bool // LDS subscribed
	responses int
}

func (s *demoStream) run(ctx context.Context, ads discovery.AggregatedDiscoveryServiceClient) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// WaitForReady: a server still starting is waited for, not reported as an error every second.
	stream, err := ads.DeltaAggregatedResources(ctx, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	s.stream = stream
	s.held = map[string]map[string]string{}
	s.wanted = map[string]map[string]bool{envoy.EndpointType: {}, envoy.RouteType: {}}
	s.refs = map[string]map[string][]string{}
	// Envoy asks for clusters first and for listeners once the first clusters arrived; both wildcard.
	if err := s.send(&discovery.DeltaDiscoveryRequest{TypeUrl: envoy.ClusterType}); err != nil {
		return err
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		if err := s.handle(resp); err != nil {
			return err
		}
	}
}

func (s *demoStream) send(req *discovery.DeltaDiscoveryRequest) error {
	req.Node = s.node
	return s.stream.Send(req)
}

// handle applies a response, ACKs or NACKs it, then changes the subscriptions it calls for.
func (s *demoStream) handle(resp *discovery.DeltaDiscoveryResponse) error {
	s.responses++
	typ := resp.GetTypeUrl()
	refs := map[string][]string{}
	ack := &discovery.DeltaDiscoveryRequest{TypeUrl: typ, ResponseNonce: resp.GetNonce()}
	for _, r := range resp.GetResources() {
		names, err := referredNames(typ, r)
		if err != nil {
			// Envoy rejects the whole response and keeps what it held.
			ack.ErrorDetail = &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: r.GetName() + ": " + err.Error()}
			fmt.Fprintf(s.out, "demo-proxy: %s NACK: %s\n", typeName(typ), ack.ErrorDetail.Message)
			return s.send(ack)
		}
		refs[r.GetName()] = names
	}
	held := s.held[typ]
	if held == nil {
		held = map[string]string{}
		s.held[typ] = held
	}
	if s.refs[typ] == nil {
		s.refs[typ] = map[string][]string{}
	}
	for _, r := range resp.GetResources() {
		held[r.GetName()] = r.GetVersion()
		s.refs[typ][r.GetName()] = refs[r.GetName()]
	}
	for _, name := range resp.GetRemovedResources() {
		delete(held, name)
		delete(s.refs[typ], name)
	}
	fmt.Fprintf(s.out, "demo-proxy: %s +%d -%d, holding %d, ACK\n", typeName(typ), len(resp.GetResources()),
		len(resp.GetRemovedResources()), len(held))
	if err := s.send(ack); err != nil {
		return err
	}
	switch typ {
	case envoy.ClusterType:
		if err := s.follow(envoy.ClusterType, envoy.EndpointType); err != nil {
			return err
		}
		if !s.listeners {
			s.listeners = true
			return s.send(&discovery.DeltaDiscoveryRequest{TypeUrl: envoy.ListenerType})
		}
	case envoy.ListenerType:
		return s.follow(envoy.ListenerType, envoy.RouteType)
	}
	return nil
}

// follow subscribes to the resources of type to that the held resources of type from name, and
// unsubscribes from those none of them names any more.
func (s *demoStream) follow(from, to string) error {
	want := map[string]bool{}
	for _, names := range s.refs[from] {
		for _, n := range names {
			want[n] = true
		}
	}
	req := &discovery.DeltaDiscoveryRequest{TypeUrl: to}
	for n := range want {
		if !s.wanted[to][n] {
			req.ResourceNamesSubscribe = append(req.ResourceNamesSubscribe, n)
		}
	}
	for n := range s.wanted[to] {
		if !want[n] {
			req.ResourceNamesUnsubscribe = append(req.ResourceNamesUnsubscribe, n)
		}
	}
	if len(req.ResourceNamesSubscribe)+len(req.ResourceNamesUnsubscribe) == 0 {
		return nil
	}
	slices.Sort(req.ResourceNamesSubscribe)
	slices.Sort(req.ResourceNamesUnsubscribe)
	s.wanted[to] = want
	return s.send(req)
}

// referredNames decodes a cluster or listener and returns the load assignment or route configurations it
// needs; other types are taken as they come.
func referredNames(typ string, r *discovery.Resource) ([]string, error) {
	switch typ {
	case envoy.ClusterType:
		var c cluster.Cluster
		if err := r.GetResource().UnmarshalTo(&c); err != nil {
			return nil, err
		}
		if c.GetType() != cluster.Cluster_EDS {
			return nil, nil
		}
		if n := c.GetEdsClusterConfig().GetServiceName(); n != "" {
			return []string{n}, nil
		}
		return []string{c.GetName()}, nil
	case envoy.ListenerType:
		var l listener.Listener
		if err := r.GetResource().UnmarshalTo(&l); err != nil {
			return nil, err
		}
		return routeConfigNames(&l)
	}
	return nil, nil
}

// routeConfigNames are the route configurations the listener's HTTP connection managers fetch over RDS.
func routeConfigNames(l *listener.Listener) ([]string, error) {
	var names []string
	chains := l.GetFilterChains()
	if l.GetDefaultFilterChain() != nil {
		chains = append(slices.Clone(chains), l.GetDefaultFilterChain())
	}
	for _, fc := range chains {
		for _, f := range fc.GetFilters() {
			tc := f.GetTypedConfig()
			if tc == nil || !strings.HasSuffix(tc.GetTypeUrl(), "HttpConnectionManager") {
				continue
			}
			var m hcm.HttpConnectionManager
			if err := tc.UnmarshalTo(&m); err != nil {
				return nil, fmt.Errorf("filter %s: %w", f.GetName(), err)
			}
			if n := m.GetRds().GetRouteConfigName(); n != "" && !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	return names, nil
}

// typeName is the short name of a type URL (CDS, EDS, LDS, RDS), as proxy-status names it.
func typeName(typeURL string) string {
	switch typeURL {
	case envoy.ClusterType:
		return "CDS"
	case envoy.EndpointType:
		return "EDS"
	case envoy.ListenerType:
		return "LDS"
	case envoy.RouteType:
		return "RDS"
	}
	return typeURL
}
