package push_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/push"
	"github.com/sextantmesh/sextant/pilot/store"
)

// logLines keeps the records a logger wrote at INFO and above, as message and attributes.
type logLines struct {
	mu    sync.Mutex
	lines []map[string]string
}

func (l *logLines) Enabled(_ context.Context, level slog.Level) bool { return level >= slog.LevelInfo }
func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	m := map[string]string{"msg": r.Message}
	r.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	l.mu.Lock()
	l.lines = append(l.lines, m)
	l.mu.Unlock()
	return nil
}
func (l *logLines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logLines) WithGroup(string) slog.Handler      { return l }

func (l *logLines) of(msg string) []map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]string
	for _, m := range l.lines {
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// A config change applied is one INFO line naming the object and the snapshot version; a storm of changes
// within LogEvery is one more line, once it is over, that counts them all and names the first few.
func TestAppliedChangeLogged(t *testing.T) {
	st := store.New()
	logs := &logLines{}
	p := push.New(push.Options{Store: st, Logger: slog.New(logs), LogEvery: 300 * time.Millisecond})
	p.Initialize()
	st.Upsert(store.LayerFile, service("reviews"))
	p.Flush()
	lines := logs.of("config change applied")
	if len(lines) != 1 || lines[0]["changed"] != "Service/ns/reviews" || lines[0]["version"] != "2" || lines[0]["changes"] != "1" {
		t.Fatalf("after one change: %v", lines)
	}

	for i := range 20 {
		if i%2 == 1 { // an object changed again is named once
			st.Upsert(store.LayerFile, service("s00"))
			st.Upsert(store.LayerFile, slice("s00", fmt.Sprintf("10.1.0.%d", i)))
			p.Flush()
			continue
		}
		st.Upsert(store.LayerFile, service(fmt.Sprintf("s%02d", i)))
		st.Upsert(store.LayerFile, slice(fmt.Sprintf("s%02d", i), "10.1.0.1"))
		p.Flush()
	}
	if n := len(logs.of("config change applied")); n != 1 {
		t.Fatalf("a storm within LogEvery wrote %d more lines at once", n-1)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(logs.of("config change applied")) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	lines = logs.of("config change applied")
	if len(lines) != 2 {
		t.Fatalf("after the storm: %v", lines)
	}
	l := lines[1]
	listed := strings.Fields(l["changed"])
	if l["snapshots"] != "20" || l["changes"] != "40" || l["version"] != "22" || len(listed) != 5 {
		t.Fatalf("the storm's line: %v", l)
	}
	if listed[0] != "Service/ns/s00" || listed[1] != "Service/ns/s02" {
		t.Errorf("listed %v, want each object once, in order", listed)
	}
	for _, name := range listed {
		if !strings.HasPrefix(name, string(config.Service)+"/") {
			t.Errorf("an endpoint object %s listed before the Services changed", name)
		}
	}
}
