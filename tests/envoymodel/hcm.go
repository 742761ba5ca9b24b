package envoymodel

import (
	"fmt"
	"net/netip"
	"regexp"
	"sort"
	"strings"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	corspb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	extauthzhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	faultpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	jwtpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	rbachttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	routerpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
)

func (s *stream) httpConnectionManager(name string, c *hcm.HttpConnectionManager) error {
	if len(c.GetOriginalIpDetectionExtensions()) > 0 {
		return notModelled("HCM %s: original_ip_detection_extensions", name)
	}
	if c.GetUseRemoteAddress().GetValue() && c.GetXffNumTrustedHops() > 0 {
		return notModelled("HCM %s: use_remote_address with xff_num_trusted_hops", name)
	}
	if len(c.GetEarlyHeaderMutationExtensions()) > 0 || c.GetLocalReplyConfig() != nil || c.GetStripPortMode() != nil {
		return notModelled("HCM %s: early_header_mutation_extensions, local_reply_config or strip port modes", name)
	}
	rc, err := s.routeConfig(name, c)
	if err != nil {
		return err
	}
	s.headers = newHeaderMap()
	req := s.req
	method := req.Method
	if method == "" {
		method = "GET"
	}
	scheme := "http"
	if s.tls != nil {
		scheme = "https"
	}
	s.headers.set(":method", method)
	s.headers.set(":path", req.Path)
	s.headers.set(":authority", req.Host)
	s.headers.set(":scheme", scheme)
	keys := make([]string, 0, len(req.Headers))
	for k := range req.Headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if strings.HasPrefix(k, ":") {
			return fmt.Errorf("request header %q: set pseudo-headers through Method, Path and Host", k)
		}
		for _, v := range req.Headers[k] {
			s.headers.add(k, v)
		}
	}
	s.downstreamRemote(c)
	if done, err := s.normalizePath(name, c); err != nil || done {
		return err
	}
	if err := s.selectRoute(rc); err != nil {
		return err
	}
	for _, f := range c.GetHttpFilters() {
		if f.GetConfigDiscovery() != nil {
			return notModelled("HTTP filter %s: config_discovery", f.GetName())
		}
		if f.GetDisabled() {
			s.tracef("%s disabled", f.GetName())
			continue
		}
		m, err := unmarshal(f.GetTypedConfig())
		if err != nil {
			return err
		}
		var cont bool
		switch fc := m.(type) {
		case *jwtpb.JwtAuthentication:
			cont, err = s.jwtAuthn(f.GetName(), fc)
		case *rbachttp.RBAC:
			cont, err = s.httpRBAC(f.GetName(), fc)
		case *extauthzhttp.ExtAuthz:
			cont, err = s.httpExtAuthz(f.GetName(), fc)
		case *faultpb.HTTPFault:
			cont, err = s.fault(f.GetName(), fc)
		case *corspb.Cors:
			// Envoy's CORS filter acts only with a policy on the route or virtual host; selectRoute refuses
			// to model either, so here it always passes the request on.
			s.tracef("%s: no CORS policy, passes", f.GetName())
			cont = true
		case *routerpb.Router:
			return s.router(f.GetName())
		default:
			return notModelled("HTTP filter %s (%T)", f.GetName(), m)
		}
		if err != nil || !cont {
			return err
		}
	}
	return notModelled("HCM %s: no router filter at the end of http_filters", name)
}

func (s *stream) routeConfig(name string, c *hcm.HttpConnectionManager) (*route.RouteConfiguration, error) {
	switch rs := c.GetRouteSpecifier().(type) {
	case *hcm.HttpConnectionManager_RouteConfig:
		return rs.RouteConfig, nil
	case *hcm.HttpConnectionManager_Rds:
		rc := s.p.routes[rs.Rds.GetRouteConfigName()]
		if rc == nil {
			// The listener would still be warming: Envoy does not use it yet.
			return nil, fmt.Errorf("HCM %s: route configuration %q was not received", name, rs.Rds.GetRouteConfigName())
		}
		return rc, nil
	}
	return nil, notModelled("HCM %s: route specifier %T", name, c.GetRouteSpecifier())
}

// downstreamRemote is ConnectionManagerUtility's remote address: the peer when use_remote_address is set,
// otherwise the last x-forwarded-for address (skipping xff_num_trusted_hops), else the peer.
func (s *stream) downstreamRemote(c *hcm.HttpConnectionManager) {
	s.downRem = s.remote.Addr()
	if c.GetUseRemoteAddress().GetValue() {
		if xff, ok := s.headers.get("x-forwarded-for"); ok {
			s.headers.set("x-forwarded-for", xff+","+s.remote.Addr().String())
		} else {
			s.headers.set("x-forwarded-for", s.remote.Addr().String())
		}
		return
	}
	xff, ok := s.headers.get("x-forwarded-for")
	if !ok {
		return
	}
	parts := strings.Split(xff, ",")
	i := len(parts) - 1 - int(c.GetXffNumTrustedHops())
	if i < 0 {
		return
	}
	if ip, err := netip.ParseAddr(strings.TrimSpace(parts[i])); err == nil {
		s.downRem = ip
	}
}

