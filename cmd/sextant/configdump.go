package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func configDumpCommand() *cobra.Command {
	var c client
	var output string
	var types []string
	cmd := &cobra.Command{
		Use:   "config-dump PROXY_ID",
		Short: "Show the config the server generates now for a connected proxy",
		Long: `Run the generators for every type the proxy (POD.NAMESPACE, node id or connection id) watches, with its
current subscriptions, against the current snapshot. The table lists the resources; -o json prints them
in full, as protojson with @type, like Envoy's config_dump.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			q := url.Values{"proxyID": {args[0]}}
			if len(types) > 0 {
				q.Set("types", strings.Join(types, ","))
			}
			dump, body, err := getDump(&c, q)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if output == "json" {
				return writeRaw(out, body)
			}
			fmt.Fprintf(out, "proxy %s (connection %s), snapshot v%d\n", dump.Proxy, dump.Connection, dump.SnapshotVersion)
			tw := tabwriter.NewWriter(out, 0, 4, 3, ' ', 0)
			fmt.Fprintln(tw, "TYPE\tNAME")
			for _, tc := range dump.Configs {
				if tc.Error != "" {
					fmt.Fprintf(tw, "%s\terror: %s\n", strings.ToUpper(tc.Type), tc.Error)
				}
				for _, r := range tc.Resources {
					fmt.Fprintf(tw, "%s\t%s\n", strings.ToUpper(tc.Type), resourceName(r))
				}
			}
			return tw.Flush()
		},
	}
	clientFlags(cmd, &c, &output)
	cmd.Flags().StringSliceVar(&types, "type", nil, "only these types: cds, eds, lds, rds, vhds, wds, authorization or a type URL")
	return cmd
}

// resourceName finds a resource's name: "name", else "clusterName" (EDS), else "uid" (workloads).
func resourceName(raw json.RawMessage) string {
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil {
		return "?"
	}
	for _, k := range []string{"name", "clusterName", "uid"} {
		if s, ok := m[k].(string); ok && s != "" {
			return s
		}
	}
	for _, v := range m { // wrappers such as Address{workload: {...}}
		if inner, ok := v.(map[string]any); ok {
			for _, k := range []string{"name", "uid", "hostname"} {
				if s, ok := inner[k].(string); ok && s != "" {
					return s
				}
			}
		}
	}
	return "?"
}
