package model

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"
	meshconfig "istio.io/api/mesh/v1alpha1"

	"github.com/sextantmesh/sextant/pilot/authn"
	"github.com/sextantmesh/sextant/pkg/loglimit"
)

// ProxyType says what kind of client is connected.
type ProxyType string

const (
	Sidecar ProxyType = "sidecar"
	Router  ProxyType = "router" // gateways
	Ztunnel ProxyType = "ztunnel"
	// GRPC is a proxyless gRPC client (google.golang.org/grpc/xds and its peers in other languages).
	GRPC ProxyType = "grpc"
)

// Proxy is a connected client as described by its xDS Node.
type Proxy struct {
	Type ProxyType
	// NodeID is the node id as sent.
	NodeID string
	// ID is POD.NAMESPACE for the Istio node id form; the whole node id for proxyless clients that use another form.
	ID          string
	IPAddresses []string
	// DNSDomain is NAMESPACE.svc.DOMAIN from the node id.
	DNSDomain string
	Namespace string
	// Name is the pod name (metadata NAME, else the part of ID before the namespace).
	Name           string
	Labels         map[string]string
	ClusterID      string
	IstioVersion   string
	ServiceAccount string
	NodeName       string
	// Generator is metadata GENERATOR ("grpc" for proxyless clients).
	Generator string
	// AutoRegisterGroup is metadata AUTO_REGISTER_GROUP: the WorkloadGroup, in the proxy's namespace, whose
	// WorkloadEntry the connecting VM asks to be registered as (pilot/autoregister).
	AutoRegisterGroup string
	// Network is metadata NETWORK, the network the proxy's addresses are on (empty: the mesh's); the network of
	// the WorkloadEntry it registers.
	Network string
	// UserAgent is node.user_agent_name and the version, e.g. "envoy 1.36.0".
	UserAgent string
	// BuildVersion is node.user_agent_build_version (Envoy sends it; major, minor, patch), zero when absent.
	BuildVersion [3]uint32
	// Delta is true on an incremental (delta) xDS stream. Set by the transport before any generation.
	Delta bool
	// notes say where the proxy is served otherwise than its type and version would have it, and why;
	// written by generators, read by the debug views. Set by ParseProxy; nil (notes dropped) otherwise.
	notes    *proxyNotes
	Locality *core.Locality
	// Identity is the verified identity of an authenticated stream; nil on a stream that was not
	// authenticated (the plaintext development port), where every claim above is the client's word.
	Identity *authn.Identity
	// InterceptionMode is how the workload's traffic reaches the proxy (metadata INTERCEPTION_MODE, from the
	// pod annotation sidecar.istio.io/interceptionMode): iptables REDIRECT (the default), TPROXY, or NONE for
	// a proxy without iptables (VMs, unprivileged pods), whose listeners must bind ports of their own.
	InterceptionMode InterceptionMode
	// Unprivileged is metadata UNPRIVILEGED_POD: the proxy cannot bind ports below 1024.
	Unprivileged bool
	// ProxyConfig is node metadata PROXY_CONFIG, nil when not sent; ProxyConfigOr says what generators read.
	ProxyConfig *meshconfig.ProxyConfig
	// MetadataNotes name node metadata that was read otherwise than sent (an unknown interception mode),
	// for the transport to report when the proxy connects.
	MetadataNotes []string
	// Node is the node as received; read only.
	Node *core.Node
}

// InterceptionMode is how traffic is captured for a sidecar, as Istio's TrafficInterceptionMode.
type InterceptionMode string

const (
	InterceptRedirect InterceptionMode = "REDIRECT"
	InterceptTPROXY   InterceptionMode = "TPROXY"
	InterceptNone     InterceptionMode = "NONE"
)

// CaptureNone reports whether no iptables rules send the workload's traffic to the proxy: its listeners bind
// their own ports, and there are no capture listeners.
func (p *Proxy) CaptureNone() bool { return p.InterceptionMode == InterceptNone }

// AtLeast reports whether the client's build version (node.user_agent_build_version) is at least major.minor.
func (p *Proxy) AtLeast(major, minor uint32) bool {
	v := p.BuildVersion
	return v[0] > major || v[0] == major && v[1] >= minor
}

