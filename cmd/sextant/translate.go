package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	corev1 "k8s.io/api/core/v1"

	"github.com/sextantmesh/sextant/pilot/config"
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
	var dir, proxyArg, meta, meshFile string
	var types []string
	var snake bool
	cmd := &cobra.Command{
		Use:   "translate DIR --proxy POD.NAMESPACE|NODE_ID",
		Short: "Print the Envoy config a proxy would receive, offline",
		Long: `Load a config directory (DIR, or -f DIR), build the snapshot and print what the proxy would receive, as
protojson with "@type" and camelCase field names, the form config-dump and istioctl print (--snake-case for
Envoy's proto field names). No server is needed. --proxy is POD.NAMESPACE, as every command takes it, or a
full node id (TYPE~IP~POD.NAMESPACE~NAMESPACE.svc.cluster.local; POD.NAMESPACE means a sidecar, give the
node id for a gateway). The pod found in the directory gives the IP and the labels (node metadata LABELS)
its agent would send, unless --meta sets them; a proxy that matches no pod is warned about on stderr.
EDS and RDS cover the names the proxy's clusters and listeners refer to, as a proxy would ask. Rejected
documents and fields without effect (the mesh config's too, by path and with the reason) go to stderr.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := configDirArg(dir, args)
			if err != nil {
				return err
			}
			if proxyArg == "" {
				return errors.New("--proxy is required: POD.NAMESPACE or a node id")
			}
			m, err := mesh.Load(meshFile)
			if err != nil {
				return err
			}
			stderr := cmd.ErrOrStderr()
			for _, e := range m.Warnings(meshFile) {
				fmt.Fprintln(stderr, "warning:", e)
			}
			st := store.New()
			src := file.New(file.Options{Dir: dir, Store: st, Logger: slog.New(slog.DiscardHandler)})
			if err := src.Load(); err != nil {
				return err
			}
			for _, e := range src.Errors() {
				fmt.Fprintln(stderr, "rejected:", e)
			}
			for _, e := range src.Warnings() {
				fmt.Fprintln(stderr, "warning:", e)
			}
			node, noPod, err := translateNode(st, m, proxyArg, meta)
			if err != nil {
				return err
			}
			proxy, err := model.ParseProxy(node)
			if err != nil {
				return err
			}
			if noPod {
				fmt.Fprintf(stderr, "warning: proxy %s matches no pod in %s: generated for a workload with no labels (unless --meta gives "+
					"them) and no service of its own\n", proxyArg, dir)
			}
			return translate(cmd.OutOrStdout(), proxy, model.Build(st, m), types, snake)
		},
	}
	cmd.Flags().StringVarP(&dir, "file", "f", "", "config directory (or give it as the argument)")
	cmd.Flags().StringVar(&proxyArg, "proxy", "", "the proxy: POD.NAMESPACE or its node id (required)")
	cmd.Flags().StringVar(&meta, "meta", "", `node metadata as JSON, e.g. '{"LABELS":{"app":"reviews"},"GENERATOR":"grpc"}'`)
	cmd.Flags().StringVar(&meshFile, "mesh-config", "", "mesh config file")
	cmd.Flags().StringSliceVar(&types, "type", []string{"cds", "eds", "lds", "rds"}, "types to print: cds, eds, lds, rds")
	cmd.Flags().BoolVar(&snake, "snake-case", false, "print Envoy's proto field names (cluster_name), not protojson's (clusterName)")
	return cmd
}

// configDirArg is the config directory given as the argument or with -f, not both.
func configDirArg(flag string, args []string) (string, error) {
	switch {
	case len(args) == 1 && flag != "" && args[0] != flag:
		return "", fmt.Errorf("two config directories, %s and -f %s: give one", args[0], flag)
	case len(args) == 1:
		return args[0], nil
	case flag == "":
		return "", errors.New("no config directory: give it as the argument or with -f")
	}
	return flag, nil
}

// translateNode makes the node a proxy's agent would send. POD.NAMESPACE becomes a sidecar's node id with
// the pod's IP; a node id is kept. The pod's labels become the metadata LABELS unless --meta gives them.
// noPod says the proxy matches no pod of the store.
func translateNode(st *store.Store, m *mesh.Config, proxyArg, meta string) (node *core.Node, noPod bool, err error) {
	node = &core.Node{Id: proxyArg, Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{}}}
	if meta != "" {
		if err := protojson.Unmarshal([]byte(meta), node.Metadata); err != nil {
			return nil, false, fmt.Errorf("--meta: %w", err)
		}
	}
	id := proxyArg
	if parts := strings.Split(proxyArg, "~"); len(parts) == 4 {
		id = parts[2]
	} else if len(parts) > 1 {
		return node, false, nil // ParseProxy says what is wrong with it
	}
	i := strings.LastIndexByte(id, '.')
	if i <= 0 || i == len(id)-1 {
		return nil, false, fmt.Errorf("--proxy %q: want POD.NAMESPACE or a node id TYPE~IP~POD.NAMESPACE~NAMESPACE.svc.DOMAIN", proxyArg)
	}
	name, ns := id[:i], id[i+1:]
	var pod *corev1.Pod
	if c := st.Get(config.Key{Kind: config.Pod, Namespace: ns, Name: name}); c != nil {
		pod, _ = c.Spec.(*corev1.Pod)
	}
	if !strings.Contains(proxyArg, "~") {
		ip := "0.0.0.0" // a node id needs one; a pod that is not there has none
		if pod != nil && pod.Status.PodIP != "" {
			ip = pod.Status.PodIP
		}
		node.Id = fmt.Sprintf("%s~%s~%s.%s~%s.svc.%s", model.Sidecar, ip, name, ns, ns, m.DomainSuffix)
	}
	if pod == nil {
		return node, true, nil
	}
	if _, ok := node.Metadata.Fields["LABELS"]; !ok && len(pod.Labels) > 0 {
		labels := map[string]any{}
		for k, v := range pod.Labels {
			labels[k] = v
		}
		v, err := structpb.NewValue(labels)
		if err != nil {
			return nil, false, err
		}
		node.Metadata.Fields["LABELS"] = v
	}
	return node, false, nil
}

// translate generates in the order a proxy asks: clusters and listeners (wildcard), then the endpoints and
// routes they name.
func translate(out io.Writer, proxy *model.Proxy, push *model.PushContext, types []string, snake bool) error {
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
			// The Any itself, as the server's config_dump renders it: protojson with "@type".
			b, err := protojson.MarshalOptions{UseProtoNames: snake}.Marshal(r.Any)
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
