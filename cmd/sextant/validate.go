package main

import (
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/source/file"
	"github.com/sextantmesh/sextant/pilot/store"
)

func validateCommand() *cobra.Command {
	var paths []string
	var output string
	cmd := &cobra.Command{
		Use:   "validate -f FILE|DIR [-f ...]",
		Short: "Check config files offline, with the errors the server would give",
		Long: `Parse and validate YAML/JSON config the way the server's file source does (the same code, so the same
messages, naming file, document, object and field). Fields Sextant accepts but does not implement are listed
after the errors as warnings, and so are the references the server would warn about (a VirtualService
delegating to one none of the files defines, which may still exist in the cluster). Exits non-zero when
anything is rejected; warnings alone exit 0.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			var rejected, warnings []*config.Error
			objects := 0
			// One store for every path, so that references between objects of different paths resolve.
			st := store.New()
			for _, p := range paths {
				src := file.New(file.Options{Dir: p, Store: st, Logger: slog.New(slog.DiscardHandler)})
				if err := src.Load(); err != nil {
					return err
				}
				rejected = append(rejected, src.Errors()...)
				warnings = append(warnings, src.Warnings()...)
				for _, n := range src.Counts() {
					objects += n
				}
			}
			warnings = append(warnings, snapshotWarnings(model.Build(st, mesh.Default()))...)
			out := cmd.OutOrStdout()
			if output == "json" {
				type entry struct {
					*config.Error
					Text string `json:"error"`
				}
				entries := func(errs []*config.Error) []entry {
					list := []entry{}
					for _, e := range errs {
						list = append(list, entry{Error: e, Text: e.Error()})
					}
					return list
				}
				b, err := json.MarshalIndent(map[string]any{"objects": objects, "rejected": entries(rejected), "warnings": entries(warnings)}, "", "  ")
				if err != nil {
					return err
				}
				fmt.Fprintln(out, string(b))
			} else {
				for _, e := range rejected {
					fmt.Fprintln(out, e.Error())
				}
				for _, e := range warnings {
					fmt.Fprintln(out, "warning: "+e.Error())
				}
				fmt.Fprintf(out, "%d objects accepted, %d documents rejected", objects, len(rejected))
				if len(warnings) > 0 {
					fmt.Fprintf(out, ", %d warnings (fields accepted but not implemented or without effect)", len(warnings))
				}
				fmt.Fprintln(out)
			}
			if len(rejected) > 0 {
				return fmt.Errorf("%d documents rejected", len(rejected)) // exit status 1
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVarP(&paths, "file", "f", nil, "a config file or directory (repeatable)")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

// snapshotWarnings are the warnings the server gives about the accepted objects taken together, with the
// same messages: those that need only the files (not Secrets, the mesh config or connected proxies).
func snapshotWarnings(ps *model.PushContext) []*config.Error {
	var out []*config.Error
	out = append(out, ps.VirtualServiceProblems()...)
	out = append(out, ps.DNSRoundRobinProblems()...)
	out = append(out, ps.DynamicDNSProblems()...)
	out = append(out, ps.ServiceHostProblems()...)
	return out
}
