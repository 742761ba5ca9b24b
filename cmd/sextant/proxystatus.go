package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sextantmesh/sextant/pilot/debug"
)

// client talks to a running server's debug endpoints.
type client struct {
	server string
	// token or tokenFile is a service-account token sent as "Authorization: Bearer TOKEN": the server
	// answers /debug only to loopback callers or callers with a token (pilot/debug/access.go).
	token, tokenFile string
	http             *http.Client
}

// clientFlags adds --server, --token, --token-file and -o to cmd.
func clientFlags(cmd *cobra.Command, c *client, output *string) {
	cmd.Flags().StringVar(&c.server, "server", "http://localhost:15014", "the server's HTTP address")
	cmd.Flags().StringVar(&c.token, "token", "", "a service-account token to send as a Bearer token (needed off loopback; "+
		"a token of an admin namespace reads every view, another namespace's only its proxies' config_dump)")
	cmd.Flags().StringVar(&c.tokenFile, "token-file", "", "read the token from this file at each request (e.g. a projected "+
		"service-account token, which is rotated)")
	cmd.MarkFlagsMutuallyExclusive("token", "token-file")
	cmd.Flags().StringVarP(output, "output", "o", "table", "output format: table or json")
}

// bearer returns the token to send, "" for none.
func (c *client) bearer() (string, error) {
	if c.tokenFile == "" {
		return strings.TrimSpace(c.token), nil
	}
	b, err := os.ReadFile(c.tokenFile)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", fmt.Errorf("--token-file %s is empty", c.tokenFile)
	}
	return token, nil
}

func checkOutput(output string) error {
	if output != "table" && output != "json" {
		return fmt.Errorf("--output %q: want table or json", output)
	}
	return nil
}

// errNotFound is a 404 from the server.
type errNotFound struct{ msg string }

func (e errNotFound) Error() string { return e.msg }

// get fetches path with query and decodes the JSON answer into v. It returns the raw body too.
func (c *client) get(path string, query url.Values, v any) ([]byte, error) {
	body, _, err := c.fetch(path, query, v)
	return body, err
}

// fetch is get, with the answer's headers (a paged view says there where its next page starts).
func (c *client) fetch(path string, query url.Values, v any) ([]byte, http.Header, error) {
	if c.http == nil {
		c.http = &http.Client{Timeout: 10 * time.Second}
	}
	u := strings.TrimSuffix(c.server, "/") + path
	if !strings.Contains(c.server, "://") {
		u = "http://" + u
	}
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return nil, nil, err
	}
	token, err := c.bearer()
	if err != nil {
		return nil, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot reach the server (--server %s): %w", c.server, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		msg := strings.TrimSpace(string(body))
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		if resp.StatusCode == http.StatusNotFound {
			return body, resp.Header, errNotFound{msg}
		}
		if resp.StatusCode == http.StatusUnauthorized && token == "" {
			msg += " (give --token or --token-file)"
		}
		return body, resp.Header, fmt.Errorf("%s: %s: %s", path, resp.Status, msg)
	}
	if v != nil {
		if err := json.Unmarshal(body, v); err != nil {
			return body, resp.Header, fmt.Errorf("%s: %w", path, err)
		}
	}
	return body, resp.Header, nil
}

func writeRaw(out io.Writer, body []byte) error {
	_, err := out.Write(body)
	return err
}

// statusTypes are proxy-status's columns; WDS is ztunnel's istio.workload.Address. RDS covers VHDS too.
var statusTypes = []string{"cds", "lds", "eds", "rds", "wds"}

// statusRank orders statuses from best to worst.
var statusRank = map[string]int{debug.Synced: 0, debug.NotSent: 1, debug.Stale: 2, debug.Error: 3}

func proxyStatusCommand() *cobra.Command {
	var c client
	var output string
	cmd := &cobra.Command{
		Use:   "proxy-status [PROXY_ID]",
		Short: "Show whether each connected proxy has ACKed the latest config, per type",
		Long: `For each connected proxy (or only PROXY_ID, POD.NAMESPACE), show per type whether the latest response
is SYNCED (ACKed), STALE (sent, not ACKed yet), NOT SENT, or ERROR (NACKed; the reason follows).
WDS is ztunnel's workload type (istio.workload.Address). RDS includes the virtual hosts a sidecar gets over
VHDS: the worse of the two is shown. Below the table, a proxy served otherwise than its version would have
it says so and why (a sidecar that rejected VHDS gets its virtual hosts inside its route configurations).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			sync, body, err := getAll[debug.ProxySync](&c, "/debug/syncz", nil)
			if err != nil {
				return err
			}
			if len(args) == 1 {
				var only []debug.ProxySync
				for _, p := range sync {
					if p.ID == args[0] || p.NodeID == args[0] || p.Connection == args[0] {
						only = append(only, p)
					}
				}
				if len(only) == 0 {
					return fmt.Errorf("no connected proxy %s", args[0])
				}
				sync = only
				if body, err = json.MarshalIndent(sync, "", "  "); err != nil {
					return err
				}
				body = append(body, '\n')
			}
			if output == "json" {
				return writeRaw(cmd.OutOrStdout(), body)
			}
			return proxyStatusTable(cmd.OutOrStdout(), sync)
		},
	}
	clientFlags(cmd, &c, &output)
	return cmd
}

func proxyStatusTable(out io.Writer, sync []debug.ProxySync) error {
	tw := tabwriter.NewWriter(out, 0, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTYPE\tCDS\tLDS\tEDS\tRDS\tWDS")
	for _, p := range sync {
		byType := map[string]debug.TypeSync{}
		for _, t := range p.Types {
			byType[t.Type] = t
		}
		cells := []string{p.ID, p.Type}
		for _, typ := range statusTypes {
			t, ok := byType[typ]
			if v, vok := byType["vhds"]; typ == "rds" && vok && (!ok || statusRank[v.Status] > statusRank[t.Status]) {
				// A sidecar's virtual hosts (VHDS) are part of its routes: the column shows the worse of both.
				t, ok = v, true
			}
			switch {
			case !ok:
				cells = append(cells, debug.NotSent)
			case t.Status == debug.Error:
				cells = append(cells, fmt.Sprintf("ERROR (%s)", t.Error))
			default:
				cells = append(cells, t.Status)
			}
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range sync {
		for _, n := range p.Notes {
			if _, err := fmt.Fprintf(out, "%s: %s\n", p.ID, n); err != nil {
				return err
			}
		}
	}
	return nil
}
