package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"k8s.io/client-go/kubernetes"

	"github.com/sextantmesh/sextant/pilot/authn"
	"github.com/sextantmesh/sextant/pilot/autoregister"
	"github.com/sextantmesh/sextant/pilot/ca"
	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/envoy"
	"github.com/sextantmesh/sextant/pilot/jwks"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/push"
	"github.com/sextantmesh/sextant/pilot/secretaccess"
	"github.com/sextantmesh/sextant/pilot/source/file"
	"github.com/sextantmesh/sextant/pilot/source/kube"
	"github.com/sextantmesh/sextant/pilot/store"
	"github.com/sextantmesh/sextant/pilot/xds"
	"github.com/sextantmesh/sextant/pilot/ztunnel"
)

// Args configure a discovery server.
type Args struct {
	ConfigDir string
	// ConfigMaxFileDocuments is file.Options.MaxFileDocuments: the most documents one config file may hold.
	ConfigMaxFileDocuments int
	// ConfigSecuritySettle is file.Options.SecuritySettle: how long a file holding security objects must be
	// quiet before an in-place write of it is read or its removal takes effect.
	ConfigSecuritySettle time.Duration
	// ConfigMaxFileBytes is file.Options.MaxFileBytes: the largest config file read.
	ConfigMaxFileBytes int64
	// ConfigMaxTotalBytes is file.Options.MaxTotalBytes: the most all config files may hold together.
	ConfigMaxTotalBytes int64
	Kubeconfig          string
	InCluster           bool
	MeshConfigFile      string
	// GRPCAddr is the plaintext xDS address (development and tests: streams there are not
	// authenticated and the node's claims are believed); empty turns it off.
	GRPCAddr string
	// SecureGRPCAddr is the address of xDS over TLS with clients authenticated, and of the CA; empty turns it off.
	SecureGRPCAddr string
	// CADir holds the CA's key material in Istio's cacerts layout; a self-signed root is created there on
	// first start. Empty: with a cluster, the Secrets cacerts or istio-ca-secret in CANamespace (the
	// latter created on first start, as istiod); without one, a root in memory, new on every start.
	CADir string
	// CANamespace is the namespace of the CA's Secrets (default DefaultCANamespace).
	CANamespace string
	// TrustedNodeAccounts is a comma-separated NAMESPACE/SERVICE_ACCOUNT list (istiod's CA_TRUSTED_NODE_ACCOUNTS).
	TrustedNodeAccounts string
	// TokenAudiences a service-account token must be issued for (default istio-ca).
	TokenAudiences []string
	// ServingDNSNames are the names of the secure port's certificate (default DefaultServingDNSNames).
	ServingDNSNames []string
	// WorkloadCertTTL and MaxWorkloadCertTTL are ca.Options' DefaultTTL and MaxTTL.
	WorkloadCertTTL    time.Duration
	MaxWorkloadCertTTL time.Duration
	// TokenAuthenticator verifies bearer tokens instead of the cluster's TokenReview API.
	TokenAuthenticator authn.TokenAuthenticator
	// SecretAuthorizer decides which identities are served their namespace's key pairs over SDS, instead
	// of the cluster's SubjectAccessReview API (without a cluster: secretaccess.FileMode).
	SecretAuthorizer envoy.SecretAuthorizer
	// SDSFileModeReaders is a comma-separated NAMESPACE/SERVICE_ACCOUNT list that may read their
	// namespace's key pairs over SDS without a cluster, beside gateways; with a cluster, RBAC decides.
	SDSFileModeReaders string
	// DebugAdminNamespaces may read every /debug view with a token, beside the mesh root namespace.
	DebugAdminNamespaces []string
	HTTPAddr             string
	DebounceAfter        time.Duration
	DebounceMax          time.Duration
	// DebounceEndpoints is how long endpoint-only changes are held from the first of a batch.
	DebounceEndpoints time.Duration
	// DebounceFirst is the quiet period for the first config change after a quiet spell.
	DebounceFirst time.Duration
	// Transport settings, see xds.Options.
	PushConcurrency  int
	SendTimeout      time.Duration
	MaxConnectionAge time.Duration
	// MaxConnectionAgeGrace is xds.Options.MaxConnectionAgeGrace.
	MaxConnectionAgeGrace time.Duration
	NewStreamsPerSecond   float64
	MaxBytesInFlight      int64
	// MaxBytesInFlightPerProxy and MaxRequestBytes are the xds.Options of the same names.
	MaxBytesInFlightPerProxy int64
	MaxRequestBytes          int
	// VHDSMinEnvoy is envoy.Options.VHDSMinEnvoy.
	VHDSMinEnvoy string
	// OutboundHTTPRoutes is envoy.Options.OutboundHTTPRoutes.
	OutboundHTTPRoutes string
	// WorkloadEntryGracePeriod is how long a VM's auto-registered WorkloadEntry outlives its agent's
	// connection (default autoregister.DefaultGracePeriod, istiod's PILOT_WORKLOAD_ENTRY_GRACE_PERIOD).
	WorkloadEntryGracePeriod time.Duration
	// ReadyWithSecurityErrors lets the server become ready although security input (AuthorizationPolicy,
	// PeerAuthentication, RequestAuthentication, or a file that cannot be read) was rejected at startup.
	ReadyWithSecurityErrors bool
	Logger                  *slog.Logger
}

