package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Result is one scenario's figures.
type Result struct {
	Scenario string `json:"scenario"`
	Changes  int    `json:"changes"`
	// Proxies is the number of interested proxies per change (the largest seen).
	Proxies int `json:"proxies"`
	// Missed counts proxy-changes not seen within the timeout.
	Missed int `json:"missed"`
	// Latency over every (change, interested proxy): time from the file write or the first API call until
	// that proxy has it.
	P50Ms float64 `json:"p50Ms"`
	P99Ms float64 `json:"p99Ms"`
	MaxMs float64 `json:"maxMs"`
	// Per change: time until the last interested proxy has it.
	AllP50Ms float64 `json:"allP50Ms"`
	AllP99Ms float64 `json:"allP99Ms"`
	// AllMs is that time for each change, in order.
	AllMs []float64 `json:"allMs,omitempty"`
	// Averages per change, measured at the clients (bytes are protobuf sizes of the responses).
	BytesPerChange     float64 `json:"bytesPerChange"`
	ResponsesPerChange float64 `json:"responsesPerChange"`
	CPUPerChange       float64 `json:"cpuSecondsPerChange"`
	// FleetCPUPerChange is the harness's CPU (its simulated proxies, on the same cores as the server).
	FleetCPUPerChange float64 `json:"harnessCpuSecondsPerChange"`
	RSSBytes          int64   `json:"rssBytes"`
	PeakRSSBytes      int64   `json:"peakRssBytes"`
	// Churn only: memory at the start and the end of the run.
	RSSStart  int64   `json:"rssStart,omitempty"`
	RSSEnd    int64   `json:"rssEnd,omitempty"`
	HeapStart int64   `json:"liveHeapStart,omitempty"` // after a forced GC
	HeapEnd   int64   `json:"liveHeapEnd,omitempty"`
	Seconds   float64 `json:"seconds,omitempty"`
	// Bytes per change by type (CDS, EDS, LDS, RDS, Address, Authorization).
	BytesByType map[string]float64 `json:"bytesByType,omitempty"`
	// Envoy's cluster warming in the sidecars over the scenario (warming.go): warmings ended by a load
	// assignment and how long they took, those that reached initial_fetch_timeout, and those still warming
	// at its end.
	Warmings        int     `json:"warmings,omitempty"`
	WarmingP50Ms    float64 `json:"warmingP50Ms,omitempty"`
	WarmingP99Ms    float64 `json:"warmingP99Ms,omitempty"`
	WarmingTimeouts int     `json:"warmingTimeouts"`
	WarmingPending  int     `json:"warmingPending,omitempty"`
	// Figures are a scenario's own measurements, named in its note and in docs/benchmarks.md.
	Figures map[string]float64 `json:"figures,omitempty"`
	Note    string             `json:"note,omitempty"`
	// warmingSet: the scenario filled in its warming figures itself.
	warmingSet bool
}

// change collects the latencies of one change over its interested proxies. The proxies time from start
// (when the change is made, before its watches are registered); began, taken just before the first write,
// is where the reported latency starts.
type change struct {
	start   time.Time
	began   time.Time // set by begin, on the harness's goroutine
	written time.Time // when the applier returned (churn only)
	sliceRV string    // the EndpointSlice's new resource version (churn on the Kubernetes source only)
	mu      sync.Mutex
	lats    []time.Duration
	pending atomic.Int64
	done    chan struct{}
}

// newChange starts a change; register its watches, then seal it.
func newChange() *change {
	c := &change{start: time.Now(), done: make(chan struct{})}
	c.pending.Store(1) // held until seal, so a watch satisfied at once does not finish the change
	return c
}

// seal ends registration.
func (c *change) seal() { c.release() }

// begin starts the clock: the applier calls it just before its first write.
func (c *change) begin() {
	if c.began.IsZero() {
		c.began = time.Now()
	}
}

func (c *change) release() {
	if c.pending.Add(-1) == 0 {
		close(c.done)
	}
}

