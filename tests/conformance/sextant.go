package conformance

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sextantmesh/sextant/pilot/envoy"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/source/file"
	"github.com/sextantmesh/sextant/pilot/store"
	"github.com/sextantmesh/sextant/pkg/nameset"
)

// KindRejected keys the documents Sextant's file source refused: istiod loaded them, so a refusal is a
// difference like any other.
const KindRejected Kind = "rejected"

// Output is what one proxy receives from a control plane, as Envoy resources.
type Output struct {
	Clusters  []*cluster.Cluster
	Endpoints []*endpoint.ClusterLoadAssignment
	Routes    []*route.RouteConfiguration
	Listeners []*listener.Listener
	// Rejected lists the file source's errors for the case's config (Sextant only).
	Rejected []string
}

// Normalise turns a proxy's output into a snapshot, asking its listeners the probes' questions.
func (o *Output) Normalise(p Proxy, probes Probes) (Snapshot, error) {
	snap, err := normalise(o, p, probes)
	if err != nil {
		return nil, err
	}
	if len(o.Rejected) > 0 {
		f := Fields{}
		for i, e := range o.Rejected {
			f[fmt.Sprintf("error#%d", i)] = e
		}
		snap[Key{Kind: KindRejected}] = f
	}
	return snap, nil
}

// RenderSextant loads the case through Sextant's public API (the file source, the model, the Envoy
// generators) as `sextant translate` does, and returns each proxy's output by proxy name.
func RenderSextant(c *Case, tmp string) (map[string]*Output, error) {
	dir := filepath.Join(tmp, "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(c.Config), 0o644); err != nil {
		return nil, err
	}
	st := store.New()
	src := file.New(file.Options{Dir: dir, Store: st})
	if err := src.Load(); err != nil {
		return nil, err
	}
	var rejected []string
	for _, e := range src.Errors() {
		rejected = append(rejected, strings.ReplaceAll(e.Error(), dir+string(os.PathSeparator), ""))
	}
	meshConfig := mesh.Default()
	if c.Mesh != "" {
		if err := mesh.Parse([]byte(c.Mesh), meshConfig); err != nil {
			return nil, fmt.Errorf("mesh.yaml: %w", err)
		}
	}
	push := model.Build(st, meshConfig)
	gens := envoy.New(envoy.Options{VHDSMinEnvoy: "off"}).ByTypeURL()
	out := map[string]*Output{}
	for _, p := range c.Proxies {
		proxy, err := sextantProxy(p)
		if err != nil {
			return nil, err
		}
		gen := generate
		if p.Type == "grpc" {
			gen = generateGRPCRoutes
		}
		o, err := gen(gens, proxy, push)
		if err != nil {
			return nil, fmt.Errorf("proxy %s: %w", p.Name, err)
		}
		o.Rejected = rejected
		out[p.Name] = o
	}
	return out, nil
}

// sextantProxy builds the node an Istio sidecar or gateway sends: TYPE~IP~POD.NS~NS.svc.cluster.local with
// its labels, namespace and the case's other metadata.
func sextantProxy(p Proxy) (*model.Proxy, error) {
	labels := map[string]any{}
	for k, v := range p.Labels {
		labels[k] = v
	}
	fields := map[string]any{"LABELS": labels, "NAMESPACE": p.Namespace, "NAME": p.Name}
	maps.Copy(fields, p.extraMetadata())
	if len(p.ExtraIPs) > 0 {
		fields["INSTANCE_IPS"] = strings.Join(p.ips(), ",") // as the agent sends a dual-stack pod's
	}
	nodeType := p.Type
	if p.Type == "grpc" {
		// Istio's gRPC bootstrap: a sidecar node whose GENERATOR is grpc.
		fields["GENERATOR"], nodeType = "grpc", "sidecar"
	}
	md, err := structpb.NewStruct(fields)
	if err != nil {
		return nil, err
	}
	id := nodeType + "~" + p.IP + "~" + p.Name + "." + p.Namespace + "~" + p.Namespace + ".svc.cluster.local"
	node := &core.Node{Id: id, Metadata: md}
	if p.Locality != "" {
		node.Locality = p.locality()
	}
	return model.ParseProxy(node)
}

