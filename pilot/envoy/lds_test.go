package envoy

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/store"
)

// ldsPush builds the snapshot of testdata/lds/mesh.yaml, objects created one second apart in file order.
func ldsPush(t testing.TB, m *mesh.Config, extra ...string) *model.PushContext {
	t.Helper()
	data, err := os.ReadFile("testdata/lds/mesh.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range extra {
		data = append(data, "\n---\n"+e...)
	}
	docs, err := config.SplitDocuments(data)
	if err != nil {
		t.Fatal(err)
	}
	st := store.New()
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, doc := range docs {
		if config.IsEmptyDocument(doc) {
			continue
		}
		c, err := config.Parse(doc, "mesh.yaml", i, "default")
		if err != nil {
			t.Fatal(err)
		}
		created = created.Add(time.Second)
		c.CreationTimestamp = created
		st.Upsert(store.LayerFile, c)
	}
	if m == nil {
		m = mesh.Default()
	}
	return model.Build(st, m)
}

func ldsSidecar(name, ip string, labels map[string]string) *model.Proxy {
	return &model.Proxy{Type: model.Sidecar, NodeID: "sidecar~" + ip + "~" + name + ".shop~shop.svc.cluster.local",
		ID: name + ".shop", Name: name, Namespace: "shop", IPAddresses: []string{ip}, Labels: labels}
}

var (
	ldsReviews  = ldsSidecar("reviews-1", "10.1.0.5", map[string]string{"app": "reviews", "version": "v1"})
	ldsMySQL    = ldsSidecar("mysql-1", "10.1.0.6", map[string]string{"app": "mysql"})
	ldsFrontend = ldsSidecar("frontend-1", "10.1.0.7", map[string]string{"app": "frontend"})
	ldsGateway  = &model.Proxy{Type: model.Router, NodeID: "router~10.1.1.1~gw-1.istio-system~istio-system.svc.cluster.local",
		ID: "gw-1.istio-system", Namespace: "istio-system", IPAddresses: []string{"10.1.1.1"},
		Labels: map[string]string{"istio": "ingressgateway"}}
	ldsGRPCClient = &model.Proxy{Type: model.GRPC, NodeID: "client-1", ID: "client-1", Namespace: "shop"}
)

// ldsGenerate runs LDS and decodes the result, checking what every listener must satisfy: ValidateAll of it
// and of every typed config inside, its name, and the invariants Envoy checks on load (unique chain names
// and matches, HTTP filters ending with the router).
func ldsGenerate(t *testing.T, g *Generators, proxy *model.Proxy, push *model.PushContext, w *model.WatchedResource) []*listener.Listener {
	t.Helper()
	res, err := g.ByTypeURL()[ListenerType].Generate(proxy, push, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []*listener.Listener
	addresses := map[string]string{} // Envoy refuses two listeners on one address
	for _, r := range res {
		l := &listener.Listener{}
		if err := r.Any.UnmarshalTo(l); err != nil {
			t.Fatal(err)
		}
		if l.Name != r.Name {
			t.Errorf("resource %q holds listener %q", r.Name, l.Name)
		}
		if err := validateDeep(l); err != nil {
			t.Errorf("listener %s: %v", l.Name, err)
		}
		checkListener(t, l, proxy.Type == model.GRPC)
		for _, a := range listenerAddresses(l) {
			if other, dup := addresses[a]; dup {
				t.Errorf("listeners %s and %s both on %s", other, l.Name, a)
			}
			addresses[a] = l.Name
		}
		out = append(out, l)
	}
	return out
}

// listenerAddresses lists the IP:port addresses of a listener, its own and its additional ones.
func listenerAddresses(l *listener.Listener) []string {
	var out []string
	for _, a := range append([]*core.Address{l.GetAddress()}, func() (as []*core.Address) {
		for _, x := range l.GetAdditionalAddresses() {
			as = append(as, x.GetAddress())
		}
		return as
	}()...) {
		if sa := a.GetSocketAddress(); sa != nil {
			out = append(out, net.JoinHostPort(sa.GetAddress(), fmt.Sprint(sa.GetPortValue())))
		}
	}
	return out
}

// validateDeep runs ValidateAll on m and on every message packed in an Any inside it, recursively.
func validateDeep(m proto.Message) error {
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			return fmt.Errorf("%s: %w", m.ProtoReflect().Descriptor().FullName(), err)
		}
	}
	var errs []error
	walkAnys(m.ProtoReflect(), func(a *anypb.Any) {
		inner, err := a.UnmarshalNew()
		if err != nil {
			errs = append(errs, fmt.Errorf("unpack %s: %w", a.TypeUrl, err))
			return
		}
		if err := validateDeep(inner); err != nil {
			errs = append(errs, err)
		}
	})
	if len(errs) > 0 {
		return fmt.Errorf("%v", errs)
	}
	return nil
}

func walkAnys(m protoreflect.Message, f func(*anypb.Any)) {
	if a, ok := m.Interface().(*anypb.Any); ok {
		f(a)
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := range v.List().Len() {
				walkAnys(v.List().Get(i).Message(), f)
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				walkAnys(mv.Message(), f)
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			walkAnys(v.Message(), f)
		}
		return true
	})
}

func checkListener(t *testing.T, l *listener.Listener, grpc bool) {
	t.Helper()
	names := map[string]bool{}
	matches := map[string]string{}
	for _, fc := range l.FilterChains {
		if names[fc.Name] {
			t.Errorf("listener %s: chain name %q twice", l.Name, fc.Name)
		}
		names[fc.Name] = true
		for _, k := range matchKeys(fc.FilterChainMatch) {
			if other, dup := matches[k]; dup {
				t.Errorf("listener %s: chains %q and %q have the same match %s", l.Name, other, fc.Name, k)
			}
			matches[k] = fc.Name
		}
		for _, f := range fc.Filters {
			if f.Name == ldsHCMFilter {
				checkHTTPFilters(t, l.Name+"/"+fc.Name, ldsDecodeHCM(t, f.GetTypedConfig()), grpc)
			} else if grpc { // a gRPC server's chain: its connection manager, RBAC before the router
				h := ldsDecodeHCM(t, f.GetTypedConfig())
				if n := len(h.HttpFilters); n == 0 || h.HttpFilters[n-1].Name != ldsRouterFilterName {
					t.Errorf("%s/%s: http filters do not end with the router", l.Name, fc.Name)
				}
			}
		}
	}
	if l.ApiListener != nil {
		checkHTTPFilters(t, l.Name, ldsDecodeHCM(t, l.ApiListener.ApiListener), grpc)
	}
}

// matchKeys expands a match into the single-valued matches Envoy indexes it by.
func matchKeys(m *listener.FilterChainMatch) []string {
	ips := []string{""}
	if len(m.GetPrefixRanges()) > 0 {
		ips = nil
		for _, r := range m.PrefixRanges {
			ips = append(ips, fmt.Sprintf("%s/%d", r.AddressPrefix, r.PrefixLen.GetValue()))
		}
	}
	snis := append([]string{}, m.GetServerNames()...)
	if len(snis) == 0 {
		snis = []string{""}
	}
	alpns := append([]string{}, m.GetApplicationProtocols()...)
	if len(alpns) == 0 {
		alpns = []string{""}
	}
	var out []string
	for _, ip := range ips {
		for _, sni := range snis {
			for _, alpn := range alpns {
				out = append(out, fmt.Sprintf("port=%d ip=%s sni=%s transport=%s alpn=%s",
					m.GetDestinationPort().GetValue(), ip, sni, m.GetTransportProtocol(), alpn))
			}
		}
	}
	return out
}