var escapedSlash = regexp.MustCompile(`(?i)%2f|%5c`)

// normalizePath is maybeNormalizePath: normalize_path resolves dot segments (and turns backslashes into
// slashes, as the URL canonicaliser does), merge_slashes collapses runs of "/", and the escaped-slash
// action rejects, redirects or unescapes %2F and %5C.
func (s *stream) normalizePath(name string, c *hcm.HttpConnectionManager) (done bool, err error) {
	p := s.req.Path
	if !strings.HasPrefix(p, "/") {
		return false, notModelled("HCM %s: a :path that does not begin with /", name)
	}
	path, query := p, ""
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		path, query = p[:i], p[i:]
	}
	if c.GetNormalizePath().GetValue() {
		path = canonicalPath(path)
	}
	if c.GetMergeSlashes() {
		for strings.Contains(path, "//") {
			path = strings.ReplaceAll(path, "//", "/")
		}
	}
	switch c.GetPathWithEscapedSlashesAction() {
	case hcm.HttpConnectionManager_IMPLEMENTATION_SPECIFIC_DEFAULT, hcm.HttpConnectionManager_KEEP_UNCHANGED:
	case hcm.HttpConnectionManager_REJECT_REQUEST:
		if escapedSlash.MatchString(path) {
			s.localReply(name, 400, "escaped slashes in the path")
			return true, nil
		}
	case hcm.HttpConnectionManager_UNESCAPE_AND_REDIRECT:
		if escapedSlash.MatchString(path) {
			s.localReply(name, 307, "escaped slashes: redirected to the unescaped path")
			return true, nil
		}
	case hcm.HttpConnectionManager_UNESCAPE_AND_FORWARD:
		if escapedSlash.MatchString(path) {
			path = escapedSlash.ReplaceAllStringFunc(path, func(m string) string {
				if strings.EqualFold(m, "%2f") {
					return "/"
				}
				return `\`
			})
			if c.GetNormalizePath().GetValue() {
				path = canonicalPath(path)
			}
		}
	default:
		return false, notModelled("HCM %s: path_with_escaped_slashes_action %v", name, c.GetPathWithEscapedSlashesAction())
	}
	if path+query != p {
		s.tracef("path normalised to %s", path+query)
	}
	s.headers.set(":path", path+query)
	return false, nil
}

// canonicalPath removes dot segments (".", "..", and their %2e spellings) after turning "\" into "/".
func canonicalPath(p string) string {
	p = strings.ReplaceAll(p, `\`, "/")
	segs := strings.Split(p[1:], "/")
	var out []string
	for i, seg := range segs {
		last := i == len(segs)-1
		switch strings.ToLower(seg) {
		case ".", "%2e":
			if last {
				out = append(out, "")
			}
		case "..", ".%2e", "%2e.", "%2e%2e":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
			if last {
				out = append(out, "")
			}
		default:
			out = append(out, seg)
		}
	}
	return "/" + strings.Join(out, "/")
}

// selectRoute picks the virtual host by :authority and the first route that matches, as the route table
// does; the route is what per-route filter config and the router read.
func (s *stream) selectRoute(rc *route.RouteConfiguration) error {
	if rc.GetVhds() != nil {
		return notModelled("route configuration %s: VHDS", rc.GetName())
	}
	host := strings.ToLower(s.headers.first(":authority"))
	vh := selectVirtualHost(rc.GetVirtualHosts(), host)
	if vh == nil {
		s.tracef("no virtual host for %q", host)
		return nil
	}
	if len(vh.GetTypedPerFilterConfig()) > 0 {
		return notModelled("virtual host %s: typed_per_filter_config", vh.GetName())
	}
	for _, r := range vh.GetRoutes() {
		ok, err := s.routeMatches(r.GetMatch())
		if err != nil {
			return fmt.Errorf("virtual host %s route %s: %w", vh.GetName(), r.GetName(), err)
		}
		if ok {
			for k := range r.GetTypedPerFilterConfig() {
				if k != "envoy.filters.http.fault" {
					return notModelled("route %s: typed_per_filter_config for %s", r.GetName(), k)
				}
			}
			s.route = r
			s.tracef("route %q of virtual host %s", r.GetName(), vh.GetName())
			return nil
		}
	}
	s.tracef("no route in virtual host %s", vh.GetName())
	return nil
}

// selectVirtualHost: an exact domain, then the longest "*suffix", then the longest "prefix*", then "*".
func selectVirtualHost(vhs []*route.VirtualHost, host string) *route.VirtualHost {
	var suffix, prefix, any *route.VirtualHost
	suffixLen, prefixLen := -1, -1
	for _, vh := range vhs {
		for _, d := range vh.GetDomains() {
			d = strings.ToLower(d)
			switch {
			case d == "*":
				if any == nil {
					any = vh
				}
			case strings.HasPrefix(d, "*"):
				if strings.HasSuffix(host, d[1:]) && len(host) > len(d)-1 && len(d) > suffixLen {
					suffix, suffixLen = vh, len(d)
				}
			case strings.HasSuffix(d, "*"):
				if strings.HasPrefix(host, d[:len(d)-1]) && len(host) > len(d)-1 && len(d) > prefixLen {
					prefix, prefixLen = vh, len(d)
				}
			case d == host:
				return vh
			}
		}
	}
	switch {
	case suffix != nil:
		return suffix
	case prefix != nil:
		return prefix
	}
	return any
}

func (s *stream) routeMatches(m *route.RouteMatch) (bool, error) {
	if m.GetRuntimeFraction() != nil || len(m.GetQueryParameters()) > 0 || m.GetTlsContext() != nil ||
		len(m.GetDynamicMetadata()) > 0 || m.GetFilterState() != nil || m.GetCookies() != nil {
		return false, notModelled("route match %v", m)
	}
	full := s.headers.first(":path")
	path := full
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	cs := m.GetCaseSensitive() == nil || m.GetCaseSensitive().GetValue()
	var ok bool
	switch p := m.GetPathSpecifier().(type) {
	case *route.RouteMatch_Prefix:
		if cs {
			ok = strings.HasPrefix(path, p.Prefix)
		} else {
			ok = strings.HasPrefix(strings.ToLower(path), strings.ToLower(p.Prefix))
		}
	case *route.RouteMatch_Path:
		ok = path == p.Path || (!cs && strings.EqualFold(path, p.Path))
	case *route.RouteMatch_SafeRegex:
		re, err := compileRegex(p.SafeRegex)
		if err != nil {
			return false, err
		}
		ok = re.MatchString(path)
	case *route.RouteMatch_PathSeparatedPrefix:
		ok = path == p.PathSeparatedPrefix || strings.HasPrefix(path, p.PathSeparatedPrefix+"/")
	default:
		return false, notModelled("route path specifier %T", m.GetPathSpecifier())
	}
	if !ok {
		return false, nil
	}
	if m.GetGrpc() != nil {
		if ct := s.headers.first("content-type"); !strings.HasPrefix(ct, "application/grpc") {
			return false, nil
		}
	}
	for _, h := range m.GetHeaders() {
		if ok, err := matchHeader(h, s.headers); err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// fault is the fault filter: with neither delay nor abort configured (here or on the route), it passes.
func (s *stream) fault(name string, c *faultpb.HTTPFault) (bool, error) {
	if c.GetDelay() != nil || c.GetAbort() != nil {
		return false, notModelled("fault filter %s with delay or abort", name)
	}
	if s.route != nil && s.route.GetTypedPerFilterConfig()[name] != nil {
		return false, notModelled("fault filter %s: per-route faults", name)
	}
	return true, nil
}

// router is the terminal filter: no route is a 404; a route's action decides the rest.
func (s *stream) router(name string) error {
	if s.route == nil {
		s.localReply(name, 404, "no route")
		return nil
	}
	switch a := s.route.GetAction().(type) {
	case *route.Route_Route:
		switch cs := a.Route.GetClusterSpecifier().(type) {
		case *route.RouteAction_Cluster:
			return s.upstream(name, cs.Cluster, false)
		case *route.RouteAction_WeightedClusters:
			for _, wc := range cs.WeightedClusters.GetClusters() {
				if wc.GetWeight().GetValue() > 0 {
					return s.upstream(name, wc.GetName(), false)
				}
			}
			s.localReply(name, 503, "no weighted cluster has weight")
			return nil
		}
		return notModelled("route %s: cluster specifier %T", s.route.GetName(), a.Route.GetClusterSpecifier())
	case *route.Route_DirectResponse:
		s.localReply(name, int(a.DirectResponse.GetStatus()), "direct response")
		return nil
	case *route.Route_Redirect:
		s.localReply(name, 301, "redirect")
		return nil
	}
	return notModelled("route %s: action %T", s.route.GetName(), s.route.GetAction())
}
