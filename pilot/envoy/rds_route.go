package envoy

// VirtualService HTTP routes → Envoy routes, following istiod's translation (pilot/pkg/networking/core/route).

import (
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	commonfault "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/common/fault/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	previoushosts "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	previouspriorities "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	envoytype "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/sextantmesh/sextant/pilot/model"
)

// DefaultRetryOn is istiod's retry_on when a route does not say.
const DefaultRetryOn = "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes"

const (
	previousHostsPredicate     = "envoy.retry_host_predicates.previous_hosts"
	previousPrioritiesPriority = "envoy.retry_priorities.previous_priorities"
)

// defaultRoute sends everything to the service's cluster on port: istiod's route for a service without a
// VirtualService.
func (b *routeBuilder) defaultRoute(svc *model.Service, port uint32) *route.Route {
	action := &route.RouteAction{ClusterSpecifier: &route.RouteAction_Cluster{Cluster: OutboundClusterName(port, "", svc.Hostname)}}
	b.setTimeout(action, nil)
	hash := b.serviceHashPolicy(svc, port)
	// As istiod, the default route keeps the previous-hosts predicate even under consistent hashing.
	action.RetryPolicy = b.retryPolicy(nil, false)
	if hash != nil {
		action.HashPolicy = []*route.RouteAction_HashPolicy{hash}
	}
	r := &route.Route{
		Name:   "default",
		Match:  &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
		Action: &route.Route_Route{Route: action},
	}
	if !b.grpc {
		r.Decorator = &route.Decorator{Operation: hostPort(svc.Hostname, port) + "/*"}
	}
	return r
}

// virtualServiceRoutes translates vs's HTTP routes that apply to this proxy on gateway and port. Routes after
// a catch-all are unreachable and left out, as istiod does.
func (b *routeBuilder) virtualServiceRoutes(vs *model.VirtualService, gateway string, port uint32) []*route.Route {
	var out []*route.Route
	for _, in := range vs.Spec.Http {
		if in.Delegate != nil {
			continue // never here: the model merges a delegate's routes into its root in place of this one
		}
		matches := in.Match
		if len(matches) == 0 {
			matches = []*networking.HTTPMatchRequest{nil}
		}
		for _, m := range matches {
			if !b.matchApplies(vs, m, gateway, port) {
				continue
			}
			r := b.translateRoute(vs, in, m, port)
			if r == nil {
				continue
			}
			out = append(out, r)
			if isCatchAllRoute(r) {
				return out
			}
		}
	}
	return out
}

// matchApplies evaluates the parts of a match decided by the proxy rather than the request: port, gateways,
// sourceNamespace and sourceLabels.
func (b *routeBuilder) matchApplies(vs *model.VirtualService, m *networking.HTTPMatchRequest, gateway string, port uint32) bool {
	if m == nil {
		return true
	}
	if m.Port != 0 && m.Port != port {
		return false
	}
	if len(m.Gateways) > 0 && !slices.ContainsFunc(m.Gateways, func(g string) bool { return resolveGateway(g, vs.Namespace) == gateway }) {
		return false
	}
	if m.SourceNamespace != "" && m.SourceNamespace != b.proxy.Namespace {
		return false
	}
	if len(m.SourceLabels) > 0 {
		b.usedLabels = true
		for k, v := range m.SourceLabels {
			if lv, ok := b.proxy.Labels[k]; !ok || lv != v {
				return false
			}
		}
	}
	return true
}

// resolveGateway turns a gateway reference in namespace ns into "mesh" or NAMESPACE/NAME, as the model does.
func resolveGateway(g, ns string) string {
	if g == model.MeshGateway || strings.Contains(g, "/") {
		return g
	}
	if name, rest, ok := strings.Cut(g, "."); ok {
		gwNS, _, _ := strings.Cut(rest, ".")
		return gwNS + "/" + name
	}
	return ns + "/" + g
}

func isCatchAllRoute(r *route.Route) bool {
	m := r.GetMatch()
	catchAll := false
	switch ps := m.GetPathSpecifier().(type) {
	case *route.RouteMatch_Prefix:
		catchAll = ps.Prefix == "/"
	case *route.RouteMatch_SafeRegex:
		catchAll = ps.SafeRegex.GetRegex() == "*" || ps.SafeRegex.GetRegex() == ".*"
	}
	return catchAll && len(m.Headers) == 0 && len(m.QueryParameters) == 0 && m.RuntimeFraction == nil
}