func ldsDecodeHCM(t *testing.T, a *anypb.Any) *hcm.HttpConnectionManager {
	t.Helper()
	h := &hcm.HttpConnectionManager{}
	if err := a.UnmarshalTo(h); err != nil {
		t.Fatal(err)
	}
	return h
}

func checkHTTPFilters(t *testing.T, where string, h *hcm.HttpConnectionManager, grpc bool) {
	t.Helper()
	var names []string
	for _, f := range h.HttpFilters {
		names = append(names, f.Name)
	}
	if len(names) == 0 || names[len(names)-1] != ldsRouterFilterName {
		t.Errorf("%s: http filters %v do not end with the router", where, names)
	}
	if grpc && len(names) != 1 {
		t.Errorf("%s: proxyless gRPC http filters %v, want the router only", where, names)
	}
	// The filters that routes configure (fault, CORS) come before the router, as in istiod's list, with only a
	// dynamic forward proxy (which resolves the host the router connects to) between them and the router.
	tail := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == ldsHTTPDynamicForwardProxyFilter })
	if !grpc && (len(tail) < 3 || tail[len(tail)-3] != ldsFaultFilter || tail[len(tail)-2] != CORSFilterName) {
		t.Errorf("%s: http filters %v, want the fault and CORS filters before the router", where, names)
	}
}

func TestLDSGolden(t *testing.T) {
	push := ldsPush(t, nil)
	for _, tc := range []struct {
		name  string
		proxy *model.Proxy
	}{
		{"sidecar_reviews", ldsReviews},
		{"sidecar_mysql", ldsMySQL},
		{"sidecar_frontend", ldsFrontend},
		{"gateway", ldsGateway},
		{"grpc", ldsGRPCClient},
	} {
		t.Run(tc.name, func(t *testing.T) {
			golden(t, "lds", tc.name, ldsGenerate(t, New(Options{}), tc.proxy, push, wildcard(ListenerType)))
		})
	}
}

func ldsFind(t *testing.T, ls []*listener.Listener, name string) *listener.Listener {
	t.Helper()
	for _, l := range ls {
		if l.Name == name {
			return l
		}
	}
	t.Fatalf("no listener %q", name)
	return nil
}

func ldsChain(t *testing.T, l *listener.Listener, name string) *listener.FilterChain {
	t.Helper()
	for _, fc := range l.FilterChains {
		if fc.Name == name {
			return fc
		}
	}
	var names []string
	for _, fc := range l.FilterChains {
		names = append(names, fc.Name)
	}
	t.Fatalf("listener %s: no chain %q in %v", l.Name, name, names)
	return nil
}

// ldsDefaultChain is l's default chain, which must be named name.
func ldsDefaultChain(t *testing.T, l *listener.Listener, name string) *listener.FilterChain {
	t.Helper()
	if fc := l.DefaultFilterChain; fc == nil || fc.Name != name {
		t.Fatalf("listener %s: default chain %v, want %q", l.Name, fc.GetName(), name)
	}
	return l.DefaultFilterChain
}

func ldsTCPProxyOf(t *testing.T, fc *listener.FilterChain) *tcpproxy.TcpProxy {
	t.Helper()
	f := fc.Filters[len(fc.Filters)-1]
	tp := &tcpproxy.TcpProxy{}
	if f.Name != ldsTCPProxyFilterName {
		t.Fatalf("chain %s: last filter %s, want tcp_proxy", fc.Name, f.Name)
	}
	if err := f.GetTypedConfig().UnmarshalTo(tp); err != nil {
		t.Fatal(err)
	}
	return tp
}

func ldsHCMOf(t *testing.T, fc *listener.FilterChain) *hcm.HttpConnectionManager {
	t.Helper()
	f := fc.Filters[len(fc.Filters)-1]
	if f.Name != ldsHCMFilter {
		t.Fatalf("chain %s: last filter %s, want the connection manager", fc.Name, f.Name)
	}
	return ldsDecodeHCM(t, f.GetTypedConfig())
}

func filterNames(fc *listener.FilterChain) []string {
	var out []string
	for _, f := range fc.Filters {
		out = append(out, f.Name)
	}
	return out
}

// ldsSidecarOutboundNames are the listeners of every sidecar in testdata/lds/mesh.yaml, in order: with
// routes by service, the Kubernetes Services' HTTP ports on their ClusterIPs (10.0.0.10, 10.0.0.11) too.
var ldsSidecarOutboundNames = []string{"0.0.0.0_443", "0.0.0.0_5432", "0.0.0.0_7070", "0.0.0.0_80",
	"0.0.0.0_9080", "10.0.0.10_80", "10.0.0.11_7070", "10.0.0.11_9080", "10.0.0.20_3306", "10.0.0.21_3306", "10.0.0.25_8000",
	"10.0.0.25_9000", "10.0.0.30_9001",
	"10.0.0.40_8443", "10.0.0.41_6379", "10.1.3.1_27017", "10.1.3.2_27017", VirtualInboundListener, VirtualOutboundListener}

func listenerNames(ls []*listener.Listener) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l.Name)
	}
	return out
}

func listenerFilterNames(l *listener.Listener) []string {
	var out []string
	for _, f := range l.ListenerFilters {
		out = append(out, f.Name)
	}
	return out
}

