package xdsclient

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"

	securitypb "github.com/sextantmesh/sextant/api/security"
	workloadpb "github.com/sextantmesh/sextant/api/workload"
	"github.com/sextantmesh/sextant/pilot/model"
	"github.com/sextantmesh/sextant/tests/debugtest"
)

// server is a discovery server on loopback serving a config dir the test rewrites.
type server struct {
	*debugtest.Env
	stage string // where files are written before they are renamed into the config dir

	mu     sync.Mutex
	pushes []time.Time // when each push started
}

func startServer(t testing.TB, files map[string]string) *server {
	t.Helper()
	s := &server{Env: debugtest.Start(t, files), stage: t.TempDir()}
	s.Server.Pipeline.Subscribe(func(*model.PushRequest) {
		s.mu.Lock()
		s.pushes = append(s.pushes, time.Now())
		s.mu.Unlock()
	})
	return s
}

// pushedBetween reports whether a push started between from and to.
func (s *server) pushedBetween(from, to time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.pushes {
		if p.After(from) && p.Before(to) {
			return true
		}
	}
	return false
}

func (s *server) addr() string { return s.Server.GRPCAddr() }

// put writes a config file whole: written aside and renamed in, so the watcher never reads half a file.
func (s *server) put(t testing.TB, name, content string) {
	t.Helper()
	tmp := filepath.Join(s.stage, name)
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(s.Dir, name)); err != nil {
		t.Fatal(err)
	}
}

func (s *server) remove(t testing.TB, name string) {
	t.Helper()
	if err := os.Remove(filepath.Join(s.Dir, name)); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
}

func (s *server) getJSON(path string, v any) error {
	resp, err := http.Get(s.URL + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, body)
	}
	return json.Unmarshal(body, v)
}

// snapshotVersion is the version of the server's current snapshot.
func (s *server) snapshotVersion() uint64 {
	if ps := s.Server.Pipeline.Current(); ps != nil {
		return ps.Version
	}
	return 0
}

// generated returns what the server generates now for the connected proxy nodeID, per type URL, from its
// config dump (/debug/config_dump, as `sextant config-dump` shows it).
func (s *server) generated(nodeID string) (map[string][]*anypb.Any, error) {
	var dump struct {
		Configs []struct {
			TypeURL   string            `json:"typeUrl"`
			Error     string            `json:"error"`
			Resources []json.RawMessage `json:"resources"`
		} `json:"configs"`
	}
	if err := s.getJSON("/debug/config_dump?proxyID="+url.QueryEscape(nodeID), &dump); err != nil {
		return nil, err
	}
	out := map[string][]*anypb.Any{}
	for _, c := range dump.Configs {
		if c.Error != "" {
			return nil, fmt.Errorf("config dump of %s, %s: %s", nodeID, c.TypeURL, c.Error)
		}
		list := []*anypb.Any{}
		for _, raw := range c.Resources {
			a := &anypb.Any{}
			if err := protojson.Unmarshal(raw, a); err != nil {
				return nil, fmt.Errorf("config dump of %s, %s: %v", nodeID, c.TypeURL, err)
			}
			list = append(list, a)
		}
		out[c.TypeURL] = list
	}
	return out, nil
}

type anyRes = *anypb.Any

// subscription is a type's subscription as the server sees it (/debug/adsz).
type subscription struct {
	Wildcard bool
	Names    []string
}

