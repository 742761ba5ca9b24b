package debug

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sextantmesh/sextant/pilot/envoy"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/pilot/xds"
)

// ConfigDump is /debug/config_dump: what the generators produce for a connected proxy now. It is paged
// over the resources of every type together, in type then name order (?offset=&limit=): Page says
// which, and each type's ResourcesTotal how many it has in all. A proxy's config can be far larger than
// one response may be (MaxResponseBytes); `sextant config-dump` reads every page.
type ConfigDump struct {
	Proxy           string        `json:"proxy"`
	Connection      string        `json:"connection"`
	SnapshotVersion uint64        `json:"snapshotVersion"`
	Configs         []TypedConfig `json:"configs"`
	Page            Page          `json:"page"`
}

// TypedConfig holds the resources of one type on this page, each as protojson with its @type.
type TypedConfig struct {
	Type           string            `json:"type"`
	TypeURL        string            `json:"typeUrl"`
	Error          string            `json:"error,omitempty"`
	Resources      []json.RawMessage `json:"resources"`
	ResourcesTotal int               `json:"resourcesTotal"`
}

func (d *Debug) findConnection(id string) (xds.ConnectionStatus, bool) {
	var found xds.ConnectionStatus
	ok := false
	for _, c := range d.src.XDS.Connections() {
		if c.ID == id || c.ProxyID == id || c.NodeID == id {
			if !ok || c.ConnectedAt.After(found.ConnectedAt) {
				found, ok = c, true
			}
		}
	}
	return found, ok
}