func TestListenerSidecarOutbound(t *testing.T) {
	push := ldsPush(t, nil)
	ls := ldsGenerate(t, New(Options{}), ldsFrontend, push, wildcard(ListenerType))
	if got := listenerNames(ls); !slices.Equal(got, ldsSidecarOutboundNames) {
		t.Fatalf("listeners %v, want %v", got, ldsSidecarOutboundNames)
	}

	// virtualOutbound: istiod's capture listener: connections to its own port dropped, the rest passed through.
	vo := ldsFind(t, ls, VirtualOutboundListener)
	if vo.Address.GetSocketAddress().GetPortValue() != 15001 || !vo.UseOriginalDst.GetValue() || vo.BindToPort != nil ||
		vo.TrafficDirection != core.TrafficDirection_OUTBOUND {
		t.Errorf("virtualOutbound address %v use_original_dst %v bind_to_port %v direction %v", vo.Address, vo.UseOriginalDst,
			vo.BindToPort, vo.TrafficDirection)
	}
	if len(vo.FilterChains) != 2 || vo.FilterChains[1].Name != "PassthroughFilterChain" || vo.FilterChains[1].FilterChainMatch != nil ||
		ldsTCPProxyOf(t, vo.FilterChains[1]).GetCluster() != PassthroughCluster ||
		vo.FilterChains[0].GetFilterChainMatch().GetDestinationPort().GetValue() != 15001 ||
		ldsTCPProxyOf(t, vo.FilterChains[0]).GetCluster() != BlackHoleCluster {
		t.Errorf("virtualOutbound chains %v", vo.FilterChains)
	}
	if got := listenerFilterNames(vo); !slices.Equal(got, []string{ldsOriginalDstFilter}) {
		t.Errorf("virtualOutbound listener filters %v", got)
	}

	// Every other outbound listener: not bound, on the address its name spells.
	for _, l := range ls {
		if l.Name == VirtualOutboundListener || l.Name == VirtualInboundListener {
			continue
		}
		ip, port, _ := strings.Cut(l.Name, "_")
		sa := l.Address.GetSocketAddress()
		if sa.GetAddress() != ip || fmt.Sprint(sa.GetPortValue()) != port {
			t.Errorf("%s: address %v", l.Name, l.Address)
		}
		if l.BindToPort == nil || l.BindToPort.Value || l.UseOriginalDst != nil || l.TrafficDirection != core.TrafficDirection_OUTBOUND {
			t.Errorf("%s: bind_to_port %v use_original_dst %v direction %v", l.Name, l.BindToPort, l.UseOriginalDst, l.TrafficDirection)
		}
		if slices.Contains(listenerFilterNames(l), ldsOriginalDstFilter) {
			t.Errorf("%s: original_dst outside virtualOutbound", l.Name)
		}
		for _, fc := range l.FilterChains {
			if fc.FilterChainMatch.GetDestinationPort().GetValue() != sa.GetPortValue() {
				t.Errorf("%s: chain %s on port %v", l.Name, fc.Name, fc.FilterChainMatch.GetDestinationPort())
			}
		}
	}

	// HTTP ports: RDS by port number, on 0.0.0.0, for what the http_inspector finds to be plaintext HTTP;
	// the rest passes through (TestOutboundHTTPPortPassesOtherTraffic).
	for _, port := range []string{"80", "9080", "7070"} {
		l := ldsFind(t, ls, "0.0.0.0_"+port)
		h := ldsHCMOf(t, ldsChain(t, l, "0.0.0.0_"+port))
		if got := h.GetRds().GetRouteConfigName(); got != port {
			t.Errorf("port %s: route config %q", port, got)
		}
		if h.GetRds().GetConfigSource().GetAds() == nil {
			t.Errorf("port %s: RDS not over ADS", port)
		}
		if len(l.FilterChains) != 1 || l.DefaultFilterChain.GetName() != "PassthroughFilterChain" ||
			!slices.Equal(listenerFilterNames(l), []string{ldsHTTPInspectorFilter}) {
			t.Errorf("port %s: %d chains, default chain %q, listener filters %v", port, len(l.FilterChains),
				l.DefaultFilterChain.GetName(), listenerFilterNames(l))
		}
	}

	// Port 3306 shared by two TCP services: a listener per VIP; the replica goes where its VirtualService says.
	mysql := ldsChain(t, ldsFind(t, ls, "10.0.0.20_3306"), "10.0.0.20_3306")
	replica := ldsChain(t, ldsFind(t, ls, "10.0.0.21_3306"), "10.0.0.21_3306")
	if r := mysql.FilterChainMatch.PrefixRanges; len(r) != 1 || r[0].AddressPrefix != "10.0.0.20" || r[0].PrefixLen.GetValue() != 32 {
		t.Errorf("mysql match %v", mysql.FilterChainMatch)
	}
	if got := ldsTCPProxyOf(t, mysql).GetCluster(); got != "outbound|3306||mysql.shop.svc.cluster.local" {
		t.Errorf("mysql cluster %q", got)
	}
	if got := ldsTCPProxyOf(t, replica).GetCluster(); got != "outbound|3306||mysql.shop.svc.cluster.local" {
		t.Errorf("mysql-replica routed to %q, want mysql by its VirtualService", got)
	}

	// Weighted TCP route.
	wc := ldsTCPProxyOf(t, ldsChain(t, ldsFind(t, ls, "10.0.0.30_9001"), "10.0.0.30_9001")).GetWeightedClusters().GetClusters()
	if len(wc) != 2 || wc[0].Name != "outbound|9001|v1|echo.shop.svc.cluster.local" || wc[0].Weight != 80 ||
		wc[1].Name != "outbound|9001|v2|echo.shop.svc.cluster.local" || wc[1].Weight != 20 {
		t.Errorf("echo weighted clusters %v", wc)
	}

	// Headless: a listener on each endpoint's address (istiod's), none on 0.0.0.0: another address on the
	// port is not the service's, and goes where the capture listener sends it.
	for _, ip := range []string{"10.1.3.1", "10.1.3.2"} {
		l := ldsFind(t, ls, ip+"_27017")
		fc := envoyChain(l, connection{ip: ip, port: 27017})
		if fc == nil || ldsTCPProxyOf(t, fc).GetCluster() != "outbound|27017||mongo.shop.svc.cluster.local" {
			t.Errorf("mongo endpoint %s: chain %v, want tcp_proxy to mongo's cluster", ip, fc)
		}
	}
	if slices.Contains(listenerNames(ls), "0.0.0.0_27017") {
		t.Error("listener 0.0.0.0_27017: every address on the port is taken for the headless service")
	}

	// Sniffed port: HTTP by ALPN through RDS "HOST:8000" (istiod's name), the rest TCP; the http_inspector on
	// that listener only.
	legacy := ldsFind(t, ls, "10.0.0.25_8000")
	sniffed := ldsChain(t, legacy, "10.0.0.25_8000_http")
	if !slices.Equal(sniffed.FilterChainMatch.ApplicationProtocols, []string{"http/1.0", "http/1.1", "h2c"}) ||
		ldsHCMOf(t, sniffed).GetRds().GetRouteConfigName() != "legacy.shop.svc.cluster.local:8000" {
		t.Errorf("sniffed chain %v", sniffed)
	}
	if got := ldsTCPProxyOf(t, ldsChain(t, legacy, "10.0.0.25_8000")).GetCluster(); got != "outbound|8000||legacy.shop.svc.cluster.local" {
		t.Errorf("sniffed TCP fallback %q", got)
	}
	if got := listenerFilterNames(legacy); !slices.Equal(got, []string{ldsHTTPInspectorFilter}) {
		t.Errorf("sniffed listener filters %v", got)
	}
	if got := listenerFilterNames(ldsFind(t, ls, "10.0.0.25_9000")); len(got) != 0 {
		t.Errorf("TCP listener filters %v", got)
	}

	// TLS ServiceEntry without VIP: SNI per host (the VirtualService's route for payments), and a connection
	// naming neither host goes where the capture listener sends it (istiod's PassthroughFilterChain), not to
	// a host; the tls_inspector.
	tls := ldsFind(t, ls, "0.0.0.0_443")
	if got := ldsChain(t, tls, "0.0.0.0_443/payments.example.com").FilterChainMatch.ServerNames; !slices.Equal(got,
		[]string{"payments.example.com"}) {
		t.Errorf("payments SNI %v", got)
	}
	if got := ldsTCPProxyOf(t, ldsChain(t, tls, "0.0.0.0_443/refunds.example.com")).GetCluster(); got != "outbound|443||refunds.example.com" {
		t.Errorf("refunds cluster %q", got)
	}
	for _, fc := range tls.FilterChains {
		if len(fc.FilterChainMatch.GetServerNames()) == 0 && fc.Name != "PassthroughFilterChain" {
			t.Errorf("443 chain %s takes connections without a host's SNI", fc.Name)
		}
	}
	if got := ldsTCPProxyOf(t, ldsDefaultChain(t, tls, "PassthroughFilterChain")).GetCluster(); got != PassthroughCluster {
		t.Errorf("443 fallthrough %q", got)
	}
	if got := listenerFilterNames(tls); !slices.Equal(got, []string{ldsTLSInspectorFilter}) {
		t.Errorf("443 listener filters %v", got)
	}

	// A dual-stack Service, seen from an IPv4 proxy: on its IPv4 ClusterIP alone, as istiod's (the IPv6 one
	// is for IPv6 and dual-stack proxies: TestListenerAddressesFollowIPFamily).
	cache := ldsFind(t, ls, "10.0.0.41_6379")
	if got := listenerAddresses(cache); !slices.Equal(got, []string{"10.0.0.41:6379"}) {
		t.Errorf("dual-stack addresses %v", got)
	}
	if r := ldsChain(t, cache, "10.0.0.41_6379").FilterChainMatch.PrefixRanges; len(r) != 1 || r[0].AddressPrefix != "10.0.0.41" ||
		r[0].PrefixLen.GetValue() != 32 {
		t.Errorf("dual-stack match %v", r)
	}

	// An address block: on 0.0.0.0, matched by prefix range.
	block := ldsChain(t, ldsFind(t, ls, "0.0.0.0_5432"), "192.168.10.0/24_5432")
	if r := block.FilterChainMatch.PrefixRanges; len(r) != 1 || r[0].AddressPrefix != "192.168.10.0" || r[0].PrefixLen.GetValue() != 24 {
		t.Errorf("address block match %v", r)
	}
	if got := ldsTCPProxyOf(t, ldsDefaultChain(t, ldsFind(t, ls, "0.0.0.0_5432"), "PassthroughFilterChain")).GetCluster(); got !=
		PassthroughCluster {
		t.Errorf("5432 outside the block goes to %q", got)
	}
}

