package model

import (
	"maps"
	"time"

	"github.com/sextantmesh/sextant/pilot/config"
)

// PushRequest tells the transport what changed and with which snapshot to push.
type PushRequest struct {
	// Full asks for every resource type to be recomputed; otherwise only the services in ServicesUpdated
	// (EDS) and the workloads in WorkloadsUpdated (workload xDS) changed.
	Full bool
	// ConfigsUpdated names the config objects that changed.
	ConfigsUpdated map[config.Key]struct{}
	// ServicesUpdated holds namespace/hostname of services whose endpoints changed.
	ServicesUpdated map[string]struct{}
	// WorkloadsUpdated holds uids of workloads added, changed or removed.
	WorkloadsUpdated map[string]struct{}
	// AddressesUpdated holds the services of ServicesUpdated whose endpoint addresses sidecars listen on
	// (UpdateResult.AddressesUpdated): an incremental push then changes the listeners of the proxies that
	// see them.
	AddressesUpdated map[string]struct{}
	// SecretAccessUpdated holds the identities (NAMESPACE/SERVICE_ACCOUNT) whose permission to be served
	// their namespace's Secrets was decided or changed: their proxies get SDS again, nothing else.
	SecretAccessUpdated map[string]struct{}
	// Reason counts why the push happened ("config", "endpoint", "proxy-connect", ...).
	Reason map[string]int
	// Start is when the first change in this request was seen; push latency is measured from it.
	Start time.Time
	// Push is the snapshot to push.
	Push *PushContext
}

// Merge combines two requests for the same connection; the result pushes the newer snapshot and
// everything either asked for. Neither input is modified.
func (r *PushRequest) Merge(o *PushRequest) *PushRequest {
	if r == nil {
		return o
	}
	if o == nil {
		return r
	}
	out := &PushRequest{
		Full:                r.Full || o.Full,
		ConfigsUpdated:      unionKeys(r.ConfigsUpdated, o.ConfigsUpdated),
		ServicesUpdated:     unionKeys(r.ServicesUpdated, o.ServicesUpdated),
		WorkloadsUpdated:    unionKeys(r.WorkloadsUpdated, o.WorkloadsUpdated),
		AddressesUpdated:    unionKeys(r.AddressesUpdated, o.AddressesUpdated),
		SecretAccessUpdated: unionKeys(r.SecretAccessUpdated, o.SecretAccessUpdated),
		Reason:              map[string]int{},
		Start:               r.Start,
		Push:                r.Push,
	}
	if o.Start.Before(out.Start) || out.Start.IsZero() {
		out.Start = o.Start
	}
	if o.Push != nil && (out.Push == nil || o.Push.Version > out.Push.Version) {
		out.Push = o.Push
	}
	for k, v := range r.Reason {
		out.Reason[k] += v
	}
	for k, v := range o.Reason {
		out.Reason[k] += v
	}
	return out
}

func unionKeys[K comparable](a, b map[K]struct{}) map[K]struct{} {
	if len(a) == 0 && len(b) == 0 {
		return nil
	}
	out := make(map[K]struct{}, len(a)+len(b))
	maps.Copy(out, a)
	maps.Copy(out, b)
	return out
}
