package debug

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/model"
)

// Sync states of one type for one proxy, as proxy-status shows them.
const (
	Synced  = "SYNCED"   // the latest response is ACKed
	Stale   = "STALE"    // sent, not ACKed yet
	NotSent = "NOT SENT" // watched (or not) but nothing sent
	Error   = "ERROR"    // the proxy NACKed and has not ACKed a later response
)

// TypeSync is one type's state for one proxy (/debug/syncz).
type TypeSync struct {
	Type          string    `json:"type"`
	TypeURL       string    `json:"typeUrl"`
	Status        string    `json:"status"`
	VersionSent   string    `json:"versionSent,omitempty"`
	NonceSent     string    `json:"nonceSent,omitempty"`
	VersionAcked  string    `json:"versionAcked,omitempty"`
	NonceAcked    string    `json:"nonceAcked,omitempty"`
	LastSent      time.Time `json:"lastSent,omitzero"`
	LastAcked     time.Time `json:"lastAcked,omitzero"`
	Error         string    `json:"error,omitempty"`
	NACKs         int       `json:"nacks"`
	Resources     int       `json:"subscribedNames"`
	Wildcard      bool      `json:"wildcard"`
	SnapshotAcked uint64    `json:"snapshotAcked"`
}

// ProxySync is one connection in /debug/syncz.
type ProxySync struct {
	ID         string     `json:"id"`
	Connection string     `json:"connection"`
	NodeID     string     `json:"nodeId"`
	Type       string     `json:"type"`
	Namespace  string     `json:"namespace"`
	Delta      bool       `json:"delta"`
	Types      []TypeSync `json:"types"`
	// Notes say where the proxy is served otherwise than its type and version would have it (a shape it
	// rejected), and why.
	Notes []string `json:"notes,omitempty"`
}

func typeStatus(w *model.WatchedResource) string {
	switch {
	case w.LastError != "":
		return Error
	case w.NonceSent == "":
		return NotSent
	case w.NonceAcked == w.NonceSent:
		return Synced
	}
	return Stale
}

func (d *Debug) syncz() []ProxySync {
	out := []ProxySync{}
	for _, c := range d.src.XDS.Connections() {
		tracked := d.tracker.connTypes(c.ID)
		// What a node claims is free text of any length; so is a NACK's reason.
		ps := ProxySync{ID: clip(c.ProxyID), Connection: c.ID, NodeID: clip(c.NodeID), Type: string(c.Type), Namespace: clip(c.Namespace),
			Delta: c.Delta, Types: []TypeSync{}, Notes: c.Notes}
		for i := range c.Watched {
			w := &c.Watched[i]
			ps.Types = append(ps.Types, TypeSync{Type: ShortType(w.TypeURL), TypeURL: w.TypeURL, Status: typeStatus(w),
				VersionSent: w.VersionSent, NonceSent: w.NonceSent, VersionAcked: w.VersionAcked, NonceAcked: w.NonceAcked,
				LastSent: w.LastSent, LastAcked: w.LastAcked, Error: clip(w.LastError), NACKs: w.NACKs,
				Resources: w.ResourceNames.Len(), Wildcard: w.Wildcard, SnapshotAcked: tracked[w.TypeURL].acked})
		}
		slices.SortFunc(ps.Types, func(a, b TypeSync) int { return strings.Compare(a.Type, b.Type) })
		out = append(out, ps)
	}
	slices.SortFunc(out, func(a, b ProxySync) int {
		if c := strings.Compare(a.ID, b.ID); c != 0 {
			return c
		}
		return strings.Compare(a.Connection, b.Connection)
	})
	return out
}

func (d *Debug) handleSyncz(w http.ResponseWriter, r *http.Request) {
	sync := d.syncz()
	writeList(w, r, len(sync), func(i int) ProxySync { return sync[i] })
}

