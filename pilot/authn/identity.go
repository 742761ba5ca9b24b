package authn

import (
	"fmt"
	"strings"
)

// Identity is a workload identity, spiffe://TRUST_DOMAIN/ns/NAMESPACE/sa/SERVICE_ACCOUNT.
type Identity struct {
	TrustDomain    string
	Namespace      string
	ServiceAccount string
}

// String returns the SPIFFE URI.
func (id Identity) String() string {
	return "spiffe://" + id.TrustDomain + "/ns/" + id.Namespace + "/sa/" + id.ServiceAccount
}

// Account is NAMESPACE/SERVICE_ACCOUNT, the form trusted node accounts are configured in.
func (id Identity) Account() string { return id.Namespace + "/" + id.ServiceAccount }

// ParseSPIFFE reads spiffe://TRUST_DOMAIN/ns/NAMESPACE/sa/SERVICE_ACCOUNT.
func ParseSPIFFE(uri string) (Identity, error) {
	rest, ok := strings.CutPrefix(uri, "spiffe://")
	if !ok {
		return Identity{}, fmt.Errorf("identity %q: not a spiffe:// URI", uri)
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 5 || parts[1] != "ns" || parts[3] != "sa" || parts[0] == "" || parts[2] == "" || parts[4] == "" {
		return Identity{}, fmt.Errorf("identity %q: want spiffe://TRUST_DOMAIN/ns/NAMESPACE/sa/SERVICE_ACCOUNT", uri)
	}
	return Identity{TrustDomain: parts[0], Namespace: parts[2], ServiceAccount: parts[4]}, nil
}

// Accounts is a set of NAMESPACE/SERVICE_ACCOUNT names (istiod's CA_TRUSTED_NODE_ACCOUNTS).
type Accounts map[string]bool

// ParseAccounts reads a comma-separated list of NAMESPACE/SERVICE_ACCOUNT. Unlike istiod, which skips a
// malformed entry with a warning, a malformed entry is an error: a node account silently not trusted
// breaks every node proxy, one trusted by mistake is worse.
func ParseAccounts(list string) (Accounts, error) {
	out := Accounts{}
	for v := range strings.SplitSeq(list, ",") {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		ns, sa, ok := strings.Cut(v, "/")
		if !ok || ns == "" || sa == "" || strings.Contains(sa, "/") {
			return nil, fmt.Errorf("trusted node account %q: want NAMESPACE/SERVICE_ACCOUNT", v)
		}
		out[v] = true
	}
	return out, nil
}

// Has reports whether id's namespace and service account are in the set.
func (a Accounts) Has(id Identity) bool { return a[id.Account()] }
