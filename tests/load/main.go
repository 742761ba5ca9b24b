package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
)

// Config is everything a run is parameterised by.
type Config struct {
	// Source is where Sextant reads the mesh: "file" (a directory it watches) or "kube" (a real
	// kube-apiserver, the changes made through its API).
	Source   string    `json:"source"`
	Shape    meshShape `json:"shape"`
	Sidecars int       `json:"sidecars"`
	Ztunnels int       `json:"ztunnels"`
	Delta    bool      `json:"delta"`
	// Secure: the fleet connects to the secure port over TLS (secure.go), authenticated by SecureAuth.
	Secure bool `json:"secure,omitempty"`
	// SecureAuth is how the fleet authenticates on the secure port: "token" (a service-account token from
	// the API server's TokenRequest, audience istio-ca, reviewed by Sextant with TokenReview; needs
	// -source kube) or "cert" (client certificates). Empty: token with -source kube, else cert.
	SecureAuth string `json:"secureAuth,omitempty"`
	// EnvoyVersion is the MAJOR.MINOR the simulated sidecars report (node.user_agent_build_version).
	EnvoyVersion   [2]uint32     `json:"envoyVersion"`
	NackFraction   float64       `json:"nackFraction"`
	Reps           int           `json:"repetitions"`
	ChurnRate      int           `json:"churnRate"`
	ChurnDuration  time.Duration `json:"churnDuration"`
	ChurnTrace     string        `json:"-"`
	Debounce       time.Duration `json:"debounceAfter"` // 0: the server's default
	Timeout        time.Duration `json:"-"`
	Scenarios      []string      `json:"scenarios"`
	ServerBin      string        `json:"-"`
	WorkDir        string        `json:"-"`
	ProfileDir     string        `json:"-"`
	ProfileSeconds time.Duration `json:"-"`
	ProfileTrace   bool          `json:"-"`
	KeepDir        bool          `json:"-"`
	ServerArgs     []string      `json:"serverArgs,omitempty"`
	SendTimeout    time.Duration `json:"sendTimeout"`
	// Quiet is how long nothing must arrive before a change starts and after it is seen everywhere (the
	// bytes, responses and CPU of a change are counted over that window).
	Quiet time.Duration `json:"quiet"`
	// InitialFetchTimeout is Envoy's: how long a warming cluster waits for its load assignment.
	InitialFetchTimeout time.Duration `json:"initialFetchTimeout"`
	// MaxConnectionAge is passed to the server as --max-connection-age when connection-age runs.
	MaxConnectionAge time.Duration `json:"maxConnectionAge,omitempty"`
	// SlowReps: how many fetches slow-clients measures alone, and as many with StuckClients that do not read.
	SlowReps     int `json:"slowReps,omitempty"`
	StuckClients int `json:"stuckClients,omitempty"`
	// ztunnel-on-demand: lookups in all, over how many addresses outside the mesh, sent how fast, each
	// waited for how long.
	OnDemandLookups int           `json:"onDemandLookups,omitempty"`
	OnDemandNames   int           `json:"onDemandNames,omitempty"`
	OnDemandRate    int           `json:"onDemandRate,omitempty"`
	OnDemandTimeout time.Duration `json:"onDemandTimeout,omitempty"`
}

var allScenarios = []string{"cold", "service-add", "endpoint", "virtualservice", "authorization", "ztunnel-pod",
	"destination-rule", "ztunnel-on-demand", "churn"}

// extraScenarios run only when named: connection-age watches for 2.5 × its age (and gives the server that
// flag for the whole run), slow-clients waits out the server's send timeout twice per repetition.
var extraScenarios = []string{"connection-age", "slow-clients"}

