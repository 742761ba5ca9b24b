package discovery_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sextantmesh/sextant/pilot/authn"
	"github.com/sextantmesh/sextant/pilot/discovery"
	"github.com/sextantmesh/sextant/pilot/envoy"
)

const sdsGateway = `apiVersion: networking.istio.io/v1
kind: Gateway
metadata:
  name: shop-gateway
  namespace: istio-system
spec:
  selector:
    istio: ingressgateway
  servers:
  - port: {number: 443, name: https-shop, protocol: HTTPS}
    hosts: ["shop.example.com"]
    tls: {mode: SIMPLE, credentialName: shop-cert}
`

const gatewayNode = "router~10.1.1.1~gw-1.istio-system~istio-system.svc.cluster.local"

var sdsTokens = tokens{
	"gateway": {Identities: []authn.Identity{{TrustDomain: "cluster.local", Namespace: "istio-system",
		ServiceAccount: "istio-ingressgateway"}}, Method: "token"},
}

func sdsCert(t *testing.T, host string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: host},
		DNSNames: []string{host}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

func tlsSecretYAML(ns, name string, cert, key []byte) string {
	return fmt.Sprintf(
		"apiVersion: v1\nkind: Secret\nmetadata:\n  name: %s\n  namespace: %s\ntype: kubernetes.io/tls\ndata:\n  tls.crt: %s\n  tls.key: %s\n",
		name, ns, base64.StdEncoding.EncodeToString(cert), base64.StdEncoding.EncodeToString(key))
}

// adsClient is a SotW ADS client that ACKs every response and hands the secrets it receives to a channel.
type adsClient struct {
	t       *testing.T
	stream  grpc.BidiStreamingClient[discoverypb.DiscoveryRequest, discoverypb.DiscoveryResponse]
	node    *core.Node
	mu      sync.Mutex
	names   map[string][]string
	latest  map[string]*discoverypb.DiscoveryResponse
	secrets chan *tlsv3.Secret
	sdsSeen chan int // resources in each SDS response
}

func newADSClient(t *testing.T, ctx context.Context, cc *grpc.ClientConn, nodeID string) *adsClient {
	t.Helper()
	stream, err := discoverypb.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	md, _ := structpb.NewStruct(map[string]any{"LABELS": map[string]any{"istio": "ingressgateway"}})
	c := &adsClient{t: t, stream: stream, node: &core.Node{Id: nodeID, Metadata: md}, names: map[string][]string{},
		latest: map[string]*discoverypb.DiscoveryResponse{}, secrets: make(chan *tlsv3.Secret, 100), sdsSeen: make(chan int, 100)}
	go c.read()
	return c
}

func (c *adsClient) read() {
	for {
		resp, err := c.stream.Recv()
		if err != nil {
			return
		}
		c.mu.Lock()
		c.latest[resp.TypeUrl] = resp
		names := c.names[resp.TypeUrl]
		c.mu.Unlock()
		if resp.TypeUrl == envoy.SecretType {
			c.sdsSeen <- len(resp.Resources)
			for _, a := range resp.Resources {
				s := &tlsv3.Secret{}
				if err := a.UnmarshalTo(s); err != nil {
					c.t.Error(err)
					continue
				}
				if err := s.ValidateAll(); err != nil {
					c.t.Errorf("secret %s: %v", s.Name, err)
				}
				c.secrets <- s
			}
		}
		_ = c.stream.Send(&discoverypb.DiscoveryRequest{TypeUrl: resp.TypeUrl, VersionInfo: resp.VersionInfo,
			ResponseNonce: resp.Nonce, ResourceNames: names})
	}
}

func (c *adsClient) subscribe(typeURL string, names ...string) {
	c.mu.Lock()
	c.names[typeURL] = names
	c.mu.Unlock()
	if err := c.stream.Send(&discoverypb.DiscoveryRequest{Node: c.node, TypeUrl: typeURL, ResourceNames: names}); err != nil {
		c.t.Fatal(err)
	}
}

