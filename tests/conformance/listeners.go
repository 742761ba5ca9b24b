package conformance

import (
	"cmp"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	dfphttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/dynamic_forward_proxy/v3"
	extauthzhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	rbachttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	originalsrc "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_src/v3"
	proxyprotocol "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/proxy_protocol/v3"
	extauthznet "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/ext_authz/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rbacnet "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	dfpsni "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/sni_dynamic_forward_proxy/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/types/known/anypb"

	// Registered so the filters not named above unmarshal from their Any.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/http_inspector/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_dst/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
)

// KindListener keys what a connection to one destination meets: the listener Envoy hands it to and, per
// kind of traffic, the filter chain Envoy selects for it and what that chain does with it.
const KindListener Kind = "listener"

// CapturePorts are where iptables sends a sidecar's connections: outbound ones to the mesh config's
// proxyListenPort, inbound ones to its proxyInboundListenPort (the injector writes the rules from the same
// mesh config); Istio's defaults are 15001 and 15006.
type CapturePorts struct{ Outbound, Inbound uint32 }

// DefaultCapturePorts are the capture ports of a mesh config that does not set them.
var DefaultCapturePorts = CapturePorts{Outbound: 15001, Inbound: 15006}

// otherIP and otherPort stand for a destination no listener names: where traffic to an address or port the
// mesh does not know goes. An IPv6-only proxy's application connects to IPv6 addresses: otherIP is asked
// as otherIPv6 there.
const (
	otherIP   = "192.0.2.1"
	otherIPv6 = "2001:db8::1"
	otherPort = 65111
	// peerIP (peerIPv6 towards an IPv6 destination) is the source of every probe: another pod of the mesh,
	// not the proxy itself.
	peerIP   = "10.1.0.250"
	peerIPv6 = "fd00::250"
)

// isIPv6 reports whether ip is an IPv6 address (not IPv4, nor IPv4-mapped).
func isIPv6(ip string) bool {
	a, err := netip.ParseAddr(ip)
	return err == nil && !a.Is4() && !a.Is4In6()
}

// trafficClass is one kind of connection a client opens: what Envoy's listener filters can learn from its
// first bytes (TLS or not, SNI, ALPN offered, or the HTTP version sniffed from plaintext).
type trafficClass struct {
	name string
	tls  bool
	sni  string
	alpn []string // offered in the TLS ClientHello
	http string   // the protocol http_inspector detects in plaintext ("http/1.1", "h2c"), "" for other bytes
}

// Outbound and gateway traffic: plaintext HTTP/1.1 and h2c, other plaintext bytes, and TLS per server name.
// Inbound traffic: what a peer sidecar sends (mTLS with Istio's ALPN for HTTP and TCP), plaintext from a
// client without a sidecar, and TLS of the application's own.
var (
	plaintextClasses = []trafficClass{
		{name: "http", http: "http/1.1"},
		{name: "h2c", http: "h2c"},
		{name: "tcp"},
	}
	inboundClasses = []trafficClass{
		{name: "http", http: "http/1.1"},
		{name: "tcp"},
		{name: "mtls-http", tls: true, alpn: []string{"istio-http/1.1"}},
		{name: "mtls-tcp", tls: true, alpn: []string{"istio-peer-exchange", "istio"}},
		{name: "tls", tls: true, alpn: []string{"h2", "http/1.1"}},
	}
)

// tlsClass is a TLS client's connection for one server name.
func tlsClass(sni string) trafficClass {
	return trafficClass{name: "tls(sni=" + sni + ")", tls: true, sni: sni, alpn: []string{"h2", "http/1.1"}}
}

// mtlsClass is a sidecar's mTLS connection for one server name, with Istio's ALPN, as it reaches a gateway
// that passes it through by its SNI (AUTO_PASSTHROUGH).
func mtlsClass(sni string) trafficClass {
	return trafficClass{name: "mtls(sni=" + sni + ")", tls: true, sni: sni, alpn: []string{"istio-peer-exchange", "istio"}}
}

// unknownSNI is a server name no chain lists.
const unknownSNI = "unknown.invalid"

// Probes are the destinations asked of both control planes' listeners, gathered from both, so each side is
// asked the same questions whatever its layout (a listener per port, per VIP or per destination).
type Probes struct {
	// Outbound lists, per port, the addresses some listener or chain names on it (otherIP always).
	Outbound map[uint32][]string
	// Inbound lists the ports virtualInbound's chains name.
	Inbound []uint32
	// Gateway lists the ports a gateway listens on.
	Gateway []uint32
	// Bound lists, per port, the addresses a sidecar's own listeners (bind_to_port, not the capture
	// ones) listen on: an application connects to them itself, no capture involved.
	Bound map[uint32][]string
	// SNI lists, per port, the server names some chain matches on it.
	SNI map[uint32][]string
	// IstioALPN holds the ports where some chain matches on one of Istio's mTLS ALPNs: their server names are
	// asked with a sidecar's mTLS connection too.
	IstioALPN map[uint32]bool
	// Capture are the ports a sidecar's capture listeners take redirected connections on.
	Capture CapturePorts
}

// ProbesOf gathers the destinations named by the listeners of every side, under Istio's default capture ports.
func ProbesOf(sides ...[]*listener.Listener) Probes { return ProbesWith(DefaultCapturePorts, sides...) }

