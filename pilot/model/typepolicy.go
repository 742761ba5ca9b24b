package model

// TypePolicy is what the transport must know of one type URL's client to order and link its resources:
// the rules of the proxy that consumes them (Envoy's, ztunnel's), registered next to the type's generator
// so the transport knows none of them itself. The zero value is a type with no rule: pushed after the
// ordered types, its removals sent with its changes, served to any proxy.
type TypePolicy struct {
	// Order places the type in a push, lower first, so that no proxy briefly points at something it has
	// not received yet (Envoy's clusters before the load assignments that fill them, listeners before the
	// routes they name). Types with Order 0 come after every ordered type, by type URL.
	Order int
	// LegacyWildcard: a first request that names no resource subscribes to all of them (xDS: CDS and LDS),
	// and a state-of-the-world response always carries the type's full state, never only what a push
	// changed.
	LegacyWildcard bool
	// RemoveLast: on delta streams, what a push removes of this type is sent after every other type's
	// changes, once what names these resources no longer does (Envoy's listeners and routes naming a
	// cluster that a rename removes).
	RemoveLast bool
	// Parent is a type whose resources these belong to, ParentOf(name) the name of a resource's parent. On
	// delta streams a resource is sent only once the client has its parent, is taken as forgotten with it,
	// and is sent right after a parent the client did not have (Envoy files a virtual host only under a
	// route configuration it holds, and does not ask for it again when one arrives).
	Parent   string
	ParentOf func(name string) string
	// FollowUp is a type whose resource FollowUpOf(name) is sent again, on delta streams, after the
	// resource name of this type is updated, when the client subscribes to it (Envoy warms a cluster it
	// adds or updates until its load assignment arrives, and does not ask again for an assignment it
	// subscribes to already).
	FollowUp   string
	FollowUpOf func(name string) string
	// ZtunnelOnly: on an authenticated stream only a ztunnel may subscribe, since the type holds every
	// workload or policy of the mesh.
	ZtunnelOnly bool
	// Rejected, when set, hears every NACK of the type, with the client's message; when it reports that what
	// the proxy is served changed (its generator now builds another shape for it), the connection gets a
	// full push. It runs under the connection's turn and must not block.
	Rejected func(p *Proxy, msg string) (changed bool)
}
