package loglimit

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// records keeps what a logger wrote.
type records struct {
	mu   sync.Mutex
	list []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, rec)
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

// accounted is the lines written of msg plus the counts of left-out lines they carry.
func (r *records) accounted(msg string) (lines, total uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.list {
		if rec.Message != msg {
			continue
		}
		lines++
		total++
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == "suppressed" {
				total += a.Value.Uint64()
			}
			return true
		})
	}
	return lines, total
}

// A flood of one message writes about its burst; the next line written once a token is back carries the
// count of the rest, so every call is accounted for. Another message has a bucket of its own.
func TestFloodWritesBurstThenCountsTheRest(t *testing.T) {
	got := &records{}
	l := New(slog.New(got), 50, 5)
	const flood = 1000
	for range flood {
		l.Warn("refused", "client", "x")
	}
	l.Info("other")
	if lines, _ := got.accounted("refused"); lines > 10 {
		t.Fatalf("a flood of %d wrote %d lines, want about the burst of 5", flood, lines)
	}
	if lines, _ := got.accounted("other"); lines != 1 {
		t.Fatalf("another message wrote %d lines during the flood, want 1", lines)
	}
	time.Sleep(200 * time.Millisecond) // tokens come back at 50 a second
	l.Warn("refused", "client", "x")
	if _, total := got.accounted("refused"); total != flood+1 {
		t.Fatalf("lines written plus suppressed counts = %d, want every one of the %d calls", total, flood+1)
	}
}

// A client's text is cut at a rune boundary and says how long it was; short text is as sent.
func TestCut(t *testing.T) {
	if got := Text("node-1"); got != "node-1" {
		t.Fatalf("short text: %q", got)
	}
	if got := Cut("aé"+strings.Repeat("x", 10), 2); got != "a…(13 bytes)" {
		t.Fatalf("cut inside a rune: %q", got)
	}
	if got := Text(strings.Repeat("x", 1000)); len(got) != MaxText+len("…(1000 bytes)") {
		t.Fatalf("long text: %d bytes", len(got))
	}
}
