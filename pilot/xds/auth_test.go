package xds

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sextantmesh/sextant/pilot/authn"
)

// tokenAuth authenticates fixed bearer tokens, as TokenReview would.
type tokenAuth map[string]authn.Identity

func (m tokenAuth) AuthenticateToken(_ context.Context, token string) (*authn.Caller, error) {
	if id, ok := m[token]; ok {
		return &authn.Caller{Identities: []authn.Identity{id}, Method: "token"}, nil
	}
	return nil, errors.New("token rejected")
}

func withAuth(trusted string) envOption {
	return func(e *testEnv, o *Options) {
		e.auth = authn.Chain{Token: tokenAuth{
			"cart":         {TrustDomain: "cluster.local", Namespace: "shop", ServiceAccount: "cart"},
			"ztunnel":      {TrustDomain: "cluster.local", Namespace: "istio-system", ServiceAccount: "ztunnel"},
			"fake-ztunnel": {TrustDomain: "cluster.local", Namespace: "shop", ServiceAccount: "ztunnel"},
		}}
		accounts, err := authn.ParseAccounts(trusted)
		if err != nil {
			panic(err)
		}
		o.TrustedNodeAccounts = accounts
	}
}

func bearer(token string) func(context.Context) context.Context {
	return func(ctx context.Context) context.Context {
		if token == "" {
			return ctx
		}
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
}

func (e *testEnv) sotwAs(t *testing.T, token string) *sotwClient {
	c := e.dial(t)
	return newClient(t, func(ctx context.Context, opts ...grpc.CallOption) (
		grpc.BidiStreamingClient[discovery.DiscoveryRequest, discovery.DiscoveryResponse], error) {
		return c.StreamAggregatedResources(bearer(token)(ctx), opts...)
	}, true)
}

func (e *testEnv) deltaAs(t *testing.T, token string) *deltaClient {
	c := e.dial(t)
	return newClient(t, func(ctx context.Context, opts ...grpc.CallOption) (
		grpc.BidiStreamingClient[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse], error) {
		return c.DeltaAggregatedResources(bearer(token)(ctx), opts...)
	}, true)
}

func wantRefused(t *testing.T, err error, code codes.Code, parts ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("stream ended with %v, want %s", err, code)
	}
	for _, p := range parts {
		if !strings.Contains(status.Convert(err).Message(), p) {
			t.Errorf("%q does not say %q", status.Convert(err).Message(), p)
		}
	}
}

var authSnapshot = snapshot{ClusterType: {"a": "1"}, AddressType: {"w1": "x"}}

func TestAuthenticatedStreamMatchingItsIdentityIsServed(t *testing.T) {
	e := newEnv(t, authSnapshot, withAuth("istio-system/ztunnel"))
	c := e.sotwAs(t, "cart")
	ask(c, node("sidecar~10.0.0.1~cart-1.shop~shop.svc.cluster.local", map[string]any{"SERVICE_ACCOUNT": "cart"}), ClusterType, nil, nil)
	if got := payloads(t, ClusterType, c.recv().GetResources()); got["a"] != "1" {
		t.Errorf("got %v", got)
	}
	conns := e.srv.connections()
	if len(conns) != 1 || conns[0].proxy.Identity == nil || conns[0].proxy.Identity.String() != "spiffe://cluster.local/ns/shop/sa/cart" {
		t.Errorf("connection does not carry the verified identity")
	}
}

func TestAuthenticatedStreamRefusals(t *testing.T) {
	e := newEnv(t, authSnapshot, withAuth("istio-system/ztunnel"))
	for name, tc := range map[string]struct {
		token string
		node  string
		md    map[string]any
		code  codes.Code
		want  []string
	}{
		"no token":  {"", "sidecar~10.0.0.1~cart-1.shop~shop.svc.cluster.local", nil, codes.Unauthenticated, []string{"no credentials"}},
		"bad token": {"stolen", "sidecar~10.0.0.1~cart-1.shop~shop.svc.cluster.local", nil, codes.Unauthenticated, []string{"token rejected"}},
		"another namespace": {"cart", "sidecar~10.0.0.1~vault-1.bank~bank.svc.cluster.local", nil, codes.PermissionDenied,
			[]string{"claims namespace bank", "spiffe://cluster.local/ns/shop/sa/cart"}},
		"another service account": {"cart", "sidecar~10.0.0.1~cart-1.shop~shop.svc.cluster.local", map[string]any{"SERVICE_ACCOUNT": "admin"},
			codes.PermissionDenied, []string{"service account admin", "spiffe://cluster.local/ns/shop/sa/cart"}},
		"forged ztunnel": {"fake-ztunnel", "ztunnel~10.0.0.9~ztunnel-x.shop~shop.svc.cluster.local", nil, codes.PermissionDenied,
			[]string{"not a trusted node account", "spiffe://cluster.local/ns/shop/sa/ztunnel", "istio-system/ztunnel"}},
		"sidecar token claiming a ztunnel": {"cart", "ztunnel~10.0.0.9~ztunnel-x.shop~shop.svc.cluster.local", nil, codes.PermissionDenied,
			[]string{"not a trusted node account"}},
	} {
		t.Run(name, func(t *testing.T) {
			c := e.deltaAs(t, tc.token)
			md := tc.md
			n := node(tc.node, md)
			c.send(&discovery.DeltaDiscoveryRequest{Node: n, TypeUrl: AddressType})
			wantRefused(t, c.end(), tc.code, tc.want...)
		})
	}
	if n := len(e.srv.connections()); n != 0 {
		t.Errorf("%d connections admitted", n)
	}
}