// String names the proxy in logs.
func (p *Proxy) String() string { return loglimit.Text(p.NodeID) }

// isProxyless reports whether node describes a proxyless gRPC client.
func isProxyless(node *core.Node, generator string) bool {
	if generator == "grpc" {
		return true
	}
	ua := node.GetUserAgentName()
	return ua == "gRPC Go" || strings.HasPrefix(ua, "grpc-")
}

// ParseProxy reads a Proxy from the xDS node. Envoy-based clients and ztunnel must use Istio's node id form
// TYPE~IP~POD.NAMESPACE~NAMESPACE.svc.DOMAIN; proxyless gRPC clients may use any id and then must set
// metadata NAMESPACE. The error says exactly which part is wrong.
func ParseProxy(node *core.Node) (*Proxy, error) {
	if node == nil {
		return nil, fmt.Errorf("the first request carries no node")
	}
	p := &Proxy{NodeID: node.GetId(), Node: node, Locality: node.GetLocality(), UserAgent: node.GetUserAgentName(),
		notes: &proxyNotes{}}
	if v := node.GetUserAgentVersion(); v != "" {
		p.UserAgent += " " + v
	} else if bv := node.GetUserAgentBuildVersion().GetVersion(); bv != nil {
		p.BuildVersion = [3]uint32{bv.GetMajorNumber(), bv.GetMinorNumber(), bv.GetPatch()}
		p.UserAgent += fmt.Sprintf(" %d.%d.%d", bv.GetMajorNumber(), bv.GetMinorNumber(), bv.GetPatch())
	}
	if p.NodeID == "" {
		return nil, fmt.Errorf("node id is empty")
	}
	if err := p.readMetadata(node.GetMetadata()); err != nil {
		return nil, fmt.Errorf("node %q: %w", loglimit.Text(p.NodeID), err)
	}
	proxyless := isProxyless(node, p.Generator)
	parts := strings.Split(p.NodeID, "~")
	switch {
	case len(parts) == 4:
		if err := p.parseIstioID(parts, proxyless); err != nil {
			return nil, fmt.Errorf("node id %q: %w", loglimit.Text(p.NodeID), err)
		}
	case proxyless:
		p.Type, p.ID = GRPC, p.NodeID
	default:
		return nil, fmt.Errorf("node id %q: has %d parts separated by \"~\", want 4: TYPE~IP~POD.NAMESPACE~NAMESPACE.svc.DOMAIN",
			loglimit.Text(p.NodeID), len(parts))
	}
	if p.Namespace == "" {
		if proxyless {
			return nil, fmt.Errorf("node %q: namespace missing: set node metadata NAMESPACE", loglimit.Text(p.NodeID))
		}
		return nil, fmt.Errorf("node id %q: namespace missing: want POD.NAMESPACE as the third part, "+
			"NAMESPACE.svc.DOMAIN as the fourth, or node metadata NAMESPACE", loglimit.Text(p.NodeID))
	}
	if p.Name == "" && p.Type != GRPC {
		p.Name = strings.TrimSuffix(p.ID, "."+p.Namespace)
	}
	return p, nil
}

func (p *Proxy) parseIstioID(parts []string, proxyless bool) error {
	switch t := ProxyType(parts[0]); t {
	case Sidecar, Router, Ztunnel:
		p.Type = t
	default:
		return fmt.Errorf("unknown proxy type %q: want sidecar, router or ztunnel", parts[0])
	}
	if proxyless {
		p.Type = GRPC
	}
	if len(p.IPAddresses) == 0 { // INSTANCE_IPS, when given, is the complete list
		if _, err := netip.ParseAddr(parts[1]); err != nil {
			return fmt.Errorf("second part %q is not an IP address", parts[1])
		}
		p.IPAddresses = []string{parts[1]}
	}
	if parts[2] == "" {
		return fmt.Errorf("third part (POD.NAMESPACE) is empty")
	}
	p.ID, p.DNSDomain = parts[2], parts[3]
	if p.Namespace == "" {
		if ns, _, ok := strings.Cut(p.DNSDomain, ".svc."); ok && ns != "" && !strings.Contains(ns, ".") {
			p.Namespace = ns
		} else if i := strings.LastIndexByte(p.ID, '.'); i > 0 && i < len(p.ID)-1 {
			// Pod names may contain dots; namespaces may not, so the last dot separates them.
			p.Namespace = p.ID[i+1:]
		}
	}
	return nil
}