// translateRoute builds the Envoy route for one match of an HTTP route; nil when it cannot be expressed
// (an invalid regex, an unsupported redirect code), so Envoy is never sent something it rejects.
func (b *routeBuilder) translateRoute(vs *model.VirtualService, in *networking.HTTPRoute, m *networking.HTTPMatchRequest,
	port uint32) *route.Route {
	match, ok := translateRouteMatch(m)
	if !ok {
		return nil
	}
	if vs.UsesIngressSemantics() && !ingressPrefixMatch(match) {
		return nil
	}
	name := in.Name
	if m != nil && m.Name != "" {
		if name != "" {
			name += "." + m.Name
		} else {
			name = m.Name
		}
	}
	out := &route.Route{Name: name, Match: match, Metadata: configMetadata(vs), StatPrefix: m.GetStatPrefix()}
	ops := translateHeaderOps(in.Headers)
	out.RequestHeadersToAdd, out.RequestHeadersToRemove = ops.requestAdd, ops.requestRemove
	out.ResponseHeadersToAdd, out.ResponseHeadersToRemove = ops.responseAdd, ops.responseRemove

	switch {
	case in.Redirect != nil:
		action := redirectAction(in.Redirect, port)
		if action == nil {
			return nil
		}
		out.Action = action
	case in.DirectResponse != nil:
		if in.DirectResponse.Status < 200 || in.DirectResponse.Status >= 600 {
			return nil
		}
		out.Action = directResponseAction(in.DirectResponse)
	default:
		action := b.routeAction(vs, in, port, ops.authority, out)
		if action == nil {
			return nil
		}
		out.Action = &route.Route_Route{Route: action}
	}
	if !b.grpc {
		out.Decorator = &route.Decorator{Operation: routeOperation(out, vs.Name, port)}
	}
	if f := translateFault(in.Fault); f != nil {
		setPerFilterConfig(out, FaultFilterName, f)
	}
	// Proxyless gRPC has no CORS filter and rejects a route configuring one; a gRPC client is no browser.
	if c := translateCORS(in.CorsPolicy); c != nil && !b.grpc {
		setPerFilterConfig(out, CORSFilterName, c)
	}
	return out
}

func setPerFilterConfig(r *route.Route, filter string, m proto.Message) {
	a, err := anypb.New(m)
	if err != nil {
		return
	}
	if r.TypedPerFilterConfig == nil {
		r.TypedPerFilterConfig = map[string]*anypb.Any{}
	}
	r.TypedPerFilterConfig[filter] = a
}

// routeOperation names the route for tracing, as istiod: HOST:PORT/PATH for one cluster, else VSNAME:PORT/PATH.
func routeOperation(r *route.Route, vsName string, port uint32) string {
	path := "/*"
	switch ps := r.GetMatch().GetPathSpecifier().(type) {
	case *route.RouteMatch_Prefix:
		path = ps.Prefix + "*"
	case *route.RouteMatch_Path:
		path = ps.Path
	case *route.RouteMatch_SafeRegex:
		path = ps.SafeRegex.GetRegex()
	}
	if cn, ok := ParseClusterName(r.GetRoute().GetCluster()); ok {
		return hostPort(cn.Host, cn.Port) + path
	}
	return vsName + ":" + strconv.FormatUint(uint64(port), 10) + path
}

// configMetadata points back at the VirtualService, as istiod's does (istioctl reads it).
func configMetadata(vs *model.VirtualService) *core.Metadata {
	return &core.Metadata{FilterMetadata: map[string]*structpb.Struct{
		"istio": {Fields: map[string]*structpb.Value{
			"config": structpb.NewStringValue("/apis/networking.istio.io/v1alpha3/namespaces/" + vs.Namespace + "/virtual-service/" + vs.Name),
		}},
	}}
}

// ingressPrefixMatch turns a prefix match of a VirtualService made of Ingresses into a match of whole path
// elements, Kubernetes' Prefix (istiod trims a trailing slash; "/" stays a prefix). false when the
// prefix is no path Envoy accepts there ("//" trims to "/"): the route is left out rather than NACKed.
func ingressPrefixMatch(m *route.RouteMatch) bool {
	p, ok := m.PathSpecifier.(*route.RouteMatch_Prefix)
	if !ok || p.Prefix == "/" {
		return true
	}
	path := strings.TrimSuffix(p.Prefix, "/")
	if path == "" || strings.HasSuffix(path, "/") || strings.ContainsAny(path, "?#") {
		return false
	}
	m.PathSpecifier = &route.RouteMatch_PathSeparatedPrefix{PathSeparatedPrefix: path}
	return true
}

