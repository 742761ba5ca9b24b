package ca

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	pb "istio.io/api/security/v1alpha1"

	"github.com/sextantmesh/sextant/pilot/authn"
	"github.com/sextantmesh/sextant/pkg/loglimit"
)

// Request metadata keys, as Istio's clients send them (istio.io/istio pkg/security).
const (
	impersonatedIdentityKey = "ImpersonatedIdentity"
	certSignerKey           = "CertSigner"
)

// Pod is what impersonation needs to know about the caller's pod.
type Pod struct {
	UID            string
	NodeName       string
	ServiceAccount string
}

// Pods answers what impersonation needs to know about the cluster's pods.
type Pods interface {
	// Pod returns pod namespace/name; ok is false if it is not known.
	Pod(namespace, name string) (pod Pod, ok bool)
	// AccountOnNode reports whether a pod running as id (its namespace and service account) is on node
	// and has not failed.
	AccountOnNode(node string, id authn.Identity) bool
}

// ServiceOptions configure a Service.
type ServiceOptions struct {
	Authority     *Authority
	Authenticator authn.Authenticator
	// TrustedNodeAccounts may ask for a certificate of a workload on their own node (istiod's
	// CA_TRUSTED_NODE_ACCOUNTS): the node proxy's identity, e.g. istio-system/ztunnel.
	TrustedNodeAccounts authn.Accounts
	// Pods locates the caller's pod and the workloads on its node; nil refuses every impersonation.
	Pods   Pods
	Logger *slog.Logger
}

// MaxRequestBytes is the largest certificate request accepted: a CSR is about 1 KiB, its metadata a name or two.
const MaxRequestBytes = 64 << 10

// Refusal lines are written at most refusalLogBurst at once and refusalLogRate a second after that, per
// message; the next line written says how many were left out.
const (
	refusalLogRate  = 20
	refusalLogBurst = 200
)

// Service is istio.v1.auth.IstioCertificateService.
type Service struct {
	opts ServiceOptions
	log  *slog.Logger
	// refusals writes the lines any caller can cause, rate-limited: the port is open to every pod.
	refusals *loglimit.Log
}

// NewService returns the certificate service.
func NewService(opts ServiceOptions) *Service {
	if opts.Authority == nil || opts.Authenticator == nil {
		panic("ca.NewService: Authority and Authenticator are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Service{opts: opts, log: opts.Logger, refusals: loglimit.New(opts.Logger, refusalLogRate, refusalLogBurst)}
}

// certificateStreamer is what serviceDesc's handler calls.
type certificateStreamer interface {
	createCertificate(stream grpc.ServerStream) error
}

// serviceDesc serves CreateCertificate as a stream, which its unary clients cannot tell apart on the wire
// (one request, one response). gRPC reads and decodes a unary method's request before its handler runs,
// so a caller with no credentials made the server hold up to its largest message (64 MiB) per call; a
// stream handler authenticates first, and an unread request holds at most the stream's flow-control window.
var serviceDesc = grpc.ServiceDesc{
	ServiceName: "istio.v1.auth.IstioCertificateService",
	HandlerType: (*certificateStreamer)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName: "CreateCertificate",
		Handler: func(srv any, stream grpc.ServerStream) error {
			return srv.(certificateStreamer).createCertificate(stream)
		},
	}},
	Metadata: "security/v1alpha1/ca.proto",
}

// Register adds the service to g. Requests are read only from authenticated callers, up to g's own
// limit (grpc.MaxRecvMsgSize), then refused past MaxRequestBytes.
func (s *Service) Register(g grpc.ServiceRegistrar) { g.RegisterService(&serviceDesc, s) }

// createCertificate signs the request's CSR for the caller's own identity, or, for a trusted node account,
// for a workload on the caller's node. The caller is authenticated before its request is read.
func (s *Service) createCertificate(stream grpc.ServerStream) error {
	ctx := stream.Context()
	client := ""
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		client = p.Addr.String()
	}
	caller, err := s.opts.Authenticator.Authenticate(ctx)
	if err != nil {
		s.refusals.Warn("certificate request refused: not authenticated", "client", client, "err", err)
		return status.Error(codes.Unauthenticated, "authentication failed: "+err.Error())
	}
	if len(caller.Identities) == 0 {
		return status.Error(codes.Unauthenticated, "authentication failed: no identity")
	}
	req := &pb.IstioCertificateRequest{}
	if err := stream.RecvMsg(req); err != nil {
		return err
	}
	if err := s.checkRequest(req); err != nil {
		s.refusals.Warn("certificate request refused", "client", client, "caller", caller.Identities[0].String(), "err", err)
		return err
	}
	resp, err := s.issue(client, caller, req)
	if err != nil {
		return err
	}
	return stream.SendMsg(resp)
}

