package kubeenv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Log files in Server.Dir.
const (
	EtcdLog      = "etcd.log"
	APIServerLog = "kube-apiserver.log"
)

// Options say how to start the server. The zero value is fine.
type Options struct {
	// Dir holds certificates, etcd's data and the logs; empty: a new temporary directory, removed by Stop.
	Dir string
	// ServiceCIDR is --service-cluster-ip-range (default 10.96.0.0/16); Services with a fixed clusterIP need it to hold it.
	ServiceCIDR string
	// APIServerArgs are extra kube-apiserver flags (e.g. --watch-cache=false).
	APIServerArgs []string
}

// Server is an etcd and a kube-apiserver on loopback, with certificates made for them.
type Server struct {
	Dir            string
	URL            string
	CAPEM          []byte
	etcdBin, apBin string
	etcdURL        string
	apiArgs        []string
	removeDir      bool
	etcd, api      *exec.Cmd
	apiExited      chan struct{}
	// Admin is a system:masters client config (no client-side rate limit); Kube and Dynamic are clients on it.
	Admin   *rest.Config
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	// StartTook is how long etcd and kube-apiserver took to become ready.
	StartTook time.Duration
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start starts etcd and kube-apiserver and waits until /readyz answers. Stop them with Stop; both also
// die with the process that started them.
func Start(opts Options) (_ *Server, err error) {
	etcdBin, apBin, err := Binaries()
	if err != nil {
		return nil, err
	}
	s := &Server{Dir: opts.Dir, etcdBin: etcdBin, apBin: apBin}
	if s.Dir == "" {
		if s.Dir, err = os.MkdirTemp("", "sextant-kubeenv-"); err != nil {
			return nil, err
		}
		s.removeDir = true
	} else if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	if s.CAPEM, err = writeCerts(s.Dir); err != nil {
		return nil, err
	}
	var clientPort, peerPort, apiPort int
	for _, p := range []*int{&clientPort, &peerPort, &apiPort} {
		if *p, err = freePort(); err != nil {
			return nil, err
		}
	}
	s.etcdURL = fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	etcdArgs := []string{
		"--name=default", "--data-dir=" + filepath.Join(s.Dir, "etcd"),
		"--listen-client-urls=" + s.etcdURL, "--advertise-client-urls=" + s.etcdURL,
		"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=default=" + peerURL, "--unsafe-no-fsync", "--log-level=error",
	}
	s.URL = fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	p := func(name string) string { return filepath.Join(s.Dir, name) }
	cidr := opts.ServiceCIDR
	if cidr == "" {
		cidr = "10.96.0.0/16"
	}
	s.apiArgs = append([]string{
		"--etcd-servers=" + s.etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port=" + strconv.Itoa(apiPort),
		"--endpoint-reconciler-type=none",
		"--tls-cert-file=" + p("server.crt"), "--tls-private-key-file=" + p("server.key"),
		"--client-ca-file=" + p("ca.crt"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p("sa.pub"), "--service-account-signing-key-file=" + p("sa.key"),
		"--service-cluster-ip-range=" + cidr,
		// No controller-manager creates the "default" service account the admission plugin looks up.
		"--disable-admission-plugins=ServiceAccount",
		"--cert-dir=" + p("certs"),
		"--profiling=false", "--v=0",
	}, opts.APIServerArgs...)

	start := time.Now()
	if s.etcd, err = s.run(etcdBin, etcdArgs, EtcdLog); err != nil {
		return nil, err
	}
	if err = s.waitEtcd(); err != nil {
		return nil, err
	}
	if err = s.startAPI(); err != nil {
		return nil, err
	}
	s.Admin = &rest.Config{Host: s.URL, QPS: -1,
		TLSClientConfig: rest.TLSClientConfig{CAData: s.CAPEM, CertFile: p("admin.crt"), KeyFile: p("admin.key")}}
	if s.Kube, err = kubernetes.NewForConfig(s.Admin); err != nil {
		return nil, err
	}
	if s.Dynamic, err = dynamic.NewForConfig(s.Admin); err != nil {
		return nil, err
	}
	if err = s.waitReady(); err != nil {
		return nil, err
	}
	s.StartTook = time.Since(start)
	return s, nil
}

func (s *Server) run(bin string, args []string, logName string) (*exec.Cmd, error) {
	f, err := os.OpenFile(filepath.Join(s.Dir, logName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child has its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return cmd, nil
}

func (s *Server) startAPI() error {
	api, err := s.run(s.apBin, s.apiArgs, APIServerLog)
	if err != nil {
		return err
	}
	exited := make(chan struct{})
	s.api, s.apiExited = api, exited
	go func() { _ = api.Wait(); close(exited) }()
	return nil
}

// StopAPIServer stops kube-apiserver (etcd keeps running).
func (s *Server) StopAPIServer() {
	if s.api == nil {
		return
	}
	_ = s.api.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.apiExited:
	case <-time.After(30 * time.Second):
		_ = s.api.Process.Kill()
		<-s.apiExited
	}
}

// RestartAPIServer stops kube-apiserver and starts it again on the same port and etcd; it returns how long
// the API was unavailable.
func (s *Server) RestartAPIServer() (time.Duration, error) {
	start := time.Now()
	s.StopAPIServer()
	if err := s.startAPI(); err != nil {
		return 0, err
	}
	err := s.waitReady()
	return time.Since(start), err
}

// Stop stops kube-apiserver and etcd (and removes Dir when Start made it).
func (s *Server) Stop() {
	s.StopAPIServer()
	if s.etcd != nil {
		_ = s.etcd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = s.etcd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = s.etcd.Process.Kill()
		}
	}
	if s.removeDir {
		_ = os.RemoveAll(s.Dir)
	}
}

// LogTail returns the last max bytes of a log in Dir (EtcdLog, APIServerLog).
func (s *Server) LogTail(name string, max int) string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, name))
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

