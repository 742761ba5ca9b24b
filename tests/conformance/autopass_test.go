package conformance

import (
	"path/filepath"
	"strings"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

const (
	sniV1      = "outbound_.9080_.v1_.reviews.default.svc.cluster.local"
	sniV1Class = "mtls(sni=" + sniV1 + ")"
)

// sextantAutoPassthrough renders the gateway-auto-passthrough case with Sextant only (no istiod needed).
func sextantAutoPassthrough(t *testing.T) (*Case, *Output) {
	t.Helper()
	c, err := LoadCase(filepath.Join("cases", "gateway-auto-passthrough"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := RenderSextant(c, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return c, out[c.Proxies[0].Name]
}

func cloneAll(o *Output) *Output {
	c := cloneOutput(o)
	c.Clusters = nil
	for _, cl := range o.Clusters {
		c.Clusters = append(c.Clusters, proto.Clone(cl).(*cluster.Cluster))
	}
	return c
}

// A gateway's SNI-DNAT clusters and their endpoints have keys of their own (not those of the standard
// clusters of the same destination), and a sidecar's mTLS connection with that server name is asked of the
// gateway's listener: it reaches the SNI-DNAT cluster, where a client offering other ALPNs is closed.
func TestSNIDNATClustersAndChainsAreNormalised(t *testing.T) {
	c, out := sextantAutoPassthrough(t)
	s, err := out.Normalise(c.Proxies[0], ProbesOf(out.Listeners))
	if err != nil {
		t.Fatal(err)
	}
	ck := Key{Kind: KindCluster, SNIDNAT: true, Host: "reviews.default.svc.cluster.local", Port: 9080, Subset: "v1"}
	if ck.String() != "cluster sni-dnat reviews.default.svc.cluster.local:9080 v1" {
		t.Errorf("key reads %q", ck.String())
	}
	if s[ck] == nil || s[Key{Kind: KindCluster, Host: ck.Host, Port: ck.Port, Subset: ck.Subset}] == nil {
		t.Fatalf("no SNI-DNAT and standard clusters of reviews v1 in %s", s.Text())
	}
	ek := ck
	ek.Kind = KindEndpoints
	if got := s[ek]["addresses"]; got != "10.1.0.11:9080" {
		t.Errorf("SNI-DNAT endpoints of v1: %q, want the v1 pod", got)
	}
	lk := Key{Kind: KindListener, Host: "0.0.0.0", Port: 15443}
	if got := s[lk][sniV1Class]; got != "plaintext → tcp sni-dnat reviews.default.svc.cluster.local:9080/v1" {
		t.Errorf("%s: %q, want the SNI-DNAT cluster of v1", sniV1Class, got)
	}
	if got := s[lk]["tls(sni="+sniV1+")"]; got != "plaintext → closed" {
		t.Errorf("TLS without Istio's ALPN: %q, want closed", got)
	}
}

// A change to an SNI-DNAT cluster or to the chain leading to it is a difference naming it: a cluster that
// originates TLS, a chain that stops requiring Istio's ALPN, a tcp_proxy that loses its source-IP hash.
func TestCompareSeesSNIDNATChanges(t *testing.T) {
	c, out := sextantAutoPassthrough(t)
	tlsAny, err := anypb.New(&tlsv3.UpstreamTlsContext{Sni: sniV1})
	if err != nil {
		t.Fatal(err)
	}
	changed := cloneAll(out)
	for _, cl := range changed.Clusters {
		if cl.Name == sniV1 {
			cl.TransportSocket = &core.TransportSocket{Name: "envoy.transport_sockets.tls",
				ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: tlsAny}}
		}
	}
	for _, l := range changed.Listeners {
		for _, fc := range l.FilterChains {
			if fc.Name != sniV1 {
				continue
			}
			fc.FilterChainMatch.ApplicationProtocols = nil
			tp := &tcpproxy.TcpProxy{}
			if err := fc.Filters[0].GetTypedConfig().UnmarshalTo(tp); err != nil {
				t.Fatal(err)
			}
			tp.HashPolicy = nil
			a, err := anypb.New(tp)
			if err != nil {
				t.Fatal(err)
			}
			fc.Filters[0].ConfigType = &listener.Filter_TypedConfig{TypedConfig: a}
		}
	}
	a, b := listenerSnapshots(t, c, out, changed)
	chainKey := Key{Kind: KindListener, Host: "0.0.0.0", Port: 15443,
		Subset: "plaintext → tcp sni-dnat reviews.default.svc.cluster.local:9080/v1"}
	var sawTLS, sawALPN, sawHash bool
	for _, d := range Compare(c.Name, "p", a, b) {
		switch {
		case d.Key.SNIDNAT && d.Key.Kind == KindCluster && d.Key.Subset == "v1" && strings.HasPrefix(d.Field, "tls("):
			sawTLS = true
		case d.Key.Kind == KindListener && d.Key.Subset == "" && d.Field == "tls(sni="+sniV1+")":
			sawALPN = true
		case d.Key == chainKey && d.Field == "tcp.hash":
			sawHash = true
		}
	}
	if !sawTLS || !sawALPN || !sawHash {
		t.Errorf("differences seen: upstream TLS %v, ALPN %v, hash %v; want all", sawTLS, sawALPN, sawHash)
	}
}
