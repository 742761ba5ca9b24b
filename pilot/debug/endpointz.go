package debug

import (
	"fmt"
	"net/http"
	"slices"

	"github.com/sextantmesh/sextant/pilot/model"
)

type endpointEntry struct {
	Address        string            `json:"address"`
	Port           uint32            `json:"port"`
	Health         string            `json:"health"`
	Weight         uint32            `json:"weight,omitempty"`
	Locality       string            `json:"locality,omitempty"`
	Network        string            `json:"network,omitempty"`
	TLSMode        string            `json:"tlsMode,omitempty"`
	ServiceAccount string            `json:"serviceAccount,omitempty"`
	Workload       string            `json:"workload,omitempty"`
	Labels         map[string]string `json:"labels,omitempty"`
	// Truncated says why labels are left out: the entry would be larger than MaxItemBytes.
	Truncated string `json:"truncated,omitempty"`
}

type portEndpoints struct {
	Port      uint32          `json:"port"`
	Endpoints []endpointEntry `json:"endpoints"`
}

type serviceEndpoints struct {
	Service string          `json:"service"`
	Ports   []portEndpoints `json:"ports"`
	// WaitingForPods are pods (namespace/name) a cluster's EndpointSlice lists whose endpoints are held back
	// until the pod is known with an IP.
	WaitingForPods []string `json:"waitingForPods,omitempty"`
}

// handleEndpointz pages over endpoints, not services (a service may have tens of thousands): a service
// without endpoints counts as one, and a service split between pages is listed on each with its part.
// A JSON array, the page in headers (see writeList).
func (d *Debug) handleEndpointz(w http.ResponseWriter, r *http.Request) {
	q, err := parsePage(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ps := d.current(w)
	if ps == nil {
		return
	}
	only := r.URL.Query().Get("service")
	var services []*model.Service
	for _, s := range ps.AllServices() {
		if only == "" || only == s.Key() {
			services = append(services, s)
		}
	}
	cur := &endpointCursor{ps: ps, services: services}
	total := 0
	for i := range services {
		total += cur.units(i)
	}
	out := []serviceEndpoints{}
	var grown []int // len(out) after each index: the last one measured may not fit the page
	_, p := q.take(total, MaxResponseBytes-64<<10, func(i int) int {
		var n int
		out, n = cur.add(out, i)
		grown = append(grown, len(out))
		return n
	})
	out = trimEndpoints(out, grown, p.Returned)
	setPageHeaders(w, r, p)
	writeJSON(w, http.StatusOK, out)
}

// endpointCursor walks the endpoints of services in order, by global index (only ever forward).
type endpointCursor struct {
	ps       *model.PushContext
	services []*model.Service
	svc      int // the service of the current index
	first    int // the index of its first endpoint
	eps      *model.ServiceEndpoints
	ports    []uint32 // its ports, sorted; nil until loaded
}

// units is how many indexes service i takes: its endpoints, or one when it has none.
func (c *endpointCursor) units(i int) int {
	if eps := c.ps.Endpoints(c.services[i].Key()); eps != nil && eps.Count() > 0 {
		return eps.Count()
	}
	return 1
}

// add appends the endpoint at index i to out, opening its service's entry and port as needed, and says
// about how many bytes that added to the response (an upper bound: the page's budget keeps a margin).
func (c *endpointCursor) add(out []serviceEndpoints, i int) ([]serviceEndpoints, int) {
	size := 0
	for i >= c.first+c.units(c.svc) {
		c.first += c.units(c.svc)
		c.svc, c.ports = c.svc+1, nil
	}
	s := c.services[c.svc]
	if c.ports == nil {
		c.eps, c.ports = c.ps.Endpoints(s.Key()), []uint32{}
		if c.eps != nil {
			for p := range c.eps.ByPort {
				c.ports = append(c.ports, p)
			}
			slices.Sort(c.ports)
		}
	}
	if len(out) == 0 || out[len(out)-1].Service != s.Key() {
		se := serviceEndpoints{Service: s.Key(), Ports: []portEndpoints{}}
		if c.eps != nil && len(c.eps.WaitingForPods) > 0 {
			pods := make([]string, 0, len(c.eps.WaitingForPods))
			for _, pod := range c.eps.WaitingForPods {
				pods = append(pods, s.Namespace+"/"+pod)
			}
			se.WaitingForPods = firstNames(pods)
		}
		out = append(out, se)
		size += encodedSize(se, 1)
	}
	se := &out[len(out)-1]
	k := i - c.first
	for _, port := range c.ports {
		list := c.eps.ByPort[port]
		if k >= len(list) {
			k -= len(list)
			continue
		}
		if len(se.Ports) == 0 || se.Ports[len(se.Ports)-1].Port != port {
			se.Ports = append(se.Ports, portEndpoints{Port: port, Endpoints: []endpointEntry{}})
			size += 128
		}
		pe := &se.Ports[len(se.Ports)-1]
		e := endpointOf(list[k])
		n := encodedSize(e, 5)
		if n > MaxItemBytes {
			e.Labels, e.Truncated = nil, fmt.Sprintf("labels left out: the entry takes %d bytes, more than %d", n, MaxItemBytes)
			n = encodedSize(e, 5)
		}
		pe.Endpoints = append(pe.Endpoints, e)
		size += n
		break
	}
	return out, size
}

// trimEndpoints drops from out what was added after the first n indexes (grown[i] is len(out) after
// index i was added): the last endpoint measured, when it did not fit the page.
func trimEndpoints(out []serviceEndpoints, grown []int, n int) []serviceEndpoints {
	switch n {
	case len(grown):
		return out
	case 0:
		return out[:0]
	}
	out = out[:grown[n-1]]
	if grown[n] > grown[n-1] {
		return out // the dropped endpoint had opened a service of its own
	}
	last := &out[len(out)-1]
	pe := &last.Ports[len(last.Ports)-1]
	pe.Endpoints = pe.Endpoints[:len(pe.Endpoints)-1]
	if len(pe.Endpoints) == 0 {
		last.Ports = last.Ports[:len(last.Ports)-1]
	}
	return out
}

func endpointOf(ep *model.Endpoint) endpointEntry {
	wl := ep.WorkloadName
	if wl != "" && ep.Namespace != "" {
		wl = ep.Namespace + "/" + wl
	}
	return endpointEntry{Address: ep.Address, Port: ep.Port, Health: ep.Health.String(),
		Weight: ep.Weight, Locality: clip(ep.Locality), Network: clip(ep.Network), TLSMode: ep.TLSMode,
		ServiceAccount: clip(ep.ServiceAccount), Workload: clip(wl), Labels: ep.Labels}
}