// Server is a running (or ready to run) discovery server.
type Server struct {
	args Args
	log  *slog.Logger
	// tokens verifies bearer tokens (xDS, the CA, /debug); nil without a cluster.
	tokens   authn.TokenAuthenticator
	Mesh     *mesh.Config
	Store    *store.Store
	Pipeline *push.Pipeline
	Files    *file.Source
	XDS      *xds.Server
	// Generators by type URL, as registered with XDS; debug views use them to show generated config.
	Generators map[string]model.Generator
	Envoy      *envoy.Generators
	Ztunnel    *ztunnel.Generators
	// AutoRegister registers the WorkloadEntries of VMs whose agents connect naming a WorkloadGroup.
	AutoRegister *autoregister.Controller
	// JWKS fetches the key sets RequestAuthentication rules name by URI into the store.
	JWKS *jwks.Fetcher
	// CA is the mesh CA, nil when the secure port is off.
	CA *ca.Authority
	// SecretAccess reviews which identities may be served their namespace's key pairs over SDS; nil
	// without a cluster or without the secure port.
	SecretAccess *secretaccess.Reviewer
	kube         *kube.Source
	// kubeClient is the client of the security features (token and access reviews, the CA's Secrets).
	kubeClient kubernetes.Interface
	// startupCleared is set once the server has been ready; see notReadyReason.
	startupCleared atomic.Bool

	grpcServer       *grpc.Server
	secureGRPCServer *grpc.Server
	httpServer       *http.Server
	grpcListener     net.Listener
	secureListener   net.Listener
	httpListener     net.Listener
	mux              *http.ServeMux
	serving          *ca.ServingCert
	rootPublisher    *ca.RootPublisher
	trustedAccounts  authn.Accounts

	wg sync.WaitGroup
}

