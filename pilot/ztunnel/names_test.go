package ztunnel

import (
	"testing"

	"github.com/sextantmesh/sextant/api/workload"
	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/model"
)

func TestWorkloadNameAndType(t *testing.T) {
	for _, tc := range []struct {
		pod, name string
		typ       workload.WorkloadType
	}{
		{"reviews-v1-545db77b95-2xbcz", "reviews-v1", workload.WorkloadType_DEPLOYMENT},
		{"fluentd-7xk2p", "fluentd", workload.WorkloadType_POD},            // DaemonSet
		{"backup-29012345-b7x4z", "backup", workload.WorkloadType_CRONJOB}, // CronJob's Job's pod
		{"web-0", "web-0", workload.WorkloadType_POD},                      // StatefulSet
		{"my-app-proxy", "my-app-proxy", workload.WorkloadType_POD},        // words have vowels
		{"sleep", "sleep", workload.WorkloadType_POD},
	} {
		w := &model.Workload{Name: tc.pod, Source: config.Key{Kind: config.Pod, Namespace: "ns", Name: tc.pod}}
		if name, typ := workloadNameAndType(w); name != tc.name || typ != tc.typ {
			t.Errorf("%s: got %s %v, want %s %v", tc.pod, name, typ, tc.name, tc.typ)
		}
	}
	we := &model.Workload{Name: "vm-1", Source: config.Key{Kind: config.WorkloadEntry, Namespace: "ns", Name: "vm-1"}}
	if name, typ := workloadNameAndType(we); name != "vm-1" || typ != workload.WorkloadType_POD {
		t.Errorf("WorkloadEntry: %s %v", name, typ)
	}
}

func TestAddressNames(t *testing.T) {
	for name, want := range map[string]bool{
		"/10.1.0.5": true, "net1/fd00::1": true, "Kubernetes//Pod/ns/p": false, "ns/reviews.ns.svc.cluster.local": false,
		"ns/10.0.0.1.example.com": false, "a/b/10.0.0.1": false,
	} {
		if got := isAddressName(name); got != want {
			t.Errorf("isAddressName(%q) = %v", name, got)
		}
	}
}
