package discovery

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	corev1 "k8s.io/api/core/v1"

	"github.com/sextantmesh/sextant/pilot/authn"
	"github.com/sextantmesh/sextant/pilot/ca"
	"github.com/sextantmesh/sextant/pilot/config"
)

// DefaultServingDNSNames are the names the serving certificate of the secure port carries: istiod's, so
// proxies configured for istiod reach Sextant unchanged, and the Service in manifests/.
var DefaultServingDNSNames = []string{"istiod.istio-system.svc", "sextant.istio-system.svc"}

// DefaultCANamespace is where the CA's Secrets are, as istiod's (its own namespace).
const DefaultCANamespace = "istio-system"

// RootPublisherLease is the Lease that elects the replica publishing the ConfigMap istio-ca-root-cert.
const RootPublisherLease = "sextant-ca-root-publisher"

// DefaultTrustedNodeAccounts is istiod's node proxy account: ztunnel's.
const DefaultTrustedNodeAccounts = "istio-system/ztunnel"

// setupSecurity builds the CA, the authenticators and the secure gRPC server (xDS and the CA over TLS).
func (s *Server) setupSecurity() error {
	a := s.args
	now := time.Now()
	client := s.kubeClient
	ns := a.CANamespace
	if ns == "" {
		ns = DefaultCANamespace
	}
	var km ca.KeyMaterial
	switch {
	case a.CADir != "":
		var created bool
		var err error
		if km, created, err = ca.LoadOrCreateDir(a.CADir, s.Mesh.TrustDomain, now); err != nil {
			return err
		}
		if created {
			s.log.Info("created a self-signed mesh CA root", "dir", a.CADir, "trustDomain", s.Mesh.TrustDomain)
		} else {
			s.log.Info("loaded the mesh CA", "dir", a.CADir)
		}
	case client != nil:
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var from string
		var err error
		if km, from, err = ca.LoadOrCreateSecret(ctx, client, ns, s.Mesh.TrustDomain, now); err != nil {
			return fmt.Errorf("mesh CA: %w", err)
		}
		s.log.Info("loaded the mesh CA", "secret", from)
	default:
		var err error
		if km, err = ca.GenerateSelfSigned(s.Mesh.TrustDomain, now); err != nil {
			return err
		}
		s.log.Warn("the mesh CA root is kept in memory only: a restart makes a new root, and certificates issued before are no longer trusted; " +
			"give --ca-dir to keep it")
	}
	authority, err := ca.New(km, ca.Options{TrustDomain: s.Mesh.TrustDomain, DefaultTTL: a.WorkloadCertTTL, MaxTTL: a.MaxWorkloadCertTTL})
	if err != nil {
		return err
	}
	names := a.ServingDNSNames
	if len(names) == 0 {
		names = DefaultServingDNSNames
	}
	serving, err := ca.NewServingCert(authority, names, 0)
	if err != nil {
		return err
	}
	chain := authn.Chain{ClientCert: &authn.ClientCertAuthenticator{TrustDomain: s.Mesh.TrustDomain,
		TrustDomainAliases: s.Mesh.TrustDomainAliases}, Token: a.TokenAuthenticator,
		ClusterID: s.Mesh.ClusterID}
	if chain.Token == nil && client != nil {
		chain.Token = authn.NewTokenReviewAuthenticator(authn.TokenReviewOptions{Client: client, TrustDomain: s.Mesh.TrustDomain,
			Audiences: a.TokenAudiences})
	}
	s.CA, s.serving, s.tokens = authority, serving, chain.Token
	if client != nil {
		s.rootPublisher = ca.NewRootPublisher(ca.RootPublisherOptions{Client: client, RootPEM: authority.RootPEM(),
			LeaseNamespace: ns, LeaseName: RootPublisherLease, Logger: s.log})
	}
	s.secureGRPCServer = grpc.NewServer(append(s.XDS.AuthenticatedGRPCServerOptions(), grpc.Creds(credentials.NewTLS(serving.TLSConfig())))...)
	s.XDS.RegisterAuthenticated(s.secureGRPCServer, chain)
	ca.NewService(ca.ServiceOptions{Authority: authority, Authenticator: chain, TrustedNodeAccounts: s.trustedAccounts,
		Pods: storePods{s}, Logger: s.log}).Register(s.secureGRPCServer)
	return nil
}

// listenSecure binds the secure port; the TLS handshake runs in gRPC's transport, per connection.
func (s *Server) listenSecure() error {
	if s.secureGRPCServer == nil {
		return nil
	}
	lis, err := net.Listen("tcp", s.args.SecureGRPCAddr)
	if err != nil {
		return fmt.Errorf("secure xDS listener: %w", err)
	}
	s.secureListener = lis
	return nil
}

// ServingCertificate returns the secure port's current certificate (for tests and debug views).
func (s *Server) ServingCertificate() (*tls.Certificate, error) {
	if s.serving == nil {
		return nil, errors.New("the secure port is off")
	}
	return s.serving.Certificate()
}

// storePods answers impersonation checks from the store, the latest view of the cluster: a pod counts
// from when it is scheduled (it has no IP yet when its node proxy first asks for its certificate) until
// it has failed, as istiod's node authorizer.
type storePods struct{ s *Server }

func (p storePods) Pod(namespace, name string) (ca.Pod, bool) {
	c := p.s.Store.Get(config.Key{Kind: config.Pod, Namespace: namespace, Name: name})
	if c == nil {
		return ca.Pod{}, false
	}
	pod, ok := c.Spec.(*corev1.Pod)
	if !ok {
		return ca.Pod{}, false
	}
	return ca.Pod{UID: c.UID, NodeName: pod.Spec.NodeName, ServiceAccount: podServiceAccount(pod)}, true
}

func (p storePods) AccountOnNode(node string, id authn.Identity) bool {
	for _, c := range p.s.Store.ListNamespace(config.Pod, id.Namespace) {
		pod, ok := c.Spec.(*corev1.Pod)
		if ok && pod.Spec.NodeName == node && pod.Status.Phase != corev1.PodFailed && podServiceAccount(pod) == id.ServiceAccount {
			return true
		}
	}
	return false
}

// podServiceAccount is the account a pod runs as; Kubernetes' admission defaults an empty one to "default".
func podServiceAccount(pod *corev1.Pod) string {
	if pod.Spec.ServiceAccountName == "" {
		return "default"
	}
	return pod.Spec.ServiceAccountName
}