// watch registers pred on p for this change.
func (c *change) watch(p *proxy, pred func(*proxy) bool) {
	c.pending.Add(1)
	p.expect(c, c.start, pred, func(d time.Duration) {
		c.mu.Lock()
		c.lats = append(c.lats, d)
		c.mu.Unlock()
		c.release()
	})
}

// wait blocks until every proxy has the change or the deadline; it returns the latencies and how many missed.
func (c *change) wait(deadline time.Time, proxies []*proxy) ([]time.Duration, int) {
	select {
	case <-c.done:
	case <-time.After(time.Until(deadline)):
	}
	for _, p := range proxies {
		p.dropWaiters(c)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	lats := slices.Clone(c.lats)
	if !c.began.IsZero() {
		skew := c.began.Sub(c.start)
		for i, d := range lats {
			lats[i] = max(0, d-skew)
		}
	}
	return lats, int(c.pending.Load())
}

// settle follows a clean-up made after since: it waits for the first response after since (the server's
// answer; at most 3 s, for clean-ups no proxy hears of), then for quiet. Waiting for quiet alone returned at
// once when nothing had arrived for a while before the clean-up, and its push then landed in the next
// measurement.
func (h *harness) settle(since time.Time, d, limit time.Duration) {
	first := time.Now().Add(3 * time.Second)
	for time.Now().Before(first) && h.lastResponse.Load() < since.UnixNano() {
		time.Sleep(5 * time.Millisecond)
	}
	h.quiet(d, limit)
}

// quiet waits until no proxy has received anything for d (at most limit).
func (h *harness) quiet(d, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		last := time.Unix(0, h.lastResponse.Load())
		if time.Since(last) >= d {
			return
		}
		time.Sleep(d / 5)
	}
}

// measure runs one change: register waiters (before the write), apply it, wait, and take the counters.
// apply passes begin on to the applier, which calls it just before its first write.
type sample struct {
	byType    map[string]int64
	lats      []time.Duration
	missed    int
	interest  int
	bytes     int64
	responses int64
	cpu       float64
	fleetCPU  float64 // the harness's own: the simulated proxies share the server's cores
}

func (h *harness) measure(register func(c *change) int, apply func(begin func()) error) (sample, error) {
	return h.measureFor(h.cfg.Timeout, register, apply)
}

// measureFor is measure with a timeout of its own.
func (h *harness) measureFor(timeout time.Duration, register func(c *change) int, apply func(begin func()) error) (sample, error) {
	h.quiet(h.cfg.Quiet, 5*time.Second)
	st0, fleet0 := h.srv.stats(), procCPUSeconds("self", h.srv.clkTck)
	b0, r0, t0 := h.bytes.Load(), h.responses.Load(), h.typeBytes()
	c := newChange()
	n := register(c)
	c.seal()
	if err := apply(c.begin); err != nil {
		return sample{}, err
	}
	lats, missed := c.wait(time.Now().Add(timeout), h.all())
	h.quiet(h.cfg.Quiet, 5*time.Second)
	st1 := h.srv.stats()
	return sample{lats: lats, missed: missed, interest: n, bytes: h.bytes.Load() - b0, responses: h.responses.Load() - r0,
		cpu: st1.CPUSeconds - st0.CPUSeconds, fleetCPU: procCPUSeconds("self", h.srv.clkTck) - fleet0,
		byType: typeDiff(h.typeBytes(), t0)}, nil
}

func (h *harness) typeBytes() map[string]int64 {
	out := map[string]int64{}
	for t, c := range h.byType {
		out[shortType[t]] = c.Load()
	}
	return out
}

