package model

import (
	"sync/atomic"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sextantmesh/sextant/pkg/nameset"
)

// Resource is one generated resource.
type Resource struct {
	Name string
	// Version identifies the content for delta xDS. Empty means a hash of the bytes; generators that share
	// resources between proxies should set it (e.g. from their cache key) so nothing is hashed per proxy.
	Version string
	// Any holds the marshaled resource. It may be shared between proxies: the transport never modifies it.
	Any *anypb.Any

	// delta is the resource as delta responses carry it, built on first use and shared by every response
	// (marshalling only reads it): one per proxy was a tenth of the allocations under endpoint churn.
	delta atomic.Pointer[discovery.Resource]
}

// DeltaResource returns r as a delta response carries it, with version v (the transport's version of r:
// Version, or the hash of the bytes). It is built once and shared: callers must not modify it.
func (r *Resource) DeltaResource(v string) *discovery.Resource {
	if d := r.delta.Load(); d != nil {
		return d
	}
	d := &discovery.Resource{Name: r.Name, Version: v, Resource: r.Any}
	r.delta.CompareAndSwap(nil, d)
	return r.delta.Load()
}

// Resources is what a generator returns.
type Resources []*Resource

// Generator builds the resources of one type URL for a proxy. It must not block on I/O nor modify push or w.
type Generator interface {
	// Generate returns the full state of the type for the proxy: every resource it watches (all of them
	// for a wildcard subscription, plus any names in w.ResourceNames). Names that do not exist are left out.
	// req is nil when the proxy's own request (a new or changed subscription) asked for the resources.
	Generate(proxy *Proxy, push *PushContext, w *WatchedResource, req *PushRequest) (Resources, error)
}

// DeltaGenerator is optionally implemented by generators that can compute a delta push themselves, e.g. only
// the workloads in req.WorkloadsUpdated. When incremental is false, resources is the full state and the
// transport computes removals by comparing with what it last sent.
type DeltaGenerator interface {
	Generator
	GenerateDeltas(proxy *Proxy, push *PushContext, w *WatchedResource, req *PushRequest) (
		resources Resources, removed []string, incremental bool, err error)
}

// PushFilter is optionally implemented by generators to say whether a push concerns a proxy's watch (EDS:
// only when a watched cluster's service is in req.ServicesUpdated). Without it a type is pushed on full
// pushes only. It is called often and must be cheap.
type PushFilter interface {
	NeedsPush(proxy *Proxy, w *WatchedResource, req *PushRequest) bool
}

// WatchedResource is a connection's subscription to one type URL and what was sent and acknowledged.
// Generators read it; only the transport changes it.
type WatchedResource struct {
	TypeURL string
	// ResourceNames are the names subscribed explicitly; with Wildcard they are added to "everything".
	// The set is shared with other connections subscribed to the same names: never modified, replaced.
	ResourceNames *nameset.Set
	Wildcard      bool

	NonceSent, NonceAcked     string
	VersionSent, VersionAcked string
	LastSent, LastAcked       time.Time
	// LastError is the error_detail of the latest NACK, kept until the proxy ACKs a later response.
	LastError string
	NACKs     int
}

// Subscribed reports whether name is covered by the subscription.
func (w *WatchedResource) Subscribed(name string) bool {
	if w.Wildcard {
		return true
	}
	return w.ResourceNames.Has(name)
}