// NewServer builds the server and binds its listeners; nothing runs until Start.
func NewServer(args Args) (*Server, error) {
	if args.Logger == nil {
		args.Logger = slog.Default()
	}
	if args.ConfigDir == "" && args.Kubeconfig == "" && !args.InCluster {
		return nil, errors.New("no config source: give --config-dir DIR and/or --kubeconfig FILE")
	}
	if _, _, err := envoy.ParseVHDSMinEnvoy(args.VHDSMinEnvoy); err != nil {
		return nil, err
	}
	if _, err := envoy.ParseOutboundHTTPRoutes(args.OutboundHTTPRoutes); err != nil {
		return nil, err
	}
	if args.GRPCAddr == "" && args.SecureGRPCAddr == "" {
		return nil, errors.New("no xDS address: give --grpc-addr and/or --secure-grpc-addr")
	}
	m, err := mesh.Load(args.MeshConfigFile)
	if err != nil {
		return nil, err
	}
	if len(m.Unimplemented) > 0 {
		args.Logger.Warn("mesh config fields Sextant does not implement have no effect", "file", args.MeshConfigFile, "fields", m.Unimplemented)
	}
	trusted, err := authn.ParseAccounts(args.TrustedNodeAccounts)
	if err != nil {
		return nil, err
	}
	fileMode, err := fileModeSecretAccess(args)
	if err != nil {
		return nil, err
	}
	s := &Server{args: args, log: args.Logger, Mesh: m, Store: store.New(), trustedAccounts: trusted}
	s.Pipeline = push.New(push.Options{Store: s.Store, Mesh: m, DebounceAfter: args.DebounceAfter, DebounceMax: args.DebounceMax,
		DebounceEndpoints: args.DebounceEndpoints, DebounceFirst: args.DebounceFirst, Logger: args.Logger})
	s.JWKS = jwks.New(jwks.Options{Store: s.Store, Mesh: m, Logger: args.Logger})
	if args.ConfigDir != "" {
		s.Files = file.New(file.Options{Dir: args.ConfigDir, Store: s.Store, Logger: args.Logger, MaxFileBytes: args.ConfigMaxFileBytes,
			MaxTotalBytes: args.ConfigMaxTotalBytes, MaxFileDocuments: args.ConfigMaxFileDocuments, SecuritySettle: args.ConfigSecuritySettle})
	}
	secretAuthorizer := args.SecretAuthorizer
	if args.SecureGRPCAddr != "" && (args.Kubeconfig != "" || args.InCluster) {
		restConfig, err := kube.RESTConfig(args.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubernetes: %w", err)
		}
		// A TokenReview per new token, a SubjectAccessReview per identity: at client-go's default of 5
		// requests per second, 300 proxies connecting at once waited up to a minute. istiod's client allows 80.
		restConfig.QPS, restConfig.Burst = SecurityClientQPS, 2*SecurityClientQPS
		if s.kubeClient, err = kubernetes.NewForConfig(restConfig); err != nil {
			return nil, fmt.Errorf("kubernetes: %w", err)
		}
		if secretAuthorizer == nil {
			s.SecretAccess = secretaccess.New(secretaccess.Options{Reviews: s.kubeClient.AuthorizationV1().SubjectAccessReviews(),
				OnDecided: s.pushSecretAccess, Logger: args.Logger})
			secretAuthorizer = s.SecretAccess
		}
	}
	if secretAuthorizer == nil {
		secretAuthorizer = fileMode
	}
	s.Envoy, s.Ztunnel = envoy.New(envoy.Options{VHDSMinEnvoy: args.VHDSMinEnvoy, OutboundHTTPRoutes: args.OutboundHTTPRoutes,
		SecretAuthorizer: secretAuthorizer}), ztunnel.New()
	generators := s.Envoy.ByTypeURL()
	maps.Copy(generators, s.Ztunnel.ByTypeURL())
	s.Generators = generators
	policies := s.Envoy.Policies() // with the fallback from VHDS for a proxy that rejects it
	maps.Copy(policies, ztunnel.Policies())
	if s.AutoRegister, err = s.newAutoRegistration(); err != nil {
		return nil, err
	}
	s.XDS = xds.NewServer(xds.Options{
		Pipeline:                 readyPipeline{Pipeline: s.Pipeline, server: s},
		Generators:               generators,
		Policies:                 policies,
		Logger:                   args.Logger,
		PushConcurrency:          args.PushConcurrency,
		SendTimeout:              args.SendTimeout,
		MaxConnectionAge:         args.MaxConnectionAge,
		NewStreamsPerSecond:      args.NewStreamsPerSecond,
		MaxBytesInFlight:         args.MaxBytesInFlight,
		MaxConnectionAgeGrace:    args.MaxConnectionAgeGrace,
		MaxBytesInFlightPerProxy: args.MaxBytesInFlightPerProxy,
		MaxRequestBytes:          args.MaxRequestBytes,
		TrustedNodeAccounts:      trusted,
		ConnectionHook:           s.AutoRegister,
	})
	if args.GRPCAddr != "" {
		s.grpcServer = grpc.NewServer(s.XDS.GRPCServerOptions()...)
		s.XDS.Register(s.grpcServer)
	}
	if args.SecureGRPCAddr != "" {
		if err := s.setupSecurity(); err != nil {
			return nil, err
		}
	}
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("/ready", s.handleReady)
	s.mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	s.registerDebug()
	s.httpServer = &http.Server{Handler: s.mux, ReadHeaderTimeout: 10 * time.Second}

	if s.grpcServer != nil {
		if s.grpcListener, err = net.Listen("tcp", args.GRPCAddr); err != nil {
			return nil, fmt.Errorf("xDS listener: %w", err)
		}
	}
	if err := s.listenSecure(); err != nil {
		s.closeListeners()
		return nil, err
	}
	if s.httpListener, err = net.Listen("tcp", args.HTTPAddr); err != nil {
		s.closeListeners()
		return nil, fmt.Errorf("HTTP listener: %w", err)
	}
	return s, nil
}

