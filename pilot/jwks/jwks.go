package jwks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	security "istio.io/api/security/v1beta1"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/store"
)

// SourceName is the Source of the FetchedJWKS objects the Fetcher stores.
const SourceName = "jwks"

// openIDDiscoveryPath is where an issuer publishes its OpenID configuration (OpenID Connect Discovery 1.0).
const openIDDiscoveryPath = "/.well-known/openid-configuration"

// maxConcurrentFetches bounds the fetches running at once, so one slow server does not hold up the rest
// and many rules do not open many connections at once.
const maxConcurrentFetches = 4

// Options configure a Fetcher.
type Options struct {
	Store *store.Store
	// Mesh supplies the fetch bounds (mesh.JWKSFetch).
	Mesh *mesh.Config
	// Client makes the requests; nil means one that refuses link-local and cloud metadata addresses (as
	// istiod's does) and follows the environment's proxy settings. Each fetch has its own deadline.
	Client *http.Client
	Logger *slog.Logger
}

// Fetcher keeps, for every key set the store's RequestAuthentications need, a FetchedJWKS object: fetched
// at once when a rule first names it, refreshed periodically, retried sooner after a failure, its last good
// set kept (up to MaxStale) while fetches fail. A failure is logged, counted in the metrics and listed by
// Problems; a key set that never fetched (or went stale) is stored without keys, and the rule's provider
// then rejects every token (pilot/envoy). Generators read only the snapshot, never the network.
type Fetcher struct {
	opts     Options
	settings mesh.JWKSFetchSettings
	client   *http.Client
	log      *slog.Logger
	wake     chan struct{}

	mu      sync.Mutex
	sources map[config.Key]*keySource
	version uint64 // ResourceVersion of the objects stored

	fetchOK, fetchFailed atomic.Uint64
	// firstDone is closed once every key set wanted when Run began has been fetched once (or failed).
	firstDone    chan struct{}
	firstPending map[config.Key]bool
}

// keySource is one key set wanted by one or more rules.
type keySource struct {
	key         config.Key
	issuer, uri string
	timeout     time.Duration
	users       []ruleRef
	// stored is what the store holds for key (nil before the first fetch ended); next is when to fetch.
	stored     *config.FetchedKeySet
	next       time.Time
	lastGoodAt time.Time // when the stored JWKS was last fetched successfully
	fetching   bool
}

// ruleRef names one rule using a key set, for reports.
type ruleRef struct {
	ra    *config.Config
	index int
}

// New creates a Fetcher and subscribes it to the store's RequestAuthentication changes; call Run.
func New(opts Options) *Fetcher {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Mesh == nil {
		opts.Mesh = mesh.Default()
	}
	f := &Fetcher{opts: opts, settings: opts.Mesh.JWKSFetch.Settings(), client: opts.Client, log: opts.Logger.With("source", SourceName),
		wake: make(chan struct{}, 1), sources: map[config.Key]*keySource{}, firstDone: make(chan struct{})}
	if f.client == nil {
		f.client = newClient()
	}
	opts.Store.AddHandler(func(ev store.Event) {
		if ev.Key().Kind == config.RequestAuthentication {
			f.signal()
		}
	})
	return f
}

func (f *Fetcher) signal() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// Run fetches until ctx is done. Call it once, usually with go.
func (f *Fetcher) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, maxConcurrentFetches)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	f.sync()
	f.mu.Lock()
	f.firstPending = map[config.Key]bool{}
	for k := range f.sources {
		f.firstPending[k] = true
	}
	f.checkFirstDone()
	f.mu.Unlock()
	for {
		now := time.Now()
		next := now.Add(time.Hour)
		type fetchJob struct {
			s           *keySource
			issuer, uri string
			timeout     time.Duration
		}
		var due []fetchJob
		f.mu.Lock()
		for _, s := range f.sources {
			switch {
			case s.fetching:
			case !s.next.After(now):
				s.fetching = true
				due = append(due, fetchJob{s, s.issuer, s.uri, s.timeout})
			case s.next.Before(next):
				next = s.next
			}
		}
		f.mu.Unlock()
		for _, job := range due {
			wg.Go(func() {
				select {
				case sem <- struct{}{}:
				case <-ctx.Done():
					return
				}
				keys, err := f.fetch(ctx, job.issuer, job.uri, job.timeout)
				<-sem
				if ctx.Err() != nil {
					return // shutting down: not a failure of the key set's server
				}
				f.finish(job.s, keys, err)
				f.signal() // its next fetch may be sooner than the loop's timer
			})
		}
		timer.Reset(time.Until(next))
		select {
		case <-ctx.Done():
			return
		case <-f.wake:
			f.sync()
		case <-timer.C:
		}
	}
}

