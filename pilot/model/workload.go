package model

import (
	"slices"

	networking "istio.io/api/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"

	"github.com/sextantmesh/sextant/pilot/config"
)

// Workload is a pod or a WorkloadEntry: something with an address that can serve traffic.
type Workload struct {
	// UID is CLUSTER//Pod/NAMESPACE/NAME or CLUSTER/networking.istio.io/WorkloadEntry/NAMESPACE/NAME,
	// the form ztunnel expects.
	UID            string
	Source         config.Key
	Name           string
	Namespace      string
	Addresses      []string
	Labels         map[string]string
	Annotations    map[string]string
	ServiceAccount string
	NodeName       string
	Locality       string
	Network        string
	Ready          bool
	TLSMode        string
	HostNetwork    bool
	// ContainerPorts maps a named container port to its number, for Services that target ports by name.
	ContainerPorts map[string]uint32
}

// WorkloadUID returns the uid ztunnel expects for a pod or WorkloadEntry.
func WorkloadUID(cluster string, k config.Key) string {
	if k.Kind == config.Pod {
		return cluster + "//Pod/" + k.Namespace + "/" + k.Name
	}
	return cluster + "/networking.istio.io/WorkloadEntry/" + k.Namespace + "/" + k.Name
}

// workloadFromConfig converts a pod (nil when it has no IP yet) or a WorkloadEntry.
func workloadFromConfig(c *config.Config, r *resolver) *Workload {
	m := r.m
	switch s := c.Spec.(type) {
	case *corev1.Pod:
		if s.Status.PodIP == "" {
			return nil
		}
		w := &Workload{
			UID:            WorkloadUID(m.ClusterID, c.Key),
			Source:         c.Key,
			Name:           c.Name,
			Namespace:      c.Namespace,
			Labels:         s.Labels,
			Annotations:    s.Annotations,
			ServiceAccount: s.Spec.ServiceAccountName,
			NodeName:       s.Spec.NodeName,
			Locality:       r.podLocality(s),
			Network:        networkOf(s.Labels, "", m),
			Ready:          podHealth(s) == Healthy,
			TLSMode:        tlsMode(s.Labels),
			HostNetwork:    s.Spec.HostNetwork,
		}
		for _, ip := range s.Status.PodIPs {
			w.Addresses = append(w.Addresses, ip.IP)
		}
		if len(w.Addresses) == 0 {
			w.Addresses = []string{s.Status.PodIP}
		}
		for _, ctr := range s.Spec.Containers {
			for _, p := range ctr.Ports {
				if p.Name != "" {
					if w.ContainerPorts == nil {
						w.ContainerPorts = map[string]uint32{}
					}
					w.ContainerPorts[p.Name] = uint32(p.ContainerPort)
				}
			}
		}
		if w.ServiceAccount == "" {
			w.ServiceAccount = "default"
		}
		return w
	case *networking.WorkloadEntry:
		labels := workloadEntryLabels(c, s)
		w := &Workload{
			UID:            WorkloadUID(m.ClusterID, c.Key),
			Source:         c.Key,
			Name:           c.Name,
			Namespace:      c.Namespace,
			Labels:         labels,
			Annotations:    c.Annotations,
			ServiceAccount: s.ServiceAccount,
			Network:        networkOf(labels, s.Network, m),
			Ready:          true,
			TLSMode:        workloadEntryTLSMode(s, labels),
			ContainerPorts: s.Ports,
			Locality:       workloadEntryLocality(s, labels),
		}
		if s.Address != "" {
			w.Addresses = []string{s.Address}
		}
		if w.ServiceAccount == "" {
			w.ServiceAccount = "default"
		}
		return w
	}
	return nil
}

// addressKey is NETWORK/IP, the name of an on-demand address lookup.
func addressKey(network, ip string) string { return network + "/" + ip }

func insertSorted(list []string, v string) []string {
	i, found := slices.BinarySearch(list, v)
	if found {
		return list
	}
	out := make([]string, 0, len(list)+1)
	out = append(out, list[:i]...)
	out = append(out, v)
	return append(out, list[i:]...)
}

func removeSorted(list []string, v string) []string {
	i, found := slices.BinarySearch(list, v)
	if !found {
		return list
	}
	out := make([]string, 0, len(list)-1)
	out = append(out, list[:i]...)
	return append(out, list[i+1:]...)
}