// checkRequest refuses a request larger than MaxRequestBytes, and a validity_duration that is negative or
// longer than the authority's maximum (in seconds, it overflowed time.Duration into a validity of ~0).
func (s *Service) checkRequest(req *pb.IstioCertificateRequest) error {
	if n := proto.Size(req); n > MaxRequestBytes {
		return status.Errorf(codes.ResourceExhausted,
			"certificate request of %d bytes (csr %d bytes) is over the limit of %d bytes (a CSR is about 1 KiB)",
			n, len(req.GetCsr()), MaxRequestBytes)
	}
	v, maxTTL := req.GetValidityDuration(), s.opts.Authority.MaxTTL()
	if v < 0 {
		return status.Errorf(codes.InvalidArgument, "validity_duration: %d s is negative", v)
	}
	if v > int64(maxTTL/time.Second) {
		return status.Errorf(codes.InvalidArgument,
			"validity_duration: %d s is longer than the %s (%d s) a certificate may be valid (--max-workload-cert-ttl)",
			v, maxTTL, int64(maxTTL/time.Second))
	}
	return nil
}

// issue signs req for the authenticated caller.
func (s *Service) issue(client string, caller *authn.Caller, req *pb.IstioCertificateRequest) (*pb.IstioCertificateResponse, error) {
	id := caller.Identities[0]
	fields := req.GetMetadata().GetFields()
	if signer := fields[certSignerKey].GetStringValue(); signer != "" {
		// istiod signs with a named Kubernetes signer; Sextant has one CA. Signing with it anyway would
		// hand out a certificate from another chain than the one asked for.
		return nil, status.Errorf(codes.InvalidArgument,
			"metadata %s %q: only the mesh CA signs here, no other signer is configured", certSignerKey, signer)
	}
	if target := fields[impersonatedIdentityKey].GetStringValue(); target != "" {
		impersonated, err := s.authorizeImpersonation(caller, target)
		if err != nil {
			// The reason goes to the log only, as istiod: it tells an attacker which pods run where.
			s.refusals.Warn("certificate request refused: impersonation", "client", client, "caller", id.String(), "identity", target, "err", err)
			return nil, status.Error(codes.Unauthenticated, "request impersonation authentication failure")
		}
		id = impersonated
	}
	ttl := time.Duration(req.GetValidityDuration()) * time.Second
	cert, chain, err := s.opts.Authority.SignCSR([]byte(req.GetCsr()), id, ttl)
	if err != nil {
		s.refusals.Warn("certificate request refused", "client", client, "identity", id.String(), "err", err)
		if _, ok := errors.AsType[*SignError](err); ok {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		return nil, status.Error(codes.Internal, err.Error())
	}
	s.log.Debug("certificate issued", "client", client, "identity", id.String(), "by", caller.Method,
		"serial", cert.SerialNumber.Text(16), "notAfter", cert.NotAfter)
	return &pb.IstioCertificateResponse{CertChain: chain}, nil
}

func (s *Service) authorizeImpersonation(caller *authn.Caller, target string) (authn.Identity, error) {
	self := caller.Identities[0]
	if !s.opts.TrustedNodeAccounts.Has(self) {
		return authn.Identity{}, fmt.Errorf("%s is not a trusted node account", self.Account())
	}
	want, err := authn.ParseSPIFFE(target)
	if err != nil {
		return authn.Identity{}, err
	}
	if want.TrustDomain != s.opts.Authority.TrustDomain() {
		return authn.Identity{}, fmt.Errorf("identity %s: trust domain is not %q", want, s.opts.Authority.TrustDomain())
	}
	if s.opts.Pods == nil {
		return authn.Identity{}, errors.New("no pod information (impersonation needs a Kubernetes cluster)")
	}
	if caller.PodName == "" {
		return authn.Identity{}, errors.New("the caller's token is not bound to a pod, so its node is unknown")
	}
	pod, ok := s.opts.Pods.Pod(self.Namespace, caller.PodName)
	if !ok {
		return authn.Identity{}, fmt.Errorf("pod %s/%s not found", self.Namespace, caller.PodName)
	}
	if pod.UID != caller.PodUID {
		// The pod was replaced by one of the same name, perhaps on another node, and the view of the
		// cluster is behind the token (or ahead of it): its node says nothing about the caller's.
		return authn.Identity{}, fmt.Errorf("pod %s/%s has UID %q, but the token was issued for UID %q", self.Namespace, caller.PodName,
			pod.UID, caller.PodUID)
	}
	if pod.ServiceAccount != self.ServiceAccount {
		return authn.Identity{}, fmt.Errorf("pod %s/%s runs as %s, not %s", self.Namespace, caller.PodName,
			pod.ServiceAccount, self.ServiceAccount)
	}
	if pod.NodeName == "" || !s.opts.Pods.AccountOnNode(pod.NodeName, want) {
		return authn.Identity{}, fmt.Errorf("no pod of %s on node %q", want.Account(), pod.NodeName)
	}
	return want, nil
}
