// Command sextant is the Sextant control plane and its operator CLI.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/sextantmesh/sextant/pkg/buildinfo"
)

// readBuildInfo is what version reports; tests feed it a fixed build.
var readBuildInfo = buildinfo.Read

func main() {
	root := &cobra.Command{
		Use:           "sextant",
		Short:         "Sextant: an xDS control plane for Envoy, ztunnel and proxyless gRPC",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(discoveryCommand(), translateCommand(), proxyStatusCommand(), waitCommand(), configDumpCommand(),
		validateCommand(), versionCommand(), demoProxyCommand())
	os.Exit(exitCode(root.Execute(), os.Stderr))
}

// exitCode prints err, unless the command has said why it failed (exitStatus), and returns the status.
func exitCode(err error, stderr io.Writer) int {
	var status exitStatus
	switch {
	case err == nil:
		return 0
	case errors.As(err, &status):
		return int(status)
	}
	fmt.Fprintln(stderr, "error:", err)
	return 1
}

func versionCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version and the commit the binary was built from",
		Long: `Print the module version and the git commit (with its time, and "modified" when the checkout had
uncommitted changes) that go build recorded in the binary. -o json prints what the server's /version answers.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			info := readBuildInfo()
			if output == "json" {
				b, err := json.MarshalIndent(info, "", "  ")
				if err != nil {
					return err
				}
				_, err = fmt.Fprintln(cmd.OutOrStdout(), string(b))
				return err
			}
			_, err := fmt.Fprintln(cmd.OutOrStdout(), "sextant", info)
			return err
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table (one line) or json")
	return cmd
}
