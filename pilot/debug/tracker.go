package debug

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
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
//
// What is called for every response to every proxy (Sent, Pushed, Acked) takes only its connection's lock
// and atomics. With one lock for everything, those calls (18,000 a second under endpoint churn to 300
// proxies) convoyed on a busy machine: each hand-over of the lock waited for the next holder to be
// scheduled, and store events from Kubernetes waited behind them for up to 25 ms.
type tracker struct {
	m *metrics

	connMu sync.RWMutex // guards conns; each connState guards its own types
	conns  map[string]*connState

	// recent holds the records of recent pushes, oldest first; copied on write under mu, read without it.
	recent atomic.Pointer[[]*pushEntry]
	// learned is the newest snapshot version learn has recorded: the transport's calls for it skip mu.
	learned atomic.Uint64

	mu sync.Mutex
	// history holds recent push requests by snapshot version; versions below histMin are forgotten.
	history map[uint64]*model.PushRequest
	histMin uint64
	// objects: config key → where its current (or deleting) generation is in the snapshot sequence.
	objects map[config.Key]*objectState
	pending map[config.Key]*objectState // objects whose snapshot version is not known yet
	pruned  time.Time                   // the last pruneDeleted: it walks every object, so at most once a minute
}

type connState struct {
	proxy *model.Proxy // set at creation
	mu    sync.Mutex
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
	key config.Key
	// exportTo is the object's, current or the last before deletion: it tells who was concerned. Only it is
	// kept, not the object, so deleted objects held for an hour cost a few bytes each.
	exportTo        []string
	deleted         bool
	resourceVersion string
	generation      int64
	changedAt       time.Time
	// after is the snapshot version current when the change was seen: the change is in a later one.
	after uint64
	// version is the first snapshot containing the change; 0 while not known.
	version uint64
}

// pushEntry is one snapshot pushed. rec is written by learn under the tracker's mu; the counters are
// updated by connection goroutines without it.
type pushEntry struct {
	version                uint64
	rec                    pushRecord
	responses, acks, nacks atomic.Int64
	pushNanos, convNanos   atomic.Int64 // the longest push and the latest ACK, from the first change
}

