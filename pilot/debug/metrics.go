package debug

import (
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/xds"
)

// metrics holds the instruments fed by events; everything else is read from existing counters at scrape
// time by scrapeCollector, so the hot paths pay nothing for it.
type metrics struct {
	pushes      *prometheus.CounterVec
	pushTime    *prometheus.HistogramVec
	convergence *prometheus.HistogramVec
	buildTime   prometheus.Histogram

	// byType holds each type's children of the vectors above, copied on write: every response and ACK
	// updates them, and a label lookup hashes the labels and takes the vector's lock each time.
	byType   atomic.Pointer[map[string]*typeMetrics]
	byTypeMu sync.Mutex
}

// typeMetrics are one type URL's instruments.
type typeMetrics struct {
	sent, unchanged, failed prometheus.Counter
	pushTime, convergence   prometheus.Observer
}

// forType returns the instruments of typeURL.
func (m *metrics) forType(typeURL string) *typeMetrics {
	if all := m.byType.Load(); all != nil {
		if tm := (*all)[typeURL]; tm != nil {
			return tm
		}
	}
	m.byTypeMu.Lock()
	defer m.byTypeMu.Unlock()
	old := map[string]*typeMetrics{}
	if all := m.byType.Load(); all != nil {
		old = *all
	}
	if tm := old[typeURL]; tm != nil {
		return tm
	}
	short := ShortType(typeURL)
	tm := &typeMetrics{
		sent:        m.pushes.WithLabelValues(short, xds.PushSent),
		unchanged:   m.pushes.WithLabelValues(short, xds.PushUnchanged),
		failed:      m.pushes.WithLabelValues(short, xds.PushError),
		pushTime:    m.pushTime.WithLabelValues(short),
		convergence: m.convergence.WithLabelValues(short),
	}
	all := maps.Clone(old)
	all[typeURL] = tm
	m.byType.Store(&all)
	return tm
}

// pushed counts one push of the type with its result.
func (tm *typeMetrics) pushed(result string, took time.Duration) {
	switch result {
	case xds.PushSent:
		tm.sent.Inc()
	case xds.PushUnchanged:
		tm.unchanged.Inc()
	default:
		tm.failed.Inc()
	}
	tm.pushTime.Observe(took.Seconds())
}

var timeBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

func newMetrics() *metrics {
	return &metrics{
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sextant_xds_pushes_total",
			Help: "Pushes of one type to one proxy, by type and result (sent, unchanged: nothing new for a delta client, error).",
		}, []string{"type", "result"}),
		pushTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sextant_xds_push_duration_seconds",
			Help:    "Time to generate and send one type to one proxy during a push.",
			Buckets: timeBuckets,
		}, []string{"type"}),
		convergence: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sextant_proxy_convergence_seconds",
			Help:    "From the first config change in a push (PushRequest.Start) to the proxy's ACK of the response carrying it.",
			Buckets: timeBuckets,
		}, []string{"type"}),
		buildTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sextant_push_context_build_seconds",
			Help:    "Time to build a PushContext (snapshot) that was pushed.",
			Buckets: timeBuckets,
		}),
	}
}

// newRegistry returns a registry owned by the server (never the global default) with every metric.
func newRegistry(m *metrics, src Sources) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.pushes, m.pushTime, m.convergence, m.buildTime,
		&scrapeCollector{src: src},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(src.Collectors...)
	return reg
}