// FirstFetches is closed once every key set the store's rules named when Run began has been fetched once,
// or has failed: a server can wait for it (bounded) so its first snapshot already holds the keys.
func (f *Fetcher) FirstFetches() <-chan struct{} { return f.firstDone }

// checkFirstDone closes firstDone when nothing of the first round is pending. Called with mu held.
func (f *Fetcher) checkFirstDone() {
	if f.firstPending != nil && len(f.firstPending) == 0 {
		close(f.firstDone)
		f.firstPending = nil
	}
}

// sync makes the wanted key sets those the store's RequestAuthentications name, deleting the objects of
// key sets no rule needs any more.
func (f *Fetcher) sync() {
	wanted := map[config.Key]*keySource{}
	for _, c := range f.opts.Store.List(config.RequestAuthentication) {
		ra, ok := c.Spec.(*security.RequestAuthentication)
		if !ok {
			continue
		}
		for i, r := range ra.GetJwtRules() {
			if r.GetJwks() != "" {
				continue // inline keys: nothing to fetch
			}
			k := config.FetchedJWKSKey(r.GetIssuer(), r.GetJwksUri())
			s := wanted[k]
			if s == nil {
				s = &keySource{key: k, issuer: r.GetIssuer(), uri: r.GetJwksUri()}
				if r.GetJwksUri() != "" {
					s.issuer = "" // the key set is the URI's, whatever issuer names it
				}
				wanted[k] = s
			}
			// The rule's timeout (istiod's), else the default; rules sharing a key set get the longest.
			timeout := f.settings.Timeout
			if t := r.GetTimeout(); t != nil && t.AsDuration() > 0 {
				timeout = min(t.AsDuration(), f.settings.MaxTimeout)
			}
			s.timeout = max(s.timeout, timeout)
			s.users = append(s.users, ruleRef{ra: c, index: i})
		}
	}
	var gone []config.Key
	f.mu.Lock()
	for k, s := range f.sources {
		if w := wanted[k]; w != nil {
			s.users, s.timeout = w.users, w.timeout
			continue
		}
		delete(f.sources, k)
		if f.firstPending != nil {
			delete(f.firstPending, k)
			f.checkFirstDone()
		}
		if s.stored != nil {
			gone = append(gone, k)
		}
	}
	for k, w := range wanted {
		if f.sources[k] == nil {
			f.sources[k] = w // next is zero: fetched at once
		}
	}
	f.mu.Unlock()
	for _, k := range gone {
		f.opts.Store.Delete(store.LayerKube, k)
	}
}

