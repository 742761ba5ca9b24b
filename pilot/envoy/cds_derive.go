package envoy

import (
	"strings"

	"github.com/sextantmesh/sextant/pilot/derive"
	"github.com/sextantmesh/sextant/pilot/model"
)

// clusterInputs is what a scope's outbound clusters are built in: the snapshot, the scope and the kind of
// proxy that shares the list.
type clusterInputs struct {
	scope  *Scope
	push   *model.PushContext
	flavor flavor
	who    proxyView
	gen    clusterGenerator
}

// outboundClusters is a scope's outbound clusters, owned by the services they are built for.
type outboundClusters = derive.List[*model.Service, *model.Resource]

type clusterInput = derive.Input[clusterInputs, *model.Service]

// outboundClusterInputs is everything a scope's outbound clusters read: the cache key and what a change of
// each rebuilds follow from it (docs/architecture.md has the table).
var outboundClusterInputs = derive.Declare(
	clusterInput{Name: "scope", Of: func(in clusterInputs) any { return in.scope }, Members: true},
	clusterInput{Name: "destination rules", Of: func(in clusterInputs) any { return in.push.DestinationRulesID() }},
	clusterInput{Name: "mesh config", Of: func(in clusterInputs) any { return in.push.Mesh }},
	// A service's accounts change rarely (a workload with a new identity): a full walk finds it, and the
	// per-cluster cache rebuilds only the clusters whose accounts differ.
	clusterInput{Name: "service accounts", Of: func(in clusterInputs) any { return in.push.ServiceAccountsID() }},
	// Clusters that carry their endpoints (followsEndpoints) read them.
	clusterInput{Name: "endpoints", Of: func(in clusterInputs) any { return in.push.EndpointsID() }, Readers: true},
	// Auto mTLS follows each namespace's PeerAuthentication mode; inline endpoints carry their tlsMode,
	// which workload policies decide too.
	clusterInput{Name: "peer authentication", Of: func(in clusterInputs) any { return in.push.PeerAuthenticationsID() },
		Readers: true, Affected: mtlsModeChanges},
)

// mtlsModeChanges names the services of the namespaces whose mTLS mode may have changed since prev.
func mtlsModeChanges(in clusterInputs, prev any, services []*model.Service) ([]*model.Service, bool) {
	namespaces, all := in.push.NamespaceMTLSChanges(prev)
	if all || len(namespaces) == 0 {
		return nil, all
	}
	var out []*model.Service
	for _, svc := range services {
		if namespaces[svc.Namespace] {
			out = append(out, svc)
		}
	}
	return out, false
}

// outboundClusterPlan builds a scope's outbound clusters service by service, and derives the next
// snapshot's from the last: a service add costs its own clusters, not a walk over the mesh per namespace.
var outboundClusterPlan = &derive.Plan[clusterInputs, *model.Service, *model.Resource]{
	Inputs:  outboundClusterInputs,
	Members: func(in clusterInputs) []*model.Service { return in.scope.clusterServices },
	Compare: func(a, b *model.Service) int { return strings.Compare(a.Hostname, b.Hostname) },
	Build: func(in clusterInputs, out []*model.Resource, svc *model.Service, b *derive.Building) ([]*model.Resource, error) {
		out, follows, err := in.gen.serviceClusters(out, svc, in.scope, in.push, in.flavor, in.who, nil)
		if follows {
			b.Read(outboundClusterInputs.Read("endpoints") | outboundClusterInputs.Read("peer authentication"))
		}
		return out, err
	},
	Name: func(r *model.Resource) string { return r.Name },
}