// listenerSecrets waits for LDS and returns the SDS names its TLS contexts ask for over ADS.
func (c *adsClient) listenerSecrets(t *testing.T) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		resp := c.latest[envoy.ListenerType]
		c.mu.Unlock()
		if resp == nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		var names []string
		for _, a := range resp.Resources {
			l := &listenerv3.Listener{}
			if err := a.UnmarshalTo(l); err != nil {
				t.Fatal(err)
			}
			for _, fc := range l.FilterChains {
				ctx := &tlsv3.DownstreamTlsContext{}
				if fc.GetTransportSocket().GetTypedConfig().UnmarshalTo(ctx) != nil {
					continue
				}
				for _, s := range ctx.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs() {
					if s.GetSdsConfig().GetAds() == nil {
						t.Errorf("listener %s: secret %s not over ADS", l.Name, s.Name)
					}
					names = append(names, s.Name)
				}
			}
		}
		return names
	}
	t.Fatal("no LDS response")
	return nil
}

// nextSecret waits for a secret named name whose certificate is cert.
func (c *adsClient) nextSecret(t *testing.T, name string, cert []byte, within time.Duration) {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case s := <-c.secrets:
			if s.Name != name {
				t.Errorf("received secret %s, never asked for", s.Name)
				continue
			}
			if bytes.Equal(s.GetTlsCertificate().GetCertificateChain().GetInlineBytes(), cert) {
				return
			}
		case <-timeout:
			t.Fatalf("secret %s with the expected certificate not received within %v", name, within)
		}
	}
}

func TestGatewayGetsItsCertificateOverSDS(t *testing.T) {
	dir := t.TempDir()
	cert, key := sdsCert(t, "shop.example.com")
	otherCert, otherKey := sdsCert(t, "other.example.com")
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("gateway.yaml", sdsGateway)
	write("secret.yaml", tlsSecretYAML("istio-system", "shop-cert", cert, key))
	write("other.yaml", tlsSecretYAML("shop", "shop-cert", otherCert, otherKey))

	caDir := filepath.Join(t.TempDir(), "ca")
	srv, err := discovery.NewServer(discovery.Args{ConfigDir: dir, GRPCAddr: "127.0.0.1:0", SecureGRPCAddr: "127.0.0.1:0", CADir: caDir,
		HTTPAddr: "127.0.0.1:0", DebounceAfter: 20 * time.Millisecond, TrustedNodeAccounts: discovery.DefaultTrustedNodeAccounts,
		TokenAuthenticator: sdsTokens})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); srv.Wait() })
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}

	gw := newADSClient(t, bearer("gateway"), dialSecure(t, srv, caDir), gatewayNode)
	gw.subscribe(envoy.ListenerType)
	names := gw.listenerSecrets(t)
	if !slices.Equal(names, []string{"kubernetes://shop-cert"}) {
		t.Fatalf("listener names secrets %v", names)
	}
	// The other namespace's Secret is asked for too: it must never come.
	gw.subscribe(envoy.SecretType, "kubernetes://shop-cert", "kubernetes://shop/shop-cert")
	gw.nextSecret(t, "kubernetes://shop-cert", cert, 10*time.Second)

	// Rotation: the new certificate arrives within a second of the Secret's change.
	for i := range 3 {
		newCert, newKey := sdsCert(t, "shop.example.com")
		start := time.Now()
		write("secret.yaml", tlsSecretYAML("istio-system", "shop-cert", newCert, newKey))
		gw.nextSecret(t, "kubernetes://shop-cert", newCert, time.Second)
		t.Logf("rotation %d: new certificate received %v after the Secret changed", i+1, time.Since(start).Round(time.Millisecond))
	}

	// A change of the other namespace's Secret pushes nothing to the gateway.
	drain(gw.sdsSeen)
	write("other.yaml", tlsSecretYAML("shop", "shop-cert", cert, key))
	select {
	case n := <-gw.sdsSeen:
		t.Errorf("an SDS response with %d secrets after another namespace's Secret changed", n)
	case <-time.After(500 * time.Millisecond):
	}

	// The same node on the plaintext port, not authenticated: its listener names the secret, which never comes.
	cc, err := grpc.NewClient("passthrough:///"+srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	plain := newADSClient(t, context.Background(), cc, gatewayNode)
	plain.subscribe(envoy.ListenerType)
	if names := plain.listenerSecrets(t); len(names) != 1 {
		t.Errorf("plaintext listener names %v", names)
	}
	plain.subscribe(envoy.SecretType, "kubernetes://shop-cert")
	select {
	case n := <-plain.sdsSeen:
		if n != 0 {
			t.Errorf("unauthenticated stream got %d secrets", n)
		}
	case <-time.After(5 * time.Second):
		t.Error("no SDS answer on the plaintext port")
	}
}

// drain drops what c already holds (responses from before the step under test).
func drain(c chan int) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}