// translateRouteMatch converts the request side of a match. ok is false when a regex does not compile.
func translateRouteMatch(m *networking.HTTPMatchRequest) (*route.RouteMatch, bool) {
	out := &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}}
	if m == nil {
		return out, true
	}
	switch u := m.Uri.GetMatchType().(type) {
	case *networking.StringMatch_Exact:
		out.PathSpecifier = &route.RouteMatch_Path{Path: u.Exact}
	case *networking.StringMatch_Prefix:
		out.PathSpecifier = &route.RouteMatch_Prefix{Prefix: u.Prefix}
	case *networking.StringMatch_Regex:
		if !validRouteRegex(u.Regex) {
			return nil, false
		}
		out.PathSpecifier = &route.RouteMatch_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: u.Regex}}
	}
	if m.IgnoreUriCase {
		out.CaseSensitive = wrapperspb.Bool(false)
	}
	for _, name := range sortedMapKeys(m.Headers) {
		h, ok := routeHeaderMatcher(strings.ToLower(name), m.Headers[name])
		if !ok {
			return nil, false
		}
		out.Headers = append(out.Headers, h)
	}
	for _, name := range sortedMapKeys(m.WithoutHeaders) {
		h, ok := routeHeaderMatcher(strings.ToLower(name), m.WithoutHeaders[name])
		if !ok {
			return nil, false
		}
		h.InvertMatch = true
		out.Headers = append(out.Headers, h)
	}
	for _, pseudo := range []struct {
		name string
		sm   *networking.StringMatch
	}{{":method", m.Method}, {":authority", m.Authority}, {":scheme", m.Scheme}} {
		if pseudo.sm == nil {
			continue
		}
		h, ok := routeHeaderMatcher(pseudo.name, pseudo.sm)
		if !ok {
			return nil, false
		}
		out.Headers = append(out.Headers, h)
	}
	for _, name := range sortedMapKeys(m.QueryParams) {
		if name == "" {
			return nil, false
		}
		q := &route.QueryParameterMatcher{Name: name}
		sm := m.QueryParams[name]
		if isPresentMatch(sm) {
			q.QueryParameterMatchSpecifier = &route.QueryParameterMatcher_PresentMatch{PresentMatch: true}
		} else {
			em, ok := routeStringMatcher(sm)
			if !ok {
				return nil, false
			}
			q.QueryParameterMatchSpecifier = &route.QueryParameterMatcher_StringMatch{StringMatch: em}
		}
		out.QueryParameters = append(out.QueryParameters, q)
	}
	return out, true
}

// isPresentMatch: an empty match, an empty prefix, or a match-everything regex only asks for presence.
func isPresentMatch(sm *networking.StringMatch) bool {
	switch v := sm.GetMatchType().(type) {
	case nil:
		return true
	case *networking.StringMatch_Prefix:
		return v.Prefix == ""
	case *networking.StringMatch_Regex:
		return v.Regex == "*" || v.Regex == ".*"
	}
	return false
}

func routeHeaderMatcher(name string, sm *networking.StringMatch) (*route.HeaderMatcher, bool) {
	if name == "" || strings.ContainsAny(name, "\x00\r\n") {
		return nil, false
	}
	h := &route.HeaderMatcher{Name: name}
	if isPresentMatch(sm) {
		h.HeaderMatchSpecifier = &route.HeaderMatcher_PresentMatch{PresentMatch: true}
		return h, true
	}
	em, ok := routeStringMatcher(sm)
	if !ok {
		return nil, false
	}
	h.HeaderMatchSpecifier = &route.HeaderMatcher_StringMatch{StringMatch: em}
	return h, true
}

func routeStringMatcher(sm *networking.StringMatch) (*matcher.StringMatcher, bool) {
	switch v := sm.GetMatchType().(type) {
	case *networking.StringMatch_Exact:
		return &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: v.Exact}}, true
	case *networking.StringMatch_Prefix:
		return &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Prefix{Prefix: v.Prefix}}, true
	case *networking.StringMatch_Regex:
		if !validRouteRegex(v.Regex) {
			return nil, false
		}
		return &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: v.Regex}}}, true
	}
	return nil, false
}

// validRegex checks a regex with Go's RE2 syntax, close to Envoy's, so a bad one drops the route rather than
// getting the whole RouteConfiguration rejected.
func validRouteRegex(r string) bool {
	if r == "" {
		return false
	}
	_, err := regexp.Compile(r)
	return err == nil
}

func sortedMapKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// headerOps is a translated Headers block. authority comes from setting the host or :authority request
// header, which Envoy only allows as a host rewrite.
type headerOps struct {
	requestAdd, responseAdd       []*core.HeaderValueOption
	requestRemove, responseRemove []string
	authority                     string
}

