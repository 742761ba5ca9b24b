package debug

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
	security "istio.io/api/security/v1beta1"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/xds"
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
}

func typeStatus(w *xds.WatchedResource) string {
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
		ps := ProxySync{ID: c.ProxyID, Connection: c.ID, NodeID: c.NodeID, Type: string(c.Type), Namespace: c.Namespace,
			Delta: c.Delta, Types: []TypeSync{}}
		for i := range c.Watched {
			w := &c.Watched[i]
			ps.Types = append(ps.Types, TypeSync{Type: ShortType(w.TypeURL), TypeURL: w.TypeURL, Status: typeStatus(w),
				VersionSent: w.VersionSent, NonceSent: w.NonceSent, VersionAcked: w.VersionAcked, NonceAcked: w.NonceAcked,
				LastSent: w.LastSent, LastAcked: w.LastAcked, Error: w.LastError, NACKs: w.NACKs,
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

func (d *Debug) handleSyncz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, d.syncz())
}

type adsSubscription struct {
	Type          string   `json:"type"`
	TypeURL       string   `json:"typeUrl"`
	Wildcard      bool     `json:"wildcard"`
	ResourceNames []string `json:"resourceNames"`
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

func (d *Debug) handleAdsz(w http.ResponseWriter, _ *http.Request) {
	out := []adsConnection{}
	for _, c := range d.src.XDS.Connections() {
		ac := adsConnection{Connection: c.ID, ID: c.ProxyID, NodeID: c.NodeID, Type: string(c.Type), Namespace: c.Namespace,
			Delta: c.Delta, Peer: c.Peer, ConnectedAt: c.ConnectedAt, Subscriptions: []adsSubscription{}}
		for _, wr := range c.Watched {
			names := slices.Clone(wr.ResourceNames.Sorted())
			if names == nil {
				names = []string{}
			}
			ac.Subscriptions = append(ac.Subscriptions, adsSubscription{Type: ShortType(wr.TypeURL), TypeURL: wr.TypeURL,
				Wildcard: wr.Wildcard, ResourceNames: names})
		}
		out = append(out, ac)
	}
	writeJSON(w, http.StatusOK, out) // Connections() is sorted by connection id
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
	out := []configEntry{}
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
		for _, c := range list {
			out = append(out, configEntry{Kind: string(c.Kind), Namespace: c.Namespace, Name: c.Name, Source: c.Source,
				ResourceVersion: c.ResourceVersion, Generation: c.Generation, Created: c.CreationTimestamp})
		}
	}
	slices.SortFunc(out, func(a, b configEntry) int {
		return config.CompareKeys(config.Key{Kind: config.Kind(a.Kind), Namespace: a.Namespace, Name: a.Name},
			config.Key{Kind: config.Kind(b.Kind), Namespace: b.Namespace, Name: b.Name})
	})
	writeJSON(w, http.StatusOK, out)
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
}

func (d *Debug) current(w http.ResponseWriter) *model.PushContext {
	ps := d.src.Pipeline.Current()
	if ps == nil {
		writeError(w, http.StatusServiceUnavailable, "no snapshot yet")
	}
	return ps
}

func (d *Debug) handleRegistryz(w http.ResponseWriter, _ *http.Request) {
	ps := d.current(w)
	if ps == nil {
		return
	}
	out := []serviceEntry{}
	for _, s := range ps.AllServices() {
		se := serviceEntry{Hostname: s.Hostname, Namespace: s.Namespace, Name: s.Name, Source: s.Source.String(),
			Addresses: append([]string{}, s.Addresses...), Ports: []servicePort{}, Resolution: s.Resolution.String(),
			MeshExternal: s.MeshExternal, ExportTo: s.ExportTo, Selector: s.Selector}
		for _, p := range s.Ports {
			se.Ports = append(se.Ports, servicePort{Name: p.Name, Port: p.Port, Protocol: string(p.Protocol), TargetPort: p.TargetPort})
		}
		if eps := ps.Endpoints(s.Key()); eps != nil {
			se.Endpoints = eps.Count()
		}
		out = append(out, se)
	}
	writeJSON(w, http.StatusOK, out)
}

type endpointEntry struct {
	Address        string            `json:"address"`
	Port           uint32            `json:"port"`
	Health         string            `json:"health"`
	Weight         uint32            `json:"weight,omitempty"`
	Locality       string            `json:"locality,omitempty"`
	Network        string            `json:"network,omitempty"`
	TLSMode        string            `json:"tlsMode,omitempty"`
	ServiceAccount string            `json:"serviceAccount,omitempty"`
	Workload       string            `json:"workload,omitempty"`
	Labels         map[string]string `json:"labels,omitempty"`
}

type portEndpoints struct {
	Port      uint32          `json:"port"`
	Endpoints []endpointEntry `json:"endpoints"`
}

type serviceEndpoints struct {
	Service string          `json:"service"`
	Ports   []portEndpoints `json:"ports"`
	// WaitingForPods are pods (namespace/name) a cluster's EndpointSlice lists whose endpoints are held back
	// until the pod is known with an IP.
	WaitingForPods []string `json:"waitingForPods,omitempty"`
}

func (d *Debug) handleEndpointz(w http.ResponseWriter, r *http.Request) {
	ps := d.current(w)
	if ps == nil {
		return
	}
	only := r.URL.Query().Get("service")
	out := []serviceEndpoints{}
	for _, s := range ps.AllServices() {
		if only != "" && only != s.Key() {
			continue
		}
		se := serviceEndpoints{Service: s.Key(), Ports: []portEndpoints{}}
		if eps := ps.Endpoints(s.Key()); eps != nil {
			ports := make([]uint32, 0, len(eps.ByPort))
			for p := range eps.ByPort {
				ports = append(ports, p)
			}
			slices.Sort(ports)
			for _, p := range ports {
				pe := portEndpoints{Port: p, Endpoints: []endpointEntry{}}
				for _, ep := range eps.ByPort[p] {
					wl := ep.WorkloadName
					if wl != "" && ep.Namespace != "" {
						wl = ep.Namespace + "/" + wl
					}
					pe.Endpoints = append(pe.Endpoints, endpointEntry{Address: ep.Address, Port: ep.Port, Health: ep.Health.String(),
						Weight: ep.Weight, Locality: ep.Locality, Network: ep.Network, TLSMode: ep.TLSMode,
						ServiceAccount: ep.ServiceAccount, Workload: wl, Labels: ep.Labels})
				}
				se.Ports = append(se.Ports, pe)
			}
			for _, pod := range eps.WaitingForPods {
				se.WaitingForPods = append(se.WaitingForPods, s.Namespace+"/"+pod)
			}
		}
		out = append(out, se)
	}
	writeJSON(w, http.StatusOK, out)
}

// PushStatus is /debug/push_status.
type PushStatus struct {
	Version       uint64          `json:"version"`
	BuiltAt       time.Time       `json:"builtAt"`
	BuildSeconds  float64         `json:"buildSeconds"`
	Rebuilt       []string        `json:"rebuilt"`
	Services      int             `json:"services"`
	Endpoints     int             `json:"endpoints"`
	Workloads     int             `json:"workloads"`
	ConfigObjects map[string]int  `json:"configObjects"`
	Pipeline      map[string]any  `json:"pipeline"`
	Connected     int             `json:"connectedProxies"`
	Rejected      []*config.Error `json:"rejected"`
	Warnings      []*config.Error `json:"warnings"` // fields accepted but not implemented
	// EndpointsWaitingForPods counts pods whose endpoints are held back until the pod has an IP
	// (/debug/endpointz names them).
	EndpointsWaitingForPods int `json:"endpointsWaitingForPods"`
}

func (d *Debug) handlePushStatus(w http.ResponseWriter, _ *http.Request) {
	ps := d.current(w)
	if ps == nil {
		return
	}
	st := d.src.Pipeline.Stats()
	out := PushStatus{Version: ps.Version, BuiltAt: ps.BuiltAt, BuildSeconds: ps.BuildDuration.Seconds(),
		Rebuilt: append([]string{}, ps.Rebuilt...), Services: ps.ServiceCount(), Endpoints: ps.EndpointCount(),
		EndpointsWaitingForPods: ps.EndpointsWaitingForPods(), Workloads: ps.WorkloadCount(), ConfigObjects: map[string]int{},
		Pipeline: map[string]any{"builds": st.Builds, "fullPushes": st.FullPushes, "incrementalPushes": st.Incremental,
			"mergedEvents": st.MergedEvents, "lastBuildSeconds": st.LastBuild.Seconds()},
		Connected: d.src.XDS.Counters().Connected, Rejected: d.rejected(), Warnings: d.warnings()}
	slices.Sort(out.Rebuilt)
	for _, ki := range config.Kinds() {
		if n := d.src.Store.Count(ki.Kind); n > 0 {
			out.ConfigObjects[string(ki.Kind)] = n
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (d *Debug) rejected() []*config.Error {
	out := slices.Clone(d.src.Rejected())
	if out == nil {
		out = []*config.Error{}
	}
	sortErrors(out)
	return out
}

func sortErrors(out []*config.Error) {
	slices.SortStableFunc(out, func(a, b *config.Error) int {
		if c := strings.Compare(a.File, b.File); c != 0 {
			return c
		}
		if a.Index != b.Index {
			return a.Index - b.Index
		}
		return strings.Compare(a.Kind+"/"+a.Namespace+"/"+a.Name, b.Kind+"/"+b.Namespace+"/"+b.Name)
	})
}

// warnings returns the accepted-but-unimplemented fields, sorted as rejected sorts, never nil.
func (d *Debug) warnings() []*config.Error {
	out := []*config.Error{}
	if d.src.Warnings != nil {
		out = append(out, d.src.Warnings()...)
	}
	sortErrors(out)
	return out
}

type configError struct {
	*config.Error
	Text string `json:"error"`
}

func (d *Debug) handleConfigErrors(w http.ResponseWriter, _ *http.Request) {
	out := []configError{}
	for _, e := range d.rejected() {
		out = append(out, configError{Error: e, Text: e.Error()})
	}
	// Warnings follow the errors, so a client reading only the first entries still sees what was rejected.
	for _, e := range d.warnings() {
		out = append(out, configError{Error: e, Text: e.Error()})
	}
	writeJSON(w, http.StatusOK, out)
}

type policyEntry struct {
	Name   string          `json:"name"`
	Action string          `json:"action"`
	Source string          `json:"source"`
	Spec   json.RawMessage `json:"spec"`
}

type namespacePolicies struct {
	Namespace string        `json:"namespace"`
	MeshWide  bool          `json:"meshWide"`
	Policies  []policyEntry `json:"policies"`
}

func (d *Debug) handleAuthorizationz(w http.ResponseWriter, _ *http.Request) {
	ps := d.current(w)
	if ps == nil {
		return
	}
	var namespaces []string
	for _, c := range d.src.Store.List(config.AuthorizationPolicy) {
		namespaces = append(namespaces, c.Namespace)
	}
	slices.Sort(namespaces)
	namespaces = slices.Compact(namespaces)
	out := []namespacePolicies{}
	for _, ns := range namespaces {
		np := namespacePolicies{Namespace: ns, MeshWide: ns == ps.Mesh.RootNamespace, Policies: []policyEntry{}}
		for _, c := range ps.AuthorizationPoliciesInNamespace(ns) {
			pe := policyEntry{Name: c.Name, Source: c.Source, Spec: json.RawMessage("{}")}
			if m, ok := c.Spec.(*security.AuthorizationPolicy); ok {
				pe.Action = m.GetAction().String()
				if b, err := (protojson.MarshalOptions{}).Marshal(m); err == nil {
					pe.Spec = compactJSON(b)
				}
			}
			np.Policies = append(np.Policies, pe)
		}
		slices.SortFunc(np.Policies, func(a, b policyEntry) int { return strings.Compare(a.Name, b.Name) })
		out = append(out, np)
	}
	writeJSON(w, http.StatusOK, out)
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

// ConfigDump is /debug/config_dump: what the generators produce for a connected proxy now.
type ConfigDump struct {
	Proxy           string        `json:"proxy"`
	Connection      string        `json:"connection"`
	SnapshotVersion uint64        `json:"snapshotVersion"`
	Configs         []TypedConfig `json:"configs"`
}

// TypedConfig holds the resources of one type, each as protojson with its @type.
type TypedConfig struct {
	Type      string            `json:"type"`
	TypeURL   string            `json:"typeUrl"`
	Error     string            `json:"error,omitempty"`
	Resources []json.RawMessage `json:"resources"`
}

func (d *Debug) findConnection(id string) (xds.ConnectionStatus, bool) {
	var found xds.ConnectionStatus
	ok := false
	for _, c := range d.src.XDS.Connections() {
		if c.ID == id || c.ProxyID == id || c.NodeID == id {
			if !ok || c.ConnectedAt.After(found.ConnectedAt) {
				found, ok = c, true
			}
		}
	}
	return found, ok
}

func (d *Debug) handleConfigDump(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("proxyID")
	if id == "" {
		writeError(w, http.StatusBadRequest, "proxyID is required: POD.NAMESPACE, the node id, or a connection id")
		return
	}
	c, ok := d.findConnection(id)
	if !ok {
		writeError(w, http.StatusNotFound, "no connected proxy "+id)
		return
	}
	if ns := callerNamespace(r.Context()); ns != "" && c.Namespace != ns {
		writeError(w, http.StatusForbidden, "config_dump of proxy "+c.ProxyID+" needs a token of its namespace "+c.Namespace+
			" or of an admin namespace; this token's is "+ns)
		return
	}
	ps := d.current(w)
	if ps == nil {
		return
	}
	var only map[string]bool
	if t := r.URL.Query().Get("types"); t != "" {
		only = map[string]bool{}
		for s := range strings.SplitSeq(t, ",") {
			if s = strings.TrimSpace(s); s != "" {
				only[TypeURL(s)] = true
			}
		}
	}
	proxy := d.tracker.proxy(c.ID)
	if proxy == nil {
		p, err := xds.ParseProxy(&core.Node{Id: c.NodeID})
		if err != nil {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		proxy = p
	}
	out := ConfigDump{Proxy: c.ProxyID, Connection: c.ID, SnapshotVersion: ps.Version, Configs: []TypedConfig{}}
	for i := range c.Watched {
		wr := &c.Watched[i]
		if only != nil && !only[wr.TypeURL] {
			continue
		}
		tc := TypedConfig{Type: ShortType(wr.TypeURL), TypeURL: wr.TypeURL, Resources: []json.RawMessage{}}
		gen := d.src.Generators[wr.TypeURL]
		if gen == nil {
			tc.Error = "no generator serves this type"
			out.Configs = append(out.Configs, tc)
			continue
		}
		res, err := gen.Generate(proxy, ps, wr, nil)
		if err != nil {
			tc.Error = err.Error()
		}
		slices.SortFunc(res, func(a, b *xds.Resource) int { return strings.Compare(a.Name, b.Name) })
		for _, r := range res {
			if r == nil || r.Any == nil || !wr.Subscribed(r.Name) {
				continue
			}
			a := r.Any
			if wr.TypeURL == xds.SecretType {
				a = redactSecret(a)
			}
			tc.Resources = append(tc.Resources, anyJSON(r.Name, a))
		}
		out.Configs = append(out.Configs, tc)
	}
	slices.SortFunc(out.Configs, func(a, b TypedConfig) int { return strings.Compare(a.Type, b.Type) })
	writeJSON(w, http.StatusOK, out)
}

// redacted replaces key material in dumps, as Envoy's own config_dump writes it.
const redacted = "[redacted]"

// redactSecret returns an SDS secret without its private key, password or key provider config: a dump is
// for reading, and key material never leaves the process except to the proxy it is for. Certificates,
// public, stay. A secret that cannot be read is replaced whole.
func redactSecret(a *anypb.Any) *anypb.Any {
	s := &tlsv3.Secret{}
	if err := a.UnmarshalTo(s); err != nil {
		out, _ := anypb.New(&tlsv3.Secret{Name: redacted})
		return out
	}
	hide := func(d *core.DataSource) *core.DataSource {
		if d == nil {
			return nil
		}
		return &core.DataSource{Specifier: &core.DataSource_InlineString{InlineString: redacted}}
	}
	if c := s.GetTlsCertificate(); c != nil {
		c.PrivateKey, c.Password = hide(c.PrivateKey), hide(c.Password)
		if p := c.PrivateKeyProvider; p != nil {
			c.PrivateKeyProvider = &tlsv3.PrivateKeyProvider{ProviderName: p.ProviderName}
		}
	}
	if k := s.GetSessionTicketKeys(); k != nil {
		for i := range k.Keys {
			k.Keys[i] = hide(k.Keys[i])
		}
	}
	if g := s.GetGenericSecret(); g != nil {
		g.Secret = hide(g.Secret)
		for name := range g.Secrets {
			g.Secrets[name] = hide(g.Secrets[name])
		}
	}
	out, err := anypb.New(s)
	if err != nil {
		out, _ = anypb.New(&tlsv3.Secret{Name: redacted})
	}
	return out
}

// anyJSON renders a resource as Envoy's config_dump does: protojson with "@type". A type not linked into
// the binary is shown as its name and base64 bytes.
func anyJSON(name string, a *anypb.Any) json.RawMessage {
	if b, err := (protojson.MarshalOptions{}).Marshal(a); err == nil {
		return compactJSON(b)
	}
	b, _ := json.Marshal(map[string]string{"@type": a.TypeUrl, "name": name, "value": base64.StdEncoding.EncodeToString(a.Value)})
	return b
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
