package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sextantmesh/sextant/pilot/authn"
	"github.com/sextantmesh/sextant/pilot/autoregister"
	"github.com/sextantmesh/sextant/pilot/ca"
	"github.com/sextantmesh/sextant/pilot/discovery"
	"github.com/sextantmesh/sextant/pilot/source/file"
	"github.com/sextantmesh/sextant/pilot/xds"
)

func discoveryCommand() *cobra.Command {
	var args discovery.Args
	var logLevel string
	cmd := &cobra.Command{
		Use:   "discovery",
		Short: "Run the control plane: watch config, serve xDS",
		Long: `Run the control plane. Config comes from a directory of YAML/JSON files (--config-dir),
from a Kubernetes cluster (--kubeconfig, or in-cluster when run in a pod), or both (files win).`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			args.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			if args.Kubeconfig == "" && os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
				args.InCluster = true
			}
			srv, err := discovery.NewServer(args)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "sextant %s\n", readBuildInfo())
			fmt.Fprintf(out, "HTTP (ready, healthz, debug) listening on %s\n", srv.HTTPAddr())
			if err := srv.Start(ctx); err != nil {
				return err
			}
			if addr := srv.GRPCAddr(); addr != "" {
				fmt.Fprintf(out, "xDS (gRPC, plaintext, clients not authenticated: development only) listening on %s\n", addr)
			}
			if addr := srv.SecureGRPCAddr(); addr != "" {
				fmt.Fprintf(out, "xDS and CA (gRPC over TLS, clients authenticated) listening on %s\n", addr)
			}
			fmt.Fprint(out, srv.Summary())
			srv.Wait()
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&args.ConfigDir, "config-dir", "", "directory of YAML/JSON config, watched for changes")
	f.Int64Var(&args.ConfigMaxFileBytes, "config-max-file-bytes", file.DefaultMaxFileBytes,
		"largest config file read; a larger one is rejected and keeps the objects it held")
	f.Int64Var(&args.ConfigMaxTotalBytes, "config-max-total-bytes", file.DefaultMaxTotalBytes,
		"most all config files may hold together; a file that would cross it is rejected, keeps the objects it held, and is read again once "+
			"others shrink or go")
	f.IntVar(&args.ConfigMaxFileDocuments, "config-max-file-documents", file.DefaultMaxFileDocuments,
		"most YAML documents one config file may hold; a file with more is rejected before any is parsed and keeps the objects it held")
	f.DurationVar(&args.ConfigSecuritySettle, "config-security-settle", file.DefaultSecuritySettle,
		"how long a config file holding an AuthorizationPolicy, PeerAuthentication or RequestAuthentication must be quiet before an in-place "+
			"write of it is read or its removal withdraws its objects (a file replaced by a rename is read at once)")
	f.BoolVar(&args.ReadyWithSecurityErrors, "ready-with-security-errors", false,
		"become ready although an AuthorizationPolicy, PeerAuthentication or RequestAuthentication (or a config file that cannot be read) was "+
			"rejected at startup; by default the server stays not ready until it is fixed")
	f.StringVar(&args.Kubeconfig, "kubeconfig", "", "kubeconfig file of the cluster to watch")
	f.StringVar(&args.MeshConfigFile, "mesh-config", "", "mesh config file (rootNamespace, trustDomain, domainSuffix)")
	f.StringVar(&args.GRPCAddr, "grpc-addr", "127.0.0.1:15010",
		"plaintext xDS gRPC listen address, loopback only by default (:15010 opens it to every interface); clients there are not authenticated "+
			"and their node's claims are believed, for development only; requests over 4 MiB are refused; empty turns it off")
	f.StringVar(&args.SecureGRPCAddr, "secure-grpc-addr", ":15012",
		"xDS over TLS and the CA (istio.v1.auth.IstioCertificateService); clients authenticate with a client certificate the CA issued or a "+
			"service-account token; empty turns it off")
	f.StringVar(&args.CADir, "ca-dir", "",
		"directory of the CA's key material in Istio's cacerts layout (ca-cert.pem, ca-key.pem, cert-chain.pem, root-cert.pem); a self-signed "+
			"root is created there on first start and reused after; empty: with a cluster, the Secret cacerts (plugged in) or istio-ca-secret "+
			"(created on first start, shared by replicas) in --ca-namespace, as istiod; without one, a new root in memory on every start")
	f.StringVar(&args.CANamespace, "ca-namespace", discovery.DefaultCANamespace, "namespace of the CA's Secrets (cacerts, istio-ca-secret)")
	f.StringVar(&args.TrustedNodeAccounts, "ca-trusted-node-accounts", discovery.DefaultTrustedNodeAccounts,
		"NAMESPACE/SERVICE_ACCOUNT list (comma-separated) of node proxies: only these may connect as a ztunnel (served every workload) or ask "+
			"for certificates of workloads on their node (istiod's CA_TRUSTED_NODE_ACCOUNTS)")
	f.StringVar(&args.SDSFileModeReaders, "sds-file-mode-readers", "",
		"NAMESPACE/SERVICE_ACCOUNT list (comma-separated) that may read their namespace's TLS key pairs over SDS without a cluster, beside "+
			"gateways (node type router); every other proxy is refused them. With a cluster, a SubjectAccessReview decides (may the account list "+
			"Secrets) and this flag is an error")
	f.StringSliceVar(&args.TokenAudiences, "token-audiences", []string{authn.DefaultAudience},
		"audiences a service-account token must be issued for (one of them)")
	f.StringSliceVar(&args.ServingDNSNames, "serving-dns-names", discovery.DefaultServingDNSNames,
		"DNS names of the secure port's certificate (issued by the CA, renewed at half its validity): the names proxies dial")
	f.DurationVar(&args.WorkloadCertTTL, "workload-cert-ttl", ca.DefaultWorkloadTTL,
		"validity of a workload certificate whose request asks for none")
	f.DurationVar(&args.MaxWorkloadCertTTL, "max-workload-cert-ttl", ca.DefaultMaxTTL,
		"longest validity a certificate request may ask for; longer is refused")
	f.StringVar(&args.HTTPAddr, "http-addr", ":15014",
		"HTTP listen address (/ready, /healthz, /metrics open; /debug for loopback callers, or with a service-account token)")
	f.StringSliceVar(&args.DebugAdminNamespaces, "debug-admin-namespaces", nil,
		"namespaces whose service-account tokens may read every /debug view, beside the mesh root namespace; other namespaces' tokens read "+
			"only the config_dump of their own proxies")
	f.DurationVar(&args.DebounceAfter, "debounce-after", 100*time.Millisecond,
		"quiet period after a config change before a push (endpoint changes do not extend it)")
	f.DurationVar(&args.DebounceMax, "debounce-max", 10*time.Second, "longest a change waits while changes keep coming")
	f.DurationVar(&args.DebounceEndpoints, "debounce-endpoints", time.Millisecond,
		"how long endpoint-only changes are held from the first of a batch (at most --debounce-after)")
	f.DurationVar(&args.DebounceFirst, "debounce-first", 20*time.Millisecond,
		"quiet period for the first config change after --debounce-after without config changes; the rest of a burst waits --debounce-after "+
			"(0: always --debounce-after)")
	addTransportFlags(f, &args)
	f.DurationVar(&args.WorkloadEntryGracePeriod, "workload-entry-grace-period", autoregister.DefaultGracePeriod,
		"how long the WorkloadEntry a VM's agent registered (naming a WorkloadGroup) outlives the agent's last connection; one that "+
			"reconnects within it keeps its entry (istiod's PILOT_WORKLOAD_ENTRY_GRACE_PERIOD)")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
}

