package config

import (
	"google.golang.org/protobuf/encoding/protojson"
	istiometa "istio.io/api/meta/v1alpha1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	sigsjson "sigs.k8s.io/json"
)

// HasConditions reports whether the kind's status conditions are kept in Config.Conditions: only where
// serving depends on them (a health-checked WorkloadEntry is served once Healthy), so the rest pay nothing.
func HasConditions(k Kind) bool { return k == WorkloadEntry }

// IstioConditions returns an Istio status's conditions, type → status ("True", "False", "Unknown"); nil when
// it has none.
func IstioConditions(s *istiometa.IstioStatus) map[string]string {
	if len(s.GetConditions()) == 0 {
		return nil
	}
	out := make(map[string]string, len(s.GetConditions()))
	for _, c := range s.GetConditions() {
		if _, seen := out[c.GetType()]; !seen { // the first of a type counts, as in istiod
			out[c.GetType()] = c.GetStatus()
		}
	}
	return out
}

// UnstructuredIstioStatus reads the type and status of the conditions of an object's status as the API
// server holds it, leniently: an entry that is not a condition is skipped.
func UnstructuredIstioStatus(obj map[string]any) *istiometa.IstioStatus {
	list, _, _ := unstructured.NestedSlice(obj, "status", "conditions")
	out := &istiometa.IstioStatus{}
	for _, c := range list {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		t, _ := m["type"].(string)
		s, _ := m["status"].(string)
		out.Conditions = append(out.Conditions, &istiometa.IstioCondition{Type: t, Status: s})
	}
	return out
}

// istioStatus is the status member of a JSON document, nil without one.
func istioStatus(js []byte) []byte {
	var d struct {
		Status jsonRaw `json:"status"`
	}
	if sigsjson.UnmarshalCaseSensitivePreserveInts(js, &d) != nil {
		return nil
	}
	return d.Status
}

// parseIstioConditions reads the conditions of a document's status; a status that does not parse has none
// (status is written by controllers, not users, and is never refused).
func parseIstioConditions(status []byte) map[string]string {
	if len(status) == 0 {
		return nil
	}
	s := &istiometa.IstioStatus{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(status, s); err != nil {
		return nil
	}
	return IstioConditions(s)
}
