package debug

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/store"
	"github.com/sextantmesh/sextant/pilot/xds"
)

const (
	historySize = 512 // push requests kept, to tell which snapshots concerned a proxy's watch
	recentSize  = 50  // pushes shown by /debug/pushz
)

// tracker follows what every connection was sent and has ACKed (as an xds.Observer), the push requests
// the pipeline publishes, and the snapshot version in which each config object's current generation first
// appears. Its methods are called from connection goroutines, the pipeline and the store; all are short.
type tracker struct {
	m *metrics

	mu    sync.Mutex
	conns map[string]*connState
	// history holds recent push requests by snapshot version; versions below histMin are forgotten.
	history map[uint64]*model.PushRequest
	histMin uint64
	recent  []*pushRecord // newest last
	// objects: config key → where its current (or deleting) generation is in the snapshot sequence.
	objects map[config.Key]*objectState
	pending map[config.Key]*objectState // objects whose snapshot version is not known yet
	pruned  time.Time                   // the last pruneDeleted: it walks every object, so at most once a minute
}

type connState struct {
	proxy *xds.Proxy
	types map[string]*typeState
}

// typeState is one connection's progress on one type, in snapshot versions.
type typeState struct {
	sentNonce   string
	sentVersion uint64
	sentStart   time.Time // the push's PushRequest.Start; zero for responses to the proxy's own request
	outstanding bool      // sent, neither ACKed nor NACKed yet
	// upTo is the newest snapshot the outstanding response is current for (later pushes found nothing new).
	upTo uint64
	// acked is the snapshot version the proxy runs for this type: that of the last ACKed response, advanced
	// by pushes that found nothing new for it.
	acked uint64
	// nackVersion and nackReason describe a NACK not yet superseded by an ACK.
	nackVersion uint64
	nackReason  string
}

// objectState tracks one config object's current generation.
type objectState struct {
	key             config.Key
	cfg             *config.Config // current, or the last one before deletion
	deleted         bool
	resourceVersion string
	generation      int64
	changedAt       time.Time
	// after is the snapshot version current when the change was seen: the change is in a later one.
	after uint64
	// version is the first snapshot containing the change; 0 while not known.
	version uint64
}

// pushRecord is one snapshot pushed, for the dashboard.
type pushRecord struct {
	Version         uint64         `json:"version"`
	Time            time.Time      `json:"time"`
	Full            bool           `json:"full"`
	Reason          map[string]int `json:"reason,omitempty"`
	ConfigsUpdated  []string       `json:"configsUpdated,omitempty"`
	ServicesUpdated int            `json:"servicesUpdated"`
	BuildSeconds    float64        `json:"buildSeconds"`
	// DebounceSeconds is from the first change to the snapshot being built.
	DebounceSeconds float64 `json:"debounceSeconds"`
	// Responses counts pushes to a proxy type that sent a response; PushSeconds is the longest of them.
	Responses   int     `json:"responses"`
	PushSeconds float64 `json:"pushSeconds"`
	// ACKs counts ACKs of responses carrying this push; ConvergenceSeconds is from the first change to the
	// latest of them.
	ACKs               int     `json:"acks"`
	ConvergenceSeconds float64 `json:"convergenceSeconds"`
	NACKs              int     `json:"nacks"`
}

func newTracker(m *metrics) *tracker {
	return &tracker{m: m, conns: map[string]*connState{}, history: map[uint64]*model.PushRequest{},
		objects: map[config.Key]*objectState{}, pending: map[config.Key]*objectState{}}
}

var _ xds.Observer = (*tracker)(nil)

func (t *tracker) typeState(connID string, proxy *xds.Proxy, typeURL string, create bool) *typeState {
	cs := t.conns[connID]
	if cs == nil {
		if !create {
			return nil
		}
		cs = &connState{proxy: proxy, types: map[string]*typeState{}}
		t.conns[connID] = cs
	}
	ts := cs.types[typeURL]
	if ts == nil && create {
		ts = &typeState{}
		cs.types[typeURL] = ts
	}
	return ts
}

// Sent implements xds.Observer.
func (t *tracker) Sent(connID string, proxy *xds.Proxy, typeURL, nonce string, version uint64, req *model.PushRequest) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ts := t.typeState(connID, proxy, typeURL, true)
	ts.sentNonce, ts.sentVersion, ts.upTo, ts.outstanding = nonce, version, version, true
	ts.sentStart = time.Time{}
	if req != nil && req.Push != nil {
		t.learn(req, false)
		ts.sentStart = req.Start
		if r := t.record(version); r != nil {
			r.Responses++
		}
	}
}

