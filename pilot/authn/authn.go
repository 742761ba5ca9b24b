package authn

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// Caller is an authenticated client.
type Caller struct {
	// Identities are the verified identities, all in the mesh's trust domain.
	Identities []Identity
	// Method says how they were verified ("client certificate" or "token"), for errors and logs.
	Method string
	// PodName and PodUID are the pod a bound service-account token was issued for, when the token says.
	PodName string
	PodUID  string
}

// Authenticator verifies who is calling from the gRPC context of a call or stream.
type Authenticator interface {
	Authenticate(ctx context.Context) (*Caller, error)
}

// ErrNoCredentials is returned when the caller presented neither a client certificate nor a token.
var ErrNoCredentials = errors.New(
	"no credentials: present a client certificate issued by the mesh CA or a service-account token in the authorization metadata (Bearer)")

// Chain tries a client certificate first, then the bearer token. A caller that presents a token the
// token authenticator rejects is refused with that reason, even if it has no certificate.
type Chain struct {
	ClientCert *ClientCertAuthenticator
	// Token verifies bearer tokens; nil when no cluster is configured (then only certificates are accepted).
	Token TokenAuthenticator
	// ClusterID is the cluster whose API server reviews the tokens. Istio's clients name their cluster in
	// the clusterid metadata; a token of another cluster is not this one's to vouch for (istiod would ask
	// that cluster's API server), so it is refused.
	ClusterID string
}

// clusterIDKey is the metadata Istio's agent and ztunnel name their cluster in.
const clusterIDKey = "clusterid"

// TokenAuthenticator verifies a bearer token.
type TokenAuthenticator interface {
	AuthenticateToken(ctx context.Context, token string) (*Caller, error)
}

// Authenticate implements Authenticator.
func (c Chain) Authenticate(ctx context.Context) (*Caller, error) {
	if c.ClientCert != nil {
		caller, err := c.ClientCert.Authenticate(ctx)
		if err == nil {
			return caller, nil
		}
		if !errors.Is(err, ErrNoCredentials) {
			return nil, err
		}
	}
	token, err := BearerToken(ctx)
	if err != nil {
		return nil, err
	}
	if c.Token == nil {
		return nil, errors.New("bearer token presented, but token authentication needs a Kubernetes cluster: " +
			"present a client certificate issued by the mesh CA")
	}
	if c.ClusterID != "" {
		md, _ := metadata.FromIncomingContext(ctx)
		for _, claimed := range md.Get(clusterIDKey) {
			if claimed != c.ClusterID {
				return nil, fmt.Errorf("the client says its token is from cluster %q, but tokens are reviewed by cluster %q only", claimed, c.ClusterID)
			}
		}
	}
	return c.Token.AuthenticateToken(ctx, token)
}

// BearerToken returns the token of the "authorization: Bearer TOKEN" metadata, ErrNoCredentials if there is none.
func BearerToken(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	values := md.Get("authorization")
	if len(values) == 0 {
		return "", ErrNoCredentials
	}
	if len(values) > 1 {
		return "", errors.New("authorization metadata given more than once")
	}
	scheme, token, ok := strings.Cut(values[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return "", errors.New("authorization metadata: want \"Bearer TOKEN\"")
	}
	return strings.TrimSpace(token), nil
}

// ClientCertAuthenticator accepts a TLS client certificate that chains to the mesh's roots (checked by
// the TLS handshake, see the server's tls.Config) and names SPIFFE identities of the trust domain or of
// one of its aliases (a proxy still holding a certificate of the trust domain being migrated from).
type ClientCertAuthenticator struct {
	TrustDomain        string
	TrustDomainAliases []string
}

// Authenticate implements Authenticator.
func (a *ClientCertAuthenticator) Authenticate(ctx context.Context) (*Caller, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, ErrNoCredentials
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return nil, ErrNoCredentials
	}
	if len(info.State.VerifiedChains) == 0 {
		// The handshake verifies a presented certificate; a certificate without a chain here means the
		// server was configured not to, and such a certificate proves nothing.
		return nil, errors.New("client certificate not verified against the mesh CA")
	}
	return a.identities(info.State.VerifiedChains[0][0])
}

func (a *ClientCertAuthenticator) identities(leaf *x509.Certificate) (*Caller, error) {
	caller := &Caller{Method: "client certificate"}
	var problems []string
	for _, uri := range leaf.URIs {
		id, err := ParseSPIFFE(uri.String())
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if id.TrustDomain != a.TrustDomain && !slices.Contains(a.TrustDomainAliases, id.TrustDomain) {
			problems = append(problems, fmt.Sprintf("identity %s: trust domain is not %q", id, a.TrustDomain))
			continue
		}
		caller.Identities = append(caller.Identities, id)
	}
	if len(caller.Identities) == 0 {
		if len(problems) == 0 {
			problems = append(problems, "it has no URI SAN")
		}
		return nil, fmt.Errorf("client certificate names no workload identity: %s", strings.Join(problems, "; "))
	}
	return caller, nil
}

type callerKey struct{}

// NewContext returns ctx carrying the authenticated caller.
func NewContext(ctx context.Context, c *Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// FromContext returns the caller NewContext stored, nil if the context was not authenticated.
func FromContext(ctx context.Context) *Caller {
	c, _ := ctx.Value(callerKey{}).(*Caller)
	return c
}