// ProbesWith gathers the destinations named by the listeners of every side, for sidecars whose iptables
// rules redirect to capture.
func ProbesWith(capture CapturePorts, sides ...[]*listener.Listener) Probes {
	outboundCapturePort, inboundCapturePort := capture.Outbound, capture.Inbound
	outbound := map[uint32]map[string]bool{}
	inbound := map[uint32]bool{}
	gateway := map[uint32]bool{}
	sni := map[uint32]map[string]bool{}
	istioALPN := map[uint32]bool{}
	bound := map[uint32]map[string]bool{}
	addTo := func(m map[uint32]map[string]bool, port uint32, v string) {
		if m[port] == nil {
			m[port] = map[string]bool{}
		}
		m[port][v] = true
	}
	for _, ls := range sides {
		for _, l := range ls {
			ip, port := listenerAddress(l.GetAddress())
			for _, fc := range allChains(l) {
				m := fc.GetFilterChainMatch()
				p := port
				if m.GetDestinationPort() != nil {
					p = m.GetDestinationPort().GetValue()
				}
				for _, n := range m.GetServerNames() {
					addTo(sni, p, strings.Replace(n, "*", "x", 1))
				}

				switch {
				case port == inboundCapturePort:
					if m.GetDestinationPort() != nil && p != inboundCapturePort {
						inbound[p] = true
					}
				case l.GetBindToPort() != nil && !l.GetBindToPort().GetValue() || port == outboundCapturePort:
					if p == outboundCapturePort {
						continue
					}
					// A range is asked at both ends, so a chain's prefix length counts, not its address alone.
					for _, r := range m.GetPrefixRanges() {
						addTo(outbound, p, r.GetAddressPrefix())
						if last, ok := lastAddress(r); ok {
							addTo(outbound, p, last)
						}
					}
					if m.GetDestinationPort() != nil || port != outboundCapturePort {
						addTo(outbound, p, otherIP)
					}
				default:
					gateway[p] = true
					if slices.ContainsFunc(m.GetApplicationProtocols(), func(a string) bool { return strings.HasPrefix(a, "istio") }) {
						istioALPN[p] = true
					}
				}
			}
			if (l.GetBindToPort() == nil || l.GetBindToPort().GetValue()) && port != outboundCapturePort && port != inboundCapturePort {
				addTo(bound, port, ip)
			}
			if l.GetBindToPort() != nil && !l.GetBindToPort().GetValue() {
				addTo(outbound, port, otherIP)
				if ip != "0.0.0.0" && ip != "::" {
					addTo(outbound, port, ip)
				}
				for _, a := range l.GetAdditionalAddresses() {
					if aip, aport := listenerAddress(a.GetAddress()); aport == port {
						addTo(outbound, port, aip)
					}
				}
			}
		}
	}
	p := Probes{Outbound: map[uint32][]string{}, SNI: map[uint32][]string{}, IstioALPN: istioALPN, Bound: map[uint32][]string{},
		Capture: capture}
	for port, ips := range outbound {
		p.Outbound[port] = sortedKeys(ips)
	}
	for port, ips := range bound {
		p.Bound[port] = sortedKeys(ips)
	}
	for port, names := range sni {
		p.SNI[port] = sortedKeys(names)
	}
	for port := range inbound {
		p.Inbound = append(p.Inbound, port)
	}
	for port := range gateway {
		p.Gateway = append(p.Gateway, port)
	}
	slices.Sort(p.Inbound)
	slices.Sort(p.Gateway)
	return p
}

