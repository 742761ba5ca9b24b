package model_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sextantmesh/sextant/pilot/model"
)

func TestParseProxy(t *testing.T) {
	p, err := model.ParseProxy(node("sidecar~10.0.0.1~reviews-v1-abc.bookinfo~bookinfo.svc.cluster.local", map[string]any{
		"LABELS": map[string]any{"app": "reviews", "version": "v1"}, "CLUSTER_ID": "Kubernetes", "ISTIO_VERSION": "1.28.0",
		"SERVICE_ACCOUNT": "bookinfo-reviews", "INSTANCE_IPS": "10.0.0.1,fd00::1", "NODE_NAME": "node-1",
		"NAME": "reviews-v1-abc",
	}))
	must(t, err)
	if p.Type != model.Sidecar || p.ID != "reviews-v1-abc.bookinfo" || p.Namespace != "bookinfo" || p.Name != "reviews-v1-abc" ||
		p.DNSDomain != "bookinfo.svc.cluster.local" || !slices.Equal(p.IPAddresses, []string{"10.0.0.1", "fd00::1"}) ||
		!maps.Equal(p.Labels, map[string]string{"app": "reviews", "version": "v1"}) || p.ClusterID != "Kubernetes" ||
		p.IstioVersion != "1.28.0" || p.ServiceAccount != "bookinfo-reviews" || p.NodeName != "node-1" {
		t.Fatalf("sidecar: %+v", p)
	}

	// Namespace and pod name from the id alone; pod names may contain dots.
	p, err = model.ParseProxy(node("router~10.0.0.7~gw.v2.istio-system~istio-system.svc.cluster.local", nil))
	must(t, err)
	if p.Type != model.Router || p.Namespace != "istio-system" || p.Name != "gw.v2" {
		t.Fatalf("router: %+v", p)
	}
	p, err = model.ParseProxy(node("ztunnel~10.0.0.2~ztunnel-x.kube-system~", nil))
	must(t, err)
	if p.Type != model.Ztunnel || p.Namespace != "kube-system" {
		t.Fatalf("ztunnel: %+v", p)
	}

	// Proxyless gRPC: any id, namespace from metadata.
	p, err = model.ParseProxy(&core.Node{Id: "my-client", UserAgentName: "gRPC Go",
		UserAgentVersionType: &core.Node_UserAgentVersion{UserAgentVersion: "1.85.0"},
		Metadata:             node("", map[string]any{"NAMESPACE": "app"}).Metadata})
	must(t, err)
	if p.Type != model.GRPC || p.ID != "my-client" || p.Namespace != "app" || p.UserAgent != "gRPC Go 1.85.0" {
		t.Fatalf("grpc: %+v", p)
	}
	p, err = model.ParseProxy(node("sidecar~10.0.0.3~c.app~app.svc.cluster.local", map[string]any{"GENERATOR": "grpc"}))
	must(t, err)
	if p.Type != model.GRPC || p.Namespace != "app" || p.Generator != "grpc" {
		t.Fatalf("grpc with Istio id: %+v", p)
	}
}

// INTERCEPTION_MODE and UNPRIVILEGED_POD are read as istiod reads them: a mode it does not know is
// REDIRECT (with a note the transport logs), UNPRIVILEGED_POD is strconv.ParseBool.
func TestParseProxyInterception(t *testing.T) {
	for _, tc := range []struct {
		md           map[string]any
		mode         model.InterceptionMode
		unprivileged bool
		noted        bool
	}{
		{nil, model.InterceptRedirect, false, false},
		{map[string]any{"INTERCEPTION_MODE": "NONE", "UNPRIVILEGED_POD": "true"}, model.InterceptNone, true, false},
		{map[string]any{"INTERCEPTION_MODE": "TPROXY", "UNPRIVILEGED_POD": "1"}, model.InterceptTPROXY, true, false},
		{map[string]any{"INTERCEPTION_MODE": "REDIRECT", "UNPRIVILEGED_POD": "yes"}, model.InterceptRedirect, false, false},
		{map[string]any{"INTERCEPTION_MODE": "tproxy"}, model.InterceptRedirect, false, true},
	} {
		p, err := model.ParseProxy(node("sidecar~10.0.0.1~pod.ns~ns.svc.cluster.local", tc.md))
		must(t, err)
		if p.InterceptionMode != tc.mode || p.Unprivileged != tc.unprivileged || (len(p.MetadataNotes) > 0) != tc.noted ||
			p.CaptureNone() != (tc.mode == model.InterceptNone) {
			t.Errorf("%v: mode %q unprivileged %t notes %q", tc.md, p.InterceptionMode, p.Unprivileged, p.MetadataNotes)
		}
	}
	_, err := model.ParseProxy(node("sidecar~10.0.0.1~pod.ns~ns.svc.cluster.local", map[string]any{"INTERCEPTION_MODE": true}))
	if err == nil || !strings.Contains(err.Error(), "metadata INTERCEPTION_MODE: want a string") {
		t.Fatalf("a non-string mode: %v", err)
	}
}

var badNodes = []struct {
	name string
	node *core.Node
	want string
}{
	{"no node", nil, "carries no node"},
	{"empty id", node("", nil), "node id is empty"},
	{"parts", node("sidecar~10.0.0.1~pod.ns", nil), `has 3 parts separated by "~", want 4`},
	{"type", node("waypoint~10.0.0.1~pod.ns~ns.svc.cluster.local", nil), `unknown proxy type "waypoint"`},
	{"ip", node("sidecar~10.0.0.300~pod.ns~ns.svc.cluster.local", nil), `second part "10.0.0.300" is not an IP address`},
	{"namespace", node("sidecar~10.0.0.1~pod~", nil), "namespace missing"},
	{"grpc namespace", &core.Node{Id: "client", UserAgentName: "grpc-java-netty"}, "namespace missing: set node metadata NAMESPACE"},
	{"instance ips", node("sidecar~10.0.0.1~pod.ns~ns.svc.cluster.local", map[string]any{"INSTANCE_IPS": "10.0.0.1,nope"}),
		`metadata INSTANCE_IPS: "nope" is not an IP address`},
	{"labels", node("sidecar~10.0.0.1~pod.ns~ns.svc.cluster.local", map[string]any{"LABELS": "app=x"}), "metadata LABELS: want a map"},
	{"metadata type", node("sidecar~10.0.0.1~pod.ns~ns.svc.cluster.local", map[string]any{"NAMESPACE": 3.0}),
		"metadata NAMESPACE: want a string"},
}

func TestParseProxyErrors(t *testing.T) {
	for _, tc := range badNodes {
		t.Run(tc.name, func(t *testing.T) {
			_, err := model.ParseProxy(tc.node)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func node(id string, md map[string]any) *core.Node {
	n := &core.Node{Id: id}
	if md != nil {
		s, err := structpb.NewStruct(md)
		if err != nil {
			panic(err)
		}
		n.Metadata = s
	}
	return n
}
