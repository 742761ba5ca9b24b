package agent

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"os"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/structpb"
	pb "istio.io/api/security/v1alpha1"
)

// ztunnelModel is a MODEL of ztunnel's control-plane client, written from ztunnel's source
// (github.com/istio/ztunnel at 62d8265, August 2026): ztunnel is Rust, and no binary of it can be built
// or fetched here. It does what these files do, nothing more:
//   - src/tls/control.rs (control_plane_client_config, AltHostnameVerifier, grpc_connector): TLS with
//     HTTP/2, no client certificate; the server's certificate must chain to the root file and name the
//     address's host, or else the alternate hostname (ALT_CA_HOSTNAME / ALT_XDS_HOSTNAME).
//   - src/identity/auth.rs (AuthSource::Token): every request carries "authorization: Bearer " followed
//     by the token file's bytes as read, re-read per request (an empty file fails before anything is
//     sent), and "clusterid: CLUSTER_ID" (default "Kubernetes").
//   - src/identity/caclient.rs (fetch_certificate) and src/tls/csr.rs: CreateCertificate with a fresh
//     P-256 key, a CSR with no subject and one critical URI SAN naming the identity, validity_duration
//     SECRET_TTL (24 h by default) and, in shared (node proxy) mode, the metadata field
//     ImpersonatedIdentity; the answer's first certificate is the leaf, and the leaf must name the
//     identity asked for (Error::SanError).
//   - src/xds/client.rs (node, construct_initial_request): delta ADS, a first request per type with the
//     node ztunnel~IP~POD.NS~NS.svc.cluster.local and metadata NAME, NAMESPACE, INSTANCE_IPS,
//     NODE_NAME, and no resource names (a wildcard subscription).
type ztunnelModel struct {
	// Address is https://HOST:PORT, as CA_ADDRESS and XDS_ADDRESS.
	Address      string
	AltHostname  string
	RootCertFile string
	TokenFile    string
	ClusterID    string
	// Shared is the node proxy mode: certificates for other identities (impersonation).
	Shared    bool
	SecretTTL time.Duration
	// Pod, Namespace, IP and NodeName are POD_NAME, POD_NAMESPACE, INSTANCE_IP and NODE_NAME.
	Pod, Namespace, IP, NodeName string
}

// ztunnelToken is AuthSource::Token: the file's bytes, as read, on every request.
type ztunnelToken struct{ file, clusterID string }

func (z ztunnelToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	t, err := os.ReadFile(z.file)
	if err != nil {
		return nil, err
	}
	if len(t) == 0 {
		return nil, errors.New("token file exists, but was empty")
	}
	return map[string]string{"authorization": "Bearer " + string(t), "clusterid": z.clusterID}, nil
}

func (ztunnelToken) RequireTransportSecurity() bool { return true }

func (z *ztunnelModel) dial() (*grpc.ClientConn, error) {
	u, err := url.Parse(z.Address)
	if err != nil || u.Scheme != "https" {
		return nil, fmt.Errorf("address %q: want https://HOST:PORT", z.Address)
	}
	rootPEM, err := os.ReadFile(z.RootCertFile)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(rootPEM) {
		return nil, fmt.Errorf("%s: no certificate", z.RootCertFile)
	}
	host := u.Hostname()
	cfg := &tls.Config{
		ServerName: host,
		MinVersion: tls.VersionTLS12,
		// The verification is AltHostnameVerifier's, below: the chain, then the host or the alternate name.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("no server certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			leaf := cs.PeerCertificates[0]
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter}); err != nil {
				return err
			}
			err := leaf.VerifyHostname(host)
			if err != nil && z.AltHostname != "" {
				err = leaf.VerifyHostname(z.AltHostname)
			}
			return err
		},
	}
	return grpc.NewClient(u.Host, grpc.WithTransportCredentials(credentials.NewTLS(cfg)),
		grpc.WithPerRPCCredentials(ztunnelToken{file: z.TokenFile, clusterID: z.ClusterID}))
}

// FetchCertificate is CaClient::fetch_certificate for identity (a SPIFFE URI).
func (z *ztunnelModel) FetchCertificate(ctx context.Context, identity string) (
	leaf *x509.Certificate, chain []*x509.Certificate, err error) {
	csrPEM, err := ztunnelCSR(identity)
	if err != nil {
		return nil, nil, err
	}
	req := &pb.IstioCertificateRequest{Csr: csrPEM, ValidityDuration: int64(z.SecretTTL / time.Second)}
	if z.Shared {
		req.Metadata = &structpb.Struct{Fields: map[string]*structpb.Value{"ImpersonatedIdentity": structpb.NewStringValue(identity)}}
	}
	cc, err := z.dial()
	if err != nil {
		return nil, nil, err
	}
	defer cc.Close()
	resp, err := pb.NewIstioCertificateServiceClient(cc).CreateCertificate(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	if len(resp.GetCertChain()) == 0 {
		return nil, nil, fmt.Errorf("empty response for %s", identity)
	}
	var certs []*x509.Certificate
	for _, p := range resp.GetCertChain() {
		block, _ := pem.Decode([]byte(p))
		if block == nil {
			return nil, nil, errors.New("certificate chain element is not PEM")
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, nil, err
		}
		certs = append(certs, c)
	}
	if z.Shared && (len(certs[0].URIs) != 1 || certs[0].URIs[0].String() != identity) {
		return nil, nil, fmt.Errorf("expected identity %s, got %v", identity, certs[0].URIs)
	}
	return certs[0], certs[1:], nil
}

// ztunnelCSR is CsrOptions::generate: a P-256 key, no subject, one critical URI SAN.
func ztunnelCSR(san string) (string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", err
	}
	names, err := asn1.Marshal([]asn1.RawValue{{Class: asn1.ClassContextSpecific, Tag: 6, Bytes: []byte(san)}})
	if err != nil {
		return "", err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		ExtraExtensions: []pkix.Extension{{Id: asn1.ObjectIdentifier{2, 5, 29, 17}, Critical: true, Value: names}},
	}, key)
	if err != nil {
		return "", err
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})), nil
}

// Workload and authorization type URLs (ztunnel's src/xds.rs).
const (
	addressType       = "type.googleapis.com/istio.workload.Address"
	authorizationType = "type.googleapis.com/istio.security.Authorization"
)

// FirstXDSResponse opens ztunnel's delta ADS stream, sends its initial request for typeURL and returns
// the first answer.
func (z *ztunnelModel) FirstXDSResponse(ctx context.Context, typeURL string) (*discovery.DeltaDiscoveryResponse, error) {
	cc, err := z.dial()
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		return nil, err
	}
	meta, err := structpb.NewStruct(map[string]any{"NAME": z.Pod, "NAMESPACE": z.Namespace, "INSTANCE_IPS": z.IP, "NODE_NAME": z.NodeName})
	if err != nil {
		return nil, err
	}
	node := &core.Node{Id: fmt.Sprintf("ztunnel~%s~%s.%s~%s.svc.cluster.local", z.IP, z.Pod, z.Namespace, z.Namespace), Metadata: meta}
	if err := stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: typeURL, Node: node}); err != nil {
		return nil, err
	}
	return stream.Recv()
}
