package envoy

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sextantmesh/sextant/pilot/model"
)

// SecretDenial is a secret a proxy asked for and was refused: not silently left out, it is listed in
// /debug/config_errors until the proxy is served it or disconnects.
type SecretDenial struct {
	// Proxy is the node id; Identity the verified identity ("" on a stream that was not authenticated).
	Proxy    string
	Identity string
	// Resource is the SDS name asked for; Namespace and Name the Secret it names.
	Resource  string
	Namespace string
	Name      string
	Reason    string
	Since     time.Time
}

// maxSecretDenials bounds what is kept: a client asking for many names cannot grow it without end.
const maxSecretDenials = 1000

type denialKey struct{ proxy, resource string }

// secretDenials is the one record generators keep beside their caches: what was refused to whom.
type secretDenials struct {
	mu sync.Mutex
	m  map[denialKey]SecretDenial
}

func newSecretDenials() *secretDenials { return &secretDenials{m: map[denialKey]SecretDenial{}} }

// deny records a refusal; it reports whether it is new (or its reason changed), for the caller to log.
func (d *secretDenials) deny(p *model.Proxy, resource, namespace, identity, reason string) bool {
	if namespace == "" {
		namespace = p.Namespace
	}
	ref, _ := parseSecretName(resource)
	k := denialKey{p.NodeID, resource}
	d.mu.Lock()
	defer d.mu.Unlock()
	prev, ok := d.m[k]
	if ok && prev.Reason == reason {
		return false
	}
	if !ok && len(d.m) >= maxSecretDenials {
		var oldest denialKey
		var at time.Time
		for k, v := range d.m {
			if at.IsZero() || v.Since.Before(at) {
				oldest, at = k, v.Since
			}
		}
		delete(d.m, oldest)
	}
	d.m[k] = SecretDenial{Proxy: p.NodeID, Identity: identity, Resource: resource, Namespace: namespace, Name: ref.name,
		Reason: reason, Since: time.Now()}
	return true
}

// allow forgets a denial once the proxy may have the secret.
func (d *secretDenials) allow(p *model.Proxy, resource string) {
	k := denialKey{p.NodeID, resource}
	d.mu.Lock()
	if len(d.m) > 0 {
		delete(d.m, k)
	}
	d.mu.Unlock()
}

// SecretDenials returns the secrets refused to connected proxies, by proxy and name; connected says which
// node ids are connected now, and the denials of the others are dropped.
func (g *Generators) SecretDenials(connected func(nodeID string) bool) []SecretDenial {
	d := g.denials
	d.mu.Lock()
	out := make([]SecretDenial, 0, len(d.m))
	for k, v := range d.m {
		if !connected(k.proxy) {
			delete(d.m, k)
			continue
		}
		out = append(out, v)
	}
	d.mu.Unlock()
	slices.SortFunc(out, func(a, b SecretDenial) int {
		return cmp.Or(strings.Compare(a.Proxy, b.Proxy), strings.Compare(a.Resource, b.Resource))
	})
	return out
}