// TestListenerTLSWithoutVIPRegistryOnly: under REGISTRY_ONLY a connection to a TLS port without a VIP that
// names no known host is refused (BlackHoleCluster), as the capture listener refuses unknown destinations.
func TestListenerTLSWithoutVIPRegistryOnly(t *testing.T) {
	m := mesh.Default()
	m.OutboundTrafficPolicy.Mode = mesh.RegistryOnly
	ls := ldsGenerate(t, New(Options{}), ldsFrontend, ldsPush(t, m), wildcard(ListenerType))
	tls := ldsFind(t, ls, "0.0.0.0_443")
	if got := ldsTCPProxyOf(t, ldsDefaultChain(t, tls, "PassthroughFilterChain")).GetCluster(); got != BlackHoleCluster {
		t.Errorf("443 fallthrough %q, want %s", got, BlackHoleCluster)
	}
	if got := ldsTCPProxyOf(t, ldsChain(t, tls, "0.0.0.0_443/refunds.example.com")).GetCluster(); got != "outbound|443||refunds.example.com" {
		t.Errorf("refunds cluster %q", got)
	}
}

// TestListenerOutboundAddresses: no outbound listener on the sidecar's own wildcard addresses, and an
// address belongs to one listener only.
func TestListenerOutboundAddresses(t *testing.T) {
	push := ldsPush(t, nil, `
# Without addresses or endpoints: on 0.0.0.0_PORT (istiod's wildcard listener for such a ServiceEntry).
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: odd-ports, namespace: shop}
spec:
  hosts: [odd-ports.example.com]
  resolution: NONE
  ports: [{name: tcp-a, number: 15001, protocol: TCP}, {name: tcp-b, number: 15006, protocol: TCP}, `+
		`{name: tcp-c, number: 15021, protocol: TCP},
    {name: tcp-d, number: 15090, protocol: TCP}, {name: tcp-e, number: 15002, protocol: TCP}]
---
apiVersion: v1
kind: Service
metadata: {name: odd-vip, namespace: shop}
spec:
  clusterIP: 10.0.0.60
  ports: [{name: tcp, port: 15001}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ledger-a, namespace: shop}
spec:
  hosts: [ledger-a.example.com]
  addresses: [10.0.0.70, 10.0.0.71, 10.0.0.72]
  resolution: NONE
  ports: [{number: 7000, name: tcp, protocol: TCP}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ledger-b, namespace: shop}
spec:
  hosts: [ledger-b.example.com]
  addresses: [10.0.0.71]
  resolution: NONE
  ports: [{number: 7000, name: tcp, protocol: TCP}]
`)
	ls := ldsGenerate(t, New(Options{}), ldsFrontend, push, wildcard(ListenerType)) // checks addresses are unique
	names := listenerNames(ls)
	for _, reserved := range []string{"0.0.0.0_15001", "0.0.0.0_15006", "0.0.0.0_15021", "0.0.0.0_15090"} {
		if slices.Contains(names, reserved) {
			t.Errorf("listener %s on the sidecar's own address", reserved)
		}
	}
	for _, want := range []string{"0.0.0.0_15002", "10.0.0.60_15001", "10.0.0.70_7000", "10.0.0.71_7000"} {
		if !slices.Contains(names, want) {
			t.Errorf("no listener %s in %v", want, names)
		}
	}
	// 10.0.0.71 is ledger-b's own listener: ledger-a keeps 10.0.0.72 only.
	if got := listenerAddresses(ldsFind(t, ls, "10.0.0.70_7000")); !slices.Equal(got, []string{"10.0.0.70:7000", "10.0.0.72:7000"}) {
		t.Errorf("ledger-a addresses %v", got)
	}
}

// TestListenerServiceAddSendsOneListener: adding a service with a TCP port and an HTTP port other services
// already use adds the service's own listeners, VIP_PORT, one per port (the HTTP one too: routes by
// service); every other keeps its bytes, so delta xDS sends those only.
func TestListenerServiceAddSendsOneListener(t *testing.T) {
	g := New(Options{})
	gen := g.ByTypeURL()[ListenerType]
	versions := func(push *model.PushContext) map[string]string {
		res, err := gen.Generate(ldsReviews, push, wildcard(ListenerType), nil)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, r := range res {
			out[r.Name] = r.Version
		}
		return out
	}
	before := versions(ldsPush(t, nil))
	after := versions(ldsPush(t, nil, `
apiVersion: v1
kind: Service
metadata: {name: ledger, namespace: shop}
spec:
  clusterIP: 10.0.0.50
  selector: {app: ledger}
  ports: [{name: tcp-ledger, port: 3306}, {name: http, port: 9080}]
`))
	var changed []string
	for name, v := range after {
		if before[name] != v {
			changed = append(changed, name)
		}
	}
	for name := range before {
		if _, ok := after[name]; !ok {
			changed = append(changed, name)
		}
	}
	slices.Sort(changed)
	if !slices.Equal(changed, []string{"10.0.0.50_3306", "10.0.0.50_9080"}) {
		t.Errorf("changed listeners %v, want the new 10.0.0.50_3306 and 10.0.0.50_9080 only", changed)
	}
	if len(before) < 10 || before[VirtualOutboundListener] == "" || before["0.0.0.0_9080"] == "" {
		t.Errorf("listeners before %v", before)
	}
}

