package xdsclient

import (
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Type URLs the models subscribe to.
const (
	ClusterType       = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	EndpointType      = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	ListenerType      = "type.googleapis.com/envoy.config.listener.v3.Listener"
	RouteType         = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	VirtualHostType   = "type.googleapis.com/envoy.config.route.v3.VirtualHost"
	AddressType       = "type.googleapis.com/istio.workload.Address"
	AuthorizationType = "type.googleapis.com/istio.security.Authorization"
)

// DefaultInitialFetchTimeout is Envoy's initial_fetch_timeout when the config source leaves it unset.
const DefaultInitialFetchTimeout = 15 * time.Second

// Resource is one resource a client holds.
type Resource struct {
	Name string
	// Version is the delta resource version, or the version_info of the state-of-the-world response.
	Version string
	Any     *anypb.Any
}

// Same reports whether a and b carry the same message (compared decoded: marshalling maps is not
// deterministic, so equal messages may have different bytes).
func Same(a, b *anypb.Any) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a.TypeUrl != b.TypeUrl {
		return false
	}
	if string(a.Value) == string(b.Value) {
		return true
	}
	ma, errA := a.UnmarshalNew()
	mb, errB := b.UnmarshalNew()
	if errA != nil || errB != nil {
		return false
	}
	return proto.Equal(ma, mb)
}

// Timeout is a wait that ended because initial_fetch_timeout passed, not because the server answered.
type Timeout struct {
	// What waited: "cluster NAME", "listener NAME".
	What string
	// For what it waited: the type URL and the resource name.
	TypeURL, Name string
	Waited        time.Duration
}

// Rejection is a resource the client NACKed.
type Rejection struct {
	TypeURL, Name string
	Any           *anypb.Any
}

// Resend is a resource (or, in state-of-the-world, a whole response) the server sent again unchanged after
// the client had rejected it (Rejected is the latest rejection). It is a NACK loop when nothing changed on
// the server in between.
type Resend struct {
	TypeURL, Name    string
	Rejected, Resent time.Time
}

// rejections remembers what was rejected, per type and name, so a re-send of the very same thing is seen.
type rejections map[string]map[string]rejection

type rejection struct {
	any *anypb.Any
	at  time.Time
}

func (r rejections) add(typeURL, name string, a *anypb.Any) {
	if r[typeURL] == nil {
		r[typeURL] = map[string]rejection{}
	}
	r[typeURL][name] = rejection{a, time.Now()}
}

// seen reports whether a is exactly what was rejected under name (and when it was), and forgets a rejection
// that a different version has replaced.
func (r rejections) seen(typeURL, name string, a *anypb.Any) (time.Time, bool) {
	old, ok := r[typeURL][name]
	if !ok {
		return time.Time{}, false
	}
	if Same(old.any, a) {
		return old.at, true
	}
	delete(r[typeURL], name)
	return time.Time{}, false
}

func (r rejections) list() []Rejection {
	var out []Rejection
	for _, t := range slices.Sorted(maps.Keys(r)) {
		for _, n := range slices.Sorted(maps.Keys(r[t])) {
			out = append(out, Rejection{TypeURL: t, Name: n, Any: r[t][n].any})
		}
	}
	return out
}

func cloneHeld(m map[string]Resource) map[string]Resource {
	out := make(map[string]Resource, len(m))
	maps.Copy(out, m)
	return out
}