// A sidecar with a valid identity must not get the mesh's workloads by asking for the ztunnel types.
func TestAuthenticatedSidecarCannotSubscribeToWorkloadTypes(t *testing.T) {
	e := newEnv(t, authSnapshot, withAuth("istio-system/ztunnel"))
	for _, typeURL := range []string{AddressType, AuthorizationType} {
		c := e.deltaAs(t, "cart")
		c.send(&discovery.DeltaDiscoveryRequest{Node: node("sidecar~10.0.0.1~cart-1.shop~shop.svc.cluster.local", nil), TypeUrl: typeURL})
		wantRefused(t, c.end(), codes.PermissionDenied, "not a ztunnel", typeURL)
		s := e.sotwAs(t, "cart")
		ask(s, node("sidecar~10.0.0.1~cart-1.shop~shop.svc.cluster.local", nil), ClusterType, nil, nil)
		s.recv()
		ask(s, nil, typeURL, nil, nil)
		wantRefused(t, s.end(), codes.PermissionDenied, "not a ztunnel")
	}
}

func TestTrustedZtunnelIsServed(t *testing.T) {
	e := newEnv(t, authSnapshot, withAuth("istio-system/ztunnel"))
	c := e.deltaAs(t, "ztunnel")
	c.send(&discovery.DeltaDiscoveryRequest{Node: node("ztunnel~10.0.0.9~ztunnel-a.istio-system~istio-system.svc.cluster.local", nil),
		TypeUrl: AddressType})
	if got := deltaResources(t, c.recv()); got["w1"] != "x" {
		t.Errorf("got %v", got)
	}
}

func TestNoTrustedNodeAccountsRefusesEveryZtunnel(t *testing.T) {
	e := newEnv(t, authSnapshot, withAuth(""))
	c := e.deltaAs(t, "ztunnel")
	c.send(&discovery.DeltaDiscoveryRequest{Node: node("ztunnel~10.0.0.9~ztunnel-a.istio-system~istio-system.svc.cluster.local", nil),
		TypeUrl: AddressType})
	wantRefused(t, c.end(), codes.PermissionDenied, "none configured")
}

// A refused client that goes on sending (Istio's agent sends what its proxy asks while the server decides)
// must get the reason on its receive side, not an EOF on its next send: the server reads its requests until
// it is quiet and only then ends the stream with the status.
func TestRefusedClientStillSendingGetsTheReason(t *testing.T) {
	e := newEnv(t, authSnapshot, withAuth("istio-system/ztunnel"))
	for name, tc := range map[string]struct {
		token string
		node  string
		code  codes.Code
		want  string
	}{
		"no token":          {"", "sidecar~10.0.0.1~cart-1.shop~shop.svc.cluster.local", codes.Unauthenticated, "no credentials"},
		"another namespace": {"cart", "sidecar~10.0.0.1~vault-1.bank~bank.svc.cluster.local", codes.PermissionDenied, "claims namespace bank"},
	} {
		t.Run(name, func(t *testing.T) {
			c := e.dial(t)
			stream, err := c.StreamAggregatedResources(bearer(tc.token)(t.Context()))
			must(t, err)
			// Long enough for a status sent when the stream opened to have arrived.
			time.Sleep(200 * time.Millisecond)
			for i, typeURL := range []string{ClusterType, ListenerType} {
				req := &discovery.DiscoveryRequest{TypeUrl: typeURL}
				if i == 0 {
					req.Node = node(tc.node, nil)
				}
				if err := stream.Send(req); err != nil {
					t.Fatalf("send %d: %v (the stream ended while the client was still sending)", i, err)
				}
			}
			_, err = stream.Recv()
			wantRefused(t, err, tc.code, tc.want)
		})
	}
}

// A refused client that never sends still gets its status, once the server stops waiting.
func TestRefusedSilentClientIsEnded(t *testing.T) {
	e := newEnv(t, authSnapshot, withAuth("istio-system/ztunnel"))
	stream, err := e.dial(t).DeltaAggregatedResources(t.Context())
	must(t, err)
	_, err = stream.Recv()
	wantRefused(t, err, codes.Unauthenticated, "no credentials")
}