type adsSubscription struct {
	Type          string   `json:"type"`
	TypeURL       string   `json:"typeUrl"`
	Wildcard      bool     `json:"wildcard"`
	ResourceNames []string `json:"resourceNames"`
	// ResourceNamesTotal counts the names subscribed to; ResourceNames lists the first, up to MaxNamesBytes.
	ResourceNamesTotal int `json:"resourceNamesTotal"`
}

type adsConnection struct {
	Connection    string            `json:"connection"`
	ID            string            `json:"id"`
	NodeID        string            `json:"nodeId"`
	Type          string            `json:"type"`
	Namespace     string            `json:"namespace"`
	Delta         bool              `json:"delta"`
	Peer          string            `json:"peer"`
	ConnectedAt   time.Time         `json:"connectedAt"`
	Subscriptions []adsSubscription `json:"subscriptions"`
}

func (d *Debug) handleAdsz(w http.ResponseWriter, r *http.Request) {
	conns := d.src.XDS.Connections() // sorted by connection id
	writeList(w, r, len(conns), func(i int) adsConnection {
		c := conns[i]
		ac := adsConnection{Connection: c.ID, ID: clip(c.ProxyID), NodeID: clip(c.NodeID), Type: string(c.Type), Namespace: clip(c.Namespace),
			Delta: c.Delta, Peer: c.Peer, ConnectedAt: c.ConnectedAt, Subscriptions: []adsSubscription{}}
		for _, wr := range c.Watched {
			all := wr.ResourceNames.Sorted()
			ac.Subscriptions = append(ac.Subscriptions, adsSubscription{Type: ShortType(wr.TypeURL), TypeURL: wr.TypeURL,
				Wildcard: wr.Wildcard, ResourceNames: firstNames(all), ResourceNamesTotal: len(all)})
		}
		return ac
	})
}

// firstNames returns the first names, each clipped, up to MaxNamesBytes in all: a proxy may subscribe to
// hundreds of thousands. Never nil.
func firstNames(all []string) []string {
	out := []string{}
	used := 0
	for _, n := range all {
		n = clip(n)
		if used += len(n) + 8; used > MaxNamesBytes {
			break
		}
		out = append(out, n)
	}
	return out
}

type configEntry struct {
	Kind            string    `json:"kind"`
	Namespace       string    `json:"namespace,omitempty"`
	Name            string    `json:"name"`
	Source          string    `json:"source"`
	ResourceVersion string    `json:"resourceVersion"`
	Generation      int64     `json:"generation"`
	Created         time.Time `json:"creationTimestamp,omitzero"`
}

func (d *Debug) handleConfigz(w http.ResponseWriter, r *http.Request) {
	kind, ns := r.URL.Query().Get("kind"), r.URL.Query().Get("namespace")
	var all []*config.Config
	for _, ki := range config.Kinds() {
		if kind != "" && !strings.EqualFold(kind, string(ki.Kind)) {
			continue
		}
		var list []*config.Config
		if ns != "" {
			list = d.src.Store.ListNamespace(ki.Kind, ns)
		} else {
			list = d.src.Store.List(ki.Kind)
		}
		all = append(all, list...)
	}
	slices.SortFunc(all, func(a, b *config.Config) int { return config.CompareKeys(a.Key, b.Key) })
	writeList(w, r, len(all), func(i int) configEntry {
		c := all[i]
		return configEntry{Kind: string(c.Kind), Namespace: clip(c.Namespace), Name: clip(c.Name), Source: clip(c.Source),
			ResourceVersion: clip(c.ResourceVersion), Generation: c.Generation, Created: c.CreationTimestamp}
	})
}

type servicePort struct {
	Name       string `json:"name,omitempty"`
	Port       uint32 `json:"port"`
	Protocol   string `json:"protocol"`
	TargetPort uint32 `json:"targetPort,omitempty"`
}