// storeMax raises v to n.
func storeMax(v *atomic.Int64, n int64) {
	for old := v.Load(); n > old && !v.CompareAndSwap(old, n); old = v.Load() {
	}
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

// conn returns a connection's state, creating it if asked to.
func (t *tracker) conn(connID string, proxy *model.Proxy, create bool) *connState {
	t.connMu.RLock()
	cs := t.conns[connID]
	t.connMu.RUnlock()
	if cs != nil || !create {
		return cs
	}
	t.connMu.Lock()
	defer t.connMu.Unlock()
	if cs = t.conns[connID]; cs == nil {
		cs = &connState{proxy: proxy, types: map[string]*typeState{}}
		t.conns[connID] = cs
	}
	return cs
}

// typeState returns the state of one type, creating it if asked to. Called with cs.mu held.
func (cs *connState) typeState(typeURL string, create bool) *typeState {
	ts := cs.types[typeURL]
	if ts == nil && create {
		ts = &typeState{}
		cs.types[typeURL] = ts
	}
	return ts
}

// learnSent learns a push request the transport is sending, unless already known.
func (t *tracker) learnSent(req *model.PushRequest) {
	if req == nil || req.Push == nil || t.learned.Load() == req.Push.Version {
		return
	}
	t.mu.Lock()
	t.learn(req, false)
	t.mu.Unlock()
}

// Sent implements xds.Observer.
func (t *tracker) Sent(connID string, proxy *model.Proxy, typeURL, nonce string, version uint64, req *model.PushRequest) {
	var start time.Time
	if req != nil && req.Push != nil {
		t.learnSent(req)
		start = req.Start
		if e := t.record(version); e != nil {
			e.responses.Add(1)
		}
	}
	cs := t.conn(connID, proxy, true)
	cs.mu.Lock()
	defer cs.mu.Unlock()
	ts := cs.typeState(typeURL, true)
	ts.sentNonce, ts.sentVersion, ts.upTo, ts.outstanding = nonce, version, version, true
	ts.sentStart = start
}

// Pushed implements xds.Observer.
func (t *tracker) Pushed(connID, typeURL string, version uint64, req *model.PushRequest, result string, took time.Duration) {
	t.m.forType(typeURL).pushed(result, took)
	t.learnSent(req)
	if result == xds.PushSent {
		if e := t.record(version); e != nil {
			storeMax(&e.pushNanos, int64(took))
		}
	}
	if result != xds.PushUnchanged {
		return
	}
	// Nothing new for this client in snapshot version: it is as current as its last response.
	cs := t.conn(connID, nil, false)
	if cs == nil {
		return
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	ts := cs.typeState(typeURL, false)
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
	cs := t.conn(connID, nil, false)
	if cs == nil {
		return
	}
	cs.mu.Lock()
	ts := cs.typeState(typeURL, false)
	if ts == nil || nonce != ts.sentNonce || !ts.outstanding {
		cs.mu.Unlock()
		return
	}
	ts.outstanding = false
	sentVersion, sentStart := ts.sentVersion, ts.sentStart
	if nack {
		ts.nackVersion, ts.nackReason = ts.sentVersion, reason
	} else {
		ts.acked = max(ts.acked, ts.upTo, ts.sentVersion)
		ts.nackVersion, ts.nackReason = 0, ""
	}
	cs.mu.Unlock()
	e := t.record(sentVersion)
	if nack {
		if e != nil {
			e.nacks.Add(1)
		}
		return
	}
	if !sentStart.IsZero() {
		d := now.Sub(sentStart)
		t.m.forType(typeURL).convergence.Observe(d.Seconds())
		if e != nil {
			e.acks.Add(1)
			storeMax(&e.convNanos, int64(d))
		}
	}
}

// Closed implements xds.Observer.
func (t *tracker) Closed(connID string) {
	t.connMu.Lock()
	delete(t.conns, connID)
	t.connMu.Unlock()
}

// record returns the push entry of version, if still kept.
func (t *tracker) record(version uint64) *pushEntry {
	list := t.recent.Load()
	if list == nil {
		return nil
	}
	for i := len(*list) - 1; i >= 0; i-- {
		if e := (*list)[i]; e.version == version {
			return e
		} else if e.version < version {
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
	e := t.record(v)
	if e == nil {
		e = &pushEntry{version: v, rec: pushRecord{Version: v}}
		var list []*pushEntry
		if old := t.recent.Load(); old != nil {
			list = *old
		}
		i, _ := slices.BinarySearchFunc(list, v, func(e *pushEntry, v uint64) int { return cmp.Compare(e.version, v) })
		list = slices.Insert(slices.Clone(list), i, e)
		if len(list) > recentSize {
			list = list[len(list)-recentSize:]
		}
		t.recent.Store(&list)
	}
	// Published only once the record is in recent: learnSent skips a version it sees here, and a response
	// counted between the two would find no record and be lost.
	if v > t.learned.Load() {
		t.learned.Store(v)
	}
	rec := &e.rec
	rec.Time, rec.Full, rec.Reason = req.Push.BuiltAt, req.Full, req.Reason
	rec.ServicesUpdated, rec.BuildSeconds = len(req.ServicesUpdated), req.Push.BuildDuration.Seconds()
	if !req.Start.IsZero() && !req.Push.BuiltAt.IsZero() {
		rec.DebounceSeconds = max(0, req.Push.BuiltAt.Sub(req.Start).Seconds())
	}
	rec.ConfigsUpdated = rec.ConfigsUpdated[:0]
	for k := range req.ConfigsUpdated {
		rec.ConfigsUpdated = append(rec.ConfigsUpdated, clip(k.String()))
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
		o.exportTo, o.resourceVersion, o.generation = exportTo(ev.New), ev.New.ResourceVersion, ev.New.Generation
	} else {
		o.deleted = true
		o.exportTo, o.resourceVersion, o.generation = exportTo(ev.Old), ev.Old.ResourceVersion, ev.Old.Generation
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
	list := t.recent.Load()
	if list == nil {
		return []pushRecord{}
	}
	out := make([]pushRecord, 0, len(*list))
	for i := len(*list) - 1; i >= 0; i-- {
		e := (*list)[i]
		r := e.rec
		r.ConfigsUpdated = slices.Clone(r.ConfigsUpdated) // learn may rewrite the entry's slice later
		r.Responses, r.ACKs, r.NACKs = int(e.responses.Load()), int(e.acks.Load()), int(e.nacks.Load())
		r.PushSeconds = time.Duration(e.pushNanos.Load()).Seconds()
		r.ConvergenceSeconds = time.Duration(e.convNanos.Load()).Seconds()
		out = append(out, r)
	}
	return out
}

// typeSnapshot is a copy of one connection's typeState.
type typeSnapshot struct {
	typeState
	known bool
}

func (t *tracker) connTypes(connID string) map[string]typeSnapshot {
	out := map[string]typeSnapshot{}
	if cs := t.conn(connID, nil, false); cs != nil {
		cs.mu.Lock()
		for typ, ts := range cs.types {
			out[typ] = typeSnapshot{typeState: *ts, known: true}
		}
		cs.mu.Unlock()
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
func (t *tracker) proxy(connID string) *model.Proxy {
	if cs := t.conn(connID, nil, false); cs != nil {
		return cs.proxy
	}
	return nil
}