func (p *Proxy) readMetadata(md *structpb.Struct) error {
	fields := md.GetFields()
	str := func(key string) (string, error) {
		v, ok := fields[key]
		if !ok {
			return "", nil
		}
		s, ok := v.GetKind().(*structpb.Value_StringValue)
		if !ok {
			return "", fmt.Errorf("metadata %s: want a string", key)
		}
		return s.StringValue, nil
	}
	var err error
	for key, dst := range map[string]*string{
		"NAMESPACE": &p.Namespace, "CLUSTER_ID": &p.ClusterID, "ISTIO_VERSION": &p.IstioVersion,
		"SERVICE_ACCOUNT": &p.ServiceAccount, "NODE_NAME": &p.NodeName, "GENERATOR": &p.Generator, "NAME": &p.Name,
		"AUTO_REGISTER_GROUP": &p.AutoRegisterGroup, "NETWORK": &p.Network,
	} {
		if *dst, err = str(key); err != nil {
			return err
		}
	}
	mode, err := str("INTERCEPTION_MODE")
	if err != nil {
		return err
	}
	switch m := InterceptionMode(mode); m {
	case InterceptRedirect, InterceptTPROXY, InterceptNone:
		p.InterceptionMode = m
	default:
		// istiod reads any other value as REDIRECT; so does Sextant, saying so.
		p.InterceptionMode = InterceptRedirect
		if mode != "" {
			p.MetadataNotes = append(p.MetadataNotes, fmt.Sprintf("metadata INTERCEPTION_MODE %q is not REDIRECT, TPROXY or NONE: read as REDIRECT",
				loglimit.Text(mode)))
		}
	}
	unprivileged, err := str("UNPRIVILEGED_POD")
	if err != nil {
		return err
	}
	// As istiod: strconv.ParseBool, anything else is false.
	p.Unprivileged, _ = strconv.ParseBool(unprivileged)
	ips, err := str("INSTANCE_IPS")
	if err != nil {
		return err
	}
	for ip := range strings.SplitSeq(ips, ",") {
		if ip = strings.TrimSpace(ip); ip == "" {
			continue
		}
		if _, err := netip.ParseAddr(ip); err != nil {
			return fmt.Errorf("metadata INSTANCE_IPS: %q is not an IP address", loglimit.Text(ip))
		}
		p.IPAddresses = append(p.IPAddresses, ip)
	}
	if v, ok := fields["PROXY_CONFIG"]; ok {
		if err := p.readProxyConfig(v); err != nil {
			return err
		}
	}
	if v, ok := fields["LABELS"]; ok {
		s := v.GetStructValue()
		if s == nil {
			return fmt.Errorf("metadata LABELS: want a map of strings")
		}
		p.Labels = make(map[string]string, len(s.GetFields()))
		for k, lv := range s.GetFields() {
			sv, ok := lv.GetKind().(*structpb.Value_StringValue)
			if !ok {
				return fmt.Errorf("metadata LABELS: value of %q is not a string", loglimit.Text(k))
			}
			p.Labels[k] = sv.StringValue
		}
	}
	return nil
}

// proxyNotes are a proxy's shape notes; a copy of the Proxy shares them.
type proxyNotes struct {
	mu   sync.Mutex
	list []string
}

// NoteShape records note, once, among the proxy's shape notes.
func (p *Proxy) NoteShape(note string) {
	if p.notes == nil {
		return
	}
	p.notes.mu.Lock()
	defer p.notes.mu.Unlock()
	if !slices.Contains(p.notes.list, note) {
		p.notes.list = append(p.notes.list, note)
	}
}

// ShapeNotes returns the notes NoteShape recorded.
func (p *Proxy) ShapeNotes() []string {
	if p.notes == nil {
		return nil
	}
	p.notes.mu.Lock()
	defer p.notes.mu.Unlock()
	return slices.Clone(p.notes.list)
}