func (s *Server) waitEtcd() error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(s.etcdURL + "/health")
		if err == nil {
			body := new(bytes.Buffer)
			_, _ = body.ReadFrom(resp.Body)
			resp.Body.Close()
			if strings.Contains(body.String(), `"health":"true"`) {
				return nil
			}
		}
		if s.etcd.ProcessState != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("etcd did not become healthy (log: %s)", filepath.Join(s.Dir, EtcdLog))
}

func (s *Server) waitReady() error {
	deadline := time.Now().Add(90 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		select {
		case <-s.apiExited:
			return fmt.Errorf("kube-apiserver exited (log: %s)", filepath.Join(s.Dir, APIServerLog))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		b, err := s.Kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		cancel()
		if err == nil {
			return nil
		}
		last = fmt.Sprintf("%v %s", err, b)
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("kube-apiserver not ready: %s", last)
}

// EtcdRevision returns etcd's current revision, through its JSON gateway.
func (s *Server) EtcdRevision() (int64, error) {
	var out struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	if err := s.etcdPost("/v3/kv/range", `{"key":"AA=="}`, &out); err != nil { // key "\x00": any key will do
		return 0, err
	}
	rev, err := strconv.ParseInt(out.Header.Revision, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("etcd revision %q: %w", out.Header.Revision, err)
	}
	return rev, nil
}

// EtcdCompact compacts etcd's history up to rev, as kube-apiserver does every 5 minutes.
func (s *Server) EtcdCompact(rev int64) error {
	return s.etcdPost("/v3/kv/compaction", fmt.Sprintf(`{"revision":"%d","physical":true}`, rev), nil)
}

func (s *Server) etcdPost(path, body string, out any) error {
	resp, err := http.Post(s.etcdURL+path, "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b := new(bytes.Buffer)
	_, _ = b.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd %s: %s %s", path, resp.Status, b)
	}
	if out != nil {
		if err := json.Unmarshal(b.Bytes(), out); err != nil {
			return fmt.Errorf("etcd %s: %w", path, err)
		}
	}
	return nil
}

// RSS returns the resident memory of kube-apiserver in bytes.
func (s *Server) RSS() int64 { return RSS(s.api.Process.Pid) }

// RSS returns the resident memory of process pid in bytes (from /proc; 0 when unknown).
func RSS(pid int) int64 {
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
func (s *Server) ServiceAccountConfig(namespace, name string) (*rest.Config, error) {
	ctx := context.Background()
	if err := s.EnsureNamespace(namespace); err != nil {
		return nil, err
	}
	_, err := s.Kube.CoreV1().ServiceAccounts(namespace).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	exp := int64(3600)
	tr, err := s.Kube.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name,
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("TokenRequest for %s/%s: %w", namespace, name, err)
	}
	return &rest.Config{Host: s.URL, BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: s.CAPEM}}, nil
}

// WriteKubeconfig writes cfg (host, CA, and a token or a client certificate) as Dir/NAME.kubeconfig and
// returns its path.
func (s *Server) WriteKubeconfig(cfg *rest.Config, name string) (string, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["user"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken,
		ClientCertificate: cfg.CertFile, ClientKey: cfg.KeyFile,
		ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "user"}
	kc.CurrentContext = "test"
	path := filepath.Join(s.Dir, name+".kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return "", err
	}
	return path, nil
}

// EnsureNamespace creates a namespace unless it exists.
func (s *Server) EnsureNamespace(name string) error {
	_, err := s.Kube.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

var errTimeout = errors.New("timed out")

// poll calls cond every 20ms until it holds or d passes.
func poll(d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return errTimeout
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}
