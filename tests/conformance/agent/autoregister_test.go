package agent

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	networking "istio.io/api/networking/v1alpha3"
	"istio.io/istio/pkg/bootstrap/platform"
	"istio.io/istio/pkg/config/mesh"
	"istio.io/istio/pkg/envoy"
	istioagent "istio.io/istio/pkg/istio-agent"
	"istio.io/istio/pkg/istio-agent/grpcxds"
	"istio.io/istio/pkg/security"
	"istio.io/istio/security/pkg/credentialfetcher/plugin"

	"github.com/sextantmesh/sextant/pilot/authn"
	"github.com/sextantmesh/sextant/pilot/autoregister"
	"github.com/sextantmesh/sextant/pilot/ca"
	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/discovery"
)

// vmServiceYAML is a Service selecting the labels the WorkloadGroup gives its entries.
const vmServiceYAML = `apiVersion: v1
kind: Service
metadata: {name: vmapp, namespace: bookinfo}
spec:
  clusterIP: 10.96.0.60
  selector: {app: vmapp}
  ports: [{name: http, port: 8080}]
`

const vmGroupYAML = `apiVersion: networking.istio.io/v1
kind: WorkloadGroup
metadata: {name: vmapp, namespace: bookinfo}
spec:
  metadata:
    labels: {app: vmapp}
  template:
    serviceAccount: vmapp
    ports: {http: 8081}
`

const (
	vmIP          = "10.0.0.7"
	vmCluster     = "outbound|8080||vmapp.bookinfo.svc.cluster.local"
	endpointsType = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
)

var vmappIdentity = authn.Identity{TrustDomain: "cluster.local", Namespace: "bookinfo", ServiceAccount: "vmapp"}

// runVMAgent runs Istio's agent as a VM's (no Envoy here: its xDS proxy serves a local socket) with
// ISTIO_META_AUTO_REGISTER_GROUP, as a VM set up by istioctl x workload entry configure has it. stop
// ends the agent, and with it its connection to Sextant.
func runVMAgent(t *testing.T, s *sextant, token, group string, probe ...*networking.ReadinessProbe) (dir string, node *core.Node,
	stop func()) {
	t.Helper()
	t.Setenv("ISTIO_META_AUTO_REGISTER_GROUP", group)
	root, err := filepath.Abs(filepath.Join(s.caDir, ca.RootFile))
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	t.Chdir(dir)
	tokenFile := filepath.Join(dir, "istio-token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "certs"), 0o700); err != nil {
		t.Fatal(err)
	}
	pc := mesh.DefaultProxyConfig()
	pc.DiscoveryAddress = s.srv.SecureGRPCAddr()
	if len(probe) > 0 {
		pc.ReadinessProbe = probe[0] // as istioctl x workload entry configure writes the group's probe
	}
	sopts := &security.Options{CAEndpoint: s.srv.SecureGRPCAddr(), CAEndpointSAN: "istiod.istio-system.svc", CAProviderName: "Citadel",
		TrustDomain: "cluster.local", ClusterID: "Kubernetes", CredFetcher: plugin.CreateTokenPlugin(tokenFile),
		WorkloadNamespace: "bookinfo", ServiceAccount: "vmapp", ECCSigAlg: "ECDSA", OutputKeyCertToDir: filepath.Join(dir, "certs"),
		SecretTTL: 12 * time.Hour, CARootPath: root}
	aopts := &istioagent.AgentOptions{XDSRootCerts: root, CARootCerts: root, IstiodSAN: "istiod.istio-system.svc",
		XdsUdsPath: filepath.Join(dir, "XDS"), ServiceNode: "sidecar~" + vmIP + "~vm1.bookinfo~bookinfo.svc.cluster.local",
		GRPCBootstrapPath: filepath.Join(dir, "grpc-bootstrap.json"), DisableEnvoy: true, ProxyNamespace: "bookinfo",
		ProxyDomain: "bookinfo.svc.cluster.local", ProxyIPAddresses: []string{vmIP}, Platform: &platform.Unknown{},
		WorkloadIdentitySocketFile: security.DefaultWorkloadIdentitySocketFile}
	a := istioagent.NewAgent(pc, aopts, sopts, envoy.ProxyConfig{TestOnly: true})
	ctx, cancel := context.WithCancel(context.Background())
	wait, err := a.Run(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			a.Close()
			wait()
		}
	}
	t.Cleanup(stop)
	bootstrap, err := grpcxds.LoadBootstrap(aopts.GRPCBootstrapPath)
	if err != nil {
		t.Fatal(err)
	}
	return dir, bootstrapNode(t, bootstrap), stop
}