func translateHeaderOps(h *networking.Headers) headerOps {
	var out headerOps
	if h == nil {
		return out
	}
	req, resp := h.GetRequest(), h.GetResponse()
	for _, k := range sortedMapKeys(req.GetSet()) {
		if isAuthorityHeader(k) {
			out.authority = req.Set[k]
			continue
		}
		out.requestAdd = appendHeader(out.requestAdd, k, req.Set[k], core.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD, true)
	}
	for _, k := range sortedMapKeys(req.GetAdd()) {
		out.requestAdd = appendHeader(out.requestAdd, k, req.Add[k], core.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD, true)
	}
	for _, k := range req.GetRemove() {
		if modifiableHeader(k, true) {
			out.requestRemove = append(out.requestRemove, k)
		}
	}
	for _, k := range sortedMapKeys(resp.GetSet()) {
		out.responseAdd = appendHeader(out.responseAdd, k, resp.Set[k], core.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD, false)
	}
	for _, k := range sortedMapKeys(resp.GetAdd()) {
		out.responseAdd = appendHeader(out.responseAdd, k, resp.Add[k], core.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD, false)
	}
	for _, k := range resp.GetRemove() {
		if modifiableHeader(k, false) {
			out.responseRemove = append(out.responseRemove, k)
		}
	}
	return out
}

func isAuthorityHeader(k string) bool {
	k = strings.ToLower(k)
	return k == "host" || k == ":authority"
}

// modifiableHeader: Envoy refuses to add or remove pseudo-headers, and host on requests.
func modifiableHeader(k string, request bool) bool {
	if k == "" || strings.HasPrefix(k, ":") || strings.ContainsAny(k, "\x00\r\n") {
		return false
	}
	return !request || !strings.EqualFold(k, "host")
}

func appendHeader(list []*core.HeaderValueOption, k, v string, action core.HeaderValueOption_HeaderAppendAction,
	request bool) []*core.HeaderValueOption {
	if !modifiableHeader(k, request) || strings.ContainsAny(v, "\x00\r\n") {
		return list
	}
	return append(list, &core.HeaderValueOption{Header: &core.HeaderValue{Key: k, Value: v}, AppendAction: action})
}

// routeDestination is a VirtualService destination resolved for this proxy.
type routeDestination struct {
	cluster string
	host    string
	port    uint32
	subset  string
	svc     *model.Service // nil when the host is no known service
}

// resolveDestination picks the cluster: the destination's port, else the service's only port, else the
// port of the route configuration (istiod's GetDestinationCluster). A sidecar's (and a gRPC client's) route
// configuration looks services up among those with the configuration's port, each cut down to that port, so
// there a destination without a port always takes the route configuration's: reviews routed from port 80
// goes to outbound|80||reviews even when reviews serves only 9080, as istiod sends it.
func (b *routeBuilder) resolveDestination(vsNS string, d *networking.Destination, listenerPort uint32) routeDestination {
	host := model.ResolveHost(d.GetHost(), vsNS, b.push.Mesh.DomainSuffix)
	svc := b.push.ServiceForHostname(b.proxy.Namespace, host)
	if b.deps != nil {
		*b.deps = append(*b.deps, serviceDep{host, svc})
	}
	if svc != nil && svc.Resolution == model.Alias && (b.proxy.Type == model.Router || svc.PortByNumber(listenerPort) != nil) {
		// An ExternalName Service: its cluster is the named host's, as istiod's GetDestinationCluster. A
		// sidecar's routes see the services of their own port only: an alias without it is left as named.
		host = svc.AliasFor
		svc = b.push.ServiceForHostname(b.proxy.Namespace, host)
		if b.deps != nil {
			*b.deps = append(*b.deps, serviceDep{host, svc})
		}
	}
	port := listenerPort
	if n := d.GetPort().GetNumber(); n != 0 {
		port = n
	} else if b.proxy.Type == model.Router && svc != nil && len(svc.Ports) == 1 {
		port = svc.Ports[0].Port
	}
	return routeDestination{cluster: OutboundClusterName(port, d.GetSubset(), host), host: host, port: port, subset: d.GetSubset(), svc: svc}
}