// Pushed implements xds.Observer.
func (t *tracker) Pushed(connID, typeURL string, version uint64, req *model.PushRequest, result string, took time.Duration) {
	short := ShortType(typeURL)
	t.m.pushes.WithLabelValues(short, result).Inc()
	t.m.pushTime.WithLabelValues(short).Observe(took.Seconds())
	t.mu.Lock()
	defer t.mu.Unlock()
	if req != nil && req.Push != nil {
		t.learn(req, false)
	}
	if r := t.record(version); r != nil && result == xds.PushSent {
		r.PushSeconds = max(r.PushSeconds, took.Seconds())
	}
	if result != xds.PushUnchanged {
		return
	}
	// Nothing new for this client in snapshot version: it is as current as its last response.
	ts := t.typeState(connID, nil, typeURL, false)
	switch {
	case ts == nil, ts.nackReason != "":
	case ts.outstanding:
		ts.upTo = max(ts.upTo, version)
	default:
		ts.acked = max(ts.acked, version)
	}
}

// Acked implements xds.Observer.
func (t *tracker) Acked(connID, typeURL, nonce string, nack bool, reason string) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	ts := t.typeState(connID, nil, typeURL, false)
	if ts == nil || nonce != ts.sentNonce || !ts.outstanding {
		return
	}
	ts.outstanding = false
	r := t.record(ts.sentVersion)
	if nack {
		ts.nackVersion, ts.nackReason = ts.sentVersion, reason
		if r != nil {
			r.NACKs++
		}
		return
	}
	ts.acked = max(ts.acked, ts.upTo, ts.sentVersion)
	ts.nackVersion, ts.nackReason = 0, ""
	if !ts.sentStart.IsZero() {
		d := now.Sub(ts.sentStart)
		t.m.convergence.WithLabelValues(ShortType(typeURL)).Observe(d.Seconds())
		if r != nil {
			r.ACKs++
			r.ConvergenceSeconds = max(r.ConvergenceSeconds, d.Seconds())
		}
	}
}

// Closed implements xds.Observer.
func (t *tracker) Closed(connID string) {
	t.mu.Lock()
	delete(t.conns, connID)
	t.mu.Unlock()
}

// record returns the push record of version, if still kept. Called with mu held.
func (t *tracker) record(version uint64) *pushRecord {
	for i := len(t.recent) - 1; i >= 0; i-- {
		if t.recent[i].Version == version {
			return t.recent[i]
		}
		if t.recent[i].Version < version {
			break
		}
	}
	return nil
}

// onPush receives every push request from the pipeline. The transport subscribed first and may already
// be sending it: Sent and Pushed then learn it from the request they carry (see learn).
func (t *tracker) onPush(req *model.PushRequest) {
	if req.Push == nil {
		return
	}
	t.m.buildTime.Observe(req.Push.BuildDuration.Seconds())
	t.mu.Lock()
	t.learn(req, true)
	t.mu.Unlock()
}

// learn records a push request: in the history, as a push record, and as the snapshot that first contains
// the pending changes it names. A request seen by the transport first (precise false) may have been merged
// with earlier ones; the pipeline's own copy replaces it when it arrives. Called with mu held.
func (t *tracker) learn(req *model.PushRequest, precise bool) {
	v := req.Push.Version
	if !precise && t.history[v] != nil {
		return
	}
	// Kept without its snapshot: 512 snapshots held only for this would be megabytes of superseded indexes.
	// Push filters asked about it later go without (EDS then finds the changed services' clusters by name).
	kept := *req
	kept.Push = nil
	t.history[v] = &kept
	if t.histMin == 0 || v < t.histMin {
		t.histMin = v
	}
	for len(t.history) > historySize {
		delete(t.history, t.histMin)
		t.histMin++
	}
	rec := t.record(v)
	if rec == nil {
		rec = &pushRecord{Version: v}
		i, _ := slices.BinarySearchFunc(t.recent, v, func(r *pushRecord, v uint64) int { return cmp.Compare(r.Version, v) })
		t.recent = slices.Insert(t.recent, i, rec)
		if len(t.recent) > recentSize {
			t.recent = slices.Delete(t.recent, 0, len(t.recent)-recentSize)
		}
	}
	rec.Time, rec.Full, rec.Reason = req.Push.BuiltAt, req.Full, req.Reason
	rec.ServicesUpdated, rec.BuildSeconds = len(req.ServicesUpdated), req.Push.BuildDuration.Seconds()
	if !req.Start.IsZero() && !req.Push.BuiltAt.IsZero() {
		rec.DebounceSeconds = max(0, req.Push.BuiltAt.Sub(req.Start).Seconds())
	}
	rec.ConfigsUpdated = rec.ConfigsUpdated[:0]
	for k := range req.ConfigsUpdated {
		rec.ConfigsUpdated = append(rec.ConfigsUpdated, k.String())
	}
	slices.Sort(rec.ConfigsUpdated)
	if len(rec.ConfigsUpdated) > 20 {
		rec.ConfigsUpdated = append(rec.ConfigsUpdated[:20], "...")
	}
	for k, o := range t.pending {
		_, named := req.ConfigsUpdated[k]
		// Before the first snapshot (after == 0) everything in the store is in the first one built.
		if (named && v > o.after) || o.after == 0 || v >= o.after+2 {
			o.version = v
			delete(t.pending, k)
		}
	}
}

