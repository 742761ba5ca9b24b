package discovery

import (
	"context"
	"fmt"
	"time"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/source/kube"
)

// startKube starts the Kubernetes source when asked for, and waits until every informer has synced:
// the first snapshot must not be published from a half-listed cluster.
func (s *Server) startKube(ctx context.Context) error {
	if s.args.Kubeconfig == "" && !s.args.InCluster {
		return nil
	}
	restConfig, err := kube.RESTConfig(s.args.Kubeconfig)
	if err != nil {
		return fmt.Errorf("kubernetes: %w", err)
	}
	src, err := kube.NewFromConfig(restConfig, kube.Options{Store: s.Store, Logger: s.log, DiscoverySelectors: s.Mesh.DiscoverySelectors})
	if err != nil {
		return fmt.Errorf("kubernetes: %w", err)
	}
	s.kube = src
	s.wg.Add(1)
	go func() { defer s.wg.Done(); src.Run(ctx) }()
	start := time.Now()
	if err := src.WaitForSync(ctx); err != nil {
		return fmt.Errorf("kubernetes: waiting for informers to sync: %w", err)
	}
	s.log.Info("kubernetes informers synced", "after", time.Since(start).Round(time.Millisecond))
	return nil
}

func (s *Server) kubeRejected() []*config.Error {
	if s.kube == nil {
		return nil
	}
	var out []*config.Error
	for _, r := range s.kube.Rejected() {
		msg := r.Message
		if r.ResourceVersion != "" {
			// Tells the rejected version from the last good one still served.
			msg += " (resourceVersion " + r.ResourceVersion + ")"
		}
		out = append(out, &config.Error{File: "kube", Kind: string(r.Kind), Namespace: r.Namespace, Name: r.Name, Field: r.Field, Message: msg})
	}
	return out
}