// generate asks in the order a proxy does: clusters and listeners (wildcard), then the endpoints and routes
// they name.
func generate(gens map[string]model.Generator, proxy *model.Proxy, push *model.PushContext) (*Output, error) {
	gen := func(typeURL string, names []string) (model.Resources, error) {
		w := &model.WatchedResource{TypeURL: typeURL, Wildcard: names == nil, ResourceNames: nameset.New(names...)}
		return gens[typeURL].Generate(proxy, push, w, nil)
	}
	o := &Output{}
	clusters, err := gen(envoy.ClusterType, nil)
	if err != nil {
		return nil, err
	}
	var edsNames []string
	for _, r := range clusters {
		var c cluster.Cluster
		if err := r.Any.UnmarshalTo(&c); err != nil {
			return nil, err
		}
		o.Clusters = append(o.Clusters, &c)
		if c.GetType() == cluster.Cluster_EDS {
			edsNames = append(edsNames, c.GetName())
		}
	}
	listeners, err := gen(envoy.ListenerType, nil)
	if err != nil {
		return nil, err
	}
	var rdsNames []string
	for _, r := range listeners {
		var l listener.Listener
		if err := r.Any.UnmarshalTo(&l); err != nil {
			return nil, err
		}
		o.Listeners = append(o.Listeners, &l)
		rdsNames = append(rdsNames, routeNames(&l)...)
	}
	slices.Sort(rdsNames)
	rdsNames = slices.Compact(rdsNames)
	if len(edsNames) > 0 {
		eps, err := gen(envoy.EndpointType, edsNames)
		if err != nil {
			return nil, err
		}
		for _, r := range eps {
			var cla endpoint.ClusterLoadAssignment
			if err := r.Any.UnmarshalTo(&cla); err != nil {
				return nil, err
			}
			o.Endpoints = append(o.Endpoints, &cla)
		}
	}
	if len(rdsNames) > 0 {
		routes, err := gen(envoy.RouteType, rdsNames)
		if err != nil {
			return nil, err
		}
		for _, r := range routes {
			var rc route.RouteConfiguration
			if err := r.Any.UnmarshalTo(&rc); err != nil {
				return nil, err
			}
			o.Routes = append(o.Routes, &rc)
		}
	}
	return o, nil
}

// generateGRPCRoutes asks, as a proxyless gRPC client's resolver does per target, for the route
// configuration of every HTTP port of the services it sees (the names of a wildcard subscription).
func generateGRPCRoutes(gens map[string]model.Generator, proxy *model.Proxy, push *model.PushContext) (*Output, error) {
	res, err := gens[envoy.RouteType].Generate(proxy, push, &model.WatchedResource{TypeURL: envoy.RouteType, Wildcard: true}, nil)
	if err != nil {
		return nil, err
	}
	o := &Output{}
	for _, r := range res {
		var rc route.RouteConfiguration
		if err := r.Any.UnmarshalTo(&rc); err != nil {
			return nil, err
		}
		o.Routes = append(o.Routes, &rc)
	}
	return o, nil
}

// routeNames lists the RDS route configurations a listener's HTTP connection managers refer to.
func routeNames(l *listener.Listener) []string {
	var out []string
	add := func(m *hcm.HttpConnectionManager) {
		if rds := m.GetRds(); rds != nil {
			out = append(out, rds.GetRouteConfigName())
		}
	}
	if api := l.GetApiListener().GetApiListener(); api != nil {
		var m hcm.HttpConnectionManager
		if api.UnmarshalTo(&m) == nil {
			add(&m)
		}
	}
	chains := append(slices.Clone(l.GetFilterChains()), l.GetDefaultFilterChain())
	for _, fc := range chains {
		for _, f := range fc.GetFilters() {
			var m hcm.HttpConnectionManager
			if f.GetTypedConfig().MessageIs(&m) && f.GetTypedConfig().UnmarshalTo(&m) == nil {
				add(&m)
			}
		}
	}
	return out
}

func (p Proxy) locality() *core.Locality {
	parts := strings.SplitN(p.Locality, "/", 3)
	for len(parts) < 3 {
		parts = append(parts, "")
	}
	return &core.Locality{Region: parts[0], Zone: parts[1], SubZone: parts[2]}
}
