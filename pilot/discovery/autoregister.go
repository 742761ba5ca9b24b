package discovery

import (
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/dynamic"

	"github.com/sextantmesh/sextant/pilot/autoregister"
	"github.com/sextantmesh/sextant/pilot/source/kube"
)

// newAutoRegistration makes the controller that registers VMs whose agent names a WorkloadGroup: their
// WorkloadEntries are written to the cluster when there is one (read back by the Kubernetes source), else
// held in the store's registered layer. Either way the generators see them as any WorkloadEntry.
func (s *Server) newAutoRegistration() (*autoregister.Controller, error) {
	var entries autoregister.Entries = autoregister.NewStoreEntries(s.Store)
	if s.args.Kubeconfig != "" || s.args.InCluster {
		restConfig, err := kube.RESTConfig(s.args.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubernetes: %w", err)
		}
		dc, err := dynamic.NewForConfig(restConfig)
		if err != nil {
			return nil, fmt.Errorf("kubernetes: %w", err)
		}
		entries = autoregister.NewKubeEntries(dc)
	}
	// Each replica controls the entries of the agents connected to it, as istiod names itself by its pod.
	host, _ := os.Hostname()
	return autoregister.New(autoregister.Options{Store: s.Store, Entries: entries, Instance: host + "-" + rand.String(5),
		GracePeriod: s.args.WorkloadEntryGracePeriod, MaxConnectionAge: s.args.MaxConnectionAge, Logger: s.log}), nil
}