// routeAction builds the forwarding action of an HTTP route. It may add the single destination's header
// operations to out.
func (b *routeBuilder) routeAction(vs *model.VirtualService, in *networking.HTTPRoute, port uint32, authority string,
	out *route.Route) *route.RouteAction {
	action := &route.RouteAction{}
	b.setTimeout(action, in.Timeout)
	if rw := in.Rewrite; rw != nil {
		switch {
		case rw.UriRegexRewrite != nil && validRouteRegex(rw.UriRegexRewrite.Match):
			action.RegexRewrite = &matcher.RegexMatchAndSubstitute{
				Pattern:      &matcher.RegexMatcher{Regex: rw.UriRegexRewrite.Match},
				Substitution: rw.UriRegexRewrite.Rewrite,
			}
		case rw.Uri != "":
			action.PrefixRewrite = rw.Uri
		}
		if rw.Authority != "" {
			authority = rw.Authority
		}
	}
	// Destinations: zero weights are dropped when others carry weight; all-zero means an even split.
	dsts := make([]*networking.HTTPRouteDestination, 0, len(in.Route))
	for _, d := range in.Route {
		if d.GetDestination() != nil && (d.Weight > 0 || len(in.Route) == 1) {
			dsts = append(dsts, d)
		}
	}
	even := false
	if len(dsts) == 0 {
		for _, d := range in.Route {
			if d.GetDestination() != nil {
				dsts = append(dsts, d)
			}
		}
		even = true
	}
	if len(dsts) == 0 {
		return nil
	}
	resolved := make([]routeDestination, len(dsts))
	for i, d := range dsts {
		resolved[i] = b.resolveDestination(vs.Namespace, d.Destination, port)
	}
	if len(dsts) == 1 {
		action.ClusterSpecifier = &route.RouteAction_Cluster{Cluster: resolved[0].cluster}
		ops := translateHeaderOps(dsts[0].Headers)
		out.RequestHeadersToAdd = append(out.RequestHeadersToAdd, ops.requestAdd...)
		out.RequestHeadersToRemove = append(out.RequestHeadersToRemove, ops.requestRemove...)
		out.ResponseHeadersToAdd = append(out.ResponseHeadersToAdd, ops.responseAdd...)
		out.ResponseHeadersToRemove = append(out.ResponseHeadersToRemove, ops.responseRemove...)
		if authority == "" {
			authority = ops.authority
		}
	} else {
		wc := &route.WeightedCluster{}
		for i, d := range dsts {
			w := uint32(d.Weight)
			if even {
				w = 1
			}
			cw := &route.WeightedCluster_ClusterWeight{Name: resolved[i].cluster, Weight: wrapperspb.UInt32(w)}
			ops := translateHeaderOps(d.Headers)
			cw.RequestHeadersToAdd, cw.RequestHeadersToRemove = ops.requestAdd, ops.requestRemove
			cw.ResponseHeadersToAdd, cw.ResponseHeadersToRemove = ops.responseAdd, ops.responseRemove
			if ops.authority != "" && authority == "" {
				cw.HostRewriteSpecifier = &route.WeightedCluster_ClusterWeight_HostRewriteLiteral{HostRewriteLiteral: ops.authority}
			}
			wc.Clusters = append(wc.Clusters, cw)
		}
		action.ClusterSpecifier = &route.RouteAction_WeightedClusters{WeightedClusters: wc}
	}
	if authority != "" {
		action.HostRewriteSpecifier = &route.RouteAction_HostRewriteLiteral{HostRewriteLiteral: authority}
	}
	// Each destination taking traffic adds its DestinationRule's hash policy, in order, as istiod does: a
	// split hashes requests for the destinations whose clusters hash (Envoy combines the policies into one
	// hash, which a cluster without a hashing load balancer ignores).
	for i, d := range resolved {
		if h := b.destinationHashPolicy(d, dsts[i].Destination.GetPort().GetNumber()); h != nil {
			action.HashPolicy = append(action.HashPolicy, h)
		}
	}
	// istiod drops the previous-hosts predicate only for a single hashed destination (a retry stays on the
	// hashed host); a weighted split retries on another host.
	action.RetryPolicy = b.retryPolicy(in.Retries, len(in.Route) == 1 && len(action.HashPolicy) > 0)
	action.RequestMirrorPolicies = b.mirrorPolicies(vs, in, port)
	return action
}

// setTimeout applies the route timeout; none (0) disables Envoy's 15 s default, as istiod does.
func (b *routeBuilder) setTimeout(action *route.RouteAction, t *durationpb.Duration) {
	timeout := durationpb.New(0)
	if t != nil && t.AsDuration() >= 0 {
		timeout = t
	}
	action.Timeout = timeout
	if b.grpc {
		// gRPC reads max_stream_duration; 0 means none.
		if timeout.AsDuration() > 0 {
			action.MaxStreamDuration = &route.RouteAction_MaxStreamDuration{MaxStreamDuration: timeout}
		}
		return
	}
	// istiod's max_grpc_timeout (deprecated): honour grpc-timeout headers up to the route timeout (0: uncapped).
	action.MaxStreamDuration = &route.RouteAction_MaxStreamDuration{GrpcTimeoutHeaderMax: timeout}
}

