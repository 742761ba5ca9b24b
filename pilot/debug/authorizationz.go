package debug

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	security "istio.io/api/security/v1beta1"

	"github.com/sextantmesh/sextant/pilot/config"
)

type policyEntry struct {
	Name   string          `json:"name"`
	Action string          `json:"action"`
	Source string          `json:"source"`
	Spec   json.RawMessage `json:"spec"`
}

type namespacePolicies struct {
	Namespace string        `json:"namespace"`
	MeshWide  bool          `json:"meshWide"`
	Policies  []policyEntry `json:"policies"`
}

// policyRow is one policy of the view, or a namespace without any (c nil).
type policyRow struct {
	ns string
	c  *config.Config
}

// handleAuthorizationz pages over policies, grouped by namespace: a namespace split between pages is
// listed on each with its part. A JSON array, the page in headers (see writeList).
func (d *Debug) handleAuthorizationz(w http.ResponseWriter, r *http.Request) {
	q, err := parsePage(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ps := d.current(w)
	if ps == nil {
		return
	}
	var namespaces []string
	for _, c := range d.src.Store.List(config.AuthorizationPolicy) {
		namespaces = append(namespaces, c.Namespace)
	}
	slices.Sort(namespaces)
	namespaces = slices.Compact(namespaces)
	var rows []policyRow
	for _, ns := range namespaces {
		policies := slices.Clone(ps.AuthorizationPoliciesInNamespace(ns))
		slices.SortFunc(policies, func(a, b *config.Config) int { return strings.Compare(a.Name, b.Name) })
		if len(policies) == 0 {
			rows = append(rows, policyRow{ns: ns})
		}
		for _, c := range policies {
			rows = append(rows, policyRow{ns: ns, c: c})
		}
	}
	out := []namespacePolicies{}
	var opened []bool // whether row i opened a namespace entry
	_, p := q.take(len(rows), MaxResponseBytes-64<<10, func(i int) int {
		row, size := rows[i], 0
		if len(out) == 0 || out[len(out)-1].Namespace != row.ns {
			np := namespacePolicies{Namespace: clip(row.ns), MeshWide: row.ns == ps.Mesh.RootNamespace, Policies: []policyEntry{}}
			out = append(out, np)
			size += encodedSize(np, 1)
		}
		opened = append(opened, size > 0)
		if row.c != nil {
			pe := policyOf(row.c)
			out[len(out)-1].Policies = append(out[len(out)-1].Policies, pe)
			size += encodedSize(pe, 3)
		}
		return size
	})
	if n := p.Returned; n < len(opened) { // the last row measured did not fit
		if opened[n] {
			out = out[:len(out)-1]
		} else {
			last := &out[len(out)-1]
			last.Policies = last.Policies[:len(last.Policies)-1]
		}
	}
	setPageHeaders(w, r, p)
	writeJSON(w, http.StatusOK, out)
}

// policyOf renders one policy; a spec larger than MaxItemBytes is replaced by a note of its size.
func policyOf(c *config.Config) policyEntry {
	pe := policyEntry{Name: clip(c.Name), Source: clip(c.Source), Spec: json.RawMessage("{}")}
	if m, ok := c.Spec.(*security.AuthorizationPolicy); ok {
		pe.Action = m.GetAction().String()
		if b, err := (protojson.MarshalOptions{}).Marshal(m); err == nil {
			pe.Spec = compactJSON(b)
		}
	}
	if len(pe.Spec) > MaxItemBytes {
		pe.Spec, _ = json.Marshal(map[string]string{"truncated": fmt.Sprintf("a spec of %d bytes, more than %d", len(pe.Spec), MaxItemBytes)})
	}
	return pe
}
