package conformance

import (
	"cmp"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	cors "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	fault "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Envoy's route defaults: a route without timeout waits 15 s; a retry policy without num_retries retries once.
const (
	defaultRouteTimeout = "15s"
	defaultNumRetries   = "1"
	faultFilter         = "envoy.filters.http.fault"
	corsFilter          = "envoy.filters.http.cors"
)

// normaliseRoutes adds one entry per (service host, port) virtual host of the outbound route configurations.
// The port comes from the route configuration's name ("9080", or "HOST:9080" for a sniffed port); the host
// is the vhost's domain that names a cluster host, so short names, VIPs and ":PORT" variants all meet on
// the service's FQDN. The catch-all vhosts (allow_any, block_all, domain "*") are infrastructure.
//
// A configuration is read once however many listeners ask for it (Envoy subscribes to a name once; istiod's
// test harness lists it per listener). A destination both a PORT and a HOST:PORT configuration serve (a
// sniffed listener of one egress listener on the port of another's HTTP listener) is compared in each,
// the HOST:PORT one under the subset "sniffed", whatever order the configurations come in.
func normaliseRoutes(out Snapshot, configs []*route.RouteConfiguration, hosts map[string]bool) {
	type target struct {
		rc          *route.RouteConfiguration
		host        string
		port        uint32
		gateway, ok bool
	}
	var targets []target
	seen := map[string]bool{}
	for _, rc := range configs {
		if seen[rc.GetName()] {
			continue
		}
		seen[rc.GetName()] = true
		t := target{rc: rc}
		t.host, t.port, t.gateway, t.ok = routeConfigTarget(rc.GetName())
		if t.ok {
			targets = append(targets, t)
		}
	}
	hostPort := func(t target) int {
		if t.host != "" {
			return 1
		}
		return 0
	}
	slices.SortStableFunc(targets, func(a, b target) int { return cmp.Compare(hostPort(a), hostPort(b)) })
	ported := map[Key]bool{} // keys a PORT configuration filled
	for _, t := range targets {
		rc, host, port, gateway := t.rc, t.host, t.port, t.gateway
		for _, vh := range rc.GetVirtualHosts() {
			h := host // a HOST:PORT configuration serves that one destination, whatever its domains say
			switch {
			case gateway:
				h = gatewayHost(vh)
			case h == "":
				h = vhostHost(vh, hosts)
			}
			if h == "" {
				continue
			}
			key := Key{Kind: KindRoute, Host: h, Port: port}
			if host == "" {
				ported[key] = true
			} else if ported[key] {
				key.Subset = "sniffed"
			}
			if _, dup := out[key]; dup {
				out[key]["duplicate_vhost"] = "yes"
				continue
			}
			out[key] = vhostFields(vh, port, rc.GetIgnorePortInHostMatching())
		}
	}
}

// routeConfigTarget reads a route configuration name: "PORT" (every service on the port), "HOST:PORT" (one
// destination, as for a sniffed port or a gRPC client's target), "outbound|PORT||HOST" (istiod's gRPC
// clients') or a gateway's "http.PORT" / "https.PORT.NAME.GATEWAY.NS".
func routeConfigTarget(name string) (host string, port uint32, gateway, ok bool) {
	portText := name
	if parts := strings.Split(name, "|"); len(parts) == 4 && parts[0] == "outbound" && parts[2] == "" {
		host, portText = parts[3], parts[1]
	} else if rest, isHTTP := strings.CutPrefix(name, "http."); isHTTP {
		portText, gateway = rest, true
	} else if rest, isHTTPS := strings.CutPrefix(name, "https."); isHTTPS {
		portText, _, _ = strings.Cut(rest, ".")
		gateway = true
	} else if i := strings.LastIndex(name, ":"); i >= 0 {
		host, portText = name[:i], name[i+1:]
	}
	p, err := strconv.ParseUint(portText, 10, 32)
	return host, uint32(p), gateway, err == nil
}

// gatewayHost keys a gateway's vhost by the host it serves (its first domain without a port): gateway
// vhosts are per Gateway host, not per service, and "*" is a real host there.
func gatewayHost(vh *route.VirtualHost) string {
	domains := append([]string(nil), vh.GetDomains()...)
	sort.Strings(domains)
	if len(domains) == 0 {
		return ""
	}
	h := domains[0]
	if hh, _, err := net.SplitHostPort(h); err == nil {
		h = hh
	}
	return h
}

func vhostHost(vh *route.VirtualHost, hosts map[string]bool) string {
	var fallback string
	for _, d := range vh.GetDomains() {
		if d == "*" {
			return ""
		}
		h := d
		if hh, _, err := net.SplitHostPort(d); err == nil {
			h = hh
		}
		if hosts[h] {
			return h
		}
		if fallback == "" && net.ParseIP(h) == nil {
			fallback = h
		}
	}
	return fallback
}

func vhostFields(vh *route.VirtualHost, port uint32, ignorePort bool) Fields {
	f := Fields{}
	f["domains"] = domainsText(vh.GetDomains(), port, ignorePort)
	if rp := vh.GetRetryPolicy(); rp != nil {
		retryFields(f, "vhost.", rp)
	}
	headerOps(f, "vhost.", vh.GetRequestHeadersToAdd(), vh.GetRequestHeadersToRemove(),
		vh.GetResponseHeadersToAdd(), vh.GetResponseHeadersToRemove())
	f["routes"] = strconv.Itoa(len(vh.GetRoutes()))
	for i, r := range vh.GetRoutes() {
		routeFields(f, fmt.Sprintf("route#%d.", i), r)
	}
	return f
}

// domainsText lists the Host headers a vhost takes on its port. With ignore_port_in_host_matching (istiod)
// "reviews" takes "reviews" and "reviews:9080"; without it both forms must be listed. A name is written
// bare when both forms match, else marked with the one form it takes.
func domainsText(domains []string, port uint32, ignorePort bool) string {
	suffix := ":" + strconv.FormatUint(uint64(port), 10)
	forms := map[string]int{} // 1: without the port, 2: with it
	for _, d := range domains {
		name, withPort := strings.CutSuffix(d, suffix)
		if ignorePort || d == "*" { // "*" takes every Host header, with a port or not
			forms[name] |= 3
		} else if withPort {
			forms[name] |= 2
		} else {
			forms[name] |= 1
		}
	}
	var out []string
	for name, form := range forms {
		switch form {
		case 1:
			name += "(without port only)"
		case 2:
			name += "(with " + suffix + " only)"
		}
		out = append(out, name)
	}
	return joinSorted(out)
}

func routeFields(f Fields, p string, r *route.Route) {
	f[p+"match"] = matchText(r.GetMatch())
	headerOps(f, p, r.GetRequestHeadersToAdd(), r.GetRequestHeadersToRemove(),
		r.GetResponseHeadersToAdd(), r.GetResponseHeadersToRemove())
	var filters []string
	for name, cfg := range r.GetTypedPerFilterConfig() {
		switch name {
		case faultFilter:
			faultFields(f, p, cfg)
			continue
		case corsFilter:
			corsFields(f, p, cfg)
			continue
		}
		filters = append(filters, name)
	}
	if len(filters) > 0 {
		f[p+"filters"] = joinSorted(filters)
	}
	switch a := r.GetAction().(type) {
	case *route.Route_Route:
		f[p+"action"] = "route"
		routeActionFields(f, p, a.Route)
	case *route.Route_Redirect:
		f[p+"action"] = "redirect"
		redirectFields(f, p, a.Redirect)
	case *route.Route_DirectResponse:
		f[p+"action"] = "direct_response"
		f[p+"status"] = strconv.FormatUint(uint64(a.DirectResponse.GetStatus()), 10)
		f[p+"body"] = dataSource(a.DirectResponse.GetBody()) + inlineBody(a.DirectResponse.GetBody())
	case *route.Route_NonForwardingAction:
		f[p+"action"] = "non_forwarding"
	default:
		f[p+"action"] = "none"
	}
}

func inlineBody(d *core.DataSource) string {
	if s := d.GetInlineString(); s != "" {
		return ":" + s
	}
	if b := d.GetInlineBytes(); len(b) > 0 {
		return ":" + string(b)
	}
	return ""
}

func matchText(m *route.RouteMatch) string {
	var parts []string
	switch p := m.GetPathSpecifier().(type) {
	case *route.RouteMatch_Prefix:
		parts = append(parts, "prefix:"+p.Prefix)
	case *route.RouteMatch_Path:
		parts = append(parts, "path:"+p.Path)
	case *route.RouteMatch_SafeRegex:
		parts = append(parts, "regex:"+p.SafeRegex.GetRegex())
	case *route.RouteMatch_PathSeparatedPrefix:
		parts = append(parts, "path_prefix:"+p.PathSeparatedPrefix)
	case *route.RouteMatch_ConnectMatcher_:
		parts = append(parts, "connect")
	default:
		parts = append(parts, "path:none")
	}
	if m.GetCaseSensitive() != nil && !m.GetCaseSensitive().GetValue() {
		parts = append(parts, "ignore_case")
	}
	var headers []string
	for _, h := range m.GetHeaders() {
		headers = append(headers, headerMatch(h))
	}
	if len(headers) > 0 {
		parts = append(parts, "headers["+joinSorted(headers)+"]")
	}
	var query []string
	for _, q := range m.GetQueryParameters() {
		v := "present"
		if sm := q.GetStringMatch(); sm != nil {
			v = stringMatcher(sm)
		}
		query = append(query, q.GetName()+"="+v)
	}
	if len(query) > 0 {
		parts = append(parts, "query["+joinSorted(query)+"]")
	}
	if rf := m.GetRuntimeFraction(); rf != nil {
		parts = append(parts, "fraction:"+fractionText(rf.GetDefaultValue()))
	}
	return strings.Join(parts, " ")
}

// headerMatch reads both the string_match form and the older exact/prefix/... fields as one text.
func headerMatch(h *route.HeaderMatcher) string {
	var v string
	switch m := h.GetHeaderMatchSpecifier().(type) {
	case *route.HeaderMatcher_StringMatch:
		v = stringMatcher(m.StringMatch)
	case *route.HeaderMatcher_ExactMatch:
		v = "exact:" + m.ExactMatch
	case *route.HeaderMatcher_PrefixMatch:
		v = "prefix:" + m.PrefixMatch
	case *route.HeaderMatcher_SuffixMatch:
		v = "suffix:" + m.SuffixMatch
	case *route.HeaderMatcher_ContainsMatch:
		v = "contains:" + m.ContainsMatch
	case *route.HeaderMatcher_SafeRegexMatch:
		v = "regex:" + m.SafeRegexMatch.GetRegex()
	case *route.HeaderMatcher_PresentMatch:
		v = "present:" + strconv.FormatBool(m.PresentMatch)
	case *route.HeaderMatcher_RangeMatch:
		v = fmt.Sprintf("range:%d-%d", m.RangeMatch.GetStart(), m.RangeMatch.GetEnd())
	default:
		v = "present:true"
	}
	if h.GetInvertMatch() {
		v = "!" + v
	}
	return h.GetName() + "=" + v
}

// destination maps a cluster name back to its key text, so weighted clusters compare by what they reach.
func destination(name string) string {
	k, ok := clusterKey(KindCluster, name)
	if !ok || k.Port == 0 {
		return name // a passthrough cluster goes by its name
	}
	host := k.Host
	if k.Inbound {
		host = "inbound"
	}
	if k.SNIDNAT {
		host = "sni-dnat " + host
	}
	s := host + ":" + strconv.FormatUint(uint64(k.Port), 10)
	if k.Subset != "" {
		s += "/" + k.Subset
	}
	return s
}

func routeActionFields(f Fields, p string, a *route.RouteAction) {
	switch c := a.GetClusterSpecifier().(type) {
	case *route.RouteAction_Cluster:
		f[p+"to"] = destination(c.Cluster)
	case *route.RouteAction_ClusterHeader:
		f[p+"to"] = "header:" + c.ClusterHeader
	case *route.RouteAction_WeightedClusters:
		f[p+"to"] = weightedText(c.WeightedClusters)
	default:
		f[p+"to"] = "none"
	}
	f[p+"timeout"] = durationOr(a.GetTimeout(), defaultRouteTimeout)
	if a.GetIdleTimeout() != nil {
		f[p+"idle_timeout"] = a.GetIdleTimeout().AsDuration().String()
	}
	// Without max_stream_duration Envoy neither caps streams nor reads grpc-timeout headers; a cap of 0s is
	// no cap.
	msd := a.GetMaxStreamDuration()
	f[p+"max_stream_duration"] = durationOr(msd.GetMaxStreamDuration(), "none")
	if f[p+"max_stream_duration"] == "0s" {
		f[p+"max_stream_duration"] = "none"
	}
	// Envoy reads the deprecated max_grpc_timeout (istiod's choice) only on a route without max_stream_duration;
	// both cap a gRPC client's grpc-timeout header the same way.
	if msd == nil {
		f[p+"grpc_timeout_header_max"] = durationOr(a.GetMaxGrpcTimeout(), "header ignored") //nolint:staticcheck // still honoured by Envoy
	} else {
		f[p+"grpc_timeout_header_max"] = durationOr(msd.GetGrpcTimeoutHeaderMax(), "header ignored")
	}
	if rp := a.GetRetryPolicy(); rp != nil {
		retryFields(f, p, rp)
	} else {
		f[p+"retry"] = "none"
	}
	if a.GetPrefixRewrite() != "" {
		f[p+"prefix_rewrite"] = a.GetPrefixRewrite()
	}
	if rr := a.GetRegexRewrite(); rr != nil {
		f[p+"regex_rewrite"] = rr.GetPattern().GetRegex() + " -> " + rr.GetSubstitution()
	}
	switch h := a.GetHostRewriteSpecifier().(type) {
	case *route.RouteAction_HostRewriteLiteral:
		f[p+"host_rewrite"] = h.HostRewriteLiteral
	case *route.RouteAction_AutoHostRewrite:
		if h.AutoHostRewrite.GetValue() {
			f[p+"host_rewrite"] = "auto"
		}
	case *route.RouteAction_HostRewriteHeader:
		f[p+"host_rewrite"] = "header:" + h.HostRewriteHeader
	}
	var mirrors []string
	for _, m := range a.GetRequestMirrorPolicies() {
		mirrors = append(mirrors, destination(m.GetCluster())+"@"+fractionText(m.GetRuntimeFraction().GetDefaultValue()))
	}
	if len(mirrors) > 0 {
		f[p+"mirrors"] = joinSorted(mirrors)
	}
	var hashes []string
	for _, h := range a.GetHashPolicy() {
		hashes = append(hashes, hashText(h))
	}
	if len(hashes) > 0 {
		f[p+"hash_policy"] = strings.Join(hashes, ";")
	}
	if a.GetCors() != nil { //nolint:staticcheck // still honoured by Envoy
		f[p+"cors"] = "route.cors"
	}
}

// weightedText lists each destination with its share of the total, order-free (order does not change the
// split). A destination of weight 0 gets no traffic and is left out; a split left with one destination is
// written as that destination alone, as a plain cluster route sends the same traffic.
func weightedText(w *route.WeightedCluster) string {
	var total uint64
	for _, c := range w.GetClusters() {
		total += uint64(c.GetWeight().GetValue())
	}
	var parts []string
	headers := false
	for _, c := range w.GetClusters() {
		if c.GetWeight().GetValue() == 0 && total > 0 {
			continue
		}
		share := "0"
		if total > 0 {
			share = strconv.FormatFloat(100*float64(c.GetWeight().GetValue())/float64(total), 'f', 2, 64)
		}
		extra := ""
		if len(c.GetRequestHeadersToAdd()) > 0 || len(c.GetResponseHeadersToAdd()) > 0 ||
			len(c.GetRequestHeadersToRemove()) > 0 || len(c.GetResponseHeadersToRemove()) > 0 {
			extra, headers = "(+headers)", true
		}
		parts = append(parts, destination(c.GetName())+"="+share+"%"+extra)
	}
	if len(parts) == 1 && !headers {
		return strings.TrimSuffix(parts[0], "=100.00%")
	}
	return joinSorted(parts)
}

func hashText(h *route.RouteAction_HashPolicy) string {
	var s string
	switch p := h.GetPolicySpecifier().(type) {
	case *route.RouteAction_HashPolicy_Header_:
		s = "header:" + p.Header.GetHeaderName()
	case *route.RouteAction_HashPolicy_Cookie_:
		s = "cookie:" + p.Cookie.GetName() + " ttl=" + durationOr(p.Cookie.GetTtl(), "none") + " path=" + p.Cookie.GetPath()
	case *route.RouteAction_HashPolicy_ConnectionProperties_:
		s = "source_ip"
	case *route.RouteAction_HashPolicy_QueryParameter_:
		s = "query:" + p.QueryParameter.GetName()
	case *route.RouteAction_HashPolicy_FilterState_:
		s = "filter_state:" + p.FilterState.GetKey()
	}
	if h.GetTerminal() {
		s += " terminal"
	}
	return s
}

func retryFields(f Fields, p string, rp *route.RetryPolicy) {
	on := strings.Split(rp.GetRetryOn(), ",")
	for i := range on {
		on[i] = strings.TrimSpace(on[i])
	}
	f[p+"retry"] = "on"
	f[p+"retry.on"] = joinSorted(on)
	f[p+"retry.num_retries"] = uint32Or(rp.GetNumRetries(), defaultNumRetries)
	f[p+"retry.per_try_timeout"] = durationOr(rp.GetPerTryTimeout(), "route timeout")
	var codes []string
	for _, c := range rp.GetRetriableStatusCodes() {
		codes = append(codes, strconv.FormatUint(uint64(c), 10))
	}
	f[p+"retry.status_codes"] = joinSorted(codes)
	var preds []string
	for _, h := range rp.GetRetryHostPredicate() {
		preds = append(preds, h.GetName())
	}
	f[p+"retry.host_predicates"] = joinSorted(preds)
	f[p+"retry.host_selection_max_attempts"] = strconv.FormatInt(rp.GetHostSelectionRetryMaxAttempts(), 10)
	if rp.GetRetryPriority() != nil {
		f[p+"retry.priority"] = rp.GetRetryPriority().GetName()
	}
}

func headerOps(f Fields, p string, reqAdd []*core.HeaderValueOption, reqRemove []string,
	respAdd []*core.HeaderValueOption, respRemove []string) {
	if s := headerAddText(reqAdd); s != "" {
		f[p+"request_headers_add"] = s
	}
	if len(reqRemove) > 0 {
		f[p+"request_headers_remove"] = joinSorted(reqRemove)
	}
	if s := headerAddText(respAdd); s != "" {
		f[p+"response_headers_add"] = s
	}
	if len(respRemove) > 0 {
		f[p+"response_headers_remove"] = joinSorted(respRemove)
	}
}

// headerAddText renders header additions with the effective action: append_action when set, else the older
// append flag (true by default).
func headerAddText(ops []*core.HeaderValueOption) string {
	var parts []string
	for _, o := range ops {
		action := o.GetAppendAction().String()
		if o.GetAppend() != nil { //nolint:staticcheck // still honoured by Envoy
			if o.GetAppend().GetValue() { //nolint:staticcheck
				action = core.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD.String()
			} else {
				action = core.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD.String()
			}
		}
		parts = append(parts, o.GetHeader().GetKey()+"="+o.GetHeader().GetValue()+" "+action)
	}
	return joinSorted(parts)
}

func redirectFields(f Fields, p string, r *route.RedirectAction) {
	var parts []string
	switch s := r.GetSchemeRewriteSpecifier().(type) {
	case *route.RedirectAction_HttpsRedirect:
		if s.HttpsRedirect {
			parts = append(parts, "scheme=https")
		}
	case *route.RedirectAction_SchemeRedirect:
		parts = append(parts, "scheme="+s.SchemeRedirect)
	}
	if r.GetHostRedirect() != "" {
		parts = append(parts, "host="+r.GetHostRedirect())
	}
	if r.GetPortRedirect() != 0 {
		parts = append(parts, "port="+strconv.FormatUint(uint64(r.GetPortRedirect()), 10))
	}
	switch s := r.GetPathRewriteSpecifier().(type) {
	case *route.RedirectAction_PathRedirect:
		if s.PathRedirect != "" { // an empty path_redirect keeps the path, as an unset one does
			parts = append(parts, "path="+s.PathRedirect)
		}
	case *route.RedirectAction_PrefixRewrite:
		parts = append(parts, "prefix="+s.PrefixRewrite)
	case *route.RedirectAction_RegexRewrite:
		parts = append(parts, "regex="+s.RegexRewrite.GetPattern().GetRegex()+"->"+s.RegexRewrite.GetSubstitution())
	}
	if r.GetStripQuery() {
		parts = append(parts, "strip_query")
	}
	f[p+"redirect"] = strings.Join(parts, " ")
	f[p+"redirect.code"] = r.GetResponseCode().String()
}

// faultFields reads the per-route fault filter config, bare or wrapped in a FilterConfig.
func faultFields(f Fields, p string, a *anypb.Any) {
	var wrapped route.FilterConfig
	if a.MessageIs(&wrapped) {
		if err := a.UnmarshalTo(&wrapped); err == nil {
			a = wrapped.GetConfig()
		}
	}
	var hf fault.HTTPFault
	if err := a.UnmarshalTo(&hf); err != nil {
		f[p+"fault"] = "unreadable: " + err.Error()
		return
	}
	if d := hf.GetDelay(); d != nil {
		f[p+"fault.delay"] = durationOr(d.GetFixedDelay(), "none") + "@" + fractionText(d.GetPercentage())
	}
	if ab := hf.GetAbort(); ab != nil {
		var what string
		switch e := ab.GetErrorType().(type) {
		case *fault.FaultAbort_HttpStatus:
			what = "http:" + strconv.FormatUint(uint64(e.HttpStatus), 10)
		case *fault.FaultAbort_GrpcStatus:
			what = "grpc:" + strconv.FormatUint(uint64(e.GrpcStatus), 10)
		case *fault.FaultAbort_HeaderAbort_:
			what = "header"
		}
		f[p+"fault.abort"] = what + "@" + fractionText(ab.GetPercentage())
	}
}

// corsFields reads the per-route CORS policy, bare or wrapped in a FilterConfig: what a browser's request is
// answered with. Origins are a set: any one matching allows the request's origin.
func corsFields(f Fields, p string, a *anypb.Any) {
	var wrapped route.FilterConfig
	if a.MessageIs(&wrapped) {
		if err := a.UnmarshalTo(&wrapped); err == nil {
			a = wrapped.GetConfig()
		}
	}
	var c cors.CorsPolicy
	if err := a.UnmarshalTo(&c); err != nil {
		f[p+"cors"] = "unreadable: " + err.Error()
		return
	}
	var origins []string
	for _, m := range c.GetAllowOriginStringMatch() {
		origins = append(origins, stringMatcher(m))
	}
	f[p+"cors"] = "on"
	f[p+"cors.origins"] = joinSorted(origins)
	f[p+"cors.methods"] = listText(c.GetAllowMethods())
	f[p+"cors.allow_headers"] = listText(c.GetAllowHeaders())
	f[p+"cors.expose_headers"] = listText(c.GetExposeHeaders())
	f[p+"cors.max_age"] = c.GetMaxAge()
	f[p+"cors.credentials"] = boolOr(c.GetAllowCredentials(), "unset")
	f[p+"cors.private_network"] = boolOr(c.GetAllowPrivateNetworkAccess(), "unset")
	// Envoy forwards a preflight no origin matches unless told otherwise.
	f[p+"cors.forward_unmatched_preflights"] = boolOr(c.GetForwardNotMatchingPreflights(), "true")
	// Without filter_enabled the policy applies to every request.
	f[p+"cors.enabled"] = "100%"
	if fe := c.GetFilterEnabled(); fe != nil {
		f[p+"cors.enabled"] = fractionText(fe.GetDefaultValue())
	}
	if se := c.GetShadowEnabled(); se != nil {
		f[p+"cors.shadow"] = fractionText(se.GetDefaultValue())
	}
}

// listText normalises a comma-separated header value list: spaces and order do not matter to a browser.
func listText(s string) string {
	if s == "" {
		return ""
	}
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return joinSorted(parts)
}

func boolOr(b *wrapperspb.BoolValue, unset string) string {
	if b == nil {
		return unset
	}
	return strconv.FormatBool(b.GetValue())
}

// fractionText renders a fractional percent as a percentage, whatever its denominator.
func fractionText(fp *typev3.FractionalPercent) string {
	if fp == nil {
		return "100%"
	}
	den := map[typev3.FractionalPercent_DenominatorType]float64{
		typev3.FractionalPercent_HUNDRED:      100,
		typev3.FractionalPercent_TEN_THOUSAND: 10000,
		typev3.FractionalPercent_MILLION:      1000000,
	}[fp.GetDenominator()]
	return strconv.FormatFloat(100*float64(fp.GetNumerator())/den, 'f', 4, 64) + "%"
}

// routeHosts are the hosts of a snapshot's outbound clusters: the names a vhost's domains are matched to.
func routeHosts(s Snapshot) map[string]bool {
	hosts := map[string]bool{}
	for k := range s {
		if k.Kind == KindCluster && !k.Inbound {
			hosts[k.Host] = true
		}
	}
	return hosts
}
