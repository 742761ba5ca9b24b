package discovery_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sextantmesh/sextant/pilot/authn"
	"github.com/sextantmesh/sextant/pilot/discovery"
	"github.com/sextantmesh/sextant/pilot/envoy"
)

// Without a cluster, a plain sidecar of the gateway's namespace asking for the gateway's key pair gets an
// empty answer and the refusal is listed in /debug/config_errors; a sidecar --sds-file-mode-readers names
// gets it, as does the gateway.
func TestFileModeSDSRefusesPlainSidecars(t *testing.T) {
	dir := t.TempDir()
	cert, key := sdsCert(t, "shop.example.com")
	for name, content := range map[string]string{"gateway.yaml": sdsGateway,
		"secret.yaml": tlsSecretYAML("istio-system", "shop-cert", cert, key)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	id := func(sa string) *authn.Caller {
		return &authn.Caller{Identities: []authn.Identity{{TrustDomain: "cluster.local", Namespace: "istio-system", ServiceAccount: sa}},
			Method: "token"}
	}
	toks := tokens{"gateway": id("istio-ingressgateway"), "plain": id("plain"), "named": id("named")}
	caDir := filepath.Join(t.TempDir(), "ca")
	srv, err := discovery.NewServer(discovery.Args{ConfigDir: dir, GRPCAddr: "", SecureGRPCAddr: "127.0.0.1:0", CADir: caDir,
		HTTPAddr: "127.0.0.1:0", DebounceAfter: 20 * time.Millisecond, TrustedNodeAccounts: discovery.DefaultTrustedNodeAccounts,
		TokenAuthenticator: toks, SDSFileModeReaders: "istio-system/named"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); srv.Wait() })
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cc := dialSecure(t, srv, caDir)

	plain := newADSClient(t, bearer("plain"), cc, "sidecar~10.1.2.3~plain-1.istio-system~istio-system.svc.cluster.local")
	plain.subscribe(envoy.SecretType, "kubernetes://shop-cert")
	select {
	case n := <-plain.sdsSeen:
		if n != 0 {
			t.Fatalf("a plain sidecar of the gateway's namespace was served %d secrets", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no SDS answer to the plain sidecar")
	}
	resp, err := http.Get("http://" + srv.HTTPAddr() + "/debug/config_errors")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "istio-system/plain is not a gateway and not named") {
		t.Errorf("the refusal is not in /debug/config_errors: %s", body)
	}

	named := newADSClient(t, bearer("named"), cc, "sidecar~10.1.2.4~named-1.istio-system~istio-system.svc.cluster.local")
	named.subscribe(envoy.SecretType, "kubernetes://shop-cert")
	named.nextSecret(t, "kubernetes://shop-cert", cert, 10*time.Second)

	gw := newADSClient(t, bearer("gateway"), cc, gatewayNode)
	gw.subscribe(envoy.SecretType, "kubernetes://shop-cert")
	gw.nextSecret(t, "kubernetes://shop-cert", cert, 10*time.Second)
}

func TestFileModeReadersFlagNeedsNoCluster(t *testing.T) {
	_, err := discovery.NewServer(discovery.Args{Kubeconfig: "/nonexistent", SecureGRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		TokenAuthenticator: tokens{}, SDSFileModeReaders: "shop/reader"})
	if err == nil || !strings.Contains(err.Error(), "--sds-file-mode-readers applies only without a cluster") {
		t.Fatalf("--sds-file-mode-readers with a cluster: err = %v", err)
	}
	_, err = discovery.NewServer(discovery.Args{ConfigDir: t.TempDir(), SecureGRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		CADir: filepath.Join(t.TempDir(), "ca"), TokenAuthenticator: tokens{}, SDSFileModeReaders: "shop"})
	if err == nil || !strings.Contains(err.Error(), "--sds-file-mode-readers") {
		t.Fatalf("a malformed reader: err = %v", err)
	}
}