func (d *Debug) handleConfigDump(w http.ResponseWriter, r *http.Request) {
	q, err := parsePage(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	id := r.URL.Query().Get("proxyID")
	if id == "" {
		writeError(w, http.StatusBadRequest, "proxyID is required: POD.NAMESPACE, the node id, or a connection id")
		return
	}
	c, ok := d.findConnection(id)
	if !ok {
		writeError(w, http.StatusNotFound, "no connected proxy "+clip(id))
		return
	}
	if ns := callerNamespace(r.Context()); ns != "" && c.Namespace != ns {
		writeError(w, http.StatusForbidden, "config_dump of proxy "+c.ProxyID+" needs a token of its namespace "+c.Namespace+
			" or of an admin namespace; this token's is "+ns)
		return
	}
	ps := d.current(w)
	if ps == nil {
		return
	}
	proxy := d.tracker.proxy(c.ID)
	if proxy == nil {
		p, err := model.ParseProxy(&core.Node{Id: c.NodeID})
		if err != nil {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		proxy = p
	}
	out := ConfigDump{Proxy: c.ProxyID, Connection: c.ID, SnapshotVersion: ps.Version}
	types := d.generateAll(proxy, ps, c, dumpTypes(r))
	out.Configs, out.Page = pageDump(q, types)
	setPageHeaders(w, r, out.Page)
	writeJSON(w, http.StatusOK, out)
}

// dumpTypes is ?types=cds,lds as type URLs; nil for every type.
func dumpTypes(r *http.Request) map[string]bool {
	t := r.URL.Query().Get("types")
	if t == "" {
		return nil
	}
	only := map[string]bool{}
	for s := range strings.SplitSeq(t, ",") {
		if s = strings.TrimSpace(s); s != "" {
			only[TypeURL(s)] = true
		}
	}
	return only
}

// generated is one type's resources for a dump, before paging.
type generated struct {
	TypedConfig
	res []*model.Resource
}

// generateAll runs the generator of every type the connection watches (or only), in type order.
func (d *Debug) generateAll(proxy *model.Proxy, ps *model.PushContext, c xds.ConnectionStatus, only map[string]bool) []generated {
	var out []generated
	for i := range c.Watched {
		wr := &c.Watched[i]
		if only != nil && !only[wr.TypeURL] {
			continue
		}
		g := generated{TypedConfig: TypedConfig{Type: ShortType(wr.TypeURL), TypeURL: wr.TypeURL}}
		gen := d.src.Generators[wr.TypeURL]
		if gen == nil {
			g.Error = "no generator serves this type"
			out = append(out, g)
			continue
		}
		res, err := gen.Generate(proxy, ps, wr, nil)
		if err != nil {
			g.Error = clip(err.Error())
		}
		for _, r := range res {
			if r != nil && r.Any != nil && wr.Subscribed(r.Name) {
				g.res = append(g.res, r)
			}
		}
		slices.SortFunc(g.res, func(a, b *model.Resource) int { return strings.Compare(a.Name, b.Name) })
		g.ResourcesTotal = len(g.res)
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b generated) int { return strings.Compare(a.Type, b.Type) })
	return out
}

// pageDump renders the page q asks for of the resources of every type together; every type is listed,
// with the resources of it on this page.
func pageDump(q pageQuery, types []generated) ([]TypedConfig, Page) {
	total := 0
	for _, g := range types {
		total += len(g.res)
	}
	configs := make([]TypedConfig, len(types))
	for i, g := range types {
		configs[i] = g.TypedConfig
		configs[i].Resources = []json.RawMessage{}
	}
	// Resources are taken in order, so t and before (the resources of types before t) only move forward.
	t, before := 0, 0
	var rendered []json.RawMessage
	var owner []int
	_, p := q.take(total, MaxResponseBytes-64<<10, func(i int) int {
		for i-before >= len(types[t].res) {
			before += len(types[t].res)
			t++
		}
		g := &types[t]
		raw := dumpResource(g.TypeURL, g.res[i-before])
		rendered, owner = append(rendered, raw), append(owner, t)
		return encodedSize(raw, 4)
	})
	for i := range p.Returned {
		configs[owner[i]].Resources = append(configs[owner[i]].Resources, rendered[i])
	}
	return configs, p
}

// dumpResource renders one resource, its key material redacted; one larger than MaxResourceBytes is
// replaced by its name and size.
func dumpResource(typeURL string, r *model.Resource) json.RawMessage {
	a := r.Any
	if typeURL == envoy.SecretType {
		a = redactSecret(a)
	}
	raw := anyJSON(r.Name, a)
	if len(raw) <= MaxResourceBytes {
		return raw
	}
	b, _ := json.Marshal(map[string]string{"@type": a.TypeUrl, "name": clip(r.Name),
		"truncated": fmt.Sprintf("%d bytes: more than a config_dump resource may take (%d)", len(raw), MaxResourceBytes)})
	return b
}

// redacted replaces key material in dumps, as Envoy's own config_dump writes it.
const redacted = "[redacted]"

// redactSecret returns an SDS secret without its private key, password or key provider config: a dump is
// for reading, and key material never leaves the process except to the proxy it is for. Certificates,
// public, stay. A secret that cannot be read is replaced whole.
func redactSecret(a *anypb.Any) *anypb.Any {
	s := &tlsv3.Secret{}
	if err := a.UnmarshalTo(s); err != nil {
		out, _ := anypb.New(&tlsv3.Secret{Name: redacted})
		return out
	}
	hide := func(d *core.DataSource) *core.DataSource {
		if d == nil {
			return nil
		}
		return &core.DataSource{Specifier: &core.DataSource_InlineString{InlineString: redacted}}
	}
	if c := s.GetTlsCertificate(); c != nil {
		c.PrivateKey, c.Password = hide(c.PrivateKey), hide(c.Password)
		if p := c.PrivateKeyProvider; p != nil {
			c.PrivateKeyProvider = &tlsv3.PrivateKeyProvider{ProviderName: p.ProviderName}
		}
	}
	if k := s.GetSessionTicketKeys(); k != nil {
		for i := range k.Keys {
			k.Keys[i] = hide(k.Keys[i])
		}
	}
	if g := s.GetGenericSecret(); g != nil {
		g.Secret = hide(g.Secret)
		for name := range g.Secrets {
			g.Secrets[name] = hide(g.Secrets[name])
		}
	}
	out, err := anypb.New(s)
	if err != nil {
		out, _ = anypb.New(&tlsv3.Secret{Name: redacted})
	}
	return out
}

// anyJSON renders a resource as Envoy's config_dump does: protojson with "@type". A type not linked into
// the binary is shown as its name and base64 bytes.
func anyJSON(name string, a *anypb.Any) json.RawMessage {
	if b, err := (protojson.MarshalOptions{}).Marshal(a); err == nil {
		return compactJSON(b)
	}
	b, _ := json.Marshal(map[string]string{"@type": a.TypeUrl, "name": name, "value": base64.StdEncoding.EncodeToString(a.Value)})
	return b
}
