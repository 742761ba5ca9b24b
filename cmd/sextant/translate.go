package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sextantmesh/sextant/pilot/envoy"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/source/file"
	"github.com/sextantmesh/sextant/pilot/store"
	"github.com/sextantmesh/sextant/pkg/nameset"
)

var translateTypes = map[string]string{"cds": envoy.ClusterType, "eds": envoy.EndpointType,
	"lds": envoy.ListenerType, "rds": envoy.RouteType}

func translateCommand() *cobra.Command {
	var dir, proxyID, meta, meshFile string
	var types []string
	cmd := &cobra.Command{
		Use:   "translate -f DIR --proxy NODE_ID",
		Short: "Print the Envoy config a proxy would receive, offline",
		Long: `Load a config directory, build the snapshot and print, as Envoy JSON, what the proxy with the given
node id (TYPE~IP~POD.NAMESPACE~NAMESPACE.svc.cluster.local) would receive. No server is needed.
EDS and RDS cover the names the proxy's clusters and listeners refer to, as a proxy would ask. Rejected
documents and fields without effect (the mesh config's too, by path and with the reason) go to stderr.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := mesh.Load(meshFile)
			if err != nil {
				return err
			}
			for _, e := range m.Warnings(meshFile) {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning:", e)
			}
			node := &core.Node{Id: proxyID}
			if meta != "" {
				var md structpb.Struct
				if err := protojson.Unmarshal([]byte(meta), &md); err != nil {
					return fmt.Errorf("--meta: %w", err)
				}
				node.Metadata = &md
			}
			proxy, err := model.ParseProxy(node)
			if err != nil {
				return err
			}
			st := store.New()
			src := file.New(file.Options{Dir: dir, Store: st})
			if err := src.Load(); err != nil {
				return err
			}
			for _, e := range src.Errors() {
				fmt.Fprintln(cmd.ErrOrStderr(), "rejected:", e)
			}
			for _, e := range src.Warnings() {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning:", e)
			}
			push := model.Build(st, m)
			return translate(cmd.OutOrStdout(), proxy, push, types)
		},
	}
	cmd.Flags().StringVarP(&dir, "file", "f", "", "config directory (required)")
	cmd.Flags().StringVar(&proxyID, "proxy", "", "the proxy's node id (required)")
	cmd.Flags().StringVar(&meta, "meta", "", `node metadata as JSON, e.g. '{"LABELS":{"app":"reviews"},"GENERATOR":"grpc"}'`)
	cmd.Flags().StringVar(&meshFile, "mesh-config", "", "mesh config file")
	cmd.Flags().StringSliceVar(&types, "type", []string{"cds", "eds", "lds", "rds"}, "types to print: cds, eds, lds, rds")
	_ = cmd.MarkFlagRequired("file")
	_ = cmd.MarkFlagRequired("proxy")
	return cmd
}

// translate generates in the order a proxy asks: clusters and listeners (wildcard), then the endpoints and
// routes they name.
func translate(out io.Writer, proxy *model.Proxy, push *model.PushContext, types []string) error {
	for _, t := range types {
		if _, ok := translateTypes[t]; !ok {
			return fmt.Errorf("--type %q: want cds, eds, lds or rds", t)
		}
	}
	gens := envoy.New(envoy.Options{}).ByTypeURL()
	gen := func(typeURL string, names []string) (model.Resources, error) {
		w := &model.WatchedResource{TypeURL: typeURL, Wildcard: names == nil, ResourceNames: nameset.New(names...)}
		return gens[typeURL].Generate(proxy, push, w, nil)
	}
	clusters, err := gen(envoy.ClusterType, nil)
	if err != nil {
		return err
	}
	listeners, err := gen(envoy.ListenerType, nil)
	if err != nil {
		return err
	}
	var edsNames, rdsNames []string
	for _, r := range clusters {
		var c cluster.Cluster
		if err := r.Any.UnmarshalTo(&c); err == nil && c.GetType() == cluster.Cluster_EDS {
			edsNames = append(edsNames, c.Name)
		}
	}
	for _, r := range listeners {
		var l listener.Listener
		if err := r.Any.UnmarshalTo(&l); err == nil {
			rdsNames = append(rdsNames, routeNames(&l)...)
		}
	}
	slices.Sort(rdsNames)
	rdsNames = slices.Compact(rdsNames)
	result := map[string][]json.RawMessage{}
	add := func(key string, rs model.Resources) error {
		result[key] = []json.RawMessage{}
		for _, r := range rs {
			msg, err := r.Any.UnmarshalNew()
			if err != nil {
				return err
			}
			b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(msg) // snake_case, as Envoy prints its config
			if err != nil {
				return err
			}
			result[key] = append(result[key], b)
		}
		return nil
	}
	for _, t := range types {
		var rs model.Resources
		switch t {
		case "cds":
			rs = clusters
		case "lds":
			rs = listeners
		case "eds":
			if rs, err = gen(envoy.EndpointType, edsNames); err != nil {
				return err
			}
		case "rds":
			if rs, err = gen(envoy.RouteType, rdsNames); err != nil {
				return err
			}
		}
		if err := add(t, rs); err != nil {
			return err
		}
	}
	b, err := json.MarshalIndent(result, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, string(b))
	return err
}

// routeNames lists the RDS route configurations a listener refers to.
func routeNames(l *listener.Listener) []string {
	var out []string
	add := func(m *hcm.HttpConnectionManager) {
		if rds := m.GetRds(); rds != nil {
			out = append(out, rds.RouteConfigName)
		}
	}
	if api := l.GetApiListener().GetApiListener(); api != nil {
		var m hcm.HttpConnectionManager
		if api.UnmarshalTo(&m) == nil {
			add(&m)
		}
	}
	chains := append(slices.Clone(l.FilterChains), l.DefaultFilterChain)
	for _, fc := range chains {
		for _, f := range fc.GetFilters() {
			if !strings.Contains(f.GetName(), "http_connection_manager") {
				continue
			}
			var m hcm.HttpConnectionManager
			if f.GetTypedConfig().UnmarshalTo(&m) == nil {
				add(&m)
			}
		}
	}
	return out
}