func typeDiff(a, b map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range a {
		if d := v - b[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

func (h *harness) all() []*proxy { return append(slices.Clone(h.sidecars), h.ztunnels...) }

// summarize turns samples into a Result.
func (h *harness) summarize(name string, samples []sample) *Result {
	r := &Result{Scenario: name, Changes: len(samples)}
	var pooled, last []time.Duration
	var bytes, resps int64
	var cpu, fleet float64
	for _, s := range samples {
		pooled = append(pooled, s.lats...)
		if len(s.lats) > 0 {
			last = append(last, slices.Max(s.lats))
		}
		r.Missed += s.missed
		r.Proxies = max(r.Proxies, s.interest)
		bytes += s.bytes
		for k, v := range s.byType {
			if r.BytesByType == nil {
				r.BytesByType = map[string]float64{}
			}
			r.BytesByType[k] += float64(v) / float64(len(samples))
		}
		resps += s.responses
		cpu += s.cpu
		fleet += s.fleetCPU
	}
	r.P50Ms, r.P99Ms, r.MaxMs = pct(pooled, 50), pct(pooled, 99), pct(pooled, 100)
	r.AllP50Ms, r.AllP99Ms = pct(last, 50), pct(last, 99)
	for _, d := range last {
		r.AllMs = append(r.AllMs, float64(d.Microseconds())/1000)
	}
	if n := float64(len(samples)); n > 0 {
		r.BytesPerChange, r.ResponsesPerChange, r.CPUPerChange = float64(bytes)/n, float64(resps)/n, cpu/n
		r.FleetCPUPerChange = fleet / n
	}
	st := h.srv.stats()
	r.RSSBytes, r.PeakRSSBytes = st.RSS, st.HWM
	return r
}

// pct is the nearest-rank percentile in milliseconds.
func pct(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	i = max(0, min(i, len(s)-1))
	return float64(s[i].Microseconds()) / 1000
}

// profileDuring saves a CPU profile of the server while f runs (when -profile is set), and with
// -profile-trace an execution trace of the same length: it shows what goroutines wait for.
func (h *harness) profileDuring(name string, f func()) {
	if h.cfg.ProfileDir == "" {
		f()
		return
	}
	ctx, cancel := context.WithCancel(h.ctx)
	defer cancel()
	seconds := max(1, int(h.cfg.ProfileSeconds.Seconds()))
	downloads := map[string]string{name + ".pprof": fmt.Sprintf("/debug/pprof/profile?seconds=%d", seconds)}
	if h.cfg.ProfileTrace {
		downloads[name+".trace"] = fmt.Sprintf("/debug/pprof/trace?seconds=%d", seconds)
	}
	done := make(chan error, len(downloads))
	for file, urlPath := range downloads {
		path := filepath.Join(h.cfg.ProfileDir, file)
		go func() { done <- h.srv.download(ctx, urlPath, path) }()
	}
	time.Sleep(100 * time.Millisecond) // let the profile start
	f()
	for range downloads {
		if err := <-done; err != nil {
			fmt.Fprintf(os.Stderr, "profile %s: %v\n", name, err)
		}
	}
}

// --- scenarios ---

func outbound(port int, host string) string { return fmt.Sprintf("outbound|%d||%s", port, host) }

func (h *harness) serviceAdd() (*Result, error) {
	if len(h.sidecars) == 0 {
		return nil, nil
	}
	var samples []sample
	var added []*service
	for range h.cfg.Reps {
		s := h.mesh.addService()
		added = append(added, s)
		smp, err := h.measure(func(c *change) int {
			for _, p := range h.sidecars {
				c.watch(p, func(p *proxy) bool {
					for _, sp := range servicePorts {
						if !hasCluster(outbound(sp.port, s.host()))(p) {
							return false
						}
					}
					return true
				})
			}
			return len(h.sidecars)
		}, func(begin func()) error { return h.mesh.writeService(s, begin) })
		if err != nil {
			return nil, err
		}
		samples = append(samples, smp)
	}
	r := h.summarize("service-add", samples)
	// Put the mesh back as it was, and wait until every sidecar has dropped the added services. Waiting for
	// a quiet spell instead let the last removals arrive during the next scenario's first change, which
	// then counted their CDS, LDS and VHDS pushes as its own.
	// Dropped means gone from CDS: a cluster whose pods were deleted first has no endpoints but is still
	// there, so hasCluster would call it gone early.
	var clusters []string
	for _, s := range added {
		for _, sp := range servicePorts {
			clusters = append(clusters, outbound(sp.port, s.host()))
		}
	}
	cleanup := newChange()
	for _, p := range h.sidecars {
		cleanup.watch(p, lacksClusters(clusters))
	}
	cleanup.seal()
	b0, t0 := h.bytes.Load(), h.typeBytes()
	for _, s := range added {
		if err := h.mesh.removeService(s); err != nil {
			return nil, err
		}
	}
	removed := time.Since(cleanup.start)
	lats, missed := cleanup.wait(time.Now().Add(h.cfg.Timeout), h.all())
	if missed > 0 {
		return nil, fmt.Errorf("service-add clean-up: %d sidecars still have the added services after %s", missed, h.cfg.Timeout)
	}
	h.quiet(2*h.cfg.Quiet, 10*time.Second)
	r.Note = fmt.Sprintf("clean-up: %d services deleted in %d ms; every sidecar had dropped them %d ms after the first delete; %s sent (%s)",
		len(added), removed.Milliseconds(), slices.Max(append(lats, 0)).Milliseconds(), mb(float64(h.bytes.Load()-b0)),
		byTypeText(typeDiff(h.typeBytes(), t0)))
	return r, nil
}

// endpointAddRemove adds a pod to a service and removes it again, rep times; it measures the sidecars
// watching the service's EDS (sidecars=true) or the ztunnels (their Address for the pod).
func (h *harness) endpointAddRemove(sidecars bool) (add, remove *Result, err error) {
	targets := h.ztunnels
	if sidecars {
		targets = h.sidecars
	}
	if len(targets) == 0 {
		return nil, nil, nil
	}
	var adds, removes []sample
	for i := range h.cfg.Reps {
		s := h.mesh.svcs[(i*7+3)%len(h.mesh.svcs)]
		pd := h.mesh.newPod(s)
		cl := outbound(80, s.host())
		uid := "Kubernetes//Pod/" + s.ns + "/" + pd.name
		register := func(present bool) func(c *change) int {
			return func(c *change) int {
				n := 0
				for _, p := range targets {
					if sidecars {
						if watchesEDS(p, cl) {
							c.watch(p, endpointIs(cl, pd.ip, present))
							n++
						}
					} else {
						c.watch(p, resourceIs(addrType, uid, present))
						n++
					}
				}
				return n
			}
		}
		smp, err := h.measure(register(true), func(begin func()) error {
			s.pods = append(s.pods, pd)
			return h.mesh.writeService(s, begin)
		})
		if err != nil {
			return nil, nil, err
		}
		adds = append(adds, smp)
		smp, err = h.measure(register(false), func(begin func()) error {
			s.pods = slices.DeleteFunc(s.pods, func(x *pod) bool { return x == pd })
			return h.mesh.writeService(s, begin)
		})
		if err != nil {
			return nil, nil, err
		}
		removes = append(removes, smp)
	}
	if sidecars {
		return h.summarize("endpoint-add", adds), h.summarize("endpoint-remove", removes), nil
	}
	return h.summarize("ztunnel-pod-add", adds), h.summarize("ztunnel-pod-remove", removes), nil
}

func (h *harness) virtualServiceChange() (*Result, error) {
	if len(h.sidecars) == 0 {
		return nil, nil
	}
	s := h.mesh.svcs[0]
	file := fmt.Sprintf("vs-%s.yaml", s.name)
	var samples []sample
	for i := range h.cfg.Reps {
		marker := fmt.Sprintf("m%05d", h.nextMarker())
		smp, err := h.measure(func(c *change) int {
			for _, p := range h.sidecars {
				c.watch(p, anyContains("load-"+marker, rdsType, vhdsType))
			}
			return len(h.sidecars)
		}, func(begin func()) error {
			return h.mesh.out.apply(file, virtualService(s, "vs-"+s.name, marker), begin)
		})
		if err != nil {
			return nil, err
		}
		_ = i
		samples = append(samples, smp)
	}
	r := h.summarize("virtualservice-change", samples)
	cleanup := time.Now()
	if h.mesh.shape.RoutingEvery > 0 {
		must(h.mesh.out.apply(file, virtualService(s, "vs-"+s.name, "base"), nil))
	} else {
		must(h.mesh.out.remove(file))
	}
	h.settle(cleanup, 2*h.cfg.Quiet, 10*time.Second)
	return r, nil
}

func (h *harness) authorizationChange() (*Result, error) {
	ns := h.mesh.ns(0)
	var inNS []*proxy
	for _, p := range h.sidecars {
		if p.ns == ns {
			inNS = append(inNS, p)
		}
	}
	if len(inNS)+len(h.ztunnels) == 0 {
		return nil, nil
	}
	file := fmt.Sprintf("authz-%s.yaml", ns)
	var samples []sample
	for range h.cfg.Reps {
		marker := fmt.Sprintf("m%05d", h.nextMarker())
		smp, err := h.measure(func(c *change) int {
			for _, p := range inNS {
				c.watch(p, anyContains("load-"+marker, ldsType))
			}
			for _, p := range h.ztunnels {
				c.watch(p, anyContains("load-"+marker, authzType))
			}
			return len(inNS) + len(h.ztunnels)
		}, func(begin func()) error {
			return h.mesh.out.apply(file, authorizationPolicy(ns, "allow-mesh", marker), begin)
		})
		if err != nil {
			return nil, err
		}
		samples = append(samples, smp)
	}
	r := h.summarize("authorization-change", samples)
	r.Note = fmt.Sprintf("%d sidecars in %s (LDS) + %d ztunnels", len(inNS), ns, len(h.ztunnels))
	cleanup := time.Now()
	if h.mesh.shape.Policies {
		must(h.mesh.out.apply(file, authorizationPolicy(ns, "allow-mesh", "base"), nil))
	} else {
		must(h.mesh.out.remove(file))
	}
	h.settle(cleanup, 2*h.cfg.Quiet, 10*time.Second)
	return r, nil
}

// churn adds and removes endpoints at a steady rate, each change measured at every proxy watching it, and
// samples the server's memory.
func (h *harness) churn() (*Result, error) {
	if len(h.sidecars)+len(h.ztunnels) == 0 || h.cfg.ChurnDuration <= 0 {
		return nil, nil
	}
	// With a trace on the Kubernetes source, the harness watches EndpointSlices too, to tell the API
	// server's part of each change's latency from Sextant's (one watcher more for the API server).
	var ka *kubeApplier
	if k, ok := h.mesh.out.(*kubeApplier); ok && h.cfg.ChurnTrace != "" {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if err := k.watchSlices(ctx); err != nil {
			return nil, err
		}
		ka = k
	}
	h.quiet(h.cfg.Quiet, 5*time.Second)
	st0 := h.srv.stats()
	heap0 := h.srv.liveHeap()
	b0, r0 := h.bytes.Load(), h.responses.Load()
	interval := time.Second / time.Duration(max(1, h.cfg.ChurnRate))
	tick := time.NewTicker(interval)
	defer tick.Stop()
	type added struct {
		s  *service
		pd *pod
	}
	var live []added
	var changes []*change
	var targets [][]*proxy
	var svcs []*service
	start := time.Now()
	var rssSamples []int64
	lastSample := start
	for i := 0; time.Since(start) < h.cfg.ChurnDuration; i++ {
		<-tick.C
		var s *service
		var pd *pod
		present := true
		if len(live) >= 10 && i%2 == 1 {
			a := live[0]
			live = live[1:]
			s, pd, present = a.s, a.pd, false
			s.pods = slices.DeleteFunc(s.pods, func(x *pod) bool { return x == pd })
		} else {
			s = h.mesh.svcs[(i*13+5)%len(h.mesh.svcs)]
			pd = h.mesh.newPod(s)
			s.pods = append(s.pods, pd)
			live = append(live, added{s, pd})
		}
		cl := outbound(80, s.host())
		uid := "Kubernetes//Pod/" + s.ns + "/" + pd.name
		c := newChange()
		var ps []*proxy
		for _, p := range h.sidecars {
			if watchesEDS(p, cl) {
				c.watch(p, endpointIs(cl, pd.ip, present))
				ps = append(ps, p)
			}
		}
		for _, p := range h.ztunnels {
			c.watch(p, resourceIs(addrType, uid, present))
			ps = append(ps, p)
		}
		c.seal()
		if err := h.mesh.writeService(s, c.begin); err != nil {
			return nil, err
		}
		c.written = time.Now()
		if ka != nil {
			c.sliceRV = ka.lastSliceRV
		}
		changes = append(changes, c)
		targets = append(targets, ps)
		svcs = append(svcs, s)
		if time.Since(lastSample) >= time.Second {
			rssSamples = append(rssSamples, h.srv.stats().RSS)
			lastSample = time.Now()
		}
	}
	elapsed := time.Since(start)
	var samples []sample
	var trace *os.File
	if h.cfg.ChurnTrace != "" {
		var err error
		if trace, err = os.Create(h.cfg.ChurnTrace); err != nil {
			return nil, err
		}
		fmt.Fprintln(trace, "began_unix_ms,service,first_proxy_ms,last_proxy_ms,write_ms,slice_seen_ms")
	}
	deadline := time.Now().Add(h.cfg.Timeout)
	for i, c := range changes {
		lats, missed := c.wait(deadline, targets[i])
		samples = append(samples, sample{lats: lats, missed: missed, interest: len(targets[i])})
		if trace != nil && len(lats) > 0 {
			seen := int64(-1) // not on the Kubernetes source, or not seen
			if ka != nil {
				if at, ok := ka.sliceSeenAt(c.sliceRV); ok {
					seen = at.Sub(c.began).Milliseconds()
				}
			}
			fmt.Fprintf(trace, "%d,%s/%s,%d,%d,%d,%d\n", c.began.UnixMilli(), svcs[i].ns, svcs[i].name,
				slices.Min(lats).Milliseconds(), slices.Max(lats).Milliseconds(), c.written.Sub(c.began).Milliseconds(), seen)
		}
	}
	if trace != nil {
		if err := trace.Close(); err != nil {
			return nil, err
		}
	}
	h.quiet(2*h.cfg.Quiet, 10*time.Second)
	st1 := h.srv.stats()
	r := h.summarize("steady-churn", samples)
	n := float64(len(changes))
	r.BytesPerChange = float64(h.bytes.Load()-b0) / n
	r.ResponsesPerChange = float64(h.responses.Load()-r0) / n
	r.CPUPerChange = (st1.CPUSeconds - st0.CPUSeconds) / n
	r.Seconds = elapsed.Seconds()
	r.RSSStart, r.RSSEnd = st0.RSS, st1.RSS
	r.HeapStart, r.HeapEnd = heap0, h.srv.liveHeap()
	r.Note = fmt.Sprintf("%d changes/s for %s; server CPU %.2f cores", h.cfg.ChurnRate, elapsed.Round(time.Second),
		(st1.CPUSeconds-st0.CPUSeconds)/elapsed.Seconds())
	cleanup := time.Now()
	// Put the mesh back.
	for _, a := range live {
		a.s.pods = slices.DeleteFunc(a.s.pods, func(x *pod) bool { return x == a.pd })
	}
	written := map[*service]bool{}
	for _, a := range live {
		if !written[a.s] {
			written[a.s] = true
			must(h.mesh.writeService(a.s, nil))
		}
	}
	h.settle(cleanup, 2*h.cfg.Quiet, 10*time.Second)
	return r, nil
}