func TestListenerOutboundShared(t *testing.T) {
	push := ldsPush(t, nil)
	g := New(Options{})
	gen := g.ByTypeURL()[ListenerType]
	a, b := generateByName(t, g, ListenerType, ldsReviews, push), generateByName(t, g, ListenerType, ldsMySQL, push)
	for name, r := range a {
		if name != VirtualInboundListener && b[name].Any != r.Any {
			t.Errorf("%s not shared by two proxies of one namespace", name)
		}
	}
	if a[VirtualInboundListener].Version == b[VirtualInboundListener].Version {
		t.Error("virtualInbound of different workloads are equal")
	}
	// A second replica of reviews shares the inbound listener.
	replica := ldsSidecar("reviews-2", "10.1.0.8", ldsReviews.Labels)
	if generateByName(t, g, ListenerType, replica, push)[VirtualInboundListener].Any != a[VirtualInboundListener].Any {
		t.Error("virtualInbound not shared by replicas")
	}
	// Non-wildcard: only what is named.
	d, err := gen.Generate(ldsReviews, push, named(ListenerType, VirtualInboundListener, "10.0.0.20_3306", "nope"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(d) != 2 || d[0].Name != "10.0.0.20_3306" || d[1].Name != VirtualInboundListener {
		t.Errorf("named subscription got %d listeners", len(d))
	}
	// Ztunnel: none.
	if r, _ := gen.Generate(&model.Proxy{Type: model.Ztunnel, Namespace: "shop"}, push, wildcard(ListenerType), nil); len(r) != 0 {
		t.Errorf("ztunnel got %d listeners", len(r))
	}
}

type inboundChainWant struct {
	name      string
	port      uint32
	transport string
	tls       bool
	filters   []string
}

func TestListenerInboundMTLS(t *testing.T) {
	push := ldsPush(t, nil)
	tlsFilters := func(last string) []string { return []string{last} }
	for _, tc := range []struct {
		proxy *model.Proxy
		want  []inboundChainWant
	}{
		// STRICT, port 9080 PERMISSIVE; the named target port grpc-port resolves to 17070. Other ports
		// are sniffed: HTTP through a connection manager, the rest tcp_proxy.
		{ldsReviews, []inboundChainWant{
			{"inbound_0.0.0.0_9080_tls", 9080, "tls", true, tlsFilters(ldsHCMFilter)},
			{"inbound_0.0.0.0_9080_plaintext", 9080, "raw_buffer", false, tlsFilters(ldsHCMFilter)},
			{"inbound_0.0.0.0_17070_tls", 17070, "tls", true, tlsFilters(ldsHCMFilter)},
			{"virtualInbound-blackhole", 15006, "", false, []string{ldsTCPProxyFilterName}},
			{"inbound_passthrough_http_tls", 0, "tls", true, tlsFilters(ldsHCMFilter)},
			{"inbound_passthrough_tls", 0, "tls", true, []string{tcpRBACFilter, tcpRBACFilter, ldsTCPProxyFilterName}},
		}},
		// DISABLE: plaintext only, no TLS inspection.
		{ldsMySQL, []inboundChainWant{
			{"inbound_0.0.0.0_3306_plaintext", 3306, "raw_buffer", false, []string{tcpRBACFilter, ldsTCPProxyFilterName}},
			{"virtualInbound-blackhole", 15006, "", false, []string{ldsTCPProxyFilterName}},
			{"inbound_passthrough_http_plaintext", 0, "raw_buffer", false, tlsFilters(ldsHCMFilter)},
			{"inbound_passthrough_plaintext", 0, "raw_buffer", false, []string{tcpRBACFilter, ldsTCPProxyFilterName}},
		}},
		// PERMISSIVE (default): mesh mTLS, plaintext, and on other ports the application's own TLS;
		// targetPort 8080.
		{ldsFrontend, []inboundChainWant{
			{"inbound_0.0.0.0_8080_tls", 8080, "tls", true, tlsFilters(ldsHCMFilter)},
			{"inbound_0.0.0.0_8080_plaintext", 8080, "raw_buffer", false, tlsFilters(ldsHCMFilter)},
			{"virtualInbound-blackhole", 15006, "", false, []string{ldsTCPProxyFilterName}},
			{"inbound_passthrough_http_tls", 0, "tls", true, tlsFilters(ldsHCMFilter)},
			{"inbound_passthrough_http_plaintext", 0, "raw_buffer", false, tlsFilters(ldsHCMFilter)},
			{"inbound_passthrough_tls", 0, "tls", true, []string{ldsTCPProxyFilterName}},
			{"inbound_passthrough_plaintext", 0, "raw_buffer", false, []string{ldsTCPProxyFilterName}},
			{"inbound_passthrough_app_tls", 0, "tls", false, []string{ldsTCPProxyFilterName}},
		}},
	} {
		t.Run(tc.proxy.Name, func(t *testing.T) {
			in := ldsFind(t, ldsGenerate(t, New(Options{}), tc.proxy, push, wildcard(ListenerType)), VirtualInboundListener)
			if len(in.FilterChains) != len(tc.want) {
				var names []string
				for _, fc := range in.FilterChains {
					names = append(names, fc.Name)
				}
				t.Fatalf("chains %v", names)
			}
			anyTLS := false // a chain matches TLS: the tls_inspector must run
			for i, w := range tc.want {
				fc := in.FilterChains[i]
				m := fc.GetFilterChainMatch()
				if fc.Name != w.name || m.GetDestinationPort().GetValue() != w.port || m.GetTransportProtocol() != w.transport ||
					(fc.TransportSocket != nil) != w.tls || !slices.Equal(filterNames(fc), w.filters) {
					t.Errorf("chain %d: %s port %d transport %q tls %v filters %v, want %+v", i, fc.Name,
						m.GetDestinationPort().GetValue(), m.GetTransportProtocol(), fc.TransportSocket != nil, filterNames(fc), w)
				}
				anyTLS = anyTLS || w.transport == "tls"
				if w.tls {
					ctx := &tlsv3.DownstreamTlsContext{}
					if err := fc.TransportSocket.GetTypedConfig().UnmarshalTo(ctx); err != nil {
						t.Fatal(err)
					}
					c := ctx.CommonTlsContext
					if !ctx.RequireClientCertificate.GetValue() || c.TlsCertificateSdsSecretConfigs[0].Name != "default" ||
						c.GetCombinedValidationContext().GetValidationContextSdsSecretConfig().GetName() != "ROOTCA" ||
						len(c.AlpnProtocols) == 0 ||
						c.TlsCertificateSdsSecretConfigs[0].SdsConfig.GetApiConfigSource().GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName() !=
							"sds-grpc" {
						t.Errorf("chain %s: TLS context %v", fc.Name, ctx)
					}
				}
				if fc.Filters[len(fc.Filters)-1].Name == ldsHCMFilter {
					rc := ldsHCMOf(t, fc).GetRouteConfig()
					cluster := rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetCluster()
					want := InboundClusterName(w.port)
					if w.port == 0 {
						want = InboundPassthroughCluster
					}
					if cluster != want {
						t.Errorf("chain %s: routes to %q, want %q", fc.Name, cluster, want)
					}
				} else if w.port != 0 {
					want := InboundClusterName(w.port)
					if w.name == "virtualInbound-blackhole" {
						want = BlackHoleCluster
					}
					if got := ldsTCPProxyOf(t, fc).GetCluster(); got != want {
						t.Errorf("chain %s: forwards to %q", fc.Name, got)
					}
				} else if got := ldsTCPProxyOf(t, fc).GetCluster(); got != InboundPassthroughCluster {
					t.Errorf("chain %s: forwards to %q", fc.Name, got)
				}
			}
			hasInspector := slices.ContainsFunc(in.ListenerFilters, func(f *listener.ListenerFilter) bool { return f.Name == ldsTLSInspectorFilter })
			if hasInspector != anyTLS {
				t.Errorf("tls_inspector present %v, TLS chains %v", hasInspector, anyTLS)
			}
		})
	}
}

func TestListenerInboundRBACOnChains(t *testing.T) {
	push := ldsPush(t, nil)
	in := ldsFind(t, ldsGenerate(t, New(Options{}), ldsReviews, push, wildcard(ListenerType)), VirtualInboundListener)
	h := ldsHCMOf(t, ldsChain(t, in, "inbound_0.0.0.0_9080_tls"))
	var names []string
	for _, f := range h.HttpFilters {
		names = append(names, f.Name)
	}
	if want := []string{httpRBACFilter, httpRBACFilter, ldsFaultFilter, CORSFilterName, ldsRouterFilterName}; !slices.Equal(names, want) {
		t.Errorf("http filters %v, want %v", names, want)
	}
	// The frontend has no policy: no RBAC filter.
	in = ldsFind(t, ldsGenerate(t, New(Options{}), ldsFrontend, push, wildcard(ListenerType)), VirtualInboundListener)
	if got := filterNames(ldsChain(t, in, "inbound_passthrough_plaintext")); !slices.Equal(got, []string{ldsTCPProxyFilterName}) {
		t.Errorf("frontend passthrough filters %v", got)
	}
}

func TestListenerGateway(t *testing.T) {
	push := ldsPush(t, nil)
	ls := ldsGenerate(t, New(Options{}), ldsGateway, push, wildcard(ListenerType))
	if len(ls) != 2 || ls[0].Name != "0.0.0.0_80" || ls[1].Name != "0.0.0.0_443" {
		t.Fatalf("listeners %v", ls)
	}
	if got := ldsHCMOf(t, ls[0].FilterChains[0]).GetRds().GetRouteConfigName(); got != "http.80" {
		t.Errorf("http route %q", got)
	}
	https := ls[1]
	if !slices.ContainsFunc(https.ListenerFilters, func(f *listener.ListenerFilter) bool { return f.Name == ldsTLSInspectorFilter }) {
		t.Error("443 has no tls_inspector")
	}
	tlsOf := func(fc *listener.FilterChain) *tlsv3.DownstreamTlsContext {
		ctx := &tlsv3.DownstreamTlsContext{}
		if err := fc.GetTransportSocket().GetTypedConfig().UnmarshalTo(ctx); err != nil {
			t.Fatal(err)
		}
		return ctx
	}
	shop := ldsChain(t, https, "0.0.0.0_443/shop.example.com")
	if got := ldsHCMOf(t, shop).GetRds().GetRouteConfigName(); got != "https.443.https-shop.shop-gateway.istio-system" {
		t.Errorf("shop route %q", got)
	}
	ctx := tlsOf(shop)
	if s := ctx.CommonTlsContext.TlsCertificateSdsSecretConfigs[0]; s.Name != "kubernetes://shop-cert" || s.SdsConfig.GetAds() == nil {
		t.Errorf("shop certificate %v", s)
	}
	if ctx.RequireClientCertificate.GetValue() || ctx.CommonTlsContext.ValidationContextType != nil {
		t.Errorf("SIMPLE validates clients: %v", ctx)
	}
	partners := ldsChain(t, https, "0.0.0.0_443/partners.example.com")
	ctx = tlsOf(partners)
	if cv := ctx.CommonTlsContext.GetCombinedValidationContext(); !ctx.RequireClientCertificate.GetValue() ||
		cv.GetValidationContextSdsSecretConfig().GetName() != "kubernetes://partners-cert-cacert" ||
		ctx.CommonTlsContext.TlsCertificateSdsSecretConfigs[0].Name != "kubernetes://partners-cert" {
		t.Errorf("MUTUAL context %v", ctx)
	}
	pass := ldsChain(t, https, "0.0.0.0_443/app.secure.example.com")
	if pass.TransportSocket != nil || ldsTCPProxyOf(t, pass).GetCluster() != "outbound|8443||secure-app.shop.svc.cluster.local" {
		t.Errorf("passthrough chain %v", pass)
	}
	if len(https.FilterChains) != 3 {
		t.Errorf("443 has %d chains, want 3", len(https.FilterChains))
	}
	// Another proxy without matching labels gets nothing.
	other := &model.Proxy{Type: model.Router, Namespace: "istio-system", Labels: map[string]string{"istio": "egressgateway"}}
	if got := ldsGenerate(t, New(Options{}), other, push, wildcard(ListenerType)); len(got) != 0 {
		t.Errorf("unselected gateway got %d listeners", len(got))
	}
}

func TestListenerGatewayConflicts(t *testing.T) {
	push := ldsPush(t, nil, `
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: second, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 443, name: https-dup, protocol: HTTPS}
    hosts: [shop.example.com, extra.example.com]
    tls: {mode: SIMPLE, credentialName: other-cert}
  - port: {number: 80, name: tcp, protocol: TCP}
    hosts: ["*"]
  - port: {number: 9443, name: passthrough, protocol: TLS}
    hosts: ["*"]
    tls: {mode: PASSTHROUGH}
  - port: {number: 8080, name: http-bound, protocol: HTTP}
    bind: 127.0.0.1
    hosts: ["*"]
`)
	ls := ldsGenerate(t, New(Options{}), ldsGateway, push, wildcard(ListenerType))
	var names []string
	for _, l := range ls {
		names = append(names, l.Name)
	}
	// 9443 has no route (no listener); 8080 listens on its bind address.
	if want := []string{"0.0.0.0_80", "0.0.0.0_443", "127.0.0.1_8080"}; !slices.Equal(names, want) {
		t.Fatalf("listeners %v, want %v", names, want)
	}
	if len(ls[0].FilterChains) != 1 {
		t.Errorf("80: the TCP server joined the HTTP port: %d chains", len(ls[0].FilterChains))
	}
	// shop.example.com is taken by the first Gateway: the second keeps extra.example.com only.
	extra := ldsChain(t, ls[1], "0.0.0.0_443/extra.example.com")
	if !slices.Equal(extra.FilterChainMatch.ServerNames, []string{"extra.example.com"}) {
		t.Errorf("extra server names %v", extra.FilterChainMatch.ServerNames)
	}
	if got := ldsHCMOf(t, ls[2].FilterChains[0]).GetRds().GetRouteConfigName(); got != "http.8080.127.0.0.1" {
		t.Errorf("bound route name %q", got)
	}
	if got := ls[2].Address.GetSocketAddress().GetAddress(); got != "127.0.0.1" {
		t.Errorf("bound address %q", got)
	}
}

func TestListenerGRPC(t *testing.T) {
	push := ldsPush(t, nil)
	g := New(Options{})
	all := ldsGenerate(t, g, ldsGRPCClient, push, wildcard(ListenerType))
	var names []string
	for _, l := range all {
		names = append(names, l.Name)
	}
	want := []string{"frontend.shop.svc.cluster.local:80", "reviews.shop.svc.cluster.local:7070", "reviews.shop.svc.cluster.local:9080"}
	if !slices.Equal(names, want) {
		t.Errorf("wildcard listeners %v, want %v", names, want)
	}
	for _, l := range all {
		if l.Address != nil || l.FilterChains != nil {
			t.Errorf("%s: not a pure API listener", l.Name)
		}
		h := ldsDecodeHCM(t, l.ApiListener.ApiListener)
		if h.GetRds().GetRouteConfigName() != l.Name || h.GetRds().GetConfigSource().GetAds() == nil {
			t.Errorf("%s: RDS %v", l.Name, h.GetRds())
		}
	}

	asked := ldsGenerate(t, g, ldsGRPCClient, push, named(ListenerType, "reviews:9080", "reviews.shop:7070",
		"reviews.shop.svc:9080", "frontend.shop.svc.cluster.local:80", "reviews:1234", "nope:80", "garbage"))
	names = nil
	for _, l := range asked {
		names = append(names, l.Name)
		if h := ldsDecodeHCM(t, l.ApiListener.ApiListener); h.GetRds().GetRouteConfigName() != l.Name {
			t.Errorf("%s: route config %q", l.Name, h.GetRds().GetRouteConfigName())
		}
	}
	want = []string{"frontend.shop.svc.cluster.local:80", "reviews.shop.svc:9080", "reviews.shop:7070", "reviews:9080"}
	if !slices.Equal(names, want) {
		t.Errorf("named listeners %v, want %v", names, want)
	}
}

// TestListenerTrustDomain: principals in cluster.local stand for the mesh's trust domain.
func TestListenerTrustDomain(t *testing.T) {
	m := mesh.Default()
	m.TrustDomain = "example.org"
	push := ldsPush(t, m)
	in := ldsFind(t, ldsGenerate(t, New(Options{}), ldsMySQL, push, wildcard(ListenerType)), VirtualInboundListener)
	b, err := protojson.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "spiffe://example.org/ns/shop/sa/reviews") ||
		strings.Contains(string(b), "cluster.local/ns/shop/sa/reviews") {
		t.Errorf("principal not rewritten to the mesh trust domain")
	}
}

// Outbound listener lists derived from the previous snapshot's (outboundListenerPlan) equal what a fresh
// build gives, and what one plan of every service gives, through random service adds, changes and deletes:
// VIPs shared with other services, services without a VIP, several addresses, sniffed and TLS ports, HTTP
// ports that come and go, TCP routes to services that come and go, and endpoints of headless services
// (listened on per address, some shared).
func TestDerivedListenerListsEqualFullBuilds(t *testing.T) {
	st, push, g, proxies := derivationFixture(t)
	rng, ends := rand.New(rand.NewPCG(9, 10)), rand.New(rand.NewPCG(11, 12))
	live := map[config.Key]bool{}
	derived := 0
	for step := range 250 {
		name := fmt.Sprintf("extra-%d", rng.IntN(12))
		ns := fmt.Sprintf("ns-%d", 3+rng.IntN(2))
		switch r := rng.IntN(12); {
		case r < 3: // delete what was added under that name
			for _, kind := range []config.Kind{config.Service, config.ServiceEntry, config.VirtualService, config.EndpointSlice} {
				if key := (config.Key{Kind: kind, Namespace: ns, Name: name}); live[key] {
					push = deleteConfig(st, push, key)
					delete(live, key)
				}
			}
		case r < 4: // a ServiceEntry with two addresses: the second is an additional address
			push = applyDocs(t, st, push, fmt.Sprintf(
				"apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: %s, namespace: %s}\n"+
					"spec:\n  hosts: [%s.example.com]\n  addresses: [10.250.0.%d, 10.250.0.%d]\n  resolution: STATIC\n"+
					"  ports: [{name: tcp, number: 9090, protocol: TCP}]\n  endpoints: [{address: 10.9.0.1}]\n", name, ns, name, rng.IntN(8), rng.IntN(8)))
			live[config.Key{Kind: config.ServiceEntry, Namespace: ns, Name: name}] = true
		case r < 5 && step >= 100 && step < 150: // for a while, TCP routes to another service, which may come and go
			push = applyDocs(t, st, push, fmt.Sprintf(
				"apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: %s, namespace: %s}\n"+
					"spec:\n  hosts: [%s]\n  tcp:\n  - route:\n    - destination: {host: extra-%d.ns-%d.svc.cluster.local}\n",
				name, ns, name, rng.IntN(12), 3+rng.IntN(2)))
			live[config.Key{Kind: config.VirtualService, Namespace: ns, Name: name}] = true
		default:
			vip := fmt.Sprintf("10.250.0.%d", rng.IntN(8))
			switch rng.IntN(6) {
			case 0:
				vip = "10.100.0.7" // svc-7's VIP
			case 1:
				vip = "None" // headless: its ports go on 0.0.0.0_PORT
			}
			ports := []string{benchThreePorts, "[{name: http, port: 80}]", "[{name: tcp, port: 9090}]", "[{name: http, port: 9080}]",
				"[{name: other, port: 7000}]", "[{name: tls, port: 443}]", "[{name: tcp, port: 80}]"}[rng.IntN(7)]
			push = applyDocs(t, st, push, fmt.Sprintf(
				"apiVersion: v1\nkind: Service\nmetadata: {name: %s, namespace: %s}\nspec:\n  clusterIP: %s\n  ports: %s\n",
				name, ns, vip, ports))
			live[config.Key{Kind: config.Service, Namespace: ns, Name: name}] = true
		}
		if ends.IntN(3) == 0 { // endpoints of a service: a headless one listens on their addresses
			name := fmt.Sprintf("extra-%d", ends.IntN(12))
			ns := fmt.Sprintf("ns-%d", 3+ends.IntN(2))
			var eps []string
			for i := range ends.IntN(4) {
				// Mostly the service's own addresses; now and then one another service has too.
				eps = append(eps, fmt.Sprintf("{addresses: [10.77.%d.%d]}", ends.IntN(40), i))
			}
			push = applyDocs(t, st, push, fmt.Sprintf(
				"apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: %s, namespace: %s, labels: {kubernetes.io/service-name: %s}}\n"+
					"addressType: IPv4\nports: [{name: tcp, port: 9090}, {name: other, port: 7000}, {name: tls, port: 443}, {name: http, port: 80}]\n"+
					"endpoints: [%s]\n",
				name, ns, name, strings.Join(eps, ", ")))
			live[config.Key{Kind: config.EndpointSlice, Namespace: ns, Name: name}] = true
		}
		if step == 150 {
			for key := range live {
				if key.Kind == config.VirtualService {
					push = deleteConfig(st, push, key)
					delete(live, key)
				}
			}
		}
		together := New(Options{})
		together.planTogether = true
		for _, p := range proxies {
			checkSameAsFreshBuild(t, g, ListenerType, p, push, step)
			// Services whose listeners are their own, built apart, give what one plan of all gives.
			checkSameAsBuildOf(t, together, g, ListenerType, p, push, step)
		}
		if l, ok := g.listenerLists.Latest(listID{kind: "lds", namespace: "ns-3", variant: string(model.Sidecar)}); ok && l.derived.Full == "" {
			derived++
		}
	}
	t.Logf("derived %d", derived)
	if derived < 60 {
		t.Errorf("%d of 250 lists were derived from the previous one; want many", derived)
	}
}

// Inbound mesh mTLS accepts only client certificates of the mesh's trust domain, with istiod's ciphers: a
// root that also signs another trust domain must not let its workloads in.
func TestListenerInboundMTLSTrustDomain(t *testing.T) {
	for _, td := range []string{"cluster.local", "example.org"} {
		t.Run(td, func(t *testing.T) {
			m := mesh.Default()
			m.TrustDomain = td
			push := ldsPush(t, m)
			for _, proxy := range []*model.Proxy{ldsReviews, ldsFrontend} {
				in := ldsFind(t, ldsGenerate(t, New(Options{}), proxy, push, wildcard(ListenerType)), VirtualInboundListener)
				tlsChains := 0
				for _, fc := range in.FilterChains {
					if fc.TransportSocket == nil {
						continue
					}
					tlsChains++
					ctx := &tlsv3.DownstreamTlsContext{}
					if err := fc.TransportSocket.GetTypedConfig().UnmarshalTo(ctx); err != nil {
						t.Fatal(err)
					}
					sans := ctx.GetCommonTlsContext().GetCombinedValidationContext().GetDefaultValidationContext().GetMatchSubjectAltNames()
					if len(sans) != 1 || sans[0].GetPrefix() != "spiffe://"+td+"/" {
						t.Errorf("%s chain %s: SAN matchers %v, want the prefix spiffe://%s/", proxy.Name, fc.Name, sans, td)
					}
					params := ctx.GetCommonTlsContext().GetTlsParams()
					if !slices.Equal(params.GetCipherSuites(), ldsMeshCiphers) || params.GetTlsMinimumProtocolVersion() != tlsv3.TlsParameters_TLSv1_2 ||
						params.GetTlsMaximumProtocolVersion() != tlsv3.TlsParameters_TLSv1_3 {
						t.Errorf("%s chain %s: TLS parameters %v", proxy.Name, fc.Name, params)
					}
				}
				if tlsChains == 0 {
					t.Errorf("%s: no TLS chain", proxy.Name)
				}
			}
		})
	}
}

// Every connection manager of a sidecar (outbound and inbound) and of a gateway allows WebSocket upgrades,
// has no stream idle timeout and forwards "Expect: 100-continue", as istiod's.
func TestListenerHTTPManagerDefaults(t *testing.T) {
	push := ldsPush(t, nil)
	for _, proxy := range []*model.Proxy{ldsReviews, ldsFrontend, ldsGateway} {
		managers := 0
		for _, l := range ldsGenerate(t, New(Options{}), proxy, push, wildcard(ListenerType)) {
			for _, fc := range l.FilterChains {
				if fc.Filters[len(fc.Filters)-1].Name != ldsHCMFilter {
					continue
				}
				managers++
				hc := ldsHCMOf(t, fc)
				if len(hc.UpgradeConfigs) != 1 || hc.UpgradeConfigs[0].GetUpgradeType() != "websocket" || hc.UpgradeConfigs[0].GetEnabled() != nil {
					t.Errorf("%s %s chain %s: upgrades %v, want websocket", proxy.Name, l.Name, fc.Name, hc.UpgradeConfigs)
				}
				if d := hc.GetStreamIdleTimeout(); d == nil || d.AsDuration() != 0 {
					t.Errorf("%s %s chain %s: stream_idle_timeout %v, want 0s (none)", proxy.Name, l.Name, fc.Name, d)
				}
				if !hc.Proxy_100Continue {
					t.Errorf("%s %s chain %s: proxy_100_continue false", proxy.Name, l.Name, fc.Name)
				}
			}
		}
		if managers == 0 {
			t.Errorf("%s: no connection manager", proxy.Name)
		}
	}
}

// The inbound route is istiod's default inbound route: a gRPC client's grpc-timeout header honoured (no cap),
// two retries when the application's connection resets before the request is sent, none on a gRPC port.
func TestListenerInboundDefaultRoute(t *testing.T) {
	push := ldsPush(t, nil)
	in := ldsFind(t, ldsGenerate(t, New(Options{}), ldsReviews, push, wildcard(ListenerType)), VirtualInboundListener)
	seen := map[uint32]bool{}
	for _, fc := range in.FilterChains {
		if fc.Filters[len(fc.Filters)-1].Name != ldsHCMFilter {
			continue
		}
		port := fc.GetFilterChainMatch().GetDestinationPort().GetValue()
		seen[port] = true
		action := ldsHCMOf(t, fc).GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0].GetRoute()
		msd := action.GetMaxStreamDuration()
		if msd.GetGrpcTimeoutHeaderMax() == nil || msd.GetGrpcTimeoutHeaderMax().AsDuration() != 0 ||
			msd.GetMaxStreamDuration() == nil || msd.GetMaxStreamDuration().AsDuration() != 0 {
			t.Errorf("chain %s: max_stream_duration %v, want 0s with grpc_timeout_header_max 0s", fc.Name, msd)
		}
		retry := action.GetRetryPolicy()
		switch port {
		case 9080: // HTTP
			if retry.GetRetryOn() != "reset-before-request" || retry.GetNumRetries().GetValue() != 2 {
				t.Errorf("chain %s: retry policy %v, want reset-before-request x2", fc.Name, retry)
			}
		case 17070: // gRPC
			if retry != nil {
				t.Errorf("chain %s: retry policy %v on a gRPC port", fc.Name, retry)
			}
		}
	}
	if !seen[9080] || !seen[17070] {
		t.Fatalf("HTTP chains on ports %v, want 9080 and 17070", seen)
	}
}

