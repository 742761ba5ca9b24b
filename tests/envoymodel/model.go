package envoymodel

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// Resources is what a proxy received over xDS.
type Resources struct {
	Listeners []*listener.Listener
	Routes    []*route.RouteConfiguration
	Clusters  []*cluster.Cluster
	Endpoints []*endpoint.ClusterLoadAssignment
}

// Proxy is one Envoy holding Resources.
type Proxy struct {
	res       Resources
	routes    map[string]*route.RouteConfiguration
	clusters  map[string]*cluster.Cluster
	endpoints map[string]*endpoint.ClusterLoadAssignment
	// Now is the clock the JWT checks read; time.Now when nil.
	Now func() time.Time
}

// New indexes the resources; duplicate names are an error, as Envoy refuses them.
func New(res Resources) (*Proxy, error) {
	p := &Proxy{res: res, routes: map[string]*route.RouteConfiguration{}, clusters: map[string]*cluster.Cluster{},
		endpoints: map[string]*endpoint.ClusterLoadAssignment{}}
	seen := map[string]bool{}
	for _, l := range res.Listeners {
		if seen[l.GetName()] {
			return nil, fmt.Errorf("listener %q twice", l.GetName())
		}
		seen[l.GetName()] = true
	}
	for _, r := range res.Routes {
		if p.routes[r.GetName()] != nil {
			return nil, fmt.Errorf("route configuration %q twice", r.GetName())
		}
		p.routes[r.GetName()] = r
	}
	for _, c := range res.Clusters {
		if p.clusters[c.GetName()] != nil {
			return nil, fmt.Errorf("cluster %q twice", c.GetName())
		}
		p.clusters[c.GetName()] = c
	}
	for _, e := range res.Endpoints {
		p.endpoints[e.GetClusterName()] = e
	}
	return p, nil
}

// Certificate is what a client's certificate says of it.
type Certificate struct {
	URISANs []string
	DNSSANs []string
	Subject string
}

// TLS describes a TLS connection as the server sees its ClientHello and handshake.
type TLS struct {
	SNI  string
	ALPN []string
	// Client is the client's certificate; nil when it sent none.
	Client *Certificate
}

// Request is one inbound HTTP request on a new connection.
type Request struct {
	// DestinationIP and DestinationPort are the original destination (the workload's address).
	DestinationIP   string
	DestinationPort uint32
	// CapturePort is the port iptables redirected the connection to: 15006, Istio's inbound capture, when 0.
	CapturePort uint32
	SourceIP    string
	SourcePort  uint32
	// TLS is nil for plaintext.
	TLS *TLS
	// HTTP2 selects HTTP/2 (h2c when plaintext); HTTP/1.1 otherwise.
	HTTP2   bool
	Method  string
	Path    string
	Host    string
	Headers map[string][]string
}

// Decision is what happened to the request.
type Decision string

const (
	// Forwarded: the router (or tcp_proxy) sent the request upstream.
	Forwarded Decision = "forwarded"
	// LocalReply: a filter or the router answered (Status) without going upstream.
	LocalReply Decision = "local-reply"
	// ConnectionClosed: no filter chain, a failed handshake or a network filter closed the connection.
	ConnectionClosed Decision = "connection-closed"
)

// Result is the outcome of one request.
type Result struct {
	Decision Decision
	// Status is the local reply's HTTP status.
	Status int
	// Cluster is the upstream cluster the request was forwarded to.
	Cluster     string
	Listener    string
	FilterChain string
	// By names the filter that answered or closed, and Reason says why.
	By     string
	Reason string
	// Metadata is the dynamic metadata the filters wrote, by namespace.
	Metadata map[string]*structpb.Struct
	// ExtAuthzChecks counts the Check calls made.
	ExtAuthzChecks int
	// Trace lists what the model did, step by step.
	Trace []string
}

// Allowed reports whether the request reached an upstream.
func (r *Result) Allowed() bool { return r.Decision == Forwarded }

func (r *Result) String() string {
	s := string(r.Decision)
	if r.Status != 0 {
		s += fmt.Sprintf(" %d", r.Status)
	}
	if r.Cluster != "" {
		s += " to " + r.Cluster
	}
	if r.By != "" {
		s += " by " + r.By
	}
	if r.Reason != "" {
		s += " (" + r.Reason + ")"
	}
	return s + " [" + strings.Join(r.Trace, "; ") + "]"
}

// MetadataString reads a string from the dynamic metadata; "" when absent.
func (r *Result) MetadataString(namespace, key string) string {
	return r.Metadata[namespace].GetFields()[key].GetStringValue()
}

// MetadataValue reads a value from the dynamic metadata; nil when absent.
func (r *Result) MetadataValue(namespace, key string) *structpb.Value {
	return r.Metadata[namespace].GetFields()[key]
}

// unsupported is config the model does not evaluate: Evaluate fails rather than guess.
type unsupported struct{ what string }

func (u *unsupported) Error() string { return "envoymodel: not modelled: " + u.what }

func notModelled(format string, args ...any) error {
	return &unsupported{what: fmt.Sprintf(format, args...)}
}

// stream is the state of one request as it passes the filters.
type stream struct {
	p         *Proxy
	ctx       context.Context
	req       *Request
	res       *Result
	local     netip.AddrPort // the connection's local address after listener filters
	remote    netip.AddrPort // the direct peer
	downRem   netip.Addr     // the downstream remote address (x-forwarded-for aware)
	sni       string
	transport string
	tls       *TLS // nil unless the chain terminated TLS
	alpn      []string
	headers   *headerMap
	route     *route.Route
}

func (s *stream) tracef(format string, args ...any) {
	s.res.Trace = append(s.res.Trace, fmt.Sprintf(format, args...))
}

// setMetadata merges fields into a namespace, as StreamInfo::setDynamicMetadata does.
func (s *stream) setMetadata(namespace string, fields map[string]*structpb.Value) {
	if s.res.Metadata == nil {
		s.res.Metadata = map[string]*structpb.Struct{}
	}
	st := s.res.Metadata[namespace]
	if st == nil {
		st = &structpb.Struct{Fields: map[string]*structpb.Value{}}
		s.res.Metadata[namespace] = st
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		st.Fields[k] = fields[k]
	}
}

// Evaluate runs the request through the proxy. An error means the config (or the request) uses something
// the model does not evaluate; the request's fate is then unknown, never assumed allowed.
func (p *Proxy) Evaluate(ctx context.Context, req Request) (*Result, error) {
	s := &stream{p: p, ctx: ctx, req: &req, res: &Result{}}
	if err := s.connect(); err != nil {
		return nil, err
	}
	return s.res, nil
}

func (s *stream) closeConn(by, reason string) {
	s.res.Decision = ConnectionClosed
	s.res.By = by
	s.res.Reason = reason
	s.tracef("connection closed by %s: %s", by, reason)
}

func (s *stream) localReply(by string, status int, reason string) {
	s.res.Decision = LocalReply
	s.res.Status = status
	s.res.By = by
	s.res.Reason = reason
	s.tracef("%s answered %d: %s", by, status, reason)
}

func (s *stream) forward(by, cluster string) {
	s.res.Decision = Forwarded
	s.res.Cluster = cluster
	s.res.By = by
	s.tracef("%s forwarded to %s", by, cluster)
}