// addTransportFlags registers the flags that pace and bound the xDS streams.
func addTransportFlags(f *pflag.FlagSet, args *discovery.Args) {
	f.IntVar(&args.PushConcurrency, "push-concurrency", 100, "connections pushed to at once")
	f.DurationVar(&args.SendTimeout, "send-timeout", 5*time.Second, "a push taking longer closes the connection (the proxy is not reading)")
	f.DurationVar(&args.MaxConnectionAge, "max-connection-age", 30*time.Minute,
		"proxies reconnect after this long (with jitter), spreading them over replicas; 0 disables")
	f.DurationVar(&args.MaxConnectionAgeGrace, "max-connection-age-grace", xds.DefaultMaxConnectionAgeGrace,
		"how long a connection past --max-connection-age keeps its streams before it is closed (the proxy then reconnects, to any replica)")
	f.Int64Var(&args.MaxBytesInFlightPerProxy, "max-bytes-in-flight-per-proxy", xds.DefaultMaxBytesInFlightPerProxy,
		"the most one response counts for in --max-bytes-in-flight, so proxies that stop reading leave the rest of it to the others until "+
			"--send-timeout closes them")
	f.IntVar(&args.MaxRequestBytes, "max-request-bytes", xds.DefaultMaxRequestBytes,
		"largest xDS request accepted on the secure port, read only once its client is authenticated (64 MiB: a subscription to about 800,000 "+
			"names); a larger one ends its stream with ResourceExhausted. The plaintext port accepts 4 MiB")
	f.Int64Var(&args.MaxBytesInFlight, "max-bytes-in-flight", xds.DefaultMaxBytesInFlight,
		"response bytes sent to all proxies and not yet acknowledged; sends beyond wait (bounds the memory of a reconnect storm); <0: no bound")
	f.Float64Var(&args.NewStreamsPerSecond, "new-streams-per-second", 0,
		"limit on new xDS streams per second, smoothing reconnect storms; 0 means no limit")
	f.StringVar(&args.VHDSMinEnvoy, "vhds-min-envoy", "1.38",
		"oldest Envoy (MAJOR.MINOR) whose delta stream gets sidecar virtual hosts over VHDS instead of inside the route configurations; off "+
			"disables VHDS")
	f.StringVar(&args.OutboundHTTPRoutes, "outbound-http-routes", "service",
		"sidecars' outbound HTTP routes: service (a Kubernetes Service's HTTP port on its ClusterIP's listener with a route configuration of "+
			"its own, so a service change sends only its own) or port (every service in the port's shared table, as istiod: a request to one "+
			"ClusterIP naming another service's host goes to the named one)")
}
