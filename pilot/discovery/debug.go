package discovery

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sextantmesh/sextant/pilot/authn"
	"github.com/sextantmesh/sextant/pilot/debug"
)

// registerDebug adds the operator endpoints (/metrics, /debug/...) to the HTTP mux and hooks distribution
// tracking into the transport, the pipeline and the store. It runs in NewServer, before anything loads.
func (s *Server) registerDebug() {
	tokens := s.tokens
	if tokens == nil {
		tokens = s.args.TokenAuthenticator
	}
	collectors := []prometheus.Collector{s.JWKS.Collector(), prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "sextant_vhds_fallbacks_total",
		Help: "Proxies that rejected routes in the VHDS shape and were switched to virtual hosts inside their route configurations.",
	}, func() float64 { total, _ := s.Envoy.VHDSRefusals(); return float64(total) })}
	if c := (securityCollector{s}); c.any() {
		collectors = append(collectors, c)
	}
	debug.New(debug.Sources{
		Store:      s.Store,
		Pipeline:   s.Pipeline,
		XDS:        s.XDS,
		Generators: s.Generators,
		Mesh:       s.Mesh,
		Rejected:   s.Rejected,
		Warnings:   s.Warnings,
		Collectors: collectors,
		Logger:     s.log,
		Access: &debug.Access{Tokens: tokens,
			AdminNamespaces: append([]string{s.Mesh.RootNamespace}, s.args.DebugAdminNamespaces...)},
	}).Register(s.mux)
}

var (
	descTokenReviews = prometheus.NewDesc("sextant_token_reviews_total",
		"Service-account tokens sent to the Kubernetes TokenReview API.", nil, nil)
	descTokenCacheHits = prometheus.NewDesc("sextant_token_review_cache_hits_total",
		"Service-account tokens answered from the TokenReview cache.", nil, nil)
	descAccessReviews = prometheus.NewDesc("sextant_secret_access_reviews_total",
		"SubjectAccessReviews asking whether an identity may be served its namespace's Secrets over SDS, by result (sent, failed).",
		[]string{"result"}, nil)
)

// securityCollector counts the API server reviews the secure port asks for.
type securityCollector struct{ s *Server }

func (c securityCollector) tokenReviews() *authn.TokenReviewAuthenticator {
	tr, _ := c.s.tokens.(*authn.TokenReviewAuthenticator)
	return tr
}

func (c securityCollector) any() bool { return c.tokenReviews() != nil || c.s.SecretAccess != nil }

func (c securityCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descTokenReviews
	ch <- descTokenCacheHits
	ch <- descAccessReviews
}

func (c securityCollector) Collect(ch chan<- prometheus.Metric) {
	if tr := c.tokenReviews(); tr != nil {
		reviews, hits := tr.Counts()
		ch <- prometheus.MustNewConstMetric(descTokenReviews, prometheus.CounterValue, float64(reviews))
		ch <- prometheus.MustNewConstMetric(descTokenCacheHits, prometheus.CounterValue, float64(hits))
	}
	if sa := c.s.SecretAccess; sa != nil {
		sent, failed := sa.Reviews()
		ch <- prometheus.MustNewConstMetric(descAccessReviews, prometheus.CounterValue, float64(sent), "sent")
		ch <- prometheus.MustNewConstMetric(descAccessReviews, prometheus.CounterValue, float64(failed), "failed")
	}
}