// Report is the JSON output.
type Report struct {
	Date    string    `json:"date"`
	Machine string    `json:"machine"`
	Load    string    `json:"loadAverage"`
	Config  Config    `json:"config"`
	Mesh    meshStats `json:"mesh"`
	Results []*Result `json:"results"`
	// Server totals at the end of the run.
	PeakRSSBytes int64   `json:"peakRssBytes"`
	CPUSeconds   float64 `json:"cpuSeconds"`
	StartupMs    float64 `json:"startupMs"`
	// MeshLoadMs is how long writing the initial mesh took (files, or objects created through the API, in
	// MeshAPIRequests requests, with the kube source).
	MeshLoadMs      float64  `json:"meshLoadMs"`
	MeshAPIRequests int64    `json:"meshApiRequests,omitempty"`
	Errors          []string `json:"errors,omitempty"`
}

type meshStats struct {
	Services  int `json:"services"`
	Pods      int `json:"pods"`
	Clusters  int `json:"clustersPerSidecar"`
	Endpoints int `json:"edsClustersPerSidecar"`
	Listeners int `json:"listenersPerSidecar"`
	Routes    int `json:"routesPerSidecar"`
	// VirtualHosts counts those received over VHDS (0 when the routes carry them).
	VirtualHosts int `json:"vhdsVirtualHostsPerSidecar"`
	Addresses    int `json:"addressesPerZtunnel"`
}

type harness struct {
	cfg  Config
	ctx  context.Context
	dec  *decoder
	mesh *mesh
	srv  *serverProc

	sidecars, ztunnels []*proxy

	bytes, responses atomic.Int64
	byType           map[string]*atomic.Int64
	lastResponse     atomic.Int64
	syncedCount      atomic.Int64
	marker           atomic.Int64
	// extraSeq numbers the clients scenarios add beside the fleet (slow-clients, ztunnel-on-demand), so
	// each has an identity of its own. Only the harness's goroutine uses it.
	extraSeq int
	// caDir is the CA's key material the server was given (-secure).
	caDir string
	// kubeAdmin is the API server's admin client configuration (-source kube).
	kubeAdmin *rest.Config
}

func (h *harness) nextMarker() int64 { return h.marker.Add(1) }