type serviceEntry struct {
	Hostname     string            `json:"hostname"`
	Namespace    string            `json:"namespace"`
	Name         string            `json:"name"`
	Source       string            `json:"source"`
	Addresses    []string          `json:"addresses"`
	Ports        []servicePort     `json:"ports"`
	Resolution   string            `json:"resolution"`
	MeshExternal bool              `json:"meshExternal"`
	ExportTo     []string          `json:"exportTo"`
	Selector     map[string]string `json:"selector,omitempty"`
	Endpoints    int               `json:"endpoints"`
	// Truncated says why addresses, ports, exportTo and selector are left out: the entry would be larger
	// than MaxItemBytes.
	Truncated string `json:"truncated,omitempty"`
}

func (d *Debug) current(w http.ResponseWriter) *model.PushContext {
	ps := d.src.Pipeline.Current()
	if ps == nil {
		writeError(w, http.StatusServiceUnavailable, "no snapshot yet")
	}
	return ps
}

func (d *Debug) handleRegistryz(w http.ResponseWriter, r *http.Request) {
	ps := d.current(w)
	if ps == nil {
		return
	}
	services := ps.AllServices()
	writeList(w, r, len(services), func(i int) serviceEntry {
		s := services[i]
		se := serviceEntry{Hostname: s.Hostname, Namespace: s.Namespace, Name: s.Name, Source: s.Source.String(),
			Addresses: append([]string{}, s.Addresses...), Ports: []servicePort{}, Resolution: s.Resolution.String(),
			MeshExternal: s.MeshExternal, ExportTo: s.ExportTo, Selector: s.Selector}
		for _, p := range s.Ports {
			se.Ports = append(se.Ports, servicePort{Name: p.Name, Port: p.Port, Protocol: string(p.Protocol), TargetPort: p.TargetPort})
		}
		if eps := ps.Endpoints(s.Key()); eps != nil {
			se.Endpoints = eps.Count()
		}
		if n := encodedSize(se, 1); n > MaxItemBytes {
			se.Addresses, se.Ports, se.ExportTo, se.Selector = []string{}, []servicePort{}, nil, nil
			se.Truncated = fmt.Sprintf("addresses, ports, exportTo and selector left out: the entry takes %d bytes, more than %d", n, MaxItemBytes)
		}
		return se
	})
}

// compactJSON re-encodes protojson output (whose spacing is deliberately unstable) through encoding/json.
func compactJSON(b []byte) json.RawMessage {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return json.RawMessage(b)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(b)
	}
	return out
}

func (d *Debug) handlePushz(w http.ResponseWriter, _ *http.Request) {
	out := map[string]any{
		"pushes":      d.tracker.recentPushes(),
		"convergence": d.histogram("sextant_proxy_convergence_seconds"),
		"pushTime":    d.histogram("sextant_xds_push_duration_seconds"),
	}
	writeJSON(w, http.StatusOK, out)
}

// Bucket is one cumulative histogram bucket summed over every label.
type Bucket struct {
	UpperBound float64 `json:"le"`
	Count      uint64  `json:"count"`
}

// Histogram is a metric's buckets summed over its labels (+Inf is the total count).
type Histogram struct {
	Count   uint64   `json:"count"`
	Sum     float64  `json:"sum"`
	Buckets []Bucket `json:"buckets"`
}

func (d *Debug) histogram(name string) Histogram {
	out := Histogram{Buckets: []Bucket{}}
	families, err := d.registry.Gather()
	if err != nil {
		return out
	}
	sums := map[float64]uint64{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			h := m.GetHistogram()
			out.Count += h.GetSampleCount()
			out.Sum += h.GetSampleSum()
			for _, b := range h.GetBucket() {
				sums[b.GetUpperBound()] += b.GetCumulativeCount()
			}
		}
	}
	for _, le := range timeBuckets {
		out.Buckets = append(out.Buckets, Bucket{UpperBound: le, Count: sums[le]})
	}
	return out
}