// connectThroughAgent opens the stream a proxy on the VM opens to its agent, which opens the agent's own
// to Sextant (the agent connects upstream only for a downstream stream). err is what the first receive
// returned: nil once Sextant answered, the refusal otherwise.
func connectThroughAgent(t *testing.T, dir string, node *core.Node) (err error, closeStream func()) {
	t.Helper()
	cc, cerr := grpc.NewClient("unix://"+filepath.Join(dir, "XDS"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if cerr != nil {
		t.Fatal(cerr)
	}
	ctx, cancel := context.WithCancel(context.Background())
	closeStream = func() { cancel(); cc.Close() }
	t.Cleanup(closeStream)
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		return err, closeStream
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: listenerType,
		ResourceNames: []string{"vmapp.bookinfo.svc.cluster.local:8080"}}); err != nil {
		return err, closeStream
	}
	recv := make(chan error, 1)
	go func() { _, err := stream.Recv(); recv <- err }()
	select {
	case err = <-recv:
	case <-time.After(30 * time.Second):
		t.Fatal("no answer through the agent")
	}
	return err, closeStream
}

// edsWatch is a sidecar's EDS subscription to one cluster on Sextant's plaintext port: each response is
// ACKed and its addresses kept.
type edsWatch struct {
	updates chan []string
}

func watchEDS(t *testing.T, addr, cluster string) *edsWatch {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); cc.Close() })
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := &core.Node{Id: "sidecar~10.1.0.1~sleep-0.bookinfo~bookinfo.svc.cluster.local"}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: endpointsType, ResourceNames: []string{cluster}}); err != nil {
		t.Fatal(err)
	}
	w := &edsWatch{updates: make(chan []string, 64)}
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			var addrs []string
			for _, r := range resp.GetResources() {
				var cla endpoint.ClusterLoadAssignment
				if err := r.UnmarshalTo(&cla); err != nil {
					continue
				}
				for _, l := range cla.GetEndpoints() {
					for _, e := range l.GetLbEndpoints() {
						sa := e.GetEndpoint().GetAddress().GetSocketAddress()
						addrs = append(addrs, net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue()))))
					}
				}
			}
			w.updates <- addrs
			_ = stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: endpointsType, ResourceNames: []string{cluster},
				VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()})
		}
	}()
	return w
}

// waitFor waits until the sidecar's endpoints of the cluster satisfy want.
func (w *edsWatch) waitFor(t *testing.T, what string, timeout time.Duration, want func([]string) bool) {
	t.Helper()
	deadline := time.After(timeout)
	var last []string
	for {
		select {
		case last = <-w.updates:
			if want(last) {
				return
			}
		case <-deadline:
			t.Fatalf("%s: the sidecar's endpoints of %s are %v", what, vmCluster, last)
		}
	}
}

// keeps checks that every update for d satisfies want.
func (w *edsWatch) keeps(t *testing.T, what string, d time.Duration, want func([]string) bool) {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case got := <-w.updates:
			if !want(got) {
				t.Fatalf("%s: the sidecar's endpoints of %s became %v", what, vmCluster, got)
			}
		case <-deadline:
			return
		}
	}
}

func hasVM(addrs []string) bool {
	return slices.ContainsFunc(addrs, func(a string) bool { return strings.HasPrefix(a, vmIP+":") })
}

