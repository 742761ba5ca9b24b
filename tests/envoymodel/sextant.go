package envoymodel

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sextantmesh/sextant/pilot/envoy"
	"github.com/sextantmesh/sextant/pilot/jwks"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/source/file"
	"github.com/sextantmesh/sextant/pilot/store"
	"github.com/sextantmesh/sextant/pkg/nameset"
)

// Workload is the sidecar a test asks Sextant's config for.
type Workload struct {
	Name, Namespace, IP string
	Labels              map[string]string
}

// Generated is what Sextant produced for one sidecar from a config directory.
type Generated struct {
	Resources
	// Rejected and Warnings are the file source's errors and warnings, as text.
	Rejected []string
	Warnings []string
}

// Generate renders a sidecar's resources through Sextant's public API, as `sextant translate` does: the
// YAML config is written into dir and loaded by the file source, the mesh config parsed over the
// defaults, the key sets the RequestAuthentications name fetched (as the discovery server does before
// its first snapshot), the snapshot built and the Envoy generators asked in the order a proxy asks
// (clusters and listeners, then the endpoints and routes they name). Every resource must pass
// ValidateAll.
func Generate(dir, config, meshConfig string, w Workload) (*Generated, error) {
	cfgDir := filepath.Join(dir, "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "config.yaml"), []byte(config), 0o644); err != nil {
		return nil, err
	}
	m := mesh.Default()
	if meshConfig != "" {
		if err := mesh.Parse([]byte(meshConfig), m); err != nil {
			return nil, fmt.Errorf("mesh config: %w", err)
		}
	}
	st := store.New()
	src := file.New(file.Options{Dir: cfgDir, Store: st})
	if err := src.Load(); err != nil {
		return nil, err
	}
	out := &Generated{}
	for _, e := range src.Errors() {
		out.Rejected = append(out.Rejected, e.Error())
	}
	for _, e := range src.Warnings() {
		out.Warnings = append(out.Warnings, e.Error())
	}
	// As the discovery server does, fetch the key sets the RequestAuthentications' jwksUri (or issuers)
	// name before the first snapshot, bounded in time.
	fetcher := jwks.New(jwks.Options{Store: st, Mesh: m, Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { fetcher.Run(ctx); close(done) }()
	select {
	case <-fetcher.FirstFetches():
	case <-time.After(30 * time.Second):
	}
	cancel()
	<-done
	for _, p := range fetcher.Problems() {
		out.Warnings = append(out.Warnings, p.Error())
	}
	push := model.Build(st, m)

	labels := map[string]any{}
	for k, v := range w.Labels {
		labels[k] = v
	}
	md, err := structpb.NewStruct(map[string]any{"LABELS": labels, "NAMESPACE": w.Namespace, "NAME": w.Name})
	if err != nil {
		return nil, err
	}
	node := &core.Node{Id: "sidecar~" + w.IP + "~" + w.Name + "." + w.Namespace + "~" + w.Namespace + ".svc.cluster.local", Metadata: md}
	proxy, err := model.ParseProxy(node)
	if err != nil {
		return nil, err
	}
	gens := envoy.New(envoy.Options{}).ByTypeURL()
	gen := func(typeURL string, names []string) (model.Resources, error) {
		wr := &model.WatchedResource{TypeURL: typeURL, Wildcard: names == nil, ResourceNames: nameset.New(names...)}
		return gens[typeURL].Generate(proxy, push, wr, nil)
	}
	open := func(rs model.Resources, each func(proto.Message)) error {
		for _, r := range rs {
			msg, err := r.Any.UnmarshalNew()
			if err != nil {
				return err
			}
			if v, ok := msg.(interface{ ValidateAll() error }); ok {
				if err := v.ValidateAll(); err != nil {
					return fmt.Errorf("%T %s fails ValidateAll: %w", msg, r.Name, err)
				}
			}
			each(msg)
		}
		return nil
	}
	cds, err := gen(envoy.ClusterType, nil)
	if err != nil {
		return nil, err
	}
	var edsNames, rdsNames []string
	if err := open(cds, func(m proto.Message) {
		c := m.(*cluster.Cluster)
		out.Clusters = append(out.Clusters, c)
		if c.GetType() == cluster.Cluster_EDS {
			name := c.GetEdsClusterConfig().GetServiceName()
			if name == "" {
				name = c.GetName()
			}
			edsNames = append(edsNames, name)
		}
	}); err != nil {
		return nil, err
	}
	lds, err := gen(envoy.ListenerType, nil)
	if err != nil {
		return nil, err
	}
	if err := open(lds, func(m proto.Message) {
		l := m.(*listener.Listener)
		out.Listeners = append(out.Listeners, l)
		rdsNames = append(rdsNames, routeNames(l)...)
	}); err != nil {
		return nil, err
	}
	if len(edsNames) > 0 {
		eds, err := gen(envoy.EndpointType, edsNames)
		if err != nil {
			return nil, err
		}
		if err := open(eds, func(m proto.Message) { out.Endpoints = append(out.Endpoints, m.(*endpoint.ClusterLoadAssignment)) }); err != nil {
			return nil, err
		}
	}
	slices.Sort(rdsNames)
	rdsNames = slices.Compact(rdsNames)
	if len(rdsNames) > 0 {
		rds, err := gen(envoy.RouteType, rdsNames)
		if err != nil {
			return nil, err
		}
		if err := open(rds, func(m proto.Message) { out.Routes = append(out.Routes, m.(*route.RouteConfiguration)) }); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// routeNames lists the RDS route configurations a listener's connection managers name.
func routeNames(l *listener.Listener) []string {
	var out []string
	chains := append(slices.Clone(l.GetFilterChains()), l.GetDefaultFilterChain())
	for _, fc := range chains {
		for _, f := range fc.GetFilters() {
			var m hcm.HttpConnectionManager
			if f.GetTypedConfig().MessageIs(&m) && f.GetTypedConfig().UnmarshalTo(&m) == nil && m.GetRds() != nil {
				out = append(out, m.GetRds().GetRouteConfigName())
			}
		}
	}
	return out
}
