package main

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/debug"
)

func waitCommand() *cobra.Command {
	var c client
	var forWhat, namespace string
	var threshold float64
	var timeout, interval time.Duration
	var generation int64
	cmd := &cobra.Command{
		Use:   "wait --for distribution|delete KIND NAME[.NAMESPACE]",
		Short: "Wait until the proxies that depend on a config object run it (or its deletion)",
		Long: `Wait until at least --threshold of the connected proxies that depend on the object have ACKed config
containing its current generation (--for distribution), or until the object is gone and they have ACKed
that (--for delete). Exits 0 when done; non-zero on timeout or as soon as a relevant proxy NACKs.
Which proxies depend on an object is described in docs/metrics.md (distribution tracking).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if forWhat != "distribution" && forWhat != "delete" {
				return fmt.Errorf("--for %q: want distribution or delete", forWhat)
			}
			if threshold <= 0 || threshold > 1 {
				return fmt.Errorf("--threshold %v: want a fraction in (0, 1]", threshold)
			}
			key, err := objectKey(args[0], args[1], namespace)
			if err != nil {
				return err
			}
			q := url.Values{"kind": {string(key.Kind)}, "name": {key.Name}, "namespace": {key.Namespace}}
			deadline := time.Now().Add(timeout)
			var last string
			for {
				var dist debug.Distribution
				_, err := c.get("/debug/distribution", q, &dist)
				var nf errNotFound
				switch {
				case errors.As(err, &nf):
					if forWhat == "delete" {
						fmt.Fprintf(cmd.OutOrStdout(), "%s is gone\n", key)
						return nil
					}
					last = key.String() + " does not exist yet"
				case err != nil:
					return err
				default:
					done, msg, err := judge(forWhat, key, dist, threshold, generation)
					if err != nil {
						return err
					}
					if done {
						fmt.Fprintln(cmd.OutOrStdout(), msg)
						return nil
					}
					last = msg
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("timed out after %v waiting for %s of %s: %s", timeout, forWhat, key, last)
				}
				time.Sleep(interval)
			}
		},
	}
	clientFlags(cmd, &c, new(string))
	_ = cmd.Flags().MarkHidden("output")
	cmd.Flags().StringVar(&forWhat, "for", "distribution", "distribution or delete")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", "namespace (else from NAME.NAMESPACE, else default)")
	cmd.Flags().Float64Var(&threshold, "threshold", 1, "fraction of relevant proxies that must have ACKed")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "give up after this long")
	cmd.Flags().Int64Var(&generation, "generation", 0, "wait for at least this generation of the object (0: the current one)")
	cmd.Flags().DurationVar(&interval, "interval", 100*time.Millisecond, "how often to ask the server")
	_ = cmd.Flags().MarkHidden("interval")
	return cmd
}

// judge decides whether the wait is over. An error means it never will be (a proxy NACKed).
func judge(forWhat string, key config.Key, d debug.Distribution, threshold float64, generation int64) (bool, string, error) {
	if forWhat == "distribution" && !d.Exists {
		return false, key.String() + " is deleted; waiting for it to exist", nil
	}
	if forWhat == "delete" && d.Exists {
		return false, key.String() + " still exists", nil
	}
	if generation > 0 && d.Generation < generation {
		return false, fmt.Sprintf("generation %d is current, waiting for %d", d.Generation, generation), nil
	}
	if d.SnapshotVersion == 0 {
		return false, "the change is not in a snapshot yet", nil
	}
	what := fmt.Sprintf("generation %d of %s", d.Generation, key)
	if forWhat == "delete" {
		what = "the deletion of " + key.String()
	}
	if d.NACKed > 0 {
		var rejected []string
		for _, p := range d.Proxies {
			if p.State == debug.NACKed {
				rejected = append(rejected, fmt.Sprintf("%s (%s)", p.ID, p.Reason))
			}
		}
		return false, "", fmt.Errorf("%d of %d proxies rejected %s: %s", d.NACKed, d.Acked+d.Pending+d.NACKed, what, strings.Join(rejected, "; "))
	}
	// The counts cover every relevant proxy; Proxies is only the first page of them.
	total := d.Acked + d.Pending + d.NACKed
	if total == 0 || float64(d.Acked)/float64(total) >= threshold {
		return true, fmt.Sprintf("%s: %d of %d proxies ACKed (snapshot v%d)", what, d.Acked, total, d.SnapshotVersion), nil
	}
	var pending []string
	for _, p := range d.Proxies {
		if p.State == debug.Pending {
			pending = append(pending, p.ID)
		}
	}
	return false, fmt.Sprintf("%d of %d proxies ACKed %s; pending: %s", d.Acked, total, what, strings.Join(pending, ", ")), nil
}

// objectKey resolves KIND and NAME[.NAMESPACE] (the namespace after the last dot).
func objectKey(kind, name, namespace string) (config.Key, error) {
	var ki config.KindInfo
	found := false
	for _, k := range config.Kinds() {
		if strings.EqualFold(string(k.Kind), kind) || strings.EqualFold(k.Plural, kind) {
			ki, found = k, true
		}
	}
	if !found {
		var names []string
		for _, k := range config.Kinds() {
			names = append(names, string(k.Kind))
		}
		return config.Key{}, fmt.Errorf("unknown kind %q: want one of %s", kind, strings.Join(names, ", "))
	}
	key := config.Key{Kind: ki.Kind, Name: name}
	if !ki.Namespaced {
		return key, nil
	}
	if namespace == "" {
		if i := strings.LastIndexByte(name, '.'); i > 0 && i < len(name)-1 {
			key.Name, namespace = name[:i], name[i+1:]
		} else {
			namespace = "default"
		}
	}
	key.Namespace = namespace
	return key, nil
}
