package authpolicy

// CUSTOM AuthorizationPolicies → ext_authz, as istiod builds them (pilot/pkg/security/authz/builder):
//
//   - The CUSTOM policies of a proxy are grouped by provider. Their rules are translated as DENY rules are
//     (what cannot be expressed is dropped, so the provider is asked about more requests, never fewer) and
//     named "istio-ext-authz-PROVIDER-ns[NS]-policy[NAME]-rule[INDEX]"; a policy without rules gets one that
//     matches nothing.
//   - For each provider, an RBAC filter holds those rules as shadow rules (stat prefix "istio_ext_authz_"):
//     it enforces nothing, but writes the id of the rule a request matched into its dynamic metadata
//     (istio_ext_authz_shadow_effective_policy_id). The ext_authz filter after it is enabled only when that
//     id begins with "istio-ext-authz-PROVIDER": the service is consulted for the requests the rules match,
//     and no other.
//   - Both go ahead of the AUDIT/DENY/ALLOW filters. envoyExtAuthzGrpc gives the HTTP and the network
//     ext_authz filter; envoyExtAuthzHttp only the HTTP one.
//   - Fail closed: a provider that is not defined in the mesh config, is of a kind Sextant does not
//     implement, or names a service Sextant does not know, and more than one provider on one proxy (istiod
//     refuses it too), turn the rules into a DENY filter (policy names suffixed
//     "-deny-due-to-bad-CUSTOM-action"): the requests they match are denied. Unlike istiod, which leaves
//     TCP traffic unchecked under an HTTP-only provider, Sextant denies the TCP traffic those rules match.

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	extauthzhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	extauthznet "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/ext_authz/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	security "istio.io/api/security/v1beta1"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
)

const (
	httpExtAuthzFilter = "envoy.filters.http.ext_authz"
	tcpExtAuthzFilter  = "envoy.filters.network.ext_authz"
	// extAuthzMatchPrefix begins the name of every CUSTOM rule, so ext_authz can tell its matches apart.
	extAuthzMatchPrefix = "istio-ext-authz"
	// extAuthzShadowPrefix is the shadow rules' stat prefix; Envoy prefixes the metadata key with it.
	extAuthzShadowPrefix = "istio_ext_authz_"
	extAuthzEffectiveID  = "shadow_effective_policy_id"
	badCustomSuffix      = "-deny-due-to-bad-CUSTOM-action"
	// failClosedNote begins a note saying that policies deny traffic because they could not be honoured:
	// those are logged as warnings, the other notes at debug level.
	failClosedNote = "fails closed: "
)

// Env is what translating a proxy's policies needs besides the policies.
type Env struct {
	TrustDomain string
	// TrustDomainAliases are the mesh's other trust domains (a migration's old one): their identities are
	// the mesh's too.
	TrustDomainAliases []string
	// JWT is the proxy's JWT filter (jwt.go), nil when no RequestAuthentication applies.
	JWT *JWTAuthn
	// extAuthz holds the providers the proxy's CUSTOM policies name, resolved against the snapshot.
	extAuthz map[string]*extAuthzProvider
}

// ClusterNamer names the outbound cluster of a host's port (and subset) as the cluster generator names it:
// an ext_authz provider's checks go to that cluster.
type ClusterNamer func(port uint32, subset, host string) string

// extAuthzProvider is one resolved provider: its filters, or why it cannot be used.
type extAuthzProvider struct {
	http *extauthzhttp.ExtAuthz
	tcp  *extauthznet.ExtAuthz // gRPC providers only
	err  error
	// key spells out all of the above, for listener cache keys.
	key string
}

// NewEnv resolves the providers the CUSTOM policies name; the caller sets JWT.
func NewEnv(push *model.PushContext, policies model.AuthorizationPolicies, clusterName ClusterNamer) Env {
	env := Env{TrustDomain: push.Mesh.TrustDomain, TrustDomainAliases: push.Mesh.TrustDomainAliases}
	for _, c := range policies.Custom {
		name := c.Spec.(*security.AuthorizationPolicy).GetProvider().GetName()
		if env.extAuthz == nil {
			env.extAuthz = map[string]*extAuthzProvider{}
		}
		if env.extAuthz[name] == nil {
			env.extAuthz[name] = resolveExtAuthz(push, name, clusterName)
		}
	}
	return env
}