// lastAddress is the highest address of a prefix range.
func lastAddress(r *core.CidrRange) (string, bool) {
	a, err := netip.ParseAddr(r.GetAddressPrefix())
	if err != nil {
		return "", false
	}
	b := a.AsSlice()
	bits := int(r.GetPrefixLen().GetValue())
	for i := range b {
		for j := range 8 {
			if i*8+j >= bits {
				b[i] |= 0x80 >> j
			}
		}
	}
	last, _ := netip.AddrFromSlice(b)
	return last.String(), true
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func allChains(l *listener.Listener) []*listener.FilterChain {
	chains := slices.Clone(l.GetFilterChains())
	if l.GetDefaultFilterChain() != nil {
		chains = append(chains, l.GetDefaultFilterChain())
	}
	return chains
}

func listenerAddress(a *core.Address) (string, uint32) {
	sa := a.GetSocketAddress()
	return sa.GetAddress(), sa.GetPortValue()
}

// normaliseListeners asks the proxy's listeners, as Envoy would, where each probe's connection goes: a
// sidecar's outbound connections reach the listener of their exact destination IP:PORT, else 0.0.0.0:PORT,
// else the capture listener itself (use_original_dst); its inbound ones the inbound capture listener; a
// gateway's the listener bound to the port. Each key gets the behaviour per traffic class.
func normaliseListeners(out Snapshot, listeners []*listener.Listener, proxyType, proxyIP string, probes Probes) {
	classesFor := func(port uint32) []trafficClass {
		classes := slices.Clone(plaintextClasses)
		for _, n := range append(slices.Clone(probes.SNI[port]), unknownSNI) {
			classes = append(classes, tlsClass(n))
			if probes.IstioALPN[port] {
				classes = append(classes, mtlsClass(n))
			}
		}
		return classes
	}
	if proxyType == "router" {
		for _, port := range probes.Gateway {
			l := findListener(listeners, func(ip string, p uint32, _ *listener.Listener) bool { return p == port })
			key := Key{Kind: KindListener, Host: "0.0.0.0", Port: port}
			probeListener(out, key, l, proxyIP, port, classesFor(port))
			recordBind(out, key, l)
		}
		return
	}
	capture := findListener(listeners, func(ip string, p uint32, l *listener.Listener) bool {
		return isCapture(ip, p, l, probes.Capture.Outbound)
	})
	// use_original_dst on the outbound capture listener is what hands connections on; without it the
	// capture listener's own chains take everything.
	handOff := capture.GetUseOriginalDst().GetValue()
	other := otherIP
	if isIPv6(proxyIP) {
		other = otherIPv6
	}
	ports := make([]uint32, 0, len(probes.Outbound))
	for p := range probes.Outbound {
		ports = append(ports, p)
	}
	for _, port := range ports {
		for _, ip := range probes.Outbound[port] {
			key := Key{Kind: KindListener, Host: outboundHostText(ip), Port: port}
			if ip == otherIP {
				ip = other
			}
			l := capture
			if handOff {
				if to := outboundListener(listeners, ip, port); to != nil {
					l = to
				}
			}
			probeListener(out, key, l, ip, port, classesFor(port))
		}
	}
	// A listener of its own (an egress listener with captureMode NONE): the application connects to its
	// address, so only a listener bound to that exact address and port takes the connection.
	for port, ips := range probes.Bound {
		for _, ip := range ips {
			l := findListener(listeners, func(lip string, p uint32, l *listener.Listener) bool {
				return lip == ip && p == port && (l.GetBindToPort() == nil || l.GetBindToPort().GetValue())
			})
			classes := classesFor(port)
			if l.GetTrafficDirection() == core.TrafficDirection_INBOUND {
				// A Sidecar ingress listener bound to its port: what peers and clients send the workload.
				classes = inboundClasses
			}
			probeListener(out, Key{Kind: KindListener, Host: "bound " + ip, Port: port}, l, ip, port, classes)
		}
	}
	// Nothing names this destination: the capture listener's own chains decide.
	probeListener(out, Key{Kind: KindListener, Host: outboundHostText(otherIP)}, capture, other, otherPort, classesFor(0))
	recordBind(out, Key{Kind: KindListener, Host: outboundHostText(otherIP)}, capture)
	inbound := findListener(listeners, func(ip string, p uint32, l *listener.Listener) bool {
		return isCapture(ip, p, l, probes.Capture.Inbound)
	})
	for _, port := range append(slices.Clone(probes.Inbound), 0) {
		dst := port
		if port == 0 {
			dst = otherPort
		}
		l := inbound
		// With use_original_dst the capture listener hands the connection to a listener of its original
		// destination (the pod's IP:PORT, else 0.0.0.0:PORT or [::]:PORT) when there is one: an outbound listener, then.
		if inbound.GetUseOriginalDst().GetValue() {
			if to := outboundListener(listeners, proxyIP, dst); to != nil {
				l = to
			}
		}
		probeListener(out, Key{Kind: KindListener, Inbound: true, Port: port}, l, proxyIP, dst, inboundClasses)
	}
	recordBind(out, Key{Kind: KindListener, Inbound: true}, inbound)
}

// isCapture reports whether the listener l, on ip:p, is the capture listener of port: bound to it on the
// unspecified address, where iptables' redirect arrives (not a listener handed connections for a VIP on it).
func isCapture(ip string, p uint32, l *listener.Listener, port uint32) bool {
	return p == port && (ip == "0.0.0.0" || ip == "::") && (l.GetBindToPort() == nil || l.GetBindToPort().GetValue())
}

// recordBind adds to key the addresses l listens on (its own and its additional ones): which family's
// connections a gateway's or a capture listener takes at all.
func recordBind(out Snapshot, key Key, l *listener.Listener) {
	if l == nil || out[key] == nil {
		return
	}
	addrs := []string{l.GetAddress().GetSocketAddress().GetAddress()}
	for _, a := range l.GetAdditionalAddresses() {
		addrs = append(addrs, a.GetAddress().GetSocketAddress().GetAddress())
	}
	out[key]["bind"] = strings.Join(addrs, ",")
}

func outboundHostText(ip string) string {
	if ip == otherIP {
		return "other-ip"
	}
	return ip
}

func findListener(ls []*listener.Listener, match func(ip string, port uint32, l *listener.Listener) bool) *listener.Listener {
	for _, l := range ls {
		ip, port := listenerAddress(l.GetAddress())
		if match(ip, port, l) {
			return l
		}
	}
	return nil
}

// outboundListener is the listener use_original_dst hands a connection to: the one bound (bind_to_port
// false) to its exact address, else the one on the unspecified address of its family (0.0.0.0, or [::] for
// an IPv6 destination) and its port, as Envoy's ConnectionHandlerImpl::getBalancedHandlerByAddress.
func outboundListener(ls []*listener.Listener, ip string, port uint32) *listener.Listener {
	unspecified := "0.0.0.0"
	if isIPv6(ip) {
		unspecified = "::"
	}
	var wildcard *listener.Listener
	for _, l := range ls {
		if l.GetBindToPort() == nil || l.GetBindToPort().GetValue() {
			continue
		}
		addrs := []*core.Address{l.GetAddress()}
		for _, a := range l.GetAdditionalAddresses() {
			addrs = append(addrs, a.GetAddress())
		}
		for _, a := range addrs {
			aip, aport := listenerAddress(a)
			if aport != port {
				continue
			}
			if aip == ip {
				return l
			}
			if aip == unspecified && wildcard == nil {
				wildcard = l
			}
		}
	}
	return wildcard
}

// probeListener records, for each traffic class, where l sends a connection to ip:port (the chain's TLS
// termination and its destination, in one field per class under key), and the details of each distinct
// chain reached under a key of its own (key with Subset "TLS → DESTINATION"), so a class sent elsewhere
// is one difference and the settings of one chain are compared once, not once per class.
func probeListener(out Snapshot, key Key, l *listener.Listener, ip string, port uint32, classes []trafficClass) {
	f := Fields{}
	if l == nil {
		f["listener"] = "none"
		out[key] = f
		return
	}
	listenerSocketFields(f, l)
	type reached struct {
		classes []string
		fields  []Fields
	}
	chains := map[string]*reached{}
	for _, c := range classes {
		d := Fields{}
		chainFields(d, "", selectChain(l, c, ip, port), port)
		summary := tlsMode(d) + " → " + d["to"]
		f[c.name] = summary
		if d["to"] == "closed" {
			continue
		}
		r := chains[summary]
		if r == nil {
			r = &reached{}
			chains[summary] = r
		}
		r.classes = append(r.classes, c.name)
		r.fields = append(r.fields, d)
	}
	out[key] = f
	for summary, r := range chains {
		ck := key
		ck.Subset = summary
		out[ck] = mergeByClass(r.classes, r.fields)
	}
}

// listenerSocketFields records what the listener's socket does beyond picking a chain: transparent (TPROXY capture:
// it accepts connections to any address), original_src (the upstream connection keeps the client's
// address, with its socket mark) and proxy_protocol (a PROXY header is read first: required or optional,
// and which filters run before it, which would read the header as payload), each only when set.
func listenerSocketFields(f Fields, l *listener.Listener) {
	if l.GetTransparent().GetValue() {
		f["listener.transparent"] = "true"
	}
	var before []string
	for _, lf := range l.GetListenerFilters() {
		var src originalsrc.OriginalSrc
		if lf.GetTypedConfig().MessageIs(&src) && lf.GetTypedConfig().UnmarshalTo(&src) == nil {
			f["listener.original_src"] = "mark " + strconv.FormatUint(uint64(src.GetMark()), 10)
		}
		var pp proxyprotocol.ProxyProtocol
		if lf.GetTypedConfig().MessageIs(&pp) && lf.GetTypedConfig().UnmarshalTo(&pp) == nil {
			v := "required"
			if pp.GetAllowRequestsWithoutProxyProtocol() {
				v = "optional"
			}
			if len(before) > 0 {
				v += " after " + strings.Join(before, ",")
			}
			f["listener.proxy_protocol"] = v
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(typeNameOf(lf.GetTypedConfig()), "envoy.extensions.filters.listener."), ".")
		before = append(before, name)
	}
	listenerTimeoutFields(f, l, before)
}

// listenerTimeoutFields records how long the listener filters that read the client's first bytes (an
// inspector, a PROXY header) wait for them, filters_timeout: listener_filters_timeout (Envoy's default 15 s,
// 0 none), then close the connection or go on undetected (continue_on_listener_filters_timeout).
func listenerTimeoutFields(f Fields, l *listener.Listener, filters []string) {
	waits := slices.ContainsFunc(filters, func(name string) bool {
		return strings.HasSuffix(name, "_inspector") || name == "proxy_protocol"
	})
	if !waits {
		return
	}
	t := "15s"
	if d := l.GetListenerFiltersTimeout(); d != nil {
		t = d.AsDuration().String()
	}
	switch {
	case t == "0s":
		t = "none"
	case l.GetContinueOnListenerFiltersTimeout():
		t += ", then continue"
	default:
		t += ", then close"
	}
	f["listener.filters_timeout"] = t
}

// tlsMode names how a chain takes the connection: plaintext (no TLS, bytes pass as they are), tls
// (terminated) or mtls (terminated, a client certificate required).
func tlsMode(d Fields) string {
	switch {
	case d["tls"] == "none" || d["tls"] == "":
		return "plaintext"
	case d["tls"] == "terminate" && d["tls.client_cert"] == "required":
		return "mtls"
	case d["tls"] == "terminate":
		return "tls"
	}
	return d["tls"]
}

// mergeByClass joins the details of the chains several classes reach under one summary: a field on which
// they agree is kept as is, one on which they differ lists each class's value.
func mergeByClass(classes []string, fields []Fields) Fields {
	out := Fields{}
	names := map[string]bool{}
	for _, f := range fields {
		for k := range f {
			names[k] = true
		}
	}
	delete(names, "to")
	for name := range names {
		same := true
		for _, f := range fields[1:] {
			if f[name] != fields[0][name] {
				same = false
			}
		}
		if same {
			out[name] = fields[0][name]
			continue
		}
		var parts []string
		for i, f := range fields {
			v, ok := f[name]
			if !ok {
				v = unset
			}
			parts = append(parts, classes[i]+"="+v)
		}
		out[name] = strings.Join(parts, "; ")
	}
	return out
}

// socketState is what Envoy knows of a connection when it picks a filter chain.
type socketState struct {
	ip        netip.Addr
	port      uint32
	transport string
	sni       string
	alpn      []string
}

// selectChain picks the filter chain as Envoy's FilterChainManagerImpl does, after the listener filters
// have run: destination port (an exact port, else the chains without one; a port with chains but no match
// goes to the default chain), the longest matching destination prefix, server name (exact, then wildcards,
// then none), transport protocol (exact, then none), application protocols (the first offered one any chain
// lists, then none), then the source's prefix and port. No match, or a level with no candidate, is the
// default chain (nil when the listener has none: Envoy closes the connection).
func selectChain(l *listener.Listener, c trafficClass, ip string, port uint32) *listener.FilterChain {
	s := detect(l, c, ip, port)
	chains := l.GetFilterChains()
	byPort := filterChains(chains, func(m *listener.FilterChainMatch) bool { return m.GetDestinationPort().GetValue() == port })
	if len(byPort) == 0 {
		byPort = filterChains(chains, func(m *listener.FilterChainMatch) bool { return m.GetDestinationPort() == nil })
	}
	candidates := longestPrefix(byPort, s.ip, func(m *listener.FilterChainMatch) []*core.CidrRange { return m.GetPrefixRanges() })
	candidates = serverNameMatch(candidates, s.sni)
	if exact := filterChains(candidates, func(m *listener.FilterChainMatch) bool {
		return m.GetTransportProtocol() == s.transport
	}); len(exact) > 0 {
		candidates = exact
	} else {
		candidates = filterChains(candidates, func(m *listener.FilterChainMatch) bool { return m.GetTransportProtocol() == "" })
	}
	alpnMatched := false
	for _, a := range s.alpn {
		if m := filterChains(candidates, func(m *listener.FilterChainMatch) bool {
			return slices.Contains(m.GetApplicationProtocols(), a)
		}); len(m) > 0 {
			candidates, alpnMatched = m, true
			break
		}
	}
	if !alpnMatched {
		candidates = filterChains(candidates, func(m *listener.FilterChainMatch) bool { return len(m.GetApplicationProtocols()) == 0 })
	}
	peer := netip.MustParseAddr(peerIP)
	if s.ip.Is6() && !s.ip.Is4In6() {
		peer = netip.MustParseAddr(peerIPv6)
	}
	candidates = longestPrefix(candidates, peer,
		func(m *listener.FilterChainMatch) []*core.CidrRange { return m.GetDirectSourcePrefixRanges() })
	candidates = filterChains(candidates, func(m *listener.FilterChainMatch) bool {
		return m.GetSourceType() != listener.FilterChainMatch_SAME_IP_OR_LOOPBACK
	})
	candidates = longestPrefix(candidates, peer, func(m *listener.FilterChainMatch) []*core.CidrRange { return m.GetSourcePrefixRanges() })
	candidates = filterChains(candidates, func(m *listener.FilterChainMatch) bool { return len(m.GetSourcePorts()) == 0 })
	switch len(candidates) {
	case 0:
		return l.GetDefaultFilterChain()
	case 1:
		return candidates[0]
	}
	// Envoy refuses a listener with two chains of one match; name it rather than pick one.
	return &listener.FilterChain{Name: "ambiguous"}
}

func filterChains(chains []*listener.FilterChain, keep func(*listener.FilterChainMatch) bool) []*listener.FilterChain {
	var out []*listener.FilterChain
	for _, fc := range chains {
		if keep(fc.GetFilterChainMatch()) {
			out = append(out, fc)
		}
	}
	return out
}

// longestPrefix keeps the chains whose ranges hold the longest prefix containing ip (a chain without ranges
// matches every address, as 0.0.0.0/0).
func longestPrefix(chains []*listener.FilterChain, ip netip.Addr,
	ranges func(*listener.FilterChainMatch) []*core.CidrRange) []*listener.FilterChain {
	best := -1
	lengths := make([]int, len(chains))
	for i, fc := range chains {
		lengths[i] = -1
		rs := ranges(fc.GetFilterChainMatch())
		if len(rs) == 0 {
			lengths[i] = 0
		}
		for _, r := range rs {
			pfx, err := netip.ParsePrefix(r.GetAddressPrefix() + "/" + strconv.FormatUint(uint64(r.GetPrefixLen().GetValue()), 10))
			if err != nil {
				continue
			}
			if pfx.Masked().Contains(ip) && pfx.Bits() > lengths[i] {
				lengths[i] = pfx.Bits()
			}
		}
		best = max(best, lengths[i])
	}
	var out []*listener.FilterChain
	for i, fc := range chains {
		if best >= 0 && lengths[i] == best {
			out = append(out, fc)
		}
	}
	return out
}

func serverNameMatch(chains []*listener.FilterChain, sni string) []*listener.FilterChain {
	if sni != "" {
		if m := filterChains(chains, func(m *listener.FilterChainMatch) bool { return slices.Contains(m.GetServerNames(), sni) }); len(m) > 0 {
			return m
		}
		// Wildcards from the most specific: "*.b.example.com", then "*.example.com", then "*.com".
		for i := 1; i < len(sni)-1; i++ {
			if sni[i] != '.' {
				continue
			}
			wildcard := "*" + sni[i:]
			if m := filterChains(chains, func(m *listener.FilterChainMatch) bool {
				return slices.Contains(m.GetServerNames(), wildcard)
			}); len(m) > 0 {
				return m
			}
		}
	}
	return filterChains(chains, func(m *listener.FilterChainMatch) bool { return len(m.GetServerNames()) == 0 })
}

const (
	tlsInspector  = "envoy.filters.listener.tls_inspector"
	httpInspector = "envoy.filters.listener.http_inspector"
)

// detect runs the listener filters: the TLS inspector reads TLS, SNI and ALPN (Envoy adds it by itself
// when the listener has no listener filters and a chain matches on TLS, server names or ALPN); the HTTP
// inspector reads the HTTP version of plaintext. A filter is skipped where its filter_disabled matches.
// Without the TLS inspector every connection is raw_buffer.
func detect(l *listener.Listener, c trafficClass, ip string, port uint32) socketState {
	s := socketState{port: port, transport: "raw_buffer"}
	s.ip, _ = netip.ParseAddr(ip)
	hasTLS, hasHTTP := false, false
	for _, lf := range l.GetListenerFilters() {
		if disabled(lf.GetFilterDisabled(), port) {
			continue
		}
		switch {
		case lf.GetName() == tlsInspector || typeNameOf(lf.GetTypedConfig()) == "envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector":
			hasTLS = true
		case lf.GetName() == httpInspector ||
			typeNameOf(lf.GetTypedConfig()) == "envoy.extensions.filters.listener.http_inspector.v3.HttpInspector":
			hasHTTP = true
		}
	}
	if len(l.GetListenerFilters()) == 0 {
		for _, fc := range l.GetFilterChains() {
			m := fc.GetFilterChainMatch()
			if m.GetTransportProtocol() == "tls" || len(m.GetServerNames()) > 0 || len(m.GetApplicationProtocols()) > 0 {
				hasTLS = true
			}
		}
	}
	switch {
	case c.tls && hasTLS:
		s.transport, s.sni, s.alpn = "tls", c.sni, c.alpn
	case !c.tls && hasHTTP && c.http != "":
		s.alpn = []string{c.http}
	}
	return s
}

// disabled evaluates a listener filter's filter_disabled predicate for a destination port.
func disabled(p *listener.ListenerFilterChainMatchPredicate, port uint32) bool {
	if p == nil {
		return false
	}
	switch r := p.GetRule().(type) {
	case *listener.ListenerFilterChainMatchPredicate_AnyMatch:
		return r.AnyMatch
	case *listener.ListenerFilterChainMatchPredicate_NotMatch:
		return !disabled(r.NotMatch, port)
	case *listener.ListenerFilterChainMatchPredicate_OrMatch:
		for _, x := range r.OrMatch.GetRules() {
			if disabled(x, port) {
				return true
			}
		}
		return false
	case *listener.ListenerFilterChainMatchPredicate_AndMatch:
		for _, x := range r.AndMatch.GetRules() {
			if !disabled(x, port) {
				return false
			}
		}
		return true
	case *listener.ListenerFilterChainMatchPredicate_DestinationPortRange:
		return int64(port) >= int64(r.DestinationPortRange.GetStart()) && int64(port) < int64(r.DestinationPortRange.GetEnd())
	}
	return false
}

func typeNameOf(a *anypb.Any) string {
	if a == nil {
		return ""
	}
	return string(a.MessageName())
}

// Telemetry filters change what is measured, not where traffic goes or who may send it.
var telemetryFilters = map[string]bool{
	"istio.metadata_exchange":       true,
	"istio.stats":                   true,
	"envoy.filters.http.grpc_stats": true,
}

// chainFields describes what a chain does with a connection: its TLS termination, its network filters
// (RBAC, external authorization), and where it sends the traffic (tcp_proxy's destinations, or an HTTP
// connection manager's routes and its HTTP filters).
func chainFields(f Fields, p string, fc *listener.FilterChain, port uint32) {
	if fc == nil {
		f[p+"to"] = "closed"
		return
	}
	if fc.GetName() == "ambiguous" && fc.GetFilterChainMatch() == nil && len(fc.GetFilters()) == 0 {
		f[p+"to"] = "ambiguous: two chains match"
		return
	}
	downstreamTLSFields(f, p, fc.GetTransportSocket())
	var others []string
	rbacN := map[string]int{}
	for _, flt := range fc.GetFilters() {
		if telemetryFilters[flt.GetName()] {
			continue
		}
		msg, err := flt.GetTypedConfig().UnmarshalNew()
		if err != nil {
			others = append(others, flt.GetName())
			continue
		}
		switch m := msg.(type) {
		case *tcpproxy.TcpProxy:
			f[p+"to"] = "tcp " + tcpDestinations(m)
			// Recorded only off the usual naming (the cluster's): the mesh's cluster stat name patterns.
			if c := m.GetCluster(); c != "" && m.GetStatPrefix() != c {
				f[p+"tcp.stat_prefix"] = m.GetStatPrefix()
			}
			f[p+"tcp.idle_timeout"] = durationOr(m.GetIdleTimeout(), "1h0m0s")
			f[p+"tcp.max_connect_attempts"] = uint32Or(m.GetMaxConnectAttempts(), "1")
			f[p+"tcp.max_connection_duration"] = durationOr(m.GetMaxDownstreamConnectionDuration(), "none")
			var hashes []string
			for _, h := range m.GetHashPolicy() {
				switch {
				case h.GetSourceIp() != nil:
					hashes = append(hashes, "source_ip")
				case h.GetFilterState() != nil:
					hashes = append(hashes, "filter_state:"+h.GetFilterState().GetKey())
				}
			}
			f[p+"tcp.hash"] = cmp.Or(strings.Join(hashes, ","), "none")
		case *hcm.HttpConnectionManager:
			hcmFields(f, p, m, port)
		case *dfpsni.FilterConfig:
			f[p+"net.sni_dynamic_forward_proxy"] = dnsCacheText(m.GetDnsCacheConfig()) + " port=" + strconv.FormatUint(uint64(m.GetPortValue()), 10)
		case *rbacnet.RBAC:
			rbacFields(f, p+"net.", m.GetRules(), m.GetShadowRules(), m.GetShadowRulesStatPrefix(), rbacN)
		case *extauthznet.ExtAuthz:
			f[p+"net.ext_authz"] = "grpc " + grpcTarget(m.GetGrpcService()) + " failure_mode_allow=" + strconv.FormatBool(m.GetFailureModeAllow())
			if m.GetFilterEnabledMetadata() != nil {
				f[p+"net.ext_authz.enabled_when"] = metadataMatcher(m.GetFilterEnabledMetadata())
			}
		default:
			others = append(others, string(msg.ProtoReflect().Descriptor().FullName()))
		}
	}
	if _, ok := f[p+"to"]; !ok {
		f[p+"to"] = "no terminal filter"
	}
	if len(others) > 0 {
		f[p+"filters"] = strings.Join(others, ",")
	}
}

// downstreamTLSFields describes how a chain terminates TLS: not at all (the bytes pass as they are), or with
// a certificate, a client certificate required or not, the CA and SANs it checks, ALPN and versions.
func downstreamTLSFields(f Fields, p string, s *core.TransportSocket) {
	if s == nil || s.GetTypedConfig() == nil {
		f[p+"tls"] = "none"
		return
	}
	msg, err := s.GetTypedConfig().UnmarshalNew()
	if err != nil {
		f[p+"tls"] = "unreadable"
		return
	}
	ctx, ok := msg.(*tlsv3.DownstreamTlsContext)
	if !ok {
		name := string(msg.ProtoReflect().Descriptor().FullName())
		if strings.HasSuffix(name, ".RawBuffer") {
			name = "none"
		}
		f[p+"tls"] = name
		return
	}
	f[p+"tls"] = "terminate"
	client := "optional"
	if ctx.GetRequireClientCertificate().GetValue() {
		client = "required"
	}
	f[p+"tls.client_cert"] = client
	common := ctx.GetCommonTlsContext()
	f[p+"tls.alpn"] = joinSorted(common.GetAlpnProtocols())
	var certs []string
	for _, c := range common.GetTlsCertificates() {
		certs = append(certs, "file:"+dataSource(c.GetCertificateChain()))
	}
	for _, c := range common.GetTlsCertificateSdsSecretConfigs() {
		certs = append(certs, sdsSource(c.GetName()))
	}
	f[p+"tls.cert"] = joinSorted(certs)
	var ca string
	var vc *tlsv3.CertificateValidationContext
	switch v := common.GetValidationContextType().(type) {
	case *tlsv3.CommonTlsContext_ValidationContext:
		vc = v.ValidationContext
	case *tlsv3.CommonTlsContext_CombinedValidationContext:
		vc = v.CombinedValidationContext.GetDefaultValidationContext()
		ca = sdsSource(v.CombinedValidationContext.GetValidationContextSdsSecretConfig().GetName())
	case *tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig:
		ca = sdsSource(v.ValidationContextSdsSecretConfig.GetName())
	}
	if vc.GetTrustedCa() != nil {
		ca = "file:" + dataSource(vc.GetTrustedCa())
	}
	f[p+"tls.ca"] = ca
	var sans []string
	for _, m := range vc.GetMatchTypedSubjectAltNames() {
		sans = append(sans, m.GetSanType().String()+" "+stringMatcher(m.GetMatcher()))
	}
	for _, m := range vc.GetMatchSubjectAltNames() { //nolint:staticcheck // still honoured by Envoy
		sans = append(sans, "ANY "+stringMatcher(m))
	}
	f[p+"tls.san"] = joinSorted(sans)
	params := common.GetTlsParams()
	// Envoy's server defaults: TLS 1.2 to 1.3, its own cipher list.
	f[p+"tls.versions"] = tlsVersion(params.GetTlsMinimumProtocolVersion(), "TLSv1_2") + "-" +
		tlsVersion(params.GetTlsMaximumProtocolVersion(), "TLSv1_3")
	ciphers := "envoy default"
	if len(params.GetCipherSuites()) > 0 {
		ciphers = strings.Join(params.GetCipherSuites(), ":")
	}
	f[p+"tls.ciphers"] = ciphers
	curves := "envoy default"
	if len(params.GetEcdhCurves()) > 0 {
		curves = strings.Join(params.GetEcdhCurves(), ":")
	}
	f[p+"tls.ecdh_curves"] = curves
}

func tlsVersion(v tlsv3.TlsParameters_TlsProtocol, def string) string {
	if v == tlsv3.TlsParameters_TLS_AUTO {
		return def
	}
	return v.String()
}

// tcpDestinations names tcp_proxy's upstream the way routes name theirs.
func tcpDestinations(t *tcpproxy.TcpProxy) string {
	switch c := t.GetClusterSpecifier().(type) {
	case *tcpproxy.TcpProxy_Cluster:
		return clusterText(c.Cluster)
	case *tcpproxy.TcpProxy_WeightedClusters:
		var total uint64
		for _, w := range c.WeightedClusters.GetClusters() {
			total += uint64(w.GetWeight())
		}
		var parts []string
		for _, w := range c.WeightedClusters.GetClusters() {
			if w.GetWeight() == 0 && total > 0 {
				continue
			}
			share := strconv.FormatFloat(100*float64(w.GetWeight())/float64(max(total, 1)), 'f', 2, 64)
			parts = append(parts, clusterText(w.GetName())+"="+share+"%")
		}
		if len(parts) == 1 {
			return strings.TrimSuffix(parts[0], "=100.00%")
		}
		return joinSorted(parts)
	}
	return "none"
}

// clusterText is a cluster's destination, Envoy's special clusters by what they do.
func clusterText(name string) string {
	switch {
	case name == "PassthroughCluster":
		return "passthrough (original destination)"
	case name == "BlackHoleCluster":
		return "blackhole"
	case strings.HasPrefix(name, "InboundPassthroughCluster"):
		return "inbound passthrough (original destination)"
	}
	return destination(name)
}

func grpcTarget(g *core.GrpcService) string {
	if eg := g.GetEnvoyGrpc(); eg != nil {
		return clusterText(eg.GetClusterName())
	}
	if gg := g.GetGoogleGrpc(); gg != nil {
		return "google:" + gg.GetTargetUri()
	}
	return "none"
}

// Envoy's HTTP connection manager defaults for the settings compared.
const (
	defaultStreamIdleTimeout = "5m0s"
	defaultHCMIdleTimeout    = "1h0m0s"
)

// hcmFields describes an HTTP connection manager: which routes it serves (an RDS route configuration, by
// what it serves, or its inline routes, normalised as outbound routes are), its HTTP filters in order (RBAC
// and external authorization spelled out), and the settings that change how requests are read or forwarded.
func hcmFields(f Fields, p string, m *hcm.HttpConnectionManager, port uint32) {
	switch {
	case m.GetRds() != nil:
		f[p+"to"] = "http routes " + routeConfigText(m.GetRds().GetRouteConfigName())
	case m.GetRouteConfig() != nil:
		f[p+"to"] = "http inline routes"
		for _, vh := range m.GetRouteConfig().GetVirtualHosts() {
			domains := slices.Clone(vh.GetDomains())
			sort.Strings(domains)
			vp := p + "http.vhost[" + strings.Join(domains, ",") + "]."
			for k, v := range vhostFields(vh, port, m.GetRouteConfig().GetIgnorePortInHostMatching()) {
				f[vp+k] = v
			}
		}
	case m.GetScopedRoutes() != nil:
		f[p+"to"] = "http scoped routes"
	default:
		f[p+"to"] = "http no routes"
	}
	h := p + "http."
	var filters []string
	rbacN := map[string]int{}
	for _, hf := range m.GetHttpFilters() {
		if telemetryFilters[hf.GetName()] {
			continue
		}
		name := hf.GetName()
		msg, err := hf.GetTypedConfig().UnmarshalNew()
		if err == nil {
			name = shortFilterName(string(msg.ProtoReflect().Descriptor().FullName()))
		}
		if hf.GetDisabled() {
			name += "(disabled)"
		}
		// Filters that act only where a route or the request asks for them are compared on their own, so the
		// list keeps the order of those that act on every request.
		if own, ok := ownFieldFilters[name]; ok {
			f[h+own] = "present"
			continue
		}
		filters = append(filters, name)
		switch x := msg.(type) {
		case *dfphttp.FilterConfig:
			f[h+"dynamic_forward_proxy.dns_cache"] = dnsCacheText(x.GetDnsCacheConfig())
		case *rbachttp.RBAC:
			rbacFields(f, h, x.GetRules(), x.GetShadowRules(), x.GetShadowRulesStatPrefix(), rbacN)
		case *extauthzhttp.ExtAuthz:
			extAuthzFields(f, h+"ext_authz", x)
		}
	}
	f[h+"filters"] = strings.Join(filters, ",")
	for _, own := range ownFieldFilters {
		if _, ok := f[h+own]; !ok {
			f[h+own] = "absent"
		}
	}
	f[h+"codec"] = m.GetCodecType().String()
	f[h+"use_remote_address"] = strconv.FormatBool(m.GetUseRemoteAddress().GetValue())
	f[h+"xff_num_trusted_hops"] = strconv.FormatUint(uint64(m.GetXffNumTrustedHops()), 10)
	f[h+"forward_client_cert"] = m.GetForwardClientCertDetails().String()
	// The Server response header: its value (Envoy's own name when unset) and whether a backend's is kept.
	f[h+"server_name"] = cmp.Or(m.GetServerName(), "envoy")
	f[h+"server_header"] = m.GetServerHeaderTransformation().String()
	if cc := m.GetSetCurrentClientCertDetails(); cc != nil {
		f[h+"set_current_client_cert"] = "subject=" + strconv.FormatBool(cc.GetSubject().GetValue()) +
			" cert=" + strconv.FormatBool(cc.GetCert()) +
			" chain=" + strconv.FormatBool(cc.GetChain()) + " dns=" + strconv.FormatBool(cc.GetDns()) + " uri=" + strconv.FormatBool(cc.GetUri())
	}
	f[h+"normalize_path"] = strconv.FormatBool(m.GetNormalizePath().GetValue())
	f[h+"merge_slashes"] = strconv.FormatBool(m.GetMergeSlashes())
	escaped := m.GetPathWithEscapedSlashesAction()
	if escaped == hcm.HttpConnectionManager_IMPLEMENTATION_SPECIFIC_DEFAULT {
		escaped = hcm.HttpConnectionManager_KEEP_UNCHANGED
	}
	f[h+"escaped_slashes"] = escaped.String()
	f[h+"stream_idle_timeout"] = durationOr(m.GetStreamIdleTimeout(), defaultStreamIdleTimeout)
	f[h+"request_timeout"] = durationOr(m.GetRequestTimeout(), "0s")
	f[h+"idle_timeout"] = durationOr(m.GetCommonHttpProtocolOptions().GetIdleTimeout(), defaultHCMIdleTimeout)
	f[h+"max_connection_duration"] = durationOr(m.GetCommonHttpProtocolOptions().GetMaxConnectionDuration(), "unlimited")
	var upgrades []string
	for _, u := range m.GetUpgradeConfigs() {
		if u.GetEnabled() == nil || u.GetEnabled().GetValue() {
			upgrades = append(upgrades, strings.ToLower(u.GetUpgradeType()))
		}
	}
	f[h+"upgrades"] = joinSorted(upgrades)
	f[h+"accept_http_10"] = strconv.FormatBool(m.GetHttpProtocolOptions().GetAcceptHttp_10())
	f[h+"proxy_100_continue"] = strconv.FormatBool(m.GetProxy_100Continue())
	f[h+"preserve_external_request_id"] = strconv.FormatBool(m.GetPreserveExternalRequestId())
	f[h+"generate_request_id"] = strconv.FormatBool(m.GetGenerateRequestId() == nil || m.GetGenerateRequestId().GetValue())
	f[h+"append_x_forwarded_port"] = strconv.FormatBool(m.GetAppendXForwardedPort())
	// Whether the router adds Envoy's x-envoy-* headers (upstream service time, attempt count, ...).
	for _, hf := range m.GetHttpFilters() {
		r := &routerv3.Router{}
		if hf.GetTypedConfig().UnmarshalTo(r) == nil {
			f[h+"router.suppress_envoy_headers"] = strconv.FormatBool(r.GetSuppressEnvoyHeaders())
		}
	}
}

func extAuthzFields(f Fields, p string, x *extauthzhttp.ExtAuthz) {
	switch s := x.GetServices().(type) {
	case *extauthzhttp.ExtAuthz_GrpcService:
		f[p] = "grpc " + grpcTarget(s.GrpcService) + " timeout=" + durationOr(s.GrpcService.GetTimeout(), "none")
	case *extauthzhttp.ExtAuthz_HttpService:
		f[p] = "http " + clusterText(s.HttpService.GetServerUri().GetCluster()) +
			" timeout=" + durationOr(s.HttpService.GetServerUri().GetTimeout(), "none") +
			" path_prefix=" + s.HttpService.GetPathPrefix()
	default:
		f[p] = "no service"
	}
	f[p+".failure_mode_allow"] = strconv.FormatBool(x.GetFailureModeAllow())
	if x.GetFilterEnabledMetadata() != nil {
		f[p+".enabled_when"] = metadataMatcher(x.GetFilterEnabledMetadata())
	}
	if x.GetStatusOnError() != nil {
		f[p+".status_on_error"] = x.GetStatusOnError().GetCode().String()
	}
	if b := x.GetWithRequestBody(); b != nil {
		f[p+".request_body"] = "max=" + strconv.FormatUint(uint64(b.GetMaxRequestBytes()), 10) + " partial=" +
			strconv.FormatBool(b.GetAllowPartialMessage())
	}
	if x.GetIncludePeerCertificate() {
		f[p+".peer_certificate"] = "true"
	}
}

// ownFieldFilters are the HTTP filters recorded as a field of their own: Istio's ALPN override (sets the
// upstream mTLS ALPN from the request's HTTP version). CORS stays in the list: its place before the router
// decides whether a route's CORS policy applies.
var ownFieldFilters = map[string]string{
	"istio.envoy.config.filter.http.alpn.v2alpha1.FilterConfig": "istio_alpn_filter",
}

// shortFilterName names an HTTP filter by its config type: envoy.extensions.filters.http.fault.v3.HTTPFault
// is "fault", whatever name the filter was given.
func shortFilterName(full string) string {
	if rest, ok := strings.CutPrefix(full, "envoy.extensions.filters.http."); ok {
		name, _, _ := strings.Cut(rest, ".")
		return name
	}
	return full
}

// routeConfigText names an RDS route configuration by what it serves: "port 9080" (every service on the
// port), "HOST:PORT" (one destination) or "gateway port 80".
func routeConfigText(name string) string {
	host, port, gateway, ok := routeConfigTarget(name)
	switch {
	case !ok:
		return name
	case gateway:
		return "gateway port " + strconv.FormatUint(uint64(port), 10)
	case host != "":
		return host + ":" + strconv.FormatUint(uint64(port), 10)
	}
	return "port " + strconv.FormatUint(uint64(port), 10)
}
