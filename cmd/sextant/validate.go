package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/source/file"
	"github.com/sextantmesh/sextant/pilot/store"
)

func validateCommand() *cobra.Command {
	var paths []string
	var output, meshFile string
	cmd := &cobra.Command{
		Use:   "validate FILE|DIR... [-f FILE|DIR ...] [--mesh-config FILE]",
		Short: "Check config files offline, with the errors the server would give",
		Long: `Parse and validate YAML/JSON config files and directories, given as arguments or with -f, the way the
server's file source does (the same code, so the same messages, naming file, document, object and field).
Fields Sextant accepts but does not implement are listed after the errors as warnings, and so are the
references the server would warn about (a VirtualService delegating to one none of the files defines, which
may still exist in the cluster). With --mesh-config, the mesh config file is checked as the server reads it:
a bad value is rejected naming its field, and each field it sets that Sextant does not honour is warned, by
path, with the reason. Exits non-zero when anything is rejected; warnings alone exit 0.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			paths := append(slices.Clone(paths), args...)
			if len(paths) == 0 && meshFile == "" {
				return errors.New("nothing to validate: give FILE|DIR (as arguments or with -f) and/or --mesh-config FILE")
			}
			m, rejected, warnings, err := validateMesh(meshFile)
			if err != nil {
				return err
			}
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
			warnings = append(warnings, snapshotWarnings(model.Build(st, m))...)
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
				fmt.Fprintf(out, "%s accepted, %s rejected", counted(objects, "object"), counted(len(rejected), "document"))
				if len(warnings) > 0 {
					fmt.Fprintf(out, ", %s (fields accepted but not implemented or without effect)", counted(len(warnings), "warning"))
				}
				fmt.Fprintln(out)
			}
			if len(rejected) > 0 {
				return exitStatus(1) // the summary above said why
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVarP(&paths, "file", "f", nil, "a config file or directory (repeatable)")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	cmd.Flags().StringVar(&meshFile, "mesh-config", "", "a mesh config file (Istio's MeshConfig, as the server's --mesh-config)")
	return cmd
}

// validateMesh reads the mesh config file as the server does. A file that cannot be read is an error; a bad
// one is rejected, naming its field, and the objects are then checked against the defaults. No file gives
// the defaults.
func validateMesh(file string) (m *mesh.Config, rejected, warnings []*config.Error, err error) {
	if file == "" {
		return mesh.Default(), nil, nil, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, nil, nil, err
	}
	m = mesh.Default()
	if err := mesh.Parse(data, m); err != nil {
		e := &config.Error{File: file, Kind: "MeshConfig", Message: err.Error()}
		// The parser's errors start "field PATH: " when they are about one field.
		if rest, ok := strings.CutPrefix(e.Message, "field "); ok {
			if field, msg, ok := strings.Cut(rest, ": "); ok {
				e.Field, e.Message = field, msg
			}
		}
		return mesh.Default(), []*config.Error{e}, nil, nil
	}
	return m, nil, m.Warnings(file), nil
}

// snapshotWarnings are the warnings the server gives about the accepted objects taken together, with the
// same messages: those that need only the files (not Secrets, the mesh config or connected proxies).
func snapshotWarnings(ps *model.PushContext) []*config.Error {
	var out []*config.Error
	out = append(out, ps.VirtualServiceProblems()...)
	out = append(out, ps.DNSRoundRobinProblems()...)
	out = append(out, ps.DynamicDNSProblems()...)
	out = append(out, ps.ServiceHostProblems()...)
	out = append(out, ps.IngressProblems()...)
	return out
}

// counted is "1 object", "2 objects".
func counted(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// exitStatus ends the command with that status and no further message: the command has printed why.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }
