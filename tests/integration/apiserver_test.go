//go:build integration

package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The binaries come from scripts/test-env.sh (make test-env). SEXTANT_ETCD and SEXTANT_KUBE_APISERVER
// override where they are looked for.
const requireEnv = "SEXTANT_REQUIRE_APISERVER"

// repoRoot is the repository root, found from this file's path.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// toolHash is what scripts/test-env.sh names a build directory: sha256(go.mod + go.sum), 16 hex digits.
func toolHash(module string) (string, error) {
	h := sha256.New()
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(repoRoot(), "tools", module, f))
		if err != nil {
			return "", err
		}
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

func toolsDir() string {
	if d := os.Getenv("SEXTANT_TOOLS_DIR"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "sextant", "tools")
}

func binary(env, module, name string) (string, error) {
	if p := os.Getenv(env); p != "" {
		return p, nil
	}
	h, err := toolHash(module)
	if err != nil {
		return "", err
	}
	p := filepath.Join(toolsDir(), name, h, name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s not built (%v); run make test-env", name, err)
	}
	return p, nil
}

// binaries returns the etcd and kube-apiserver paths, or skips the test (fails it under
// SEXTANT_REQUIRE_APISERVER) when they are missing.
func binaries(t testing.TB) (etcd, apiserver string) {
	t.Helper()
	var err1, err2 error
	etcd, err1 = binary("SEXTANT_ETCD", "etcd", "etcd")
	apiserver, err2 = binary("SEXTANT_KUBE_APISERVER", "kube", "kube-apiserver")
	for _, err := range []error{err1, err2} {
		if err == nil {
			continue
		}
		if os.Getenv(requireEnv) != "" {
			t.Fatalf("%v (%s is set, so this fails instead of skipping)", err, requireEnv)
		}
		t.Skipf("no real API server: %v", err)
	}
	return etcd, apiserver
}

// apiServer is an etcd and a kube-apiserver on loopback, with certificates made for them.
type apiServer struct {
	t              testing.TB
	dir            string
	etcdBin, apBin string
	etcdURL        string
	etcdArgs       []string
	apiArgs        []string
	port           int
	URL            string
	caPEM          []byte
	etcd, api      *exec.Cmd
	apiExited      chan struct{}
	// Admin is a system:masters client config; Kube and Dynamic are clients on it.
	Admin   *rest.Config
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
}

type serverOption func(*apiServer)