// A MUTUAL or ISTIO_MUTUAL gateway server's subjectAltNames match a client certificate's SAN of any type (an
// IP or email SAN too), as istiod's.
func TestListenerGatewayMutualSANs(t *testing.T) {
	for _, mode := range []string{"MUTUAL, credentialName: mutual-cert", "ISTIO_MUTUAL"} {
		t.Run(strings.Fields(mode)[0], func(t *testing.T) { testGatewayMutualSANs(t, mode) })
	}
}

func testGatewayMutualSANs(t *testing.T, mode string) {
	push := ldsPush(t, nil, `
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: mutual, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 9443, name: https-mutual, protocol: HTTPS}
    hosts: ["*"]
    tls: {mode: `+mode+`, subjectAltNames: [client.example.com, 10.0.0.7]}
`)
	l := ldsFind(t, ldsGenerate(t, New(Options{}), ldsGateway, push, wildcard(ListenerType)), "0.0.0.0_9443")
	ctx := &tlsv3.DownstreamTlsContext{}
	if err := l.FilterChains[0].GetTransportSocket().GetTypedConfig().UnmarshalTo(ctx); err != nil {
		t.Fatal(err)
	}
	vc := ctx.GetCommonTlsContext().GetCombinedValidationContext().GetDefaultValidationContext()
	var got []string
	for _, m := range vc.GetMatchSubjectAltNames() {
		got = append(got, m.GetExact())
	}
	if !slices.Equal(got, []string{"client.example.com", "10.0.0.7"}) || len(vc.GetMatchTypedSubjectAltNames()) != 0 {
		t.Errorf("SAN matchers %v, typed %v: want any-type exact matchers for client.example.com and 10.0.0.7", got,
			vc.GetMatchTypedSubjectAltNames())
	}
}