// finish records a fetch's outcome and stores the key set when what proxies would get changes.
func (f *Fetcher) finish(s *keySource, keys string, err error) {
	now := time.Now()
	f.mu.Lock()
	s.fetching = false
	// The first round counts as done only once the key set is in the store, where a snapshot reads it.
	defer func() {
		f.mu.Lock()
		if f.firstPending != nil {
			delete(f.firstPending, s.key)
			f.checkFirstDone()
		}
		f.mu.Unlock()
	}()
	if f.sources[s.key] != s {
		f.mu.Unlock()
		return // no rule needs it any more
	}
	next := &config.FetchedKeySet{Issuer: s.issuer, URI: s.uri}
	if prev := s.stored; prev != nil {
		next.JWKS, next.FetchedAt = prev.JWKS, prev.FetchedAt
	}
	if err == nil {
		f.fetchOK.Add(1)
		s.next = now.Add(f.settings.RefreshInterval)
		s.lastGoodAt = now
		if next.JWKS != keys {
			next.JWKS, next.FetchedAt = keys, now
		}
	} else {
		f.fetchFailed.Add(1)
		s.next = now.Add(f.settings.RetryInterval)
		next.Error = err.Error()
		if next.JWKS != "" && now.Sub(s.lastGoodAt) > f.settings.MaxStale {
			next.JWKS, next.FetchedAt = "", time.Time{} // too old to trust: reject tokens from now on
		}
	}
	changed := s.stored == nil || s.stored.JWKS != next.JWKS || s.stored.Error != next.Error
	var cfg *config.Config
	if changed {
		s.stored = next
		f.version++
		cfg = &config.Config{Key: s.key, Source: SourceName, ResourceVersion: strconv.FormatUint(f.version, 10),
			Generation: int64(f.version), CreationTimestamp: now, Spec: next}
	}
	users := len(s.users)
	f.mu.Unlock()
	if err != nil && changed {
		f.log.Warn("fetching a JWT key set failed", "from", origin(s.issuer, s.uri), "rules", users, "error", err,
			"lastGoodKept", next.JWKS != "")
	} else if err == nil && changed {
		f.log.Info("JWT key set fetched", "from", origin(s.issuer, s.uri), "rules", users)
	}
	if cfg != nil {
		f.opts.Store.Upsert(store.LayerKube, cfg)
	}
}

func origin(issuer, uri string) string {
	if uri != "" {
		return uri
	}
	return "OpenID discovery of " + issuer
}

// fetch returns the key set at uri or, without uri, at the jwks_uri of issuer's OpenID configuration, all
// within timeout, each response at most MaxBytes, the set valid as Envoy reads one.
func (f *Fetcher) fetch(ctx context.Context, issuer, uri string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if uri == "" {
		doc, err := f.get(ctx, strings.TrimSuffix(issuer, "/")+openIDDiscoveryPath)
		if err != nil {
			return "", fmt.Errorf("OpenID discovery: %w", err)
		}
		var disc struct {
			JWKSURI string `json:"jwks_uri"`
		}
		if err := json.Unmarshal(doc, &disc); err != nil {
			return "", fmt.Errorf("OpenID discovery: not a JSON document: %v", err)
		}
		if err := config.ValidateJWKSURI(disc.JWKSURI); err != nil {
			return "", fmt.Errorf("OpenID discovery: jwks_uri %q: %v", disc.JWKSURI, err)
		}
		uri = disc.JWKSURI
	}
	body, err := f.get(ctx, uri)
	if err != nil {
		return "", err
	}
	if err := config.ValidateJWKS(string(body)); err != nil {
		return "", fmt.Errorf("%s: %v", uri, err)
	}
	return string(body), nil
}

func (f *Fetcher) get(ctx context.Context, uri string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, uri, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := f.client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("GET %s: no answer within the timeout", uri)
		}
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, f.settings.MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", uri, err)
	}
	if int64(len(body)) > f.settings.MaxBytes {
		return nil, fmt.Errorf("GET %s: the response is larger than %d bytes", uri, f.settings.MaxBytes)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, fmt.Errorf("GET %s: status %d", uri, resp.StatusCode)
	}
	return body, nil
}

// newClient refuses to connect to link-local addresses (cloud metadata servers live there) and to the
// metadata addresses outside that range, as istiod does; loopback and private addresses are allowed, where
// in-cluster identity providers live.
func newClient() *http.Client {
	dialer := &net.Dialer{Timeout: 10 * time.Second, Control: func(_, address string, _ syscall.RawConn) error {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return err
		}
		ip, err := netip.ParseAddr(host)
		if err != nil {
			return err
		}
		if blockedAddress(ip) {
			return fmt.Errorf("connection to %s refused: a link-local or cloud metadata address", ip)
		}
		return nil
	}}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.DialContext = dialer.DialContext
	return &http.Client{Transport: transport}
}