// TrustDomains returns the trust domain and its aliases, nil when the trust domain is not set.
func (e Env) TrustDomains() []string {
	if e.TrustDomain == "" {
		return nil
	}
	return append([]string{e.TrustDomain}, e.TrustDomainAliases...)
}

// Describe is a cache key for what the environment changes in the filters.
func (e Env) Describe() string {
	var b strings.Builder
	b.WriteString(e.TrustDomain)
	for _, a := range e.TrustDomainAliases {
		b.WriteString("," + a)
	}
	b.WriteString(e.JWT.describe())
	names := make([]string, 0, len(e.extAuthz))
	for n := range e.extAuthz {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		b.WriteString("|" + n + "=" + e.extAuthz[n].key)
	}
	return b.String()
}

func resolveExtAuthz(push *model.PushContext, name string, clusterName ClusterNamer) *extAuthzProvider {
	p, err := buildExtAuthz(push, name, clusterName)
	if err != nil {
		return &extAuthzProvider{err: err, key: "error: " + err.Error()}
	}
	h := sha256.New()
	for _, m := range []proto.Message{p.http, p.tcp} {
		if m != nil {
			b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(m)
			h.Write(b)
		}
	}
	p.key = hex.EncodeToString(h.Sum(nil))
	return p
}

func buildExtAuthz(push *model.PushContext, name string, clusterName ClusterNamer) (*extAuthzProvider, error) {
	if name == "" {
		return nil, errors.New("the policy names no provider (field provider.name)")
	}
	p := push.Mesh.ExtensionProvider(name)
	switch {
	case p == nil:
		return nil, fmt.Errorf("provider %q is not defined in the mesh config's extensionProviders", name)
	case p.EnvoyExtAuthzGRPC != nil:
		g := p.EnvoyExtAuthzGRPC
		host, cluster, err := extAuthzCluster(push, g.Service, g.Port, clusterName)
		if err != nil {
			return nil, fmt.Errorf("provider %q: field %s.service: %w", name, mesh.KindExtAuthzGRPC, err)
		}
		grpc := &core.GrpcService{
			TargetSpecifier: &core.GrpcService_EnvoyGrpc_{EnvoyGrpc: &core.GrpcService_EnvoyGrpc{ClusterName: cluster, Authority: host}},
			Timeout:         durationpb.New(g.CheckTimeout()),
		}
		return &extAuthzProvider{
			http: &extauthzhttp.ExtAuthz{
				StatusOnError:       extAuthzStatus(g.StatusOnError),
				FailureModeAllow:    g.FailOpen,
				Services:            &extauthzhttp.ExtAuthz_GrpcService{GrpcService: grpc},
				TransportApiVersion: core.ApiVersion_V3,
				WithRequestBody:     extAuthzBody(g.IncludeRequestBodyInCheck),
			},
			tcp: &extauthznet.ExtAuthz{
				StatPrefix:          "tcp.",
				FailureModeAllow:    g.FailOpen,
				TransportApiVersion: core.ApiVersion_V3,
				GrpcService:         grpc,
			},
		}, nil
	case p.EnvoyExtAuthzHTTP != nil:
		c := p.EnvoyExtAuthzHTTP
		host, cluster, err := extAuthzCluster(push, c.Service, c.Port, clusterName)
		if err != nil {
			return nil, fmt.Errorf("provider %q: field %s.service: %w", name, mesh.KindExtAuthzHTTP, err)
		}
		svc := &extauthzhttp.HttpService{
			PathPrefix: c.PathPrefix,
			ServerUri: &core.HttpUri{
				Uri:              "http://" + host,
				HttpUpstreamType: &core.HttpUri_Cluster{Cluster: cluster},
				Timeout:          durationpb.New(c.CheckTimeout()),
			},
		}
		if len(c.IncludeAdditionalHeadersInCheck) > 0 {
			keys := make([]string, 0, len(c.IncludeAdditionalHeadersInCheck))
			for k := range c.IncludeAdditionalHeadersInCheck {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			req := &extauthzhttp.AuthorizationRequest{}
			for _, k := range keys {
				req.HeadersToAdd = append(req.HeadersToAdd, &core.HeaderValue{Key: k, Value: c.IncludeAdditionalHeadersInCheck[k]})
			}
			svc.AuthorizationRequest = req
		}
		if len(c.HeadersToUpstreamOnAllow)+len(c.HeadersToDownstreamOnDeny)+len(c.HeadersToDownstreamOnAllow) > 0 {
			svc.AuthorizationResponse = &extauthzhttp.AuthorizationResponse{
				AllowedUpstreamHeaders:        extAuthzHeaders(c.HeadersToUpstreamOnAllow),
				AllowedClientHeaders:          extAuthzHeaders(c.HeadersToDownstreamOnDeny),
				AllowedClientHeadersOnSuccess: extAuthzHeaders(c.HeadersToDownstreamOnAllow),
			}
		}
		allowed := extAuthzHeaders(c.IncludeRequestHeadersInCheck)
		if allowed == nil {
			allowed = extAuthzHeaders(c.IncludeHeadersInCheck)
		}
		return &extAuthzProvider{http: &extauthzhttp.ExtAuthz{
			StatusOnError:       extAuthzStatus(c.StatusOnError),
			FailureModeAllow:    c.FailOpen,
			TransportApiVersion: core.ApiVersion_V3,
			Services:            &extauthzhttp.ExtAuthz_HttpService{HttpService: svc},
			WithRequestBody:     extAuthzBody(c.IncludeRequestBodyInCheck),
			AllowedHeaders:      allowed,
		}}, nil
	case p.Kind == "":
		return nil, fmt.Errorf("provider %q has no kind in the mesh config", name)
	}
	return nil, fmt.Errorf("provider %q is of kind %s, which is not an external authorization provider Sextant implements (%s, %s)",
		name, p.Kind, mesh.KindExtAuthzGRPC, mesh.KindExtAuthzHTTP)
}

// extAuthzCluster is istiod's LookupCluster: "NAMESPACE/HOST", or "HOST" when one namespace has it; the
// cluster is the outbound cluster of that host and port.
func extAuthzCluster(push *model.PushContext, service string, port uint32, clusterName ClusterNamer) (host, cluster string, err error) {
	ns, name, qualified := strings.Cut(service, "/")
	if !qualified {
		name = service
	}
	var found []*model.Service
	for _, s := range push.ServicesForHostname(name) {
		if !qualified || s.Namespace == ns {
			found = append(found, s)
		}
	}
	namespaces := map[string]bool{}
	for _, s := range found {
		namespaces[s.Namespace] = true
	}
	switch {
	case len(found) == 0:
		return "", "", fmt.Errorf("service %q not found", service)
	case len(namespaces) > 1:
		return "", "", fmt.Errorf("service %q is in several namespaces; write NAMESPACE/%s", service, name)
	}
	return found[0].Hostname, clusterName(port, "", found[0].Hostname), nil
}

func extAuthzStatus(s string) *typev3.HttpStatus {
	code, err := strconv.Atoi(s)
	if err != nil {
		return nil // empty: Envoy's default (403); anything else was refused when the mesh config was read
	}
	return &typev3.HttpStatus{Code: typev3.StatusCode(code)}
}

func extAuthzBody(b *mesh.RequestBody) *extauthzhttp.BufferSettings {
	if b == nil {
		return nil
	}
	return &extauthzhttp.BufferSettings{MaxRequestBytes: b.MaxRequestBytes, AllowPartialMessage: b.AllowPartialMessage,
		PackAsBytes: b.PackAsBytes}
}

// extAuthzHeaders is istiod's header list: case-insensitive, a leading "*" a suffix, a trailing one a prefix.
func extAuthzHeaders(headers []string) *matcher.ListStringMatcher {
	if len(headers) == 0 {
		return nil
	}
	out := &matcher.ListStringMatcher{}
	for _, h := range headers {
		m := &matcher.StringMatcher{IgnoreCase: true}
		if after, ok := strings.CutPrefix(h, "*"); ok {
			m.MatchPattern = &matcher.StringMatcher_Suffix{Suffix: after}
		} else if before, ok := strings.CutSuffix(h, "*"); ok {
			m.MatchPattern = &matcher.StringMatcher_Prefix{Prefix: before}
		} else {
			m.MatchPattern = &matcher.StringMatcher_Exact{Exact: h}
		}
		out.Patterns = append(out.Patterns, m)
	}
	return out
}

// extAuthzEnabled enables a provider's ext_authz filter only for requests whose matched shadow rule is
// one of that provider's.
func extAuthzEnabled(rbacFilter, provider string) *matcher.MetadataMatcher {
	return &matcher.MetadataMatcher{
		Filter: rbacFilter,
		Path: []*matcher.MetadataMatcher_PathSegment{
			{Segment: &matcher.MetadataMatcher_PathSegment_Key{Key: extAuthzShadowPrefix + extAuthzEffectiveID}}},
		Value: &matcher.ValueMatcher{MatchPattern: &matcher.ValueMatcher_StringMatch{StringMatch: &matcher.StringMatcher{
			MatchPattern: &matcher.StringMatcher_Prefix{Prefix: extAuthzMatchPrefix + "-" + provider}}}},
	}
}

// rbacMatchNever is istiod's rule for a CUSTOM policy without rules: it matches no request.
func rbacMatchNever() *rbacpb.Policy {
	return &rbacpb.Policy{
		Permissions: []*rbacpb.Permission{rbacPermissionNot(rbacPermissionAny())},
		Principals:  []*rbacpb.Principal{rbacPrincipalNot(rbacPrincipalAny())},
	}
}

// customGroup is the translated CUSTOM rules of one provider, and why they must deny instead, if they must.
type customGroup struct {
	provider string
	ext      *extAuthzProvider
	rules    map[string]*rbacpb.Policy
	policies []string
	failure  string
}

// custom translates the CUSTOM policies, one group per provider in name order.
func (b *rbacBuilder) custom(cfgs []*config.Config, env Env) []customGroup {
	byProvider := map[string]*customGroup{}
	var order []string
	for _, c := range cfgs {
		spec := c.Spec.(*security.AuthorizationPolicy)
		provider := spec.GetProvider().GetName()
		g := byProvider[provider]
		if g == nil {
			g = &customGroup{provider: provider, ext: env.extAuthz[provider], rules: map[string]*rbacpb.Policy{}}
			byProvider[provider] = g
			order = append(order, provider)
		}
		g.policies = append(g.policies, c.Key.NamespacedName())
		prefix := extAuthzMatchPrefix + "-" + provider + "-"
		if len(spec.Rules) == 0 {
			g.rules[fmt.Sprintf("%sns[%s]-policy[%s]-rule[0]", prefix, c.Namespace, c.Name)] = rbacMatchNever()
		}
		for i, rule := range spec.Rules {
			b.rule = c.Key.NamespacedName() + " rule " + strconv.Itoa(i)
			p, err := b.translateRule(rule, rbacpb.RBAC_DENY)
			if err != nil { // DENY translation drops what it cannot express; it does not fail
				b.notef("%s (CUSTOM) skipped: %v", b.rule, err)
				continue
			}
			g.rules[fmt.Sprintf("%sns[%s]-policy[%s]-rule[%d]", prefix, c.Namespace, c.Name, i)] = p
		}
	}
	slices.Sort(order)
	var out []customGroup
	for _, name := range order {
		g := byProvider[name]
		switch {
		case len(order) > 1:
			g.failure = fmt.Sprintf("CUSTOM policies name %d providers %v; one proxy can use only one", len(order), order)
		case g.ext == nil:
			g.failure = fmt.Sprintf("provider %q was not resolved", name)
		case g.ext.err != nil:
			g.failure = g.ext.err.Error()
		case b.forTCP && g.ext.tcp == nil:
			g.failure = fmt.Sprintf("provider %q is an HTTP service and cannot check TCP connections", name)
		}
		if g.failure != "" {
			b.notef("%sCUSTOM policies %v: %s; the requests their rules match are denied", failClosedNote, g.policies, g.failure)
		}
		out = append(out, *g)
	}
	return out
}

// denyRules are a failed group's rules as a DENY rule set, named as istiod names them.
func (g customGroup) denyRules() *rbacpb.RBAC {
	r := &rbacpb.RBAC{Action: rbacpb.RBAC_DENY, Policies: map[string]*rbacpb.Policy{}}
	for name, p := range g.rules {
		r.Policies[name+badCustomSuffix] = p
	}
	return r
}

// shadowRules are a working group's rules, evaluated only to mark what the provider must check.
func (g customGroup) shadowRules() *rbacpb.RBAC {
	return &rbacpb.RBAC{Action: rbacpb.RBAC_DENY, Policies: g.rules}
}