// retryPolicy is istiod's (retry.ConvertPolicy): when the route says nothing, the mesh config's
// defaultHttpRetryPolicy, else istiod's default (two retries on connection failures, refused streams and
// gRPC unavailable or cancelled, none on an HTTP status); none when attempts is 0. Retries go to another
// host (previous-hosts predicate, up to 5 picks) unless the route has a single hashed destination or
// retryIgnorePreviousHosts says otherwise; retryRemoteLocalities moves them to other priorities
// (localities) first. Proxyless gRPC clients get the same policy, as istiod's gRPC
// generator builds their routes with the sidecar's: grpc-go reads num_retries, the gRPC codes of retry_on
// and the back-off, and ignores the rest.
func (b *routeBuilder) retryPolicy(in *networking.HTTPRetry, hashed bool) *route.RetryPolicy {
	if in == nil {
		in = b.push.Mesh.DefaultRetries()
	}
	if in != nil && in.Attempts <= 0 {
		return nil
	}
	p := &route.RetryPolicy{
		NumRetries:                    wrapperspb.UInt32(2),
		RetryOn:                       DefaultRetryOn,
		HostSelectionRetryMaxAttempts: 5,
	}
	previousHosts := !hashed
	if in != nil {
		p.NumRetries = wrapperspb.UInt32(uint32(in.Attempts))
		if in.RetryOn != "" {
			p.RetryOn, p.RetriableStatusCodes = parseRetryOn(in.RetryOn)
			if len(p.RetriableStatusCodes) > 0 && !slices.Contains(strings.Split(p.RetryOn, ","), "retriable-status-codes") {
				if p.RetryOn == "" {
					p.RetryOn = "retriable-status-codes"
				} else {
					p.RetryOn += ",retriable-status-codes"
				}
			}
		}
		if in.PerTryTimeout != nil {
			p.PerTryTimeout = in.PerTryTimeout
		}
		if in.RetryIgnorePreviousHosts != nil {
			previousHosts = in.RetryIgnorePreviousHosts.Value
		}
		if in.GetRetryRemoteLocalities().GetValue() {
			if a, err := anypb.New(&previouspriorities.PreviousPrioritiesConfig{UpdateFrequency: 2}); err == nil {
				p.RetryPriority = &route.RetryPolicy_RetryPriority{
					Name: previousPrioritiesPriority, ConfigType: &route.RetryPolicy_RetryPriority_TypedConfig{TypedConfig: a},
				}
			}
		}
		if in.Backoff != nil && in.Backoff.AsDuration() > 0 {
			p.RetryBackOff = &route.RetryPolicy_RetryBackOff{BaseInterval: in.Backoff}
		}
	}
	if previousHosts {
		if a, err := anypb.New(&previoushosts.PreviousHostsPredicate{}); err == nil {
			p.RetryHostPredicate = []*route.RetryPolicy_RetryHostPredicate{{
				Name: previousHostsPredicate, ConfigType: &route.RetryPolicy_RetryHostPredicate_TypedConfig{TypedConfig: a},
			}}
		}
	}
	return p
}

// parseRetryOn splits istio's retryOn into Envoy's retry_on and the HTTP status codes in it.
func parseRetryOn(s string) (string, []uint32) {
	var on []string
	var codes []uint32
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if n, err := strconv.Atoi(part); err == nil && http.StatusText(n) != "" {
			codes = append(codes, uint32(n))
			continue
		}
		on = append(on, part)
	}
	return strings.Join(on, ","), codes
}

// serviceHashPolicy is the hash policy of the default route of svc on port (istiod's hashForService): the
// DestinationRule's consistentHash, replaced by that of the port's portLevelSettings when it sets one.
func (b *routeBuilder) serviceHashPolicy(svc *model.Service, port uint32) *route.RouteAction_HashPolicy {
	dr := b.destinationRule(svc)
	if dr == nil {
		return nil
	}
	tp := dr.Spec.GetTrafficPolicy()
	ch := tp.GetLoadBalancer().GetConsistentHash()
	for _, pl := range tp.GetPortLevelSettings() {
		if pl.GetPort().GetNumber() == port {
			if h := pl.GetLoadBalancer().GetConsistentHash(); h != nil {
				ch = h
			}
			break
		}
	}
	return consistentHashPolicy(ch)
}

// destinationHashPolicy is the hash policy of a VirtualService destination (istiod's HashForHTTPDestination):
// the first consistentHash of the subset's port-level settings, the subset's, the rule's port-level
// settings, the rule's. Port-level settings count only for a destination that names its port: istiod does
// not look at the port the route configuration resolves it to.
func (b *routeBuilder) destinationHashPolicy(d routeDestination, explicitPort uint32) *route.RouteAction_HashPolicy {
	if d.svc == nil {
		return nil
	}
	dr := b.destinationRule(d.svc)
	if dr == nil {
		return nil
	}
	tp := dr.Spec.GetTrafficPolicy()
	var subsetTP *networking.TrafficPolicy
	for _, ss := range dr.Spec.GetSubsets() {
		if ss.GetName() == d.subset {
			subsetTP = ss.GetTrafficPolicy()
			break
		}
	}
	for _, ch := range []*networking.LoadBalancerSettings_ConsistentHashLB{
		portLevelConsistentHash(subsetTP, explicitPort), subsetTP.GetLoadBalancer().GetConsistentHash(),
		portLevelConsistentHash(tp, explicitPort),
	} {
		if ch != nil {
			return consistentHashPolicy(ch)
		}
	}
	return consistentHashPolicy(tp.GetLoadBalancer().GetConsistentHash())
}