// cloudMetadata are metadata service addresses outside the link-local ranges.
var cloudMetadata = []netip.Addr{netip.MustParseAddr("100.100.100.200"), netip.MustParseAddr("fd00:ec2::254")}

func blockedAddress(ip netip.Addr) bool {
	ip = ip.Unmap()
	return ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || slices.Contains(cloudMetadata, ip)
}

// Problems lists, for every rule whose key set could not be fetched, a warning naming the
// RequestAuthentication and the field (jwksUri, or issuer for OpenID discovery), and what it means: tokens
// rejected, or the last good key set still in use.
func (f *Fetcher) Problems() []*config.Error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*config.Error
	for _, s := range f.sources {
		if s.stored == nil || s.stored.Error == "" {
			continue
		}
		effect := "every token of its issuer is rejected"
		if s.stored.JWKS != "" {
			effect = "the key set fetched at " + s.stored.FetchedAt.UTC().Format(time.RFC3339) + " is still in use"
		}
		for _, u := range s.users {
			field := fmt.Sprintf("spec.jwtRules[%d].jwksUri", u.index)
			if s.uri == "" {
				field = fmt.Sprintf("spec.jwtRules[%d].issuer", u.index)
			}
			file, index := location(u.ra.Source)
			out = append(out, &config.Error{File: file, Index: index, Kind: string(u.ra.Kind), Namespace: u.ra.Namespace,
				Name: u.ra.Name, Field: field, Warning: true,
				Message: fmt.Sprintf("fetching the key set from %s failed: %s; %s", origin(s.issuer, s.uri), s.stored.Error, effect)})
		}
	}
	slices.SortFunc(out, func(a, b *config.Error) int {
		return strings.Compare(a.Namespace+"/"+a.Name+"/"+a.Field, b.Namespace+"/"+b.Name+"/"+b.Field)
	})
	return out
}

// location turns a config Source ("file:PATH#INDEX" or "kube") into what config.Error names.
func location(source string) (string, int) {
	rest, ok := strings.CutPrefix(source, "file:")
	if !ok {
		return source, 0
	}
	if i := strings.LastIndexByte(rest, '#'); i >= 0 {
		if n, err := strconv.Atoi(rest[i+1:]); err == nil {
			return rest[:i], n
		}
	}
	return rest, 0
}

var (
	descFetches = prometheus.NewDesc("sextant_jwks_fetches_total",
		"Fetches of RequestAuthentication key sets (jwksUri or OpenID discovery), by result (success, failure).", []string{"result"}, nil)
	descFailing = prometheus.NewDesc("sextant_jwks_failing",
		"Key sets whose latest fetch failed: their rules use the last good set, or reject every token without one.", nil, nil)
	descSets = prometheus.NewDesc("sextant_jwks_key_sets", "Key sets RequestAuthentication rules need fetched.", nil, nil)
)

// Collector returns the Fetcher's metrics.
func (f *Fetcher) Collector() prometheus.Collector { return collector{f} }

type collector struct{ f *Fetcher }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descFetches
	ch <- descFailing
	ch <- descSets
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descFetches, prometheus.CounterValue, float64(c.f.fetchOK.Load()), "success")
	ch <- prometheus.MustNewConstMetric(descFetches, prometheus.CounterValue, float64(c.f.fetchFailed.Load()), "failure")
	c.f.mu.Lock()
	failing := 0
	for _, s := range c.f.sources {
		if s.stored != nil && s.stored.Error != "" {
			failing++
		}
	}
	total := len(c.f.sources)
	c.f.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descFailing, prometheus.GaugeValue, float64(failing))
	ch <- prometheus.MustNewConstMetric(descSets, prometheus.GaugeValue, float64(total))
}