// SecurityClientQPS is how many requests per second the security features' Kubernetes client may send
// (token and access reviews, the CA's Secrets and root ConfigMaps), as istiod's --kubeClientQPS.
const SecurityClientQPS = 80

// fileModeSecretAccess is who may read key pairs over SDS without a cluster: gateways and the named
// readers, never every identity (there is no RBAC to ask). Nil when a cluster's RBAC decides.
func fileModeSecretAccess(args Args) (envoy.SecretAuthorizer, error) {
	if args.Kubeconfig != "" || args.InCluster {
		if args.SDSFileModeReaders != "" {
			return nil, errors.New("--sds-file-mode-readers applies only without a cluster; with one, grant the service account a Role to list " +
				"Secrets in its namespace")
		}
		return nil, nil
	}
	return secretaccess.ParseFileModeReaders(args.SDSFileModeReaders)
}

// pushSecretAccess pushes SDS to the proxies of an identity whose access to its Secrets was decided.
func (s *Server) pushSecretAccess(id authn.Identity) {
	s.XDS.Push(&model.PushRequest{SecretAccessUpdated: map[string]struct{}{id.Account(): {}},
		Reason: map[string]int{"secret-access": 1}, Start: time.Now()})
}

func (s *Server) closeListeners() {
	for _, l := range []net.Listener{s.grpcListener, s.secureListener, s.httpListener} {
		if l != nil {
			l.Close()
		}
	}
}

// GRPCAddr is the address the plaintext xDS listener is bound to, "" when it is off.
func (s *Server) GRPCAddr() string {
	if s.grpcListener == nil {
		return ""
	}
	return s.grpcListener.Addr().String()
}

// SecureGRPCAddr is the address the secure xDS and CA listener is bound to, "" when it is off.
func (s *Server) SecureGRPCAddr() string {
	if s.secureListener == nil {
		return ""
	}
	return s.secureListener.Addr().String()
}

// HTTPAddr is the address the HTTP listener is bound to.
func (s *Server) HTTPAddr() string { return s.httpListener.Addr().String() }

// Start serves HTTP at once (so /ready can say "not yet"), loads the sources, publishes the first
// snapshot, then serves xDS and watches for changes until ctx is done.
func (s *Server) Start(ctx context.Context) error {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.httpServer.Serve(s.httpListener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("HTTP server stopped", "err", err)
		}
	}()
	if s.Files != nil {
		if err := s.Files.Load(); err != nil {
			return err
		}
	}
	if err := s.startKube(ctx); err != nil {
		return err
	}
	s.wg.Add(2)
	go func() { defer s.wg.Done(); s.JWKS.Run(ctx) }()
	go func() { defer s.wg.Done(); s.AutoRegister.Run(ctx) }()
	// The first snapshot waits (bounded) for the key sets the loaded rules name, so tokens are verified
	// from the first push rather than rejected until the fetches end.
	select {
	case <-s.JWKS.FirstFetches():
	case <-time.After(s.Mesh.JWKSFetch.Settings().MaxTimeout):
		s.log.Warn("JWT key sets still being fetched; their tokens are rejected until they arrive")
	case <-ctx.Done():
	}
	s.Pipeline.Initialize()
	if s.rootPublisher != nil {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.rootPublisher.Run(ctx) }()
	}
	s.wg.Add(2)
	go func() { defer s.wg.Done(); s.watchStartupGate(ctx) }()
	go func() { defer s.wg.Done(); s.Pipeline.Run(ctx) }()
	for _, g := range []struct {
		srv  *grpc.Server
		lis  net.Listener
		name string
	}{{s.grpcServer, s.grpcListener, "xDS server"}, {s.secureGRPCServer, s.secureListener, "secure xDS server"}} {
		if g.srv == nil {
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := g.srv.Serve(g.lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				s.log.Error(g.name+" stopped", "err", err)
			}
		}()
	}
	if s.Files != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := s.Files.Run(ctx); err != nil {
				s.log.Error("config dir watch stopped", "err", err)
			}
		}()
	}
	go func() {
		<-ctx.Done()
		s.shutdown()
	}()
	return nil
}

