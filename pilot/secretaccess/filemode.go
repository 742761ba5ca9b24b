package secretaccess

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sextantmesh/sextant/pilot/authn"
)

// FileMode decides without a cluster, where there is no RBAC to ask: a key pair of a namespace goes to
// the gateways of that namespace and to the service accounts named as readers, and to nothing else. It
// stands in for the Role a gateway's Helm chart grants (list Secrets in its namespace); a plain sidecar
// has no such Role, so it gets none.
type FileMode struct {
	readers authn.Accounts
	// named is the readers' list for refusals, so an operator sees what to add.
	named string
}

// ParseFileModeReaders returns the file-mode decision with the readers of a comma-separated
// NAMESPACE/SERVICE_ACCOUNT list (the flag --sds-file-mode-readers); each reads the Secrets of its own
// namespace only, as every proxy. A malformed entry is an error, not skipped.
func ParseFileModeReaders(list string) (*FileMode, error) {
	readers := authn.Accounts{}
	for v := range strings.SplitSeq(list, ",") {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		ns, sa, ok := strings.Cut(v, "/")
		if !ok || ns == "" || sa == "" || strings.Contains(sa, "/") {
			return nil, fmt.Errorf("--sds-file-mode-readers: entry %q: want NAMESPACE/SERVICE_ACCOUNT", v)
		}
		readers[v] = true
	}
	return NewFileMode(readers), nil
}

// NewFileMode returns the file-mode decision with extra readers.
func NewFileMode(readers authn.Accounts) *FileMode {
	names := make([]string, 0, len(readers))
	for a, ok := range readers {
		if ok {
			names = append(names, a)
		}
	}
	slices.Sort(names)
	return &FileMode{readers: readers, named: strings.Join(names, ",")}
}

// MayReadSecrets answers for a proxy that is not a gateway.
func (f *FileMode) MayReadSecrets(id authn.Identity) Decision { return f.MayReadSecretsAs(id, false) }

// MayReadSecretsAs answers for a proxy of identity id, a gateway (node type router) or not. A gateway's
// type is what its node says: the account list is what holds against a workload that lies about it.
func (f *FileMode) MayReadSecretsAs(id authn.Identity, gateway bool) Decision {
	if gateway || f.readers.Has(id) {
		return Decision{Allowed: true}
	}
	reason := "without a cluster, key pairs of namespace " + id.Namespace + " go only to its gateways (node type router) and to " +
		"the accounts --sds-file-mode-readers names"
	if f.named == "" {
		reason += " (none)"
	} else {
		reason += " (" + f.named + ")"
	}
	return Decision{Reason: reason + "; " + id.Account() + " is not a gateway and not named"}
}