// destinationRule is the DestinationRule the proxy applies to svc: as istiod's route builder (its sidecar
// scope's rule for outbound traffic), one whose workloadSelector selects the proxy comes first. A choice
// that weighed such a rule makes the routes depend on the proxy's labels.
func (b *routeBuilder) destinationRule(svc *model.Service) *model.DestinationRule {
	dr, byLabels := b.push.DestinationRuleByLabels(b.proxy.Namespace, b.proxy.Labels, svc)
	b.usedLabels = b.usedLabels || byLabels
	return dr
}

// portLevelConsistentHash is the consistentHash of the first portLevelSettings entry for port (0: none).
func portLevelConsistentHash(tp *networking.TrafficPolicy, port uint32) *networking.LoadBalancerSettings_ConsistentHashLB {
	if port == 0 {
		return nil
	}
	for _, pl := range tp.GetPortLevelSettings() {
		if pl.GetPort().GetNumber() == port {
			return pl.GetLoadBalancer().GetConsistentHash()
		}
	}
	return nil
}

// consistentHashPolicy translates a consistentHash key; nil for none, or for a key Envoy would reject.
func consistentHashPolicy(ch *networking.LoadBalancerSettings_ConsistentHashLB) *route.RouteAction_HashPolicy {
	if ch == nil {
		return nil
	}
	switch key := ch.GetHashKey().(type) {
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName:
		if key.HttpHeaderName == "" {
			return nil
		}
		return &route.RouteAction_HashPolicy{PolicySpecifier: &route.RouteAction_HashPolicy_Header_{
			Header: &route.RouteAction_HashPolicy_Header{HeaderName: key.HttpHeaderName}}}
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpCookie:
		c := key.HttpCookie
		if c.GetName() == "" {
			return nil
		}
		cookie := &route.RouteAction_HashPolicy_Cookie{Name: c.Name, Path: c.Path, Ttl: c.Ttl}
		for _, a := range c.Attributes {
			if a.GetName() != "" {
				cookie.Attributes = append(cookie.Attributes, &route.RouteAction_HashPolicy_CookieAttribute{Name: a.Name, Value: a.Value})
			}
		}
		return &route.RouteAction_HashPolicy{PolicySpecifier: &route.RouteAction_HashPolicy_Cookie_{Cookie: cookie}}
	case *networking.LoadBalancerSettings_ConsistentHashLB_UseSourceIp:
		if !key.UseSourceIp {
			return nil
		}
		return &route.RouteAction_HashPolicy{PolicySpecifier: &route.RouteAction_HashPolicy_ConnectionProperties_{
			ConnectionProperties: &route.RouteAction_HashPolicy_ConnectionProperties{SourceIp: true}}}
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpQueryParameterName:
		if key.HttpQueryParameterName == "" {
			return nil
		}
		return &route.RouteAction_HashPolicy{PolicySpecifier: &route.RouteAction_HashPolicy_QueryParameter_{
			QueryParameter: &route.RouteAction_HashPolicy_QueryParameter{Name: key.HttpQueryParameterName}}}
	}
	return nil
}

// mirrorPolicies translates mirror (+ mirrorPercentage, default 100%) and mirrors.
func (b *routeBuilder) mirrorPolicies(vs *model.VirtualService, in *networking.HTTPRoute,
	port uint32) []*route.RouteAction_RequestMirrorPolicy {
	var out []*route.RouteAction_RequestMirrorPolicy
	add := func(d *networking.Destination, pct *envoytype.FractionalPercent) {
		out = append(out, &route.RouteAction_RequestMirrorPolicy{
			Cluster:         b.resolveDestination(vs.Namespace, d, port).cluster,
			RuntimeFraction: &core.RuntimeFractionalPercent{DefaultValue: pct},
			TraceSampled:    wrapperspb.Bool(false),
		})
	}
	if in.Mirror != nil {
		switch {
		case in.MirrorPercentage != nil:
			if in.MirrorPercentage.GetValue() > 0 {
				add(in.Mirror, millionths(in.MirrorPercentage.GetValue()))
			}
		case in.MirrorPercent != nil:
			if in.MirrorPercent.GetValue() > 0 {
				add(in.Mirror, millionths(float64(in.MirrorPercent.GetValue())))
			}
		default:
			add(in.Mirror, millionths(100))
		}
	}
	for _, m := range in.Mirrors {
		if m.GetDestination() == nil {
			continue
		}
		switch {
		case m.Percentage == nil:
			add(m.Destination, millionths(100))
		case m.Percentage.GetValue() > 0:
			add(m.Destination, millionths(m.Percentage.GetValue()))
		}
	}
	return out
}

