//go:build integration

package integration

import (
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/sextantmesh/sextant/tests/kubeenv"
)

// apiServer is a kubeenv.Server that fails its test instead of returning errors. The binaries come from
// scripts/test-env.sh (make test-env); SEXTANT_ETCD and SEXTANT_KUBE_APISERVER override where they are looked for.
type apiServer struct {
	*kubeenv.Server
	t testing.TB
}

type serverOption func(*kubeenv.Options)

// withAPIServerArgs adds kube-apiserver flags (e.g. --watch-cache=false).
func withAPIServerArgs(args ...string) serverOption {
	return func(o *kubeenv.Options) { o.APIServerArgs = append(o.APIServerArgs, args...) }
}

// startAPIServer starts etcd and kube-apiserver and waits until /readyz answers, or skips the test when the
// binaries are missing (fails it under SEXTANT_REQUIRE_APISERVER). Everything is stopped at test cleanup;
// the logs are printed when the test failed.
func startAPIServer(t testing.TB, opts ...serverOption) *apiServer {
	t.Helper()
	kubeenv.SkipIfMissing(t)
	o := kubeenv.Options{Dir: t.TempDir()}
	for _, f := range opts {
		f(&o)
	}
	srv, err := kubeenv.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	s := &apiServer{Server: srv, t: t}
	t.Cleanup(func() {
		srv.Stop()
		if t.Failed() {
			for _, name := range []string{kubeenv.EtcdLog, kubeenv.APIServerLog} {
				t.Logf("--- tail of %s ---\n%s", name, srv.LogTail(name, 6000))
			}
		}
	})
	t.Logf("etcd and kube-apiserver ready in %s at %s", srv.StartTook.Round(time.Millisecond), srv.URL)
	return s
}

// RestartAPIServer stops kube-apiserver and starts it again on the same port and etcd.
func (s *apiServer) RestartAPIServer() time.Duration {
	s.t.Helper()
	d, err := s.Server.RestartAPIServer()
	must(s.t, err)
	return d
}

// EtcdRevision returns etcd's current revision.
func (s *apiServer) EtcdRevision() int64 {
	s.t.Helper()
	rev, err := s.Server.EtcdRevision()
	must(s.t, err)
	return rev
}

// EtcdCompact compacts etcd's history up to rev, as kube-apiserver does every 5 minutes.
func (s *apiServer) EtcdCompact(rev int64) {
	s.t.Helper()
	must(s.t, s.Server.EtcdCompact(rev))
}

// ServiceAccountConfig creates namespace/name as a service account (if missing) and returns a client
// config that authenticates as it with a token from the TokenRequest API.
func (s *apiServer) ServiceAccountConfig(namespace, name string) *rest.Config {
	s.t.Helper()
	cfg, err := s.Server.ServiceAccountConfig(namespace, name)
	must(s.t, err)
	return cfg
}

// WriteKubeconfig writes cfg as a kubeconfig file and returns its path.
func (s *apiServer) WriteKubeconfig(cfg *rest.Config, name string) string {
	s.t.Helper()
	path, err := s.Server.WriteKubeconfig(cfg, name)
	must(s.t, err)
	return path
}

func (s *apiServer) EnsureNamespace(name string) {
	s.t.Helper()
	must(s.t, s.Server.EnsureNamespace(name))
}

// installIstioCRDs creates the Istio CRDs and waits until each is established and listable.
func installIstioCRDs(t testing.TB, s *apiServer) time.Duration {
	t.Helper()
	d, err := s.InstallIstioCRDs(t.Context())
	must(t, err)
	return d
}
