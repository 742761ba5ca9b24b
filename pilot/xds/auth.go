package xds

import (
	"context"
	"fmt"
	"slices"
	"strings"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sextantmesh/sextant/pilot/authn"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pkg/loglimit"
)

// RegisterAuthenticated adds ADS to g with every stream authenticated by a before anything is read
// from it (a refused stream is never read, see refuseUnread), and its node's claims checked against the
// verified identity (see checkIdentity). g should be made with AuthenticatedGRPCServerOptions. Streams of
// a server registered with Register are not authenticated: for development and tests only.
func (s *Server) RegisterAuthenticated(g grpc.ServiceRegistrar, a authn.Authenticator) {
	if a == nil {
		panic("xds.RegisterAuthenticated: nil Authenticator")
	}
	discovery.RegisterAggregatedDiscoveryServiceServer(g, &authenticatedADS{s: s, auth: a})
}

type authenticatedADS struct {
	s    *Server
	auth authn.Authenticator
}

func (a *authenticatedADS) StreamAggregatedResources(
	stream grpc.BidiStreamingServer[discovery.DiscoveryRequest, discovery.DiscoveryResponse],
) error {
	ctx, err := a.authenticate(stream.Context())
	if err != nil {
		return a.s.refuseUnread(stream.Context(), err)
	}
	return a.s.StreamAggregatedResources(&authenticatedStream[discovery.DiscoveryRequest, discovery.DiscoveryResponse]{stream, ctx})
}

func (a *authenticatedADS) DeltaAggregatedResources(
	stream grpc.BidiStreamingServer[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse],
) error {
	ctx, err := a.authenticate(stream.Context())
	if err != nil {
		return a.s.refuseUnread(stream.Context(), err)
	}
	return a.s.DeltaAggregatedResources(&authenticatedStream[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]{stream, ctx})
}

func (a *authenticatedADS) authenticate(ctx context.Context) (context.Context, error) {
	caller, err := a.auth.Authenticate(ctx)
	if err == nil && len(caller.Identities) == 0 {
		err = fmt.Errorf("no identity")
	}
	if err != nil {
		a.s.refused.Add(1)
		client := ""
		if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
			client = p.Addr.String()
		}
		a.s.connLog.Warn("rejected stream: not authenticated", "peer", client, "error", err)
		return nil, status.Error(codes.Unauthenticated, "authentication failed: "+err.Error())
	}
	return authn.NewContext(ctx, caller), nil
}

// authenticatedStream is a stream whose context carries the authenticated caller.
type authenticatedStream[Req, Resp any] struct {
	grpc.BidiStreamingServer[Req, Resp]
	ctx context.Context
}

func (s *authenticatedStream[Req, Resp]) Context() context.Context { return s.ctx }

// checkIdentity finds the caller's identity that matches what the node claims: its namespace, and its
// service account when it names one (as istiod). A ztunnel is served every workload of the mesh, so its
// identity must also be a trusted node account.
func (s *Server) checkIdentity(caller *authn.Caller, p *model.Proxy) (authn.Identity, error) {
	for _, id := range caller.Identities {
		if id.Namespace != p.Namespace || p.ServiceAccount != "" && id.ServiceAccount != p.ServiceAccount {
			continue
		}
		if p.Type == model.Ztunnel && !s.opts.TrustedNodeAccounts.Has(id) {
			return authn.Identity{}, fmt.Errorf("node %q is a ztunnel, but its identity %s (%s) is not a trusted node account (%s)",
				loglimit.Text(p.NodeID), id, caller.Method, s.trustedAccountsText())
		}
		return id, nil
	}
	ids := make([]string, len(caller.Identities))
	for i, id := range caller.Identities {
		ids[i] = id.String()
	}
	claim := "namespace " + p.Namespace
	if p.ServiceAccount != "" {
		claim += ", service account " + p.ServiceAccount
	}
	return authn.Identity{}, fmt.Errorf("node %q claims %s, but the %s proves identity %s", loglimit.Text(p.NodeID), claim, caller.Method,
		strings.Join(ids, ", "))
}

func (s *Server) trustedAccountsText() string {
	if len(s.opts.TrustedNodeAccounts) == 0 {
		return "none configured"
	}
	names := make([]string, 0, len(s.opts.TrustedNodeAccounts))
	for n := range s.opts.TrustedNodeAccounts {
		names = append(names, n)
	}
	slices.Sort(names)
	return "trusted: " + strings.Join(names, ", ")
}
