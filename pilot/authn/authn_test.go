package authn

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"
)

type fixedToken map[string]*Caller

func (m fixedToken) AuthenticateToken(_ context.Context, token string) (*Caller, error) {
	if c, ok := m[token]; ok {
		return c, nil
	}
	return nil, errors.New("token rejected")
}

func TestChainRefusesATokenOfAnotherCluster(t *testing.T) {
	cart := &Caller{Identities: []Identity{{TrustDomain: "cluster.local", Namespace: "shop", ServiceAccount: "cart"}}, Method: "token"}
	chain := Chain{Token: fixedToken{"cart": cart}, ClusterID: "Kubernetes"}
	for _, tc := range []struct {
		name string
		md   []string
		want string // "" if accepted
	}{
		{"no cluster named", []string{"authorization", "Bearer cart"}, ""},
		{"this cluster", []string{"authorization", "Bearer cart", "clusterid", "Kubernetes"}, ""},
		{"another cluster", []string{"authorization", "Bearer cart", "clusterid", "east"},
			`the client says its token is from cluster "east", but tokens are reviewed by cluster "Kubernetes" only`},
		{"this cluster and another", []string{"authorization", "Bearer cart", "clusterid", "Kubernetes", "clusterid", "east"}, `cluster "east"`},
	} {
		caller, err := chain.Authenticate(metadata.NewIncomingContext(context.Background(), metadata.Pairs(tc.md...)))
		switch {
		case tc.want == "" && (err != nil || caller != cart):
			t.Errorf("%s: %v, want shop/cart", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}