// subscriptions returns the latest connection's subscriptions of nodeID, by type URL.
func (s *server) subscriptions(nodeID string) (map[string]subscription, error) {
	var conns []struct {
		NodeID        string    `json:"nodeId"`
		ConnectedAt   time.Time `json:"connectedAt"`
		Subscriptions []struct {
			TypeURL       string   `json:"typeUrl"`
			Wildcard      bool     `json:"wildcard"`
			ResourceNames []string `json:"resourceNames"`
		} `json:"subscriptions"`
	}
	if err := s.getJSON("/debug/adsz", &conns); err != nil {
		return nil, err
	}
	var out map[string]subscription
	var at time.Time
	for _, c := range conns {
		if c.NodeID != nodeID || (out != nil && !c.ConnectedAt.After(at)) {
			continue
		}
		out, at = map[string]subscription{}, c.ConnectedAt
		for _, sub := range c.Subscriptions {
			out[sub.TypeURL] = subscription{Wildcard: sub.Wildcard, Names: slices.Sorted(slices.Values(sub.ResourceNames))}
		}
	}
	if out == nil {
		return nil, fmt.Errorf("%s is not connected", nodeID)
	}
	return out, nil
}

// nameOf names a generated resource as the server sends it.
func nameOf(a *anypb.Any) string {
	m, err := a.UnmarshalNew()
	if err != nil {
		return "?" + a.TypeUrl
	}
	switch m := m.(type) {
	case *workloadpb.Address:
		if w := m.GetWorkload(); w != nil {
			return w.GetUid()
		}
		return m.GetService().GetNamespace() + "/" + m.GetService().GetHostname()
	case *securitypb.Authorization:
		return m.GetNamespace() + "/" + m.GetName()
	}
	return resourceName(m)
}

// diffHeld compares what a client holds with what the server generates, by name and content. Names in
// skip (rejected by the client in exactly the server's current form) may differ.
func diffHeld(typeURL string, held map[string]Resource, want []*anypb.Any, skip map[string]*anypb.Any) []string {
	var out []string
	wantBy := map[string]*anypb.Any{}
	for _, a := range want {
		wantBy[nameOf(a)] = a
	}
	short := typeURL[strings.LastIndexByte(typeURL, '.')+1:]
	for _, n := range slices.Sorted(maps.Keys(wantBy)) {
		if r, ok := skip[n]; ok && Same(r, wantBy[n]) {
			continue
		}
		h, ok := held[n]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s %s: generated, not held", short, n))
		case !Same(h.Any, wantBy[n]):
			out = append(out, fmt.Sprintf("%s %s: held differs from generated:\n  held: %s\n  want: %s", short, n,
				brief(h.Any), brief(wantBy[n])))
		}
	}
	for _, n := range slices.Sorted(maps.Keys(held)) {
		if _, ok := wantBy[n]; !ok {
			if _, skipped := skip[n]; !skipped {
				out = append(out, fmt.Sprintf("%s %s: held, no longer generated", short, n))
			}
		}
	}
	return out
}

// diffContents compares contents regardless of names (on-demand lookups are answered under the name asked).
func diffContents(typeURL string, held map[string]Resource, want []*anypb.Any) []string {
	left := slices.Clone(want)
	var out []string
	for _, n := range slices.Sorted(maps.Keys(held)) {
		i := slices.IndexFunc(left, func(a *anypb.Any) bool { return Same(a, held[n].Any) })
		if i < 0 {
			out = append(out, fmt.Sprintf("%s %s: held, not generated for the lookups", typeURL, n))
			continue
		}
		left = slices.Delete(left, i, i+1)
	}
	for _, a := range left {
		out = append(out, fmt.Sprintf("%s %s: generated for the lookups, not held", typeURL, nameOf(a)))
	}
	return out
}

func brief(a *anypb.Any) string {
	m, err := a.UnmarshalNew()
	if err != nil {
		return err.Error()
	}
	b, _ := protojson.MarshalOptions{}.Marshal(m)
	if len(b) > 600 {
		b = append(b[:600], "..."...)
	}
	return string(b)
}

func skipOf(rs []Rejection, typeURL string) map[string]*anypb.Any {
	out := map[string]*anypb.Any{}
	for _, r := range rs {
		if r.TypeURL == typeURL {
			out[r.Name] = r.Any
		}
	}
	return out
}

// waitFor polls cond every 10 ms until it holds or within passes.
func waitFor(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}