// onStoreEvent records that an object changed; the next snapshot that includes it is found by onPush.
func (t *tracker) onStoreEvent(ev store.Event, current uint64) {
	key := ev.Key()
	o := &objectState{key: key, changedAt: time.Now(), after: current}
	if ev.New != nil {
		o.cfg, o.resourceVersion, o.generation = ev.New, ev.New.ResourceVersion, ev.New.Generation
	} else {
		o.deleted = true
		o.resourceVersion, o.generation = ev.Old.ResourceVersion, ev.Old.Generation
		if exportedKinds[key.Kind] {
			o.cfg = ev.Old // its exportTo still says who was concerned
		}
	}
	t.mu.Lock()
	t.objects[key] = o
	t.pending[key] = o
	if ev.New == nil && o.changedAt.Sub(t.pruned) > time.Minute {
		t.pruned = o.changedAt
		t.pruneDeleted(o.changedAt)
	}
	t.mu.Unlock()
}

// exportedKinds are the kinds whose deleted objects keep their config: dependsOn reads their exportTo.
// A deleted pod or EndpointSlice keeps only its key and versions, or an hour of churn would hold every
// deleted pod whole.
var exportedKinds = map[config.Kind]bool{config.Service: true, config.ServiceEntry: true,
	config.VirtualService: true, config.DestinationRule: true}

// pruneDeleted forgets deletions older than an hour, so churn does not grow the map. Called with mu held.
func (t *tracker) pruneDeleted(now time.Time) {
	for k, o := range t.objects {
		if o.deleted && now.Sub(o.changedAt) > time.Hour {
			delete(t.objects, k)
			delete(t.pending, k)
		}
	}
}

// recentPushes returns copies of the recent push records, newest first.
func (t *tracker) recentPushes() []pushRecord {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]pushRecord, 0, len(t.recent))
	for i := len(t.recent) - 1; i >= 0; i-- {
		out = append(out, *t.recent[i])
	}
	return out
}

// typeSnapshot is a copy of one connection's typeState.
type typeSnapshot struct {
	typeState
	known bool
}

func (t *tracker) connTypes(connID string) map[string]typeSnapshot {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]typeSnapshot{}
	if cs := t.conns[connID]; cs != nil {
		for typ, ts := range cs.types {
			out[typ] = typeSnapshot{typeState: *ts, known: true}
		}
	}
	return out
}

// object returns a copy of the object's tracking state.
func (t *tracker) object(k config.Key) (objectState, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	o := t.objects[k]
	if o == nil {
		return objectState{}, false
	}
	return *o, true
}

// requestsBetween returns the kept push requests with versions in (from, to], and whether every version in
// the range is still covered by the history.
func (t *tracker) requestsBetween(from, to uint64) ([]*model.PushRequest, bool) {
	if from >= to {
		return nil, true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if from+1 < t.histMin || t.histMin == 0 {
		return nil, false
	}
	var out []*model.PushRequest
	for v := from + 1; v <= to; v++ {
		if r := t.history[v]; r != nil {
			out = append(out, r)
		}
	}
	return out, true
}

// proxy returns the proxy of a connection that has been sent something.
func (t *tracker) proxy(connID string) *xds.Proxy {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cs := t.conns[connID]; cs != nil {
		return cs.proxy
	}
	return nil
}
