package authn

import (
	"crypto/x509"
	"net/url"
	"strings"
	"testing"
)

func leafWith(t *testing.T, uris ...string) *x509.Certificate {
	t.Helper()
	leaf := &x509.Certificate{}
	for _, u := range uris {
		parsed, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		leaf.URIs = append(leaf.URIs, parsed)
	}
	return leaf
}

// A certificate of an alias trust domain (the one a mesh migrates from) is a mesh identity; one of any other
// trust domain is not.
func TestClientCertTrustDomainAliases(t *testing.T) {
	a := &ClientCertAuthenticator{TrustDomain: "new.example", TrustDomainAliases: []string{"old.example"}}
	for _, tc := range []struct {
		uri, wantErr string
	}{
		{uri: "spiffe://new.example/ns/shop/sa/cart"},
		{uri: "spiffe://old.example/ns/shop/sa/cart"},
		{uri: "spiffe://other.example/ns/shop/sa/cart", wantErr: `trust domain is not "new.example"`},
	} {
		caller, err := a.identities(leafWith(t, tc.uri))
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: err %v, want %q", tc.uri, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.uri, err)
		case len(caller.Identities) != 1 || caller.Identities[0].String() != tc.uri:
			t.Errorf("%s: identities %v", tc.uri, caller.Identities)
		}
	}
}