func (s *Server) shutdown() {
	// Close ADS streams first so proxies reconnect elsewhere at once, then stop the listener.
	drainCtx, cancelDrain := context.WithTimeout(context.Background(), 5*time.Second)
	_ = s.XDS.Shutdown(drainCtx)
	cancelDrain()
	var stopping sync.WaitGroup
	for _, g := range []*grpc.Server{s.grpcServer, s.secureGRPCServer} {
		if g == nil {
			continue
		}
		stopping.Go(func() {
			stopped := make(chan struct{})
			go func() { g.GracefulStop(); close(stopped) }()
			select {
			case <-stopped:
			case <-time.After(5 * time.Second):
				g.Stop()
			}
		})
	}
	stopping.Wait()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.httpServer.Shutdown(shutdownCtx)
}

// Wait blocks until everything Start launched has stopped.
func (s *Server) Wait() { s.wg.Wait() }

// Rejected returns every rejected config document or object, from every source.
func (s *Server) Rejected() []*config.Error {
	var out []*config.Error
	if s.Files != nil {
		out = append(out, s.Files.Errors()...)
	}
	out = append(out, s.kubeRejected()...)
	return out
}

// Warnings returns every accepted field Sextant does not implement, from every source.
func (s *Server) Warnings() []*config.Error {
	var out []*config.Error
	if s.Files != nil {
		out = append(out, s.Files.Warnings()...)
	}
	out = append(out, s.JWKS.Problems()...)
	out = append(out, s.Mesh.Warnings(s.args.MeshConfigFile)...)
	if s.kube != nil {
		out = append(out, s.kube.Warnings()...)
		for _, u := range s.kube.Unread() {
			out = append(out, &config.Error{File: "kube", Kind: string(u.Kind), Warning: true, Message: fmt.Sprintf(
				"%d objects of kind %s (%s) in the cluster at start: Sextant does not read this kind, so they have no effect",
				u.Count, u.Kind, u.APIVersion)})
		}
	}
	out = append(out, s.secretDenials()...)
	if ps := s.Pipeline.Current(); ps != nil {
		out = append(out, ps.CredentialProblems(time.Now())...)
		out = append(out, ps.AuthorizationProblems()...)
		out = append(out, ps.VirtualServiceProblems()...)
		out = append(out, ps.DNSRoundRobinProblems()...)
		out = append(out, ps.DynamicDNSProblems()...)
		out = append(out, ps.ServiceHostProblems()...)
		out = append(out, ps.IngressProblems()...)
	}
	return out
}

// secretDenials are the secrets refused to connected proxies over SDS, as warnings naming the Secret.
func (s *Server) secretDenials() []*config.Error {
	connected := map[string]bool{}
	for _, c := range s.XDS.Connections() {
		connected[c.NodeID] = true
	}
	var out []*config.Error
	for _, d := range s.Envoy.SecretDenials(func(id string) bool { return connected[id] }) {
		who := "proxy " + d.Proxy
		if d.Identity != "" {
			who += " (identity " + d.Identity + ")"
		}
		out = append(out, &config.Error{File: "sds", Kind: string(config.Secret), Namespace: d.Namespace, Name: d.Name, Warning: true,
			Message: fmt.Sprintf("%s not served to %s since %s: %s", d.Resource, who, d.Since.UTC().Format(time.RFC3339), d.Reason)})
	}
	return out
}

// Summary describes what is loaded, for people.
func (s *Server) Summary() string {
	var b strings.Builder
	ps := s.Pipeline.Current()
	if ps == nil {
		return "no snapshot yet"
	}
	fmt.Fprintf(&b, "snapshot v%d: %d services, %d endpoints, %d workloads (built in %s)\n", ps.Version, ps.ServiceCount(),
		ps.EndpointCount(), ps.WorkloadCount(), ps.BuildDuration.Round(time.Microsecond))
	var parts []string
	for _, ki := range config.Kinds() {
		if n := s.Store.Count(ki.Kind); n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, ki.Kind))
		}
	}
	sort.Strings(parts)
	fmt.Fprintf(&b, "config objects: %s\n", strings.Join(parts, ", "))
	rejected := s.Rejected()
	fmt.Fprintf(&b, "rejected documents: %d\n", len(rejected))
	for _, e := range rejected {
		fmt.Fprintf(&b, "  %s\n", e.Error())
	}
	if warnings := s.Warnings(); len(warnings) > 0 {
		fmt.Fprintf(&b, "warnings (accepted, not implemented): %d\n", len(warnings))
		for _, e := range warnings {
			fmt.Fprintf(&b, "  %s\n", e.Error())
		}
	}
	return b.String()
}