func main() {
	var cfg Config
	var scenarios, jsonOut, mode, envoyVersion string
	flag.StringVar(&cfg.Source, "source", "file", "where Sextant reads the mesh: file (--config-dir) or kube (a real kube-apiserver "+
		"and etcd from make test-env, changes made through the API)")
	flag.IntVar(&cfg.Shape.Services, "services", 300, "services (each with ports 80 http, 8080 grpc, 9090 tcp)")
	flag.IntVar(&cfg.Shape.PodsPerService, "pods", 10, "pods per service (each in the service's EndpointSlice)")
	flag.IntVar(&cfg.Shape.Namespaces, "namespaces", 10, "namespaces the services are spread over")
	flag.BoolVar(&cfg.Shape.Ambient, "ambient", false, "label the namespaces istio.io/dataplane-mode=ambient")
	flag.BoolVar(&cfg.Shape.Policies, "policies", true, "an AuthorizationPolicy per namespace")
	flag.IntVar(&cfg.Shape.RoutingEvery, "routing-every", 10, "a VirtualService for every K-th service (0: none)")
	flag.IntVar(&cfg.Sidecars, "sidecars", 300, "simulated Envoy sidecars")
	flag.IntVar(&cfg.Ztunnels, "ztunnels", 0, "simulated ztunnels (delta, wildcard Address + Authorization)")
	flag.BoolVar(&cfg.Secure, "secure", false,
		"the fleet (cold start and its reconnects) connects to the secure port over TLS, trusting the root "+
			"the server writes to --ca-dir, each proxy authenticated as its namespace and service account (see -secure-auth); the extra "+
			"clients of slow-clients and ztunnel-on-demand stay on the plaintext port")
	flag.StringVar(&cfg.SecureAuth, "secure-auth", "", "with -secure, how proxies authenticate: token (a service-account token from the "+
		"API server's TokenRequest, audience istio-ca, in the authorization metadata; needs -source kube) or cert (a client certificate "+
		"signed from the server's key material); default token with -source kube, else cert")
	flag.StringVar(&mode, "mode", "delta", "sidecar protocol: delta or sotw")
	flag.StringVar(&envoyVersion, "envoy-version", "1.38",
		"Envoy version the sidecars report (MAJOR.MINOR); from 1.38 the server sends their virtual hosts over VHDS")
	flag.Float64Var(&cfg.NackFraction, "nack", 0, "fraction of responses the sidecars NACK (0..1)")
	flag.IntVar(&cfg.Reps, "reps", 20, "repetitions of each single change")
	flag.IntVar(&cfg.ChurnRate, "churn-rate", 20, "steady churn: endpoint changes per second")
	flag.DurationVar(&cfg.ChurnDuration, "churn", 60*time.Second, "steady churn: how long (0 skips it)")
	flag.StringVar(&cfg.ChurnTrace, "churn-trace", "",
		"write each churn change as CSV here: when its first write began (Unix ms), its service, "+
			"its first and last proxy's latency, how long its writes took and, on the Kubernetes source, when the harness's own "+
			"watch saw the EndpointSlice change (ms from the first write)")
	flag.DurationVar(&cfg.Debounce, "debounce-after", 0, "pass --debounce-after to the server (0: its default, 100ms)")
	flag.DurationVar(&cfg.Timeout, "timeout", 60*time.Second, "how long a change may take to reach every proxy")
	flag.StringVar(&scenarios, "scenario", "all", "comma-separated: "+strings.Join(allScenarios, ", ")+"; or all (which leaves out "+
		strings.Join(extraScenarios, ", ")+": name them)")
	flag.DurationVar(&cfg.InitialFetchTimeout, "initial-fetch-timeout", defaultInitialFetchTimeout, "Envoy's initial_fetch_timeout: "+
		"a cluster warming longer is counted as a warming timeout")
	flag.DurationVar(&cfg.MaxConnectionAge, "max-connection-age", 30*time.Second, "connection-age: pass --max-connection-age to the "+
		"server (for the whole run) and watch the delta proxies for 2.5 times it")
	flag.IntVar(&cfg.SlowReps, "slow-reps", 3, "slow-clients: fetches measured alone, and as many with -stuck-clients that do not read")
	flag.IntVar(&cfg.StuckClients, "stuck-clients", 4, "slow-clients: clients that connect as sidecars, subscribe and never read")
	flag.IntVar(&cfg.OnDemandLookups, "ondemand-lookups", 1000, "ztunnel-on-demand: lookups of addresses outside the mesh")
	flag.IntVar(&cfg.OnDemandNames, "ondemand-names", 250, "ztunnel-on-demand: distinct addresses they cycle over (each looked up again "+
		"after its previous answer, as ztunnel does)")
	flag.IntVar(&cfg.OnDemandRate, "ondemand-rate", 200, "ztunnel-on-demand: lookups sent per second")
	flag.DurationVar(&cfg.OnDemandTimeout, "ondemand-timeout", 2*time.Second, "ztunnel-on-demand: how long the last lookup of a pass "+
		"is waited for")
	flag.StringVar(&jsonOut, "json", "", "write the results as JSON to this file")
	flag.StringVar(&cfg.ServerBin, "server-bin", "", "sextant binary to run (default: build ./cmd/sextant)")
	flag.StringVar(&cfg.WorkDir, "dir", "", "work directory (default: a new temporary one)")
	flag.StringVar(&cfg.ProfileDir, "profile", "", "save the server's CPU profile per scenario (and heap at the end) in this directory")
	flag.DurationVar(&cfg.ProfileSeconds, "profile-seconds", 10*time.Second, "length of each CPU profile")
	flag.BoolVar(&cfg.ProfileTrace, "profile-trace", false, "with -profile, also save an execution trace of the same length "+
		"per scenario (go tool trace)")
	flag.DurationVar(&cfg.SendTimeout, "send-timeout", 30*time.Second, "pass --send-timeout to the server: the simulated "+
		"proxies share its CPUs, so they read slower than a real fleet and the default 5s can cut them off in a cold start (0: server default)")
	flag.DurationVar(&cfg.Quiet, "quiet", 250*time.Millisecond, "quiet period around each change")
	flag.BoolVar(&cfg.KeepDir, "keep", false, "keep the work directory (config, server log)")
	var serverArgs, selfProfile string
	flag.StringVar(&selfProfile, "harness-cpuprofile", "", "write the harness's own CPU profile here")
	flag.StringVar(&serverArgs, "server-args", "", "extra arguments for `sextant discovery`, space-separated")
	flag.Parse()
	cfg.ServerArgs = strings.Fields(serverArgs)
	cfg.Delta = mode != "sotw"
	if _, err := fmt.Sscanf(envoyVersion, "%d.%d", &cfg.EnvoyVersion[0], &cfg.EnvoyVersion[1]); err != nil {
		fmt.Fprintf(os.Stderr, "-envoy-version %q: want MAJOR.MINOR\n", envoyVersion)
		os.Exit(2)
	}
	if scenarios == "all" {
		cfg.Scenarios = allScenarios
	} else {
		cfg.Scenarios = strings.Split(scenarios, ",")
	}
	if os.Getenv("GOGC") == "" {
		// The simulated proxies stand in for processes on other machines but share these cores with the
		// server: their collector's cycles (a tenth of the harness's CPU at the default) only add noise to
		// the server's figures. The harness's own memory is not measured.
		debug.SetGCPercent(400)
	}
	if selfProfile != "" {
		f, err := os.Create(selfProfile)
		must(err)
		must(pprof.StartCPUProfile(f))
		defer pprof.StopCPUProfile()
	}
	rep, err := Run(context.Background(), cfg, os.Stdout)
	if rep != nil && jsonOut != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if werr := os.WriteFile(jsonOut, append(b, '\n'), 0o644); werr != nil {
			fmt.Fprintln(os.Stderr, werr)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// Run performs a whole run and prints the table to out.
func Run(ctx context.Context, cfg Config, out io.Writer) (*Report, error) {
	if cfg.Shape.Namespaces <= 0 || cfg.Shape.Services <= 0 {
		return nil, errors.New("need at least one namespace and one service")
	}
	if cfg.Reps <= 0 {
		cfg.Reps = 1
	}
	if cfg.Quiet <= 0 {
		cfg.Quiet = 250 * time.Millisecond
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 60 * time.Second
	}
	switch cfg.Source {
	case "":
		cfg.Source = "file"
	case "file", "kube":
	default:
		return nil, fmt.Errorf("unknown -source %q (have file, kube)", cfg.Source)
	}
	if cfg.Secure && cfg.SecureAuth == "" {
		cfg.SecureAuth = map[bool]string{true: "token", false: "cert"}[cfg.Source == "kube"]
	}
	switch {
	case !cfg.Secure && cfg.SecureAuth != "":
		return nil, errors.New("-secure-auth needs -secure")
	case cfg.SecureAuth == "token" && cfg.Source != "kube":
		return nil, errors.New("-secure-auth token needs -source kube: without a cluster the server has no TokenReview")
	case cfg.SecureAuth != "" && cfg.SecureAuth != "token" && cfg.SecureAuth != "cert":
		return nil, fmt.Errorf("unknown -secure-auth %q (have token, cert)", cfg.SecureAuth)
	}
	for _, s := range cfg.Scenarios {
		if !slices.Contains(allScenarios, s) && !slices.Contains(extraScenarios, s) {
			return nil, fmt.Errorf("unknown scenario %q (have %s)", s, strings.Join(append(slices.Clone(allScenarios), extraScenarios...), ", "))
		}
	}
	if cfg.OnDemandRate <= 0 {
		cfg.OnDemandRate = 200
	}
	if cfg.OnDemandTimeout <= 0 {
		cfg.OnDemandTimeout = 2 * time.Second
	}
	if slices.Contains(cfg.Scenarios, "connection-age") && cfg.MaxConnectionAge > 0 &&
		!slices.ContainsFunc(cfg.ServerArgs, func(a string) bool {
			return a == "--max-connection-age" || strings.HasPrefix(a, "--max-connection-age=")
		}) {
		// For the whole run: the server's streams of every scenario age alike.
		cfg.ServerArgs = append(slices.Clone(cfg.ServerArgs), "--max-connection-age", cfg.MaxConnectionAge.String())
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	work := cfg.WorkDir
	if work == "" {
		var err error
		if work, err = os.MkdirTemp("", "sextant-load-"); err != nil {
			return nil, err
		}
		if !cfg.KeepDir {
			defer os.RemoveAll(work)
		}
	}
	if cfg.ProfileDir != "" {
		if err := os.MkdirAll(cfg.ProfileDir, 0o755); err != nil {
			return nil, err
		}
	}
	rep := &Report{Date: time.Now().UTC().Format(time.RFC3339), Machine: machine(), Load: loadavg(), Config: cfg}
	bin := cfg.ServerBin
	if bin == "" {
		fmt.Fprintln(out, "building ./cmd/sextant ...")
		var err error
		if bin, err = buildServer(ctx, work); err != nil {
			return nil, err
		}
	}
	h := &harness{cfg: cfg, ctx: ctx, dec: newDecoder(), byType: map[string]*atomic.Int64{}}
	for t := range shortType {
		h.byType[t] = &atomic.Int64{}
	}
	var config applier
	var sourceArgs []string
	var kube *kubeApplier
	if cfg.Source == "kube" {
		env, ka, kubeconfig, err := startKube(ctx, filepath.Join(work, "kube"), out)
		if err != nil {
			return nil, err
		}
		defer env.Stop()
		config, sourceArgs, kube = ka, []string{"--kubeconfig", kubeconfig}, ka
		h.kubeAdmin = env.Admin
	} else {
		configDir := filepath.Join(work, "config")
		if err := os.MkdirAll(configDir, 0o755); err != nil {
			return nil, err
		}
		config, sourceArgs = fileApplier{dir: configDir}, []string{"--config-dir", configDir}
	}
	h.mesh = newMesh(config, cfg.Shape)
	t0 := time.Now()
	if err := h.mesh.writeAll(); err != nil {
		return nil, err
	}
	rep.MeshLoadMs = float64(time.Since(t0).Microseconds()) / 1000
	if kube != nil {
		rep.MeshAPIRequests = kube.calls.Load()
		fmt.Fprintf(out, "mesh created through the API in %.1f s (%d requests)\n", rep.MeshLoadMs/1000, rep.MeshAPIRequests)
	}
	logPath := filepath.Join(work, "server.log")
	t0 = time.Now()
	serverArgs := cfg.ServerArgs
	var secureAddr string
	if cfg.Secure {
		var secureArgs []string
		var err error
		if secureAddr, h.caDir, secureArgs, err = secureServerArgs(work); err != nil {
			return nil, err
		}
		serverArgs = append(slices.Clone(serverArgs), secureArgs...)
	}
	srv, err := startServer(bin, sourceArgs, logPath, cfg.Debounce, cfg.SendTimeout, serverArgs...)
	if err != nil {
		return nil, err
	}
	srv.secureAddr = secureAddr
	h.srv = srv
	defer srv.stop()
	rep.StartupMs = float64(time.Since(t0).Microseconds()) / 1000
	fmt.Fprintf(out,
		"mesh: %d services × %d ports, %d pods, %d namespaces; %d sidecars (%s), %d ztunnels; source %s; server ready in %.0f ms\n",
		cfg.Shape.Services, len(servicePorts), cfg.Shape.Services*cfg.Shape.PodsPerService, cfg.Shape.Namespaces,
		cfg.Sidecars, map[bool]string{true: "delta", false: "sotw"}[cfg.Delta], cfg.Ztunnels, cfg.Source, rep.StartupMs)

	want := func(s string) bool { return slices.Contains(cfg.Scenarios, s) }
	var cold *Result
	h.profileDuring("cold", func() { cold, err = h.coldStart() })
	if err != nil {
		return rep, err
	}
	cold.addWarming(h.takeWarming())
	rep.Mesh = h.meshStats()
	if want("cold") {
		rep.Results = append(rep.Results, cold)
	}
	h.dec.reset()
	type step struct {
		name string
		run  func() ([]*Result, error)
	}
	one := func(f func() (*Result, error)) func() ([]*Result, error) {
		return func() ([]*Result, error) { r, err := f(); return []*Result{r}, err }
	}
	two := func(f func() (*Result, *Result, error)) func() ([]*Result, error) {
		return func() ([]*Result, error) { a, b, err := f(); return []*Result{a, b}, err }
	}
	steps := []step{
		{"service-add", one(h.serviceAdd)},
		{"endpoint", two(func() (*Result, *Result, error) { return h.endpointAddRemove(true) })},
		{"virtualservice", one(h.virtualServiceChange)},
		{"authorization", one(h.authorizationChange)},
		{"ztunnel-pod", two(func() (*Result, *Result, error) { return h.endpointAddRemove(false) })},
		{"destination-rule", one(h.destinationRuleChange)},
		{"ztunnel-on-demand", one(h.ztunnelOnDemand)},
		{"connection-age", one(h.connectionAge)},
		{"slow-clients", h.slowClients},
		{"churn", one(h.churn)},
	}
	for _, st := range steps {
		if !want(st.name) {
			continue
		}
		var rs []*Result
		var err error
		h.takeWarming() // what the previous clean-up warmed is not this scenario's
		h.profileDuring(st.name, func() { rs, err = st.run() })
		if err != nil {
			return rep, fmt.Errorf("%s: %w", st.name, err)
		}
		// Warming over the whole step: a step with two results (endpoint, ztunnel-pod) shows it on both.
		w := h.takeWarming()
		for _, r := range rs {
			if r != nil {
				if !r.warmingSet {
					r.addWarming(w)
				}
				rep.Results = append(rep.Results, r)
			}
		}
		h.dec.reset()
	}
	for _, p := range h.all() {
		p.mu.Lock()
		if p.err != nil {
			rep.Errors = append(rep.Errors, fmt.Sprintf("proxy %d: %v", p.id, p.err))
		}
		p.mu.Unlock()
	}
	if cfg.ProfileDir != "" {
		_ = srv.heapProfile(filepath.Join(cfg.ProfileDir, "heap.pprof"))
	}
	st := srv.stats()
	rep.PeakRSSBytes, rep.CPUSeconds = st.HWM, st.CPUSeconds
	printReport(out, rep)
	if len(rep.Errors) > 0 {
		return rep, fmt.Errorf("%d proxies reported errors, first: %s", len(rep.Errors), rep.Errors[0])
	}
	return rep, nil
}

// coldStart creates the proxies and connects them all at once; it measures until every one has its whole
// initial configuration acknowledged.
func (h *harness) coldStart() (*Result, error) {
	// Sidecars take the identity of pods spread over services (and so namespaces).
	pods := 0
	for i := 0; i < h.cfg.Sidecars; i++ {
		s := h.mesh.svcs[i%len(h.mesh.svcs)]
		pd := s.pods[(i/len(h.mesh.svcs))%max(1, len(s.pods))]
		if len(s.pods) == 0 {
			pd = &pod{name: fmt.Sprintf("%s-sidecar-%d", s.name, i), ip: h.mesh.nextIP()}
		}
		h.sidecars = append(h.sidecars, newProxy(h, i, kindSidecar, s.ns, s.name, pd.name, pd.ip,
			map[string]string{"app": s.name, "version": "v1", "security.istio.io/tlsMode": "istio"}))
		pods++
	}
	for i := 0; i < h.cfg.Ztunnels; i++ {
		ip := fmt.Sprintf("192.168.%d.%d", i/250, i%250+1)
		h.ztunnels = append(h.ztunnels, newProxy(h, 100000+i, kindZtunnel, "istio-system", "ztunnel", fmt.Sprintf("ztunnel-%d", i), ip, nil))
	}
	all := h.all()
	addr := h.srv.grpcAddr
	tokens := h.cfg.Secure && h.cfg.SecureAuth == "token"
	if h.cfg.Secure {
		var err error
		if tokens {
			err = issueTokens(h.ctx, h.kubeAdmin, h.caDir, all)
		} else {
			err = issueClientCerts(h.caDir, all)
		}
		if err != nil {
			return nil, err
		}
		addr = h.srv.secureAddr
	}
	reviews0, hits0 := h.srv.tokenReviews()
	st0, fleet0 := h.srv.stats(), procCPUSeconds("self", h.srv.clkTck)
	b0, r0, t0 := h.bytes.Load(), h.responses.Load(), h.typeBytes()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, len(all))
	for _, p := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.start(addr); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	deadline := start.Add(h.cfg.Timeout * 2)
	for int(h.syncedCount.Load()) < len(all) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		for _, p := range all {
			p.mu.Lock()
			err := p.err
			p.mu.Unlock()
			if err != nil {
				return nil, fmt.Errorf("proxy %d: %w", p.id, err)
			}
		}
	}
	var lats []time.Duration
	missed := 0
	for _, p := range all {
		p.mu.Lock()
		if p.synced.IsZero() {
			missed++
		} else {
			lats = append(lats, p.synced.Sub(start))
		}
		p.mu.Unlock()
	}
	h.quiet(2*h.cfg.Quiet, 10*time.Second)
	st1 := h.srv.stats()
	r := h.summarize("cold-start", []sample{{lats: lats, missed: missed, interest: len(all),
		bytes: h.bytes.Load() - b0, responses: h.responses.Load() - r0, cpu: st1.CPUSeconds - st0.CPUSeconds,
		fleetCPU: procCPUSeconds("self", h.srv.clkTck) - fleet0, byType: typeDiff(h.typeBytes(), t0)}})
	r.Note = "all proxies connect at once; until each has CDS+EDS+LDS+RDS (+VHDS when used; ztunnel: Address+Authorization)"
	if tokens {
		reviews1, hits1 := h.srv.tokenReviews()
		r.Figures = map[string]float64{"tokenReviews": reviews1 - reviews0, "tokenCacheHits": hits1 - hits0}
		r.Note += "; over 15012 with service-account tokens (TokenReview)"
	}
	return r, nil
}

func (h *harness) meshStats() meshStats {
	ms := meshStats{Services: len(h.mesh.svcs)}
	for _, s := range h.mesh.svcs {
		ms.Pods += len(s.pods)
	}
	if len(h.sidecars) > 0 {
		p := h.sidecars[0]
		p.mu.Lock()
		ms.Clusters, ms.Endpoints, ms.Listeners, ms.Routes = len(p.res[cdsType]), len(p.res[edsType]), len(p.res[ldsType]), len(p.res[rdsType])
		ms.VirtualHosts = len(p.res[vhdsType])
		p.mu.Unlock()
	}
	if len(h.ztunnels) > 0 {
		p := h.ztunnels[0]
		p.mu.Lock()
		ms.Addresses = len(p.res[addrType])
		p.mu.Unlock()
	}
	return ms
}

func machine() string {
	model := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		mem = strings.Join(strings.Fields(strings.TrimPrefix(line, "MemTotal:")), " ")
	}
	return fmt.Sprintf("%d CPUs, %s, %s RAM, %s", runtime.NumCPU(), model, mem, runtime.Version())
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return ""
}