// vmConfigDir writes the Service and, unless the cluster holds it, the WorkloadGroup.
func vmConfigDir(t *testing.T, withGroup bool) string {
	t.Helper()
	dir := t.TempDir()
	docs := vmServiceYAML
	if withGroup {
		docs += "---\n" + vmGroupYAML
	}
	if err := os.WriteFile(filepath.Join(dir, "vm.yaml"), []byte(docs), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

const vmGrace = 500 * time.Millisecond

// TestIstioAgentRegistersAVM: Istio's agent connecting with AUTO_REGISTER_GROUP and the token of the
// group's service account is registered as a WorkloadEntry (held in memory: no cluster), which a sidecar
// sees as an endpoint of the service selecting the group's labels; when the agent goes, the entry goes
// after the grace period.
func TestIstioAgentRegistersAVM(t *testing.T) {
	s := startSextantArgs(t, discovery.Args{ConfigDir: vmConfigDir(t, true), TokenAuthenticator: tokens{"vm-token": vmappIdentity},
		WorkloadEntryGracePeriod: vmGrace})
	eds := watchEDS(t, s.srv.GRPCAddr(), vmCluster)
	dir, node, stop := runVMAgent(t, s, "vm-token", "vmapp")
	if err, _ := connectThroughAgent(t, dir, node); err != nil {
		t.Fatalf("xDS through the VM's agent: %v", err)
	}
	eds.waitFor(t, "the VM registered", 20*time.Second, func(a []string) bool { return slices.Contains(a, vmIP+":8081") })

	e := s.srv.Store.Get(config.Key{Kind: config.WorkloadEntry, Namespace: "bookinfo", Name: "vmapp-" + vmIP})
	if e == nil {
		t.Fatal("no WorkloadEntry bookinfo/vmapp-" + vmIP)
	}
	if e.Annotations[autoregister.AnnotationGroup] != "vmapp" || e.Annotations[autoregister.AnnotationController] == "" ||
		e.Annotations[autoregister.AnnotationConnectedAt] == "" || e.Labels["app"] != "vmapp" {
		t.Errorf("entry labels %v, annotations %v", e.Labels, e.Annotations)
	}

	eds.keeps(t, "while the agent is connected", 2*vmGrace, hasVM)
	if s.srv.Store.Get(e.Key) == nil {
		t.Fatal("the entry went while its agent is connected")
	}

	gone := time.Now()
	stop()
	eds.waitFor(t, "the VM gone", 20*time.Second, func(a []string) bool { return !hasVM(a) })
	if d := time.Since(gone); d < vmGrace {
		t.Errorf("the VM's endpoint went %s after its agent, before the grace period (%s)", d, vmGrace)
	}
}

// With a readiness probe, the agent reports its workload's health over xDS: the entry is marked for health
// checks, and a sidecar gets the VM's endpoint only while the probe passes, as istiod serves it.
func TestIstioAgentHealthGatesTheVMEndpoint(t *testing.T) {
	app, probe := probedApp(t)
	s := startSextantArgs(t, discovery.Args{ConfigDir: vmConfigDir(t, true), TokenAuthenticator: tokens{"vm-token": vmappIdentity},
		WorkloadEntryGracePeriod: vmGrace})
	eds := watchEDS(t, s.srv.GRPCAddr(), vmCluster)
	dir, node, _ := runVMAgent(t, s, "vm-token", "vmapp", probe)
	if err, _ := connectThroughAgent(t, dir, node); err != nil {
		t.Fatalf("xDS through the VM's agent: %v", err)
	}
	eds.waitFor(t, "the VM ready", 20*time.Second, hasVM)
	key := config.Key{Kind: config.WorkloadEntry, Namespace: "bookinfo", Name: "vmapp-" + vmIP}
	if e := s.srv.Store.Get(key); e.Annotations[autoregister.AnnotationHealthChecks] != "true" || e.Conditions["Healthy"] != "True" {
		t.Errorf("entry annotations %v, conditions %v", e.Annotations, e.Conditions)
	}

	app.Close() // the probe fails from now on
	eds.waitFor(t, "the VM not ready", 20*time.Second, func(a []string) bool { return !hasVM(a) })
	if e := s.srv.Store.Get(key); e == nil || e.Conditions["Healthy"] != "False" {
		t.Errorf("entry %v after the probe failed, want it kept with Healthy False", e)
	}
}

// probedApp is the VM's application as its readiness probe sees it: a TCP port that accepts until closed.
func probedApp(t *testing.T) (net.Listener, *networking.ReadinessProbe) {
	t.Helper()
	app, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	go func() {
		for {
			c, err := app.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := uint32(app.Addr().(*net.TCPAddr).Port)
	return app, &networking.ReadinessProbe{PeriodSeconds: 1, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 1,
		HealthCheckMethod: &networking.ReadinessProbe_TcpSocket{TcpSocket: &networking.TCPHealthCheckConfig{Host: "127.0.0.1", Port: port}}}
}

// An agent whose identity is not the group's service account, or that names a group that does not exist,
// is refused with the reason, as istiod refuses it, and nothing is registered.
func TestIstioAgentRegistrationRefused(t *testing.T) {
	ratings := authn.Identity{TrustDomain: "cluster.local", Namespace: "bookinfo", ServiceAccount: "ratings"}
	for _, tc := range []struct {
		name, token, group string
		code               codes.Code
		msg                string
	}{
		{"another service account", "ratings-token", "vmapp", codes.PermissionDenied, `service account mismatch`},
		{"no such group", "vm-token", "nope", codes.FailedPrecondition, "cannot find WorkloadGroup bookinfo/nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startSextantArgs(t, discovery.Args{ConfigDir: vmConfigDir(t, true),
				TokenAuthenticator: tokens{"vm-token": vmappIdentity, "ratings-token": ratings}})
			dir, node, _ := runVMAgent(t, s, tc.token, tc.group)
			err, _ := connectThroughAgent(t, dir, node)
			if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %v, want %s: %s", err, tc.code, tc.msg)
			}
			if n := s.srv.Store.Count(config.WorkloadEntry); n != 0 {
				t.Errorf("%d WorkloadEntries registered", n)
			}
		})
	}
}
