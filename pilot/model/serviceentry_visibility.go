package model

import (
	"fmt"
	"slices"

	meshconfig "istio.io/api/mesh/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/mesh"
)

// capServiceEntryExportTo narrows a ServiceEntry's exportTo by the mesh config's serviceEntryVisibility
// when it applies to sidecars, as istiod does: NAMESPACE keeps the entry in its own namespace (if it was
// exported there at all), NONE hides it. It never widens; nsLabels are the entry's namespace's labels.
func capServiceEntryExportTo(m *mesh.Config, ns string, nsLabels map[string]string, exportTo []string) []string {
	sev := m.Spec.GetServiceEntryVisibility()
	if !sev.GetApplyToSidecars() {
		return exportTo
	}
	switch serviceEntryVisibility(sev, nsLabels) {
	case meshconfig.ServiceEntryVisibility_NAMESPACE:
		if slices.Contains(exportTo, "*") || slices.Contains(exportTo, ns) {
			return []string{ns}
		}
		return []string{}
	case meshconfig.ServiceEntryVisibility_NONE:
		return []string{}
	}
	return exportTo
}

// serviceEntryVisibility is the visibility of the first policy whose rules all match the namespace's
// labels, else the default.
func serviceEntryVisibility(sev *meshconfig.ServiceEntryVisibility,
	nsLabels map[string]string) meshconfig.ServiceEntryVisibility_Visibility {
	set := labels.Set(nsLabels)
	for _, p := range sev.GetPolicies() {
		if visibilityPolicyMatches(p, set) {
			return p.GetVisibility()
		}
	}
	return sev.GetDefaultVisibility()
}

// visibilityPolicyMatches: a rule with no matcher, or a selector that does not parse, never matches, so
// a malformed rule keeps its policy from applying (istiod's choice).
func visibilityPolicyMatches(p *meshconfig.ServiceEntryVisibility_Policy, set labels.Set) bool {
	for _, r := range p.GetMatchingRules() {
		ps := r.GetNamespaceSelector()
		if ps == nil {
			return false
		}
		sel, err := meshLabelSelector(ps)
		if err != nil || !sel.Matches(set) {
			return false
		}
	}
	return true
}

// meshLabelSelector converts the mesh config's label selector as istiod does: empty selects everything.
func meshLabelSelector(ps *meshconfig.LabelSelector) (labels.Selector, error) {
	if len(ps.MatchLabels)+len(ps.MatchExpressions) == 0 {
		return labels.Everything(), nil
	}
	reqs := make([]labels.Requirement, 0, len(ps.MatchLabels)+len(ps.MatchExpressions))
	for k, v := range ps.MatchLabels {
		r, err := labels.NewRequirement(k, selection.Equals, []string{v})
		if err != nil {
			return nil, err
		}
		reqs = append(reqs, *r)
	}
	ops := map[metav1.LabelSelectorOperator]selection.Operator{metav1.LabelSelectorOpIn: selection.In,
		metav1.LabelSelectorOpNotIn: selection.NotIn, metav1.LabelSelectorOpExists: selection.Exists,
		metav1.LabelSelectorOpDoesNotExist: selection.DoesNotExist}
	for _, expr := range ps.MatchExpressions {
		op, ok := ops[metav1.LabelSelectorOperator(expr.Operator)]
		if !ok {
			return nil, fmt.Errorf("%q is not a valid label selector operator", expr.Operator)
		}
		r, err := labels.NewRequirement(expr.Key, op, slices.Clone(expr.Values))
		if err != nil {
			return nil, err
		}
		reqs = append(reqs, *r)
	}
	return labels.NewSelector().Add(reqs...), nil
}

// reconvertServiceEntries converts the ServiceEntries of a namespace again when its labels may have
// changed their visibility.
func (u *updater) reconvertServiceEntries(ns string) {
	if !u.m.Spec.GetServiceEntryVisibility().GetApplyToSidecars() {
		return
	}
	for _, c := range u.reader.ListNamespace(config.ServiceEntry, ns) {
		u.serviceChanged(c.Key)
	}
}

// namespace looks up a Namespace object as edited so far.
func (u *updater) namespace(name string) (*config.Config, bool) {
	if u.namespaces != nil {
		return u.namespaces.Get(name)
	}
	return u.prev.namespaces.Get(name)
}
