package authn

import "testing"

func TestParseSPIFFE(t *testing.T) {
	id, err := ParseSPIFFE("spiffe://cluster.local/ns/shop/sa/cart")
	if err != nil || id != (Identity{"cluster.local", "shop", "cart"}) || id.String() != "spiffe://cluster.local/ns/shop/sa/cart" {
		t.Errorf("%+v, %v", id, err)
	}
	for _, bad := range []string{"https://cluster.local/ns/a/sa/b", "spiffe://cluster.local/ns/a", "spiffe://td/ns//sa/b",
		"spiffe://td/sa/b/ns/a", "spiffe://td/ns/a/sa/b/extra"} {
		if _, err := ParseSPIFFE(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func TestParseAccounts(t *testing.T) {
	a, err := ParseAccounts("istio-system/ztunnel, kube-system/node-proxy")
	if err != nil || !a.Has(Identity{Namespace: "istio-system", ServiceAccount: "ztunnel"}) ||
		!a.Has(Identity{Namespace: "kube-system", ServiceAccount: "node-proxy"}) ||
		a.Has(Identity{Namespace: "shop", ServiceAccount: "ztunnel"}) {
		t.Errorf("%v, %v", a, err)
	}
	for _, bad := range []string{"ztunnel", "istio-system/", "/ztunnel", "a/b/c"} {
		if _, err := ParseAccounts(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}
