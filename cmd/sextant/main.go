// Command sextant is the Sextant control plane and its operator CLI.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	root := &cobra.Command{
		Use:           "sextant",
		Short:         "Sextant: an xDS control plane for Envoy, ztunnel and proxyless gRPC",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(discoveryCommand(), translateCommand(), proxyStatusCommand(), waitCommand(), configDumpCommand(),
		validateCommand(), versionCommand())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "sextant", version)
		},
	}
}