// withAPIServerArgs adds kube-apiserver flags (e.g. --watch-cache=false).
func withAPIServerArgs(args ...string) serverOption {
	return func(s *apiServer) { s.apiArgs = append(s.apiArgs, args...) }
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startAPIServer starts etcd and kube-apiserver and waits until /readyz answers. Everything is stopped
// at test cleanup; the logs are printed when the test failed.
func startAPIServer(t testing.TB, opts ...serverOption) *apiServer {
	t.Helper()
	etcdBin, apBin := binaries(t)
	s := &apiServer{t: t, dir: t.TempDir(), etcdBin: etcdBin, apBin: apBin}
	s.writeCerts()

	clientPort, peerPort := freePort(t), freePort(t)
	s.etcdURL = fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	s.etcdArgs = []string{
		"--name=default", "--data-dir=" + filepath.Join(s.dir, "etcd"),
		"--listen-client-urls=" + s.etcdURL, "--advertise-client-urls=" + s.etcdURL,
		"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=default=" + peerURL, "--unsafe-no-fsync", "--log-level=error",
	}
	s.port = freePort(t)
	s.URL = fmt.Sprintf("https://127.0.0.1:%d", s.port)
	p := func(name string) string { return filepath.Join(s.dir, name) }
	s.apiArgs = []string{
		"--etcd-servers=" + s.etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port=" + strconv.Itoa(s.port),
		"--endpoint-reconciler-type=none",
		"--tls-cert-file=" + p("server.crt"), "--tls-private-key-file=" + p("server.key"),
		"--client-ca-file=" + p("ca.crt"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p("sa.pub"), "--service-account-signing-key-file=" + p("sa.key"),
		"--service-cluster-ip-range=10.96.0.0/16",
		// No controller-manager creates the "default" service account the admission plugin looks up.
		"--disable-admission-plugins=ServiceAccount",
		"--cert-dir=" + p("certs"),
		"--profiling=false", "--v=0",
	}
	for _, o := range opts {
		o(s)
	}

	start := time.Now()
	s.etcd = s.run(etcdBin, s.etcdArgs, "etcd.log")
	s.waitEtcd()
	s.startAPI()
	t.Cleanup(s.stop)

	s.Admin = &rest.Config{Host: s.URL, QPS: -1,
		TLSClientConfig: rest.TLSClientConfig{CAData: s.caPEM, CertFile: p("admin.crt"), KeyFile: p("admin.key")}}
	var err error
	if s.Kube, err = kubernetes.NewForConfig(s.Admin); err != nil {
		t.Fatal(err)
	}
	if s.Dynamic, err = dynamic.NewForConfig(s.Admin); err != nil {
		t.Fatal(err)
	}
	s.waitReady()
	t.Logf("etcd and kube-apiserver ready in %s at %s", time.Since(start).Round(time.Millisecond), s.URL)
	return s
}

func (s *apiServer) run(bin string, args []string, logName string) *exec.Cmd {
	s.t.Helper()
	f, err := os.OpenFile(filepath.Join(s.dir, logName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	return cmd
}

func (s *apiServer) startAPI() {
	s.api = s.run(s.apBin, s.apiArgs, "kube-apiserver.log")
	s.apiExited = make(chan struct{})
	cmd, exited := s.api, s.apiExited
	go func() { _ = cmd.Wait(); close(exited) }()
}

// StopAPIServer stops kube-apiserver (etcd keeps running).
func (s *apiServer) StopAPIServer() {
	_ = s.api.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.apiExited:
	case <-time.After(30 * time.Second):
		_ = s.api.Process.Kill()
		<-s.apiExited
	}
}

// RestartAPIServer stops kube-apiserver and starts it again on the same port and etcd.
func (s *apiServer) RestartAPIServer() time.Duration {
	s.t.Helper()
	start := time.Now()
	s.StopAPIServer()
	s.startAPI()
	s.waitReady()
	return time.Since(start)
}

func (s *apiServer) stop() {
	s.StopAPIServer()
	_ = s.etcd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.etcd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = s.etcd.Process.Kill()
	}
	if s.t.Failed() {
		for _, name := range []string{"etcd.log", "kube-apiserver.log"} {
			b, _ := os.ReadFile(filepath.Join(s.dir, name))
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			s.t.Logf("--- tail of %s ---\n%s", name, b)
		}
	}
}

func (s *apiServer) waitEtcd() {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(s.etcdURL + "/health")
		if err == nil {
			body := new(bytes.Buffer)
			_, _ = body.ReadFrom(resp.Body)
			resp.Body.Close()
			if strings.Contains(body.String(), `"health":"true"`) {
				return
			}
		}
		if s.etcd.ProcessState != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatal("etcd did not become healthy")
}

func (s *apiServer) waitReady() {
	s.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		select {
		case <-s.apiExited:
			s.t.Fatal("kube-apiserver exited; see its log")
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		b, err := s.Kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		cancel()
		if err == nil {
			return
		}
		last = fmt.Sprintf("%v %s", err, b)
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatalf("kube-apiserver not ready: %s", last)
}

// EtcdRevision returns etcd's current revision, through its JSON gateway.
func (s *apiServer) EtcdRevision() int64 {
	s.t.Helper()
	var out struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	s.etcdPost("/v3/kv/range", `{"key":"AA=="}`, &out) // key "\x00": any key will do
	rev, err := strconv.ParseInt(out.Header.Revision, 10, 64)
	if err != nil {
		s.t.Fatalf("etcd revision %q: %v", out.Header.Revision, err)
	}
	return rev
}

// EtcdCompact compacts etcd's history up to rev, as kube-apiserver does every 5 minutes.
func (s *apiServer) EtcdCompact(rev int64) {
	s.t.Helper()
	s.etcdPost("/v3/kv/compaction", fmt.Sprintf(`{"revision":"%d","physical":true}`, rev), nil)
}

func (s *apiServer) etcdPost(path, body string, out any) {
	s.t.Helper()
	resp, err := http.Post(s.etcdURL+path, "application/json", strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b := new(bytes.Buffer)
	_, _ = b.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusOK {
		s.t.Fatalf("etcd %s: %s %s", path, resp.Status, b)
	}
	if out != nil {
		if err := json.Unmarshal(b.Bytes(), out); err != nil {
			s.t.Fatalf("etcd %s: %v", path, err)
		}
	}
}

// RSS returns the resident memory of kube-apiserver in bytes (from /proc).
func (s *apiServer) RSS() int64 { return rss(s.api.Process.Pid) }

func rss(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// ServiceAccountConfig creates namespace/name as a service account (if missing) and returns a client
// config that authenticates as it with a token from the TokenRequest API.
func (s *apiServer) ServiceAccountConfig(namespace, name string) *rest.Config {
	s.t.Helper()
	ctx := context.Background()
	s.EnsureNamespace(namespace)
	_, err := s.Kube.CoreV1().ServiceAccounts(namespace).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		s.t.Fatal(err)
	}
	exp := int64(3600)
	tr, err := s.Kube.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name,
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		s.t.Fatalf("TokenRequest for %s/%s: %v", namespace, name, err)
	}
	return &rest.Config{Host: s.URL, BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: s.caPEM}}
}

// WriteKubeconfig writes cfg (host, CA, token) as a kubeconfig file and returns its path.
func (s *apiServer) WriteKubeconfig(cfg *rest.Config, name string) string {
	s.t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["user"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "user"}
	kc.CurrentContext = "test"
	path := filepath.Join(s.dir, name+".kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		s.t.Fatal(err)
	}
	return path
}

func (s *apiServer) EnsureNamespace(name string) {
	s.t.Helper()
	_, err := s.Kube.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		s.t.Fatal(err)
	}
}

// writeCerts makes a CA, a serving certificate for 127.0.0.1, an admin client certificate in
// system:masters, and the service-account signing key pair.
func (s *apiServer) writeCerts() {
	s.t.Helper()
	now := time.Now().Add(-time.Hour)
	caKey := newKey(s.t)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sextant-test-ca"},
		NotBefore: now, NotAfter: now.Add(48 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		s.t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	s.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	s.write("ca.crt", s.caPEM)

	leaf := func(name string, serial int64, tmpl *x509.Certificate) {
		key := newKey(s.t)
		tmpl.SerialNumber, tmpl.NotBefore, tmpl.NotAfter = big.NewInt(serial), now, now.Add(48*time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			s.t.Fatal(err)
		}
		s.write(name+".crt", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
		s.write(name+".key", pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	}
	leaf("server", 2, &x509.Certificate{Subject: pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"}})
	leaf("admin", 3, &x509.Certificate{Subject: pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})

	saKey := newKey(s.t)
	s.write("sa.key", pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(saKey)}))
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		s.t.Fatal(err)
	}
	s.write("sa.pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}))
}

func (s *apiServer) write(name string, b []byte) {
	if err := os.WriteFile(filepath.Join(s.dir, name), b, 0o600); err != nil {
		s.t.Fatal(err)
	}
}

func newKey(t testing.TB) *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
