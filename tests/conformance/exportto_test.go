package conformance

import (
	"fmt"
	"testing"

	networking "istio.io/api/networking/v1alpha3"
	"istio.io/api/type/v1beta1"
	"istio.io/istio/pkg/config"
	"istio.io/istio/pkg/config/validation"

	sconfig "github.com/sextantmesh/sextant/pilot/config"
)

// TestExportToValidationAsIstio: for every exportTo list here, on a VirtualService, a DestinationRule (with
// and without a workloadSelector) and a ServiceEntry, Sextant refuses the object exactly when Istio's own
// validation (the webhook's, istio.io/istio/pkg/config/validation) does.
func TestExportToValidationAsIstio(t *testing.T) {
	const ns = "shop"
	lists := [][]string{
		nil, {"."}, {"*"}, {"~"}, {ns}, {".", "team-b"}, {ns, "."}, {"team-b", "team-b"}, {"*", "team-b"},
		{"~", "team-b"}, {"~", "*"}, {"Team_B"}, {".", ns}, {"team-b"},
	}
	type kind struct {
		name     string
		sextant  sconfig.Kind
		spec     func(exportTo []string) any
		validate validation.ValidateFunc
	}
	kinds := []kind{
		{"VirtualService", sconfig.VirtualService, func(e []string) any {
			return &networking.VirtualService{Hosts: []string{"reviews"}, ExportTo: e, Http: []*networking.HTTPRoute{{
				Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "reviews"}}}}}}
		}, validation.ValidateVirtualService},
		{"DestinationRule", sconfig.DestinationRule, func(e []string) any {
			return &networking.DestinationRule{Host: "reviews", ExportTo: e}
		}, validation.ValidateDestinationRule},
		{"DestinationRule with a workloadSelector", sconfig.DestinationRule, func(e []string) any {
			return &networking.DestinationRule{Host: "reviews", ExportTo: e,
				WorkloadSelector: &v1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "a"}}}
		}, validation.ValidateDestinationRule},
		{"ServiceEntry", sconfig.ServiceEntry, func(e []string) any {
			return &networking.ServiceEntry{Hosts: []string{"api.example.com"}, ExportTo: e, Location: networking.ServiceEntry_MESH_EXTERNAL,
				Resolution: networking.ServiceEntry_DNS, Ports: []*networking.ServicePort{{Number: 443, Name: "tls", Protocol: "TLS"}}}
		}, validation.ValidateServiceEntry},
	}
	for _, k := range kinds {
		for _, list := range lists {
			spec := k.spec(list)
			_, istioErr := k.validate(config.Config{Meta: config.Meta{Name: "x", Namespace: ns}, Spec: spec.(config.Spec)})
			sextantErr := sconfig.Validate(&sconfig.Config{Key: sconfig.Key{Kind: k.sextant, Namespace: ns, Name: "x"}, Spec: spec})
			if (istioErr != nil) != (sextantErr != nil) {
				t.Errorf("%s with exportTo %s: Istio's validation says %v, Sextant's %v", k.name, fmt.Sprintf("%q", list), istioErr, sextantErr)
			}
		}
	}
}