// percent converts 0-100 to Envoy's fraction of a million, as istiod does.
func millionths(v float64) *envoytype.FractionalPercent {
	v = min(max(v, 0), 100)
	return &envoytype.FractionalPercent{Numerator: uint32(v * 10000), Denominator: envoytype.FractionalPercent_MILLION}
}

// translateFault: fixed delays and HTTP or gRPC aborts. An unset percentage stays unset, as istiod leaves it.
func translateFault(in *networking.HTTPFaultInjection) *faultv3.HTTPFault {
	if in == nil {
		return nil
	}
	out := &faultv3.HTTPFault{}
	if d := in.Delay; d != nil {
		if fd, ok := d.HttpDelayType.(*networking.HTTPFaultInjection_Delay_FixedDelay); ok && fd.FixedDelay != nil {
			out.Delay = &commonfault.FaultDelay{FaultDelaySecifier: &commonfault.FaultDelay_FixedDelay{FixedDelay: fd.FixedDelay}}
			if d.Percentage != nil {
				out.Delay.Percentage = millionths(d.Percentage.GetValue())
			} else {
				out.Delay.Percentage = millionths(float64(d.Percent)) //nolint:staticcheck // deprecated field still honoured
			}
		}
	}
	if a := in.Abort; a != nil {
		abort := &faultv3.FaultAbort{}
		switch e := a.ErrorType.(type) {
		case *networking.HTTPFaultInjection_Abort_HttpStatus:
			if e.HttpStatus >= 200 && e.HttpStatus < 600 {
				abort.ErrorType = &faultv3.FaultAbort_HttpStatus{HttpStatus: uint32(e.HttpStatus)}
			}
		case *networking.HTTPFaultInjection_Abort_GrpcStatus:
			var c codes.Code
			if err := c.UnmarshalJSON([]byte(strconv.Quote(strings.ToUpper(e.GrpcStatus)))); err == nil {
				abort.ErrorType = &faultv3.FaultAbort_GrpcStatus{GrpcStatus: uint32(c)}
			}
		}
		if abort.ErrorType != nil {
			if a.Percentage != nil {
				abort.Percentage = millionths(a.Percentage.GetValue())
			}
			out.Abort = abort
		}
	}
	if out.Delay == nil && out.Abort == nil {
		return nil
	}
	return out
}

// redirectAction is istiod's applyRedirect; nil for an unsupported redirect code.
func redirectAction(r *networking.HTTPRedirect, port uint32) *route.Route_Redirect {
	ra := &route.RedirectAction{HostRedirect: r.Authority}
	switch {
	case r.Uri != "":
		ra.PathRewriteSpecifier = &route.RedirectAction_PathRedirect{PathRedirect: r.Uri}
	case r.PrefixRewrite != "":
		ra.PathRewriteSpecifier = &route.RedirectAction_PrefixRewrite{PrefixRewrite: r.PrefixRewrite}
	}
	if r.Scheme != "" {
		ra.SchemeRewriteSpecifier = &route.RedirectAction_SchemeRedirect{SchemeRedirect: r.Scheme}
	}
	switch rp := r.RedirectPort.(type) {
	case *networking.HTTPRedirect_Port:
		ra.PortRedirect = rp.Port
	case *networking.HTTPRedirect_DerivePort:
		switch rp.DerivePort {
		case networking.HTTPRedirect_FROM_REQUEST_PORT:
			ra.PortRedirect = port
		case networking.HTTPRedirect_FROM_PROTOCOL_DEFAULT:
			ra.PortRedirect = 80
			if strings.EqualFold(r.Scheme, "https") {
				ra.PortRedirect = 443
			}
		}
	}
	switch r.RedirectCode {
	case 0, http.StatusMovedPermanently:
		ra.ResponseCode = route.RedirectAction_MOVED_PERMANENTLY
	case http.StatusFound:
		ra.ResponseCode = route.RedirectAction_FOUND
	case http.StatusSeeOther:
		ra.ResponseCode = route.RedirectAction_SEE_OTHER
	case http.StatusTemporaryRedirect:
		ra.ResponseCode = route.RedirectAction_TEMPORARY_REDIRECT
	case http.StatusPermanentRedirect:
		ra.ResponseCode = route.RedirectAction_PERMANENT_REDIRECT
	default:
		return nil
	}
	return &route.Route_Redirect{Redirect: ra}
}

func directResponseAction(d *networking.HTTPDirectResponse) *route.Route_DirectResponse {
	dr := &route.DirectResponseAction{Status: d.Status}
	switch body := d.GetBody().GetSpecifier().(type) {
	case *networking.HTTPBody_String_:
		dr.Body = &core.DataSource{Specifier: &core.DataSource_InlineString{InlineString: body.String_}}
	case *networking.HTTPBody_Bytes:
		dr.Body = &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: body.Bytes}}
	}
	return &route.Route_DirectResponse{DirectResponse: dr}
}