var (
	descConnected = prometheus.NewDesc("sextant_xds_connected_proxies",
		"Connected proxies by proxy type (sidecar, router, ztunnel, grpc).", []string{"proxy_type"}, nil)
	descNACKs = prometheus.NewDesc("sextant_xds_nacks_total", "Responses rejected by proxies, by type.", []string{"type"}, nil)
	descBytes = prometheus.NewDesc("sextant_xds_sent_bytes_total",
		"Serialized bytes of responses sent, by type.", []string{"type"}, nil)
	descResponses = prometheus.NewDesc("sextant_xds_responses_total",
		"Responses sent (to requests and pushes), by type.", []string{"type"}, nil)
	descConnects    = prometheus.NewDesc("sextant_xds_connects_total", "xDS streams accepted.", nil, nil)
	descDisconnects = prometheus.NewDesc("sextant_xds_disconnects_total", "xDS streams ended.", nil, nil)
	descRefused     = prometheus.NewDesc("sextant_xds_refused_total",
		"xDS streams refused (not ready, shutting down, bad node, rate limit).", nil, nil)
	descSendTimeouts = prometheus.NewDesc("sextant_xds_send_timeouts_total", "Connections closed because the proxy did not read.", nil, nil)
	descGenErrors    = prometheus.NewDesc("sextant_xds_generate_errors_total", "Failed generations (the proxy keeps its config).", nil, nil)
	descQueue        = prometheus.NewDesc("sextant_xds_push_queue_length", "Connections waiting for a push.", nil, nil)
	descMerged       = prometheus.NewDesc("sextant_push_debounce_merged_events_total",
		"Config events folded into an already pending push by the debouncer.", nil, nil)
	descBuilds = prometheus.NewDesc("sextant_push_snapshots_total",
		"Snapshots published, by kind of build (full, incremental; the first is full).", []string{"kind"}, nil)
	descLastBuild = prometheus.NewDesc("sextant_push_context_last_build_seconds", "Build time of the latest snapshot.", nil, nil)
	descVersion   = prometheus.NewDesc("sextant_push_context_version", "Version of the current snapshot.", nil, nil)
	descRejected  = prometheus.NewDesc("sextant_config_rejected",
		"Config documents or objects currently rejected, by kind (empty when unknown).", []string{"kind"}, nil)
	descWarnings = prometheus.NewDesc("sextant_config_warnings",
		"Fields of served config objects that Sextant accepts but does not implement, by kind.", []string{"kind"}, nil)
	descServices  = prometheus.NewDesc("sextant_services", "Services in the current snapshot.", nil, nil)
	descEndpoints = prometheus.NewDesc("sextant_endpoints", "Endpoints in the current snapshot.", nil, nil)
	descWorkloads = prometheus.NewDesc("sextant_workloads", "Workloads in the current snapshot.", nil, nil)
)

// scrapeCollector reads the transport's and pipeline's own counters when scraped.
type scrapeCollector struct{ src Sources }

func (c *scrapeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descConnected, descNACKs, descBytes, descResponses, descConnects, descDisconnects,
		descRefused, descSendTimeouts, descGenErrors, descQueue, descMerged, descBuilds, descLastBuild, descVersion,
		descRejected, descWarnings, descServices, descEndpoints, descWorkloads} {
		ch <- d
	}
}

func (c *scrapeCollector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	if x := c.src.XDS; x != nil {
		cnt := x.Counters()
		for typ, tc := range cnt.ByType {
			short := ShortType(typ)
			counter(descNACKs, float64(tc.NACKs), short)
			counter(descBytes, float64(tc.BytesSent), short)
			counter(descResponses, float64(tc.Responses), short)
		}
		counter(descConnects, float64(cnt.Connects))
		counter(descDisconnects, float64(cnt.Disconnects))
		counter(descRefused, float64(cnt.Refused))
		counter(descSendTimeouts, float64(cnt.SendTimeouts))
		counter(descGenErrors, float64(cnt.GenerateErrs))
		gauge(descQueue, float64(cnt.QueueLen))
		byType := map[model.ProxyType]int{model.Sidecar: 0, model.Router: 0, model.Ztunnel: 0, model.GRPC: 0}
		for _, cs := range x.Connections() {
			byType[cs.Type]++
		}
		for t, n := range byType {
			gauge(descConnected, float64(n), string(t))
		}
	}
	if p := c.src.Pipeline; p != nil {
		st := p.Stats()
		counter(descMerged, float64(st.MergedEvents))
		counter(descBuilds, float64(st.FullPushes+min(st.Builds, 1)), "full")
		counter(descBuilds, float64(st.Incremental), "incremental")
		gauge(descLastBuild, st.LastBuild.Seconds())
		if ps := p.Current(); ps != nil {
			gauge(descVersion, float64(ps.Version))
			gauge(descServices, float64(ps.ServiceCount()))
			gauge(descEndpoints, float64(ps.EndpointCount()))
			gauge(descWorkloads, float64(ps.WorkloadCount()))
		}
	}
	if c.src.Rejected != nil {
		byKind := map[string]int{}
		for _, e := range c.src.Rejected() {
			byKind[e.Kind]++
		}
		for k, n := range byKind {
			gauge(descRejected, float64(n), k)
		}
	}
	if c.src.Warnings != nil {
		byKind := map[string]int{}
		for _, e := range c.src.Warnings() {
			byKind[e.Kind]++
		}
		for k, n := range byKind {
			gauge(descWarnings, float64(n), k)
		}
	}
}
