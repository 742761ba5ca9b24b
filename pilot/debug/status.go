package debug

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/sextantmesh/sextant/pilot/config"
)

// PushStatus is /debug/push_status. Rejected and Warnings are pages (?offset=&limit=, applied to both),
// RejectedPage and WarningsPage say which: the dashboard polls this view, so it stays small whatever the
// config.
type PushStatus struct {
	Version       uint64          `json:"version"`
	BuiltAt       time.Time       `json:"builtAt"`
	BuildSeconds  float64         `json:"buildSeconds"`
	Rebuilt       []string        `json:"rebuilt"`
	Services      int             `json:"services"`
	Endpoints     int             `json:"endpoints"`
	Workloads     int             `json:"workloads"`
	ConfigObjects map[string]int  `json:"configObjects"`
	Pipeline      map[string]any  `json:"pipeline"`
	Connected     int             `json:"connectedProxies"`
	Rejected      []*config.Error `json:"rejected"`
	RejectedPage  Page            `json:"rejectedPage"`
	Warnings      []*config.Error `json:"warnings"` // fields accepted but not implemented
	WarningsPage  Page            `json:"warningsPage"`
	// EndpointsWaitingForPods counts pods whose endpoints are held back until the pod has an IP
	// (/debug/endpointz names them).
	EndpointsWaitingForPods int `json:"endpointsWaitingForPods"`
}

// statusListBytes bounds each of push_status's two lists, leaving room for the rest of the view.
const statusListBytes = (MaxResponseBytes - 64<<10) / 2

func (d *Debug) handlePushStatus(w http.ResponseWriter, r *http.Request) {
	q, err := parsePage(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ps := d.current(w)
	if ps == nil {
		return
	}
	st := d.src.Pipeline.Stats()
	out := PushStatus{Version: ps.Version, BuiltAt: ps.BuiltAt, BuildSeconds: ps.BuildDuration.Seconds(),
		Rebuilt: append([]string{}, ps.Rebuilt...), Services: ps.ServiceCount(), Endpoints: ps.EndpointCount(),
		EndpointsWaitingForPods: ps.EndpointsWaitingForPods(), Workloads: ps.WorkloadCount(), ConfigObjects: map[string]int{},
		Pipeline: map[string]any{"builds": st.Builds, "fullPushes": st.FullPushes, "incrementalPushes": st.Incremental,
			"mergedEvents": st.MergedEvents, "lastBuildSeconds": st.LastBuild.Seconds()},
		Connected: d.src.XDS.Counters().Connected}
	out.Rejected, out.RejectedPage = errorPage(q, d.rejected())
	out.Warnings, out.WarningsPage = errorPage(q, d.warnings())
	slices.Sort(out.Rebuilt)
	for _, ki := range config.Kinds() {
		if n := d.src.Store.Count(ki.Kind); n > 0 {
			out.ConfigObjects[string(ki.Kind)] = n
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// errorPage returns the page of errs q asks for, each bounded, never nil.
func errorPage(q pageQuery, errs []*config.Error) ([]*config.Error, Page) {
	out := []*config.Error{}
	_, p := q.take(len(errs), statusListBytes, func(i int) int {
		e := boundError(errs[i])
		out = append(out, e)
		return encodedSize(e, 2)
	})
	return out[:p.Returned], p
}

// boundError returns e with its text clipped (a copy when any is cut: sources share their errors).
func boundError(e *config.Error) *config.Error {
	c := *e
	for _, s := range []*string{&c.File, &c.Kind, &c.Namespace, &c.Name, &c.Field, &c.Message} {
		*s = clip(*s)
	}
	if c == *e {
		return e
	}
	return &c
}

func (d *Debug) rejected() []*config.Error {
	out := slices.Clone(d.src.Rejected())
	if out == nil {
		out = []*config.Error{}
	}
	sortErrors(out)
	return out
}

func compareErrors(a, b *config.Error) int {
	if c := strings.Compare(a.File, b.File); c != 0 {
		return c
	}
	if a.Index != b.Index {
		return a.Index - b.Index
	}
	return strings.Compare(a.Kind+"/"+a.Namespace+"/"+a.Name, b.Kind+"/"+b.Namespace+"/"+b.Name)
}

// sortErrors sorts errors for stable pages; sources mostly hand them over sorted, and a million errors
// checked in order cost far less than sorted again on every poll.
func sortErrors(out []*config.Error) {
	if !slices.IsSortedFunc(out, compareErrors) {
		slices.SortStableFunc(out, compareErrors)
	}
}

// warnings returns the accepted-but-unimplemented fields, sorted as rejected sorts, never nil.
func (d *Debug) warnings() []*config.Error {
	out := []*config.Error{}
	if d.src.Warnings != nil {
		out = append(out, d.src.Warnings()...)
	}
	sortErrors(out)
	return out
}

type configError struct {
	*config.Error
	Text string `json:"error"`
}

// handleConfigErrors lists rejected config, then warnings, so a client reading only the first page still
// sees what was rejected. A JSON array, paged (see writeList).
func (d *Debug) handleConfigErrors(w http.ResponseWriter, r *http.Request) {
	rejected, warnings := d.rejected(), d.warnings()
	writeList(w, r, len(rejected)+len(warnings), func(i int) configError {
		var e *config.Error
		if i < len(rejected) {
			e = rejected[i]
		} else {
			e = warnings[i-len(rejected)]
		}
		e = boundError(e)
		return configError{Error: e, Text: e.Error()}
	})
}
