package envoymodel

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/http_inspector/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_dst/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/raw_buffer/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
)

const (
	originalDstFilter  = "type.googleapis.com/envoy.extensions.filters.listener.original_dst.v3.OriginalDst"
	tlsInspectorFilter = "type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector"
	httpInspectorType  = "type.googleapis.com/envoy.extensions.filters.listener.http_inspector.v3.HttpInspector"
	tlsSocketType      = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext"
	rawBufferType      = "type.googleapis.com/envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer"
)

func listenerAddress(l *listener.Listener) (netip.AddrPort, bool) {
	sa := l.GetAddress().GetSocketAddress()
	if sa == nil {
		return netip.AddrPort{}, false
	}
	ip, err := netip.ParseAddr(sa.GetAddress())
	if err != nil {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(ip, uint16(sa.GetPortValue())), true
}

func bindsToPort(l *listener.Listener) bool {
	return l.GetBindToPort() == nil || l.GetBindToPort().GetValue()
}

// findByAddress is findActiveTcpListenerByAddress: the listener on exactly addr, else one on the wildcard
// address of its family and port. Listeners with bind_to_port false count: they exist for this hand-off.
func (p *Proxy) findByAddress(addr netip.AddrPort, bound bool) *listener.Listener {
	var wildcard *listener.Listener
	for _, l := range p.res.Listeners {
		if l.GetApiListener() != nil || l.GetInternalListener() != nil {
			continue
		}
		if bound && !bindsToPort(l) {
			continue
		}
		a, ok := listenerAddress(l)
		if !ok {
			continue
		}
		if a == addr {
			return l
		}
		if a.Port() == addr.Port() && a.Addr().IsUnspecified() && a.Addr().Is4() == addr.Addr().Is4() && wildcard == nil {
			wildcard = l
		}
	}
	return wildcard
}

func (s *stream) connect() error {
	req := s.req
	dst, err := netip.ParseAddr(req.DestinationIP)
	if err != nil {
		return fmt.Errorf("request DestinationIP %q: %w", req.DestinationIP, err)
	}
	src, err := netip.ParseAddr(req.SourceIP)
	if err != nil {
		return fmt.Errorf("request SourceIP %q: %w", req.SourceIP, err)
	}
	srcPort := req.SourcePort
	if srcPort == 0 {
		srcPort = 40000
	}
	s.remote = netip.AddrPortFrom(src, uint16(srcPort))
	capture := req.CapturePort
	if capture == 0 {
		capture = 15006
	}
	// iptables REDIRECT: the kernel accepts on the capture port; the socket's local address is the
	// destination IP with the capture port until original_dst restores the original port.
	s.local = netip.AddrPortFrom(dst, uint16(capture))
	l := s.p.findByAddress(s.local, true)
	if l == nil {
		s.closeConn("kernel", fmt.Sprintf("no listener bound to port %d", capture))
		return nil
	}
	s.tracef("accepted by listener %s", l.GetName())
	restored, err := s.runListenerFilters(l, netip.AddrPortFrom(dst, uint16(req.DestinationPort)))
	if err != nil {
		return err
	}
	if restored && l.GetUseOriginalDst().GetValue() {
		if next := s.p.findByAddress(s.local, false); next != nil && next != l {
			s.tracef("use_original_dst: handed off to listener %s", next.GetName())
			l = next
			if _, err := s.runListenerFilters(l, s.local); err != nil {
				return err
			}
		}
	}
	s.res.Listener = l.GetName()
	fc, err := s.matchFilterChain(l)
	if err != nil {
		return err
	}
	if fc == nil {
		s.closeConn("listener "+l.GetName(), "no filter chain matched")
		return nil
	}
	s.res.FilterChain = fc.GetName()
	s.tracef("filter chain %q", fc.GetName())
	ok, err := s.handshake(fc)
	if err != nil || !ok {
		return err
	}
	return s.runNetworkFilters(fc)
}

// detected is what the listener filters found: the transport protocol, and the ClientHello's SNI and ALPN
// (or the HTTP version http_inspector saw).
type detected struct {
	transport string
	alpn      []string
	sni       string
}

func (s *stream) runListenerFilters(l *listener.Listener, original netip.AddrPort) (restored bool, err error) {
	det := detected{}
	for _, f := range l.GetListenerFilters() {
		if pred := f.GetFilterDisabled(); pred != nil {
			off, err := s.listenerFilterDisabled(pred)
			if err != nil {
				return false, fmt.Errorf("listener %s filter %s: %w", l.GetName(), f.GetName(), err)
			}
			if off {
				continue
			}
		}
		switch f.GetTypedConfig().GetTypeUrl() {
		case originalDstFilter:
			s.local = original
			restored = true
		case tlsInspectorFilter:
			if s.req.TLS != nil {
				det.transport = "tls"
				det.sni = s.req.TLS.SNI
				det.alpn = slices.Clone(s.req.TLS.ALPN)
			}
		case httpInspectorType:
			// It looks only at connections no other filter found to be TLS (or anything else).
			if det.transport == "" || det.transport == "raw_buffer" {
				if s.req.TLS == nil {
					if s.req.HTTP2 {
						det.alpn = []string{"h2c"}
					} else {
						det.alpn = []string{"http/1.1"}
					}
				}
			}
		default:
			return false, notModelled("listener %s: listener filter %s (%s)", l.GetName(), f.GetName(), f.GetTypedConfig().GetTypeUrl())
		}
	}
	if det.transport == "" {
		det.transport = "raw_buffer"
	}
	s.sni = det.sni
	s.alpn = det.alpn
	s.transport = det.transport
	return restored, nil
}

// matchFilterChain prunes the chains criterion by criterion, keeping at each step only those that match
// most specifically, as FilterChainManagerImpl::findFilterChain does.
func (s *stream) matchFilterChain(l *listener.Listener) (*listener.FilterChain, error) {
	if l.GetFilterChainMatcher() != nil {
		return nil, notModelled("listener %s: filter_chain_matcher", l.GetName())
	}
	chains := l.GetFilterChains()
	for _, fc := range chains {
		m := fc.GetFilterChainMatch()
		if m.GetAddressSuffix() != "" || m.GetSuffixLen() != nil {
			return nil, notModelled("listener %s chain %s: address_suffix/suffix_len", l.GetName(), fc.GetName())
		}
	}
	steps := []func([]*listener.FilterChain) []*listener.FilterChain{
		func(cs []*listener.FilterChain) []*listener.FilterChain {
			return pruneExact(cs, func(m *listener.FilterChainMatch) (bool, bool) {
				if m.GetDestinationPort() == nil {
					return false, false
				}
				return true, m.GetDestinationPort().GetValue() == uint32(s.local.Port())
			})
		},
		func(cs []*listener.FilterChain) []*listener.FilterChain {
			return pruneCIDR(cs, s.local.Addr(), (*listener.FilterChainMatch).GetPrefixRanges)
		},
		func(cs []*listener.FilterChain) []*listener.FilterChain { return pruneServerNames(cs, s.sni) },
		func(cs []*listener.FilterChain) []*listener.FilterChain {
			return pruneExact(cs, func(m *listener.FilterChainMatch) (bool, bool) {
				if m.GetTransportProtocol() == "" {
					return false, false
				}
				return true, m.GetTransportProtocol() == s.transport
			})
		},
		func(cs []*listener.FilterChain) []*listener.FilterChain { return pruneALPN(cs, s.alpn) },
		func(cs []*listener.FilterChain) []*listener.FilterChain {
			return pruneCIDR(cs, s.remote.Addr(), (*listener.FilterChainMatch).GetDirectSourcePrefixRanges)
		},
		func(cs []*listener.FilterChain) []*listener.FilterChain { return s.pruneSourceType(cs) },
		func(cs []*listener.FilterChain) []*listener.FilterChain {
			return pruneCIDR(cs, s.remote.Addr(), (*listener.FilterChainMatch).GetSourcePrefixRanges)
		},
		func(cs []*listener.FilterChain) []*listener.FilterChain {
			return pruneExact(cs, func(m *listener.FilterChainMatch) (bool, bool) {
				if len(m.GetSourcePorts()) == 0 {
					return false, false
				}
				return true, slices.Contains(m.GetSourcePorts(), uint32(s.remote.Port()))
			})
		},
	}
	for _, step := range steps {
		chains = step(chains)
		if len(chains) == 0 {
			break
		}
	}
	switch {
	case len(chains) == 1:
		return chains[0], nil
	case len(chains) > 1:
		names := make([]string, len(chains))
		for i, c := range chains {
			names[i] = c.GetName()
		}
		return nil, fmt.Errorf("listener %s: chains %v match identically (Envoy rejects such a listener)", l.GetName(), names)
	}
	if d := l.GetDefaultFilterChain(); d != nil {
		s.tracef("no chain matched: default_filter_chain")
		return d, nil
	}
	return nil, nil
}

// pruneExact keeps the chains whose criterion is set and matches; when none does, those without it.
func pruneExact(cs []*listener.FilterChain, f func(*listener.FilterChainMatch) (set, match bool)) []*listener.FilterChain {
	var hit, unset []*listener.FilterChain
	for _, c := range cs {
		set, match := f(c.GetFilterChainMatch())
		switch {
		case !set:
			unset = append(unset, c)
		case match:
			hit = append(hit, c)
		}
	}
	if len(hit) > 0 {
		return hit
	}
	return unset
}

// pruneCIDR keeps the chains with the longest range containing ip; when none contains it, those without
// ranges.
func pruneCIDR(cs []*listener.FilterChain, ip netip.Addr,
	ranges func(*listener.FilterChainMatch) []*core.CidrRange) []*listener.FilterChain {
	best := -1
	var hit, unset []*listener.FilterChain
	for _, c := range cs {
		rs := ranges(c.GetFilterChainMatch())
		if len(rs) == 0 {
			unset = append(unset, c)
			continue
		}
		longest := -1
		for _, r := range rs {
			if n, ok := cidrContains(r, ip); ok && n > longest {
				longest = n
			}
		}
		switch {
		case longest < 0:
		case longest > best:
			best, hit = longest, []*listener.FilterChain{c}
		case longest == best:
			hit = append(hit, c)
		}
	}
	if len(hit) > 0 {
		return hit
	}
	return unset
}

// cidrContains reports whether the range holds ip, and its prefix length.
func cidrContains(r *core.CidrRange, ip netip.Addr) (int, bool) {
	base, err := netip.ParseAddr(r.GetAddressPrefix())
	if err != nil {
		return 0, false
	}
	bits := 0
	if r.GetPrefixLen() != nil {
		bits = int(r.GetPrefixLen().GetValue())
	}
	ip = ip.Unmap()
	base = base.Unmap()
	if base.Is4() != ip.Is4() || bits > base.BitLen() {
		return 0, false
	}
	pfx, err := base.Prefix(bits)
	if err != nil {
		return 0, false
	}
	return bits, pfx.Contains(ip)
}

// pruneServerNames: the exact name first, then the longest matching "*.suffix", then chains without names.
func pruneServerNames(cs []*listener.FilterChain, sni string) []*listener.FilterChain {
	best := -1
	var hit, unset []*listener.FilterChain
	for _, c := range cs {
		names := c.GetFilterChainMatch().GetServerNames()
		if len(names) == 0 {
			unset = append(unset, c)
			continue
		}
		score := -1
		for _, n := range names {
			switch {
			case sni != "" && strings.EqualFold(n, sni):
				score = max(score, 1<<20)
			case strings.HasPrefix(n, "*.") && sni != "" && strings.HasSuffix(strings.ToLower(sni), strings.ToLower(n[1:])):
				score = max(score, len(n))
			}
		}
		switch {
		case score < 0:
		case score > best:
			best, hit = score, []*listener.FilterChain{c}
		case score == best:
			hit = append(hit, c)
		}
	}
	if len(hit) > 0 {
		return hit
	}
	return unset
}

// pruneALPN takes the connection's protocols in order: the first one some chain lists selects those chains.
func pruneALPN(cs []*listener.FilterChain, alpn []string) []*listener.FilterChain {
	var unset []*listener.FilterChain
	for _, c := range cs {
		if len(c.GetFilterChainMatch().GetApplicationProtocols()) == 0 {
			unset = append(unset, c)
		}
	}
	for _, proto := range alpn {
		var hit []*listener.FilterChain
		for _, c := range cs {
			if slices.Contains(c.GetFilterChainMatch().GetApplicationProtocols(), proto) {
				hit = append(hit, c)
			}
		}
		if len(hit) > 0 {
			return hit
		}
	}
	return unset
}

func (s *stream) pruneSourceType(cs []*listener.FilterChain) []*listener.FilterChain {
	local := s.remote.Addr().IsLoopback() || s.remote.Addr() == s.local.Addr()
	want := listener.FilterChainMatch_EXTERNAL
	if local {
		want = listener.FilterChainMatch_SAME_IP_OR_LOOPBACK
	}
	return pruneExact(cs, func(m *listener.FilterChainMatch) (bool, bool) {
		if m.GetSourceType() == listener.FilterChainMatch_ANY {
			return false, false
		}
		return true, m.GetSourceType() == want
	})
}

// handshake applies the chain's transport socket: TLS terminates the client's TLS, raw_buffer passes bytes.
func (s *stream) handshake(fc *listener.FilterChain) (bool, error) {
	ts := fc.GetTransportSocket()
	typeURL := ts.GetTypedConfig().GetTypeUrl()
	switch {
	case ts == nil || typeURL == rawBufferType:
		if s.req.TLS != nil {
			s.closeConn("filter chain "+fc.GetName(), "a TLS ClientHello reached a plaintext chain")
			return false, nil
		}
		return true, nil
	case typeURL == tlsSocketType:
		var ctx tlsv3.DownstreamTlsContext
		if err := ts.GetTypedConfig().UnmarshalTo(&ctx); err != nil {
			return false, err
		}
		if s.req.TLS == nil {
			s.closeConn("filter chain "+fc.GetName(), "plaintext reached a TLS chain")
			return false, nil
		}
		if ctx.GetRequireClientCertificate().GetValue() && s.req.TLS.Client == nil {
			s.closeConn("filter chain "+fc.GetName(), "TLS handshake: client certificate required")
			return false, nil
		}
		if ctx.GetRequireSni().GetValue() && s.req.TLS.SNI == "" {
			s.closeConn("filter chain "+fc.GetName(), "TLS handshake: SNI required")
			return false, nil
		}
		if c := s.req.TLS.Client; c != nil {
			ok, reason, err := clientCertificateAccepted(ctx.GetCommonTlsContext(), c)
			if err != nil {
				return false, fmt.Errorf("chain %s: %w", fc.GetName(), err)
			}
			if !ok {
				s.closeConn("filter chain "+fc.GetName(), "TLS handshake: "+reason)
				return false, nil
			}
		}
		s.tls = s.req.TLS
		s.tracef("TLS terminated (client certificate: %v)", s.req.TLS.Client != nil)
		return true, nil
	}
	return false, notModelled("chain %s: transport socket %s", fc.GetName(), typeURL)
}

// listenerFilterDisabled is ListenerFilterMatcher over the connection's local address (as the original_dst
// filter before it left it).
func (s *stream) listenerFilterDisabled(p *listener.ListenerFilterChainMatchPredicate) (bool, error) {
	switch r := p.GetRule().(type) {
	case *listener.ListenerFilterChainMatchPredicate_AnyMatch:
		return r.AnyMatch, nil
	case *listener.ListenerFilterChainMatchPredicate_NotMatch:
		v, err := s.listenerFilterDisabled(r.NotMatch)
		return !v, err
	case *listener.ListenerFilterChainMatchPredicate_OrMatch:
		for _, q := range r.OrMatch.GetRules() {
			if v, err := s.listenerFilterDisabled(q); err != nil || v {
				return v, err
			}
		}
		return false, nil
	case *listener.ListenerFilterChainMatchPredicate_AndMatch:
		for _, q := range r.AndMatch.GetRules() {
			if v, err := s.listenerFilterDisabled(q); err != nil || !v {
				return false, err
			}
		}
		return true, nil
	case *listener.ListenerFilterChainMatchPredicate_DestinationPortRange:
		port := int32(s.local.Port())
		return r.DestinationPortRange.GetStart() <= port && port < r.DestinationPortRange.GetEnd(), nil
	}
	return false, notModelled("listener filter predicate %T", p.GetRule())
}

// clientCertificateAccepted is DefaultCertValidator's check of a client certificate the mesh CA signed (the
// model does not check chains): match_typed_subject_alt_names when set, else match_subject_alt_names
// over every SAN; untrusted certificates are accepted under ACCEPT_UNTRUSTED.
func clientCertificateAccepted(common *tlsv3.CommonTlsContext, c *Certificate) (bool, string, error) {
	var v *tlsv3.CertificateValidationContext
	switch t := common.GetValidationContextType().(type) {
	case *tlsv3.CommonTlsContext_ValidationContext:
		v = t.ValidationContext
	case *tlsv3.CommonTlsContext_CombinedValidationContext:
		v = t.CombinedValidationContext.GetDefaultValidationContext()
	case *tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig:
		// The SDS secret holds only the roots here; nothing beyond the chain is checked.
		return true, "", nil
	default:
		return false, "", notModelled("a client certificate without a validation context")
	}
	if len(v.GetVerifyCertificateSpki())+len(v.GetVerifyCertificateHash()) > 0 || v.GetCrl() != nil || v.GetCustomValidatorConfig() != nil {
		return false, "", notModelled("validation context with SPKI or hash pins, a CRL or a custom validator")
	}
	if v.GetTrustChainVerification() == tlsv3.CertificateValidationContext_ACCEPT_UNTRUSTED {
		return true, "", nil
	}
	if typed := v.GetMatchTypedSubjectAltNames(); len(typed) > 0 {
		for _, m := range typed {
			var sans []string
			switch m.GetSanType() {
			case tlsv3.SubjectAltNameMatcher_URI:
				sans = c.URISANs
			case tlsv3.SubjectAltNameMatcher_DNS:
				sans = c.DNSSANs
			default:
				return false, "", notModelled("SAN type %v", m.GetSanType())
			}
			for _, san := range sans {
				if ok, err := matchString(m.GetMatcher(), san); err != nil || ok {
					return ok, "", err
				}
			}
		}
		return false, "no SAN of the client certificate matches match_typed_subject_alt_names", nil
	}
	if plain := v.GetMatchSubjectAltNames(); len(plain) > 0 {
		for _, m := range plain {
			for _, san := range append(append([]string{}, c.URISANs...), c.DNSSANs...) {
				if ok, err := matchString(m, san); err != nil || ok {
					return ok, "", err
				}
			}
		}
		return false, "no SAN of the client certificate matches match_subject_alt_names", nil
	}
	return true, "", nil
}
