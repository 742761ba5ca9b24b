package file_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sextantmesh/sextant/pilot/source/file"
	"github.com/sextantmesh/sextant/pilot/store"
)

// Budgets of one file: its documents are counted before any is parsed, and what it reports is capped, so a
// file of a million documents costs a read and a count, not a million parses and log lines.

// countingHandler counts log records.
type countingHandler struct{ n *atomic.Int64 }

func (h countingHandler) Enabled(context.Context, slog.Level) bool  { return true }
func (h countingHandler) Handle(context.Context, slog.Record) error { h.n.Add(1); return nil }
func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler        { return h }
func (h countingHandler) WithGroup(string) slog.Handler             { return h }

// millionDocs is a million empty-mapping documents: about 7 MB, under the byte limit.
func millionDocs() string { return strings.Repeat("{}\n---\n", 1_000_000) }

func TestMillionDocumentFileDoesNotStallOtherFiles(t *testing.T) {
	logs := &atomic.Int64{}
	f := newFixture(t)
	f.src = file.New(file.Options{Dir: f.dir, Store: f.store, Settle: 20 * time.Millisecond, Logger: slog.New(countingHandler{logs})})
	write(t, f.dir, "a.yaml", svcDoc("", "cart", 80))
	f.load(t)
	f.run(t)
	waitWatching(t, f)

	big := millionDocs()
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	logsBefore := logs.Load()
	bigPath := write(t, f.dir, "big.yaml", big)
	start := time.Now()
	write(t, f.dir, "a.yaml", svcDoc("", "cart", 81))
	within(t, 2*time.Second, "an edit beside the million-document file", func() bool { return portOf(f.get(svcKey("default", "cart"))) == 81 })
	t.Logf("the edit beside a million-document file applied in %s", time.Since(start))

	within(t, waitFor, "the million-document file rejected", func() bool { return errorFor(f, bigPath) != nil })
	if e := errorFor(f, bigPath); !strings.Contains(e.Message, "limit of 10000 documents") {
		t.Errorf("the rejection does not name the document limit: %q", e.Message)
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	t.Logf("rejecting it allocated %d MiB and logged %d records", (after.TotalAlloc-before.TotalAlloc)>>20, logs.Load()-logsBefore)
	// The file is read once (7 MB) and counted; parsing it would allocate gigabytes.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 {
		t.Errorf("allocated %d MiB for a rejected 7 MB file", alloc>>20)
	}
	if n := logs.Load() - logsBefore; n > 5 {
		t.Errorf("%d log records for one rejected file, want a few", n)
	}
	// Another edit, with the rejected file still there, applies as quickly.
	write(t, f.dir, "a.yaml", svcDoc("", "cart", 82))
	within(t, 2*time.Second, "a second edit", func() bool { return portOf(f.get(svcKey("default", "cart"))) == 82 })
}

func TestMillionDocumentFileAtLoad(t *testing.T) {
	f := newFixture(t)
	write(t, f.dir, "a.yaml", svcDoc("", "cart", 80))
	bigPath := write(t, f.dir, "big.yaml", millionDocs())
	start := time.Now()
	f.load(t)
	t.Logf("Load with a million-document file took %s", time.Since(start))
	if f.get(svcKey("default", "cart")) == nil {
		t.Error("the file beside the million-document one did not load")
	}
	errs := f.src.Errors()
	if len(errs) != 1 || errs[0].File != bigPath || !strings.Contains(errs[0].Message, "limit of 10000 documents") {
		t.Errorf("Errors:%s\nwant one, on big.yaml, naming the limit", errorsString(errs))
	}
}

// A file over the document limit keeps the objects it held; back under it, it is read again.
func TestMaxFileDocumentsKeepsLastGood(t *testing.T) {
	dir := t.TempDir()
	st := store.New()
	src := file.New(file.Options{Dir: dir, Store: st, MaxFileDocuments: 3, Logger: slog.New(slog.DiscardHandler)})
	p := write(t, dir, "a.yaml", join(svcDoc("", "cart", 80), svcDoc("", "pay", 80)))
	if err := src.Load(); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "a.yaml", join(svcDoc("", "cart", 81), svcDoc("", "pay", 81), svcDoc("", "a", 1), svcDoc("", "b", 1)))
	if err := src.Load(); err != nil {
		t.Fatal(err)
	}
	if portOf(st.Get(svcKey("default", "cart"))) != 80 || portOf(st.Get(svcKey("default", "pay"))) != 80 ||
		st.Get(svcKey("default", "a")) != nil {
		t.Error("a file over the document limit replaced its last good objects")
	}
	if errs := src.Errors(); len(errs) != 1 || errs[0].File != p || !strings.Contains(errs[0].Message, "limit of 3 documents") {
		t.Errorf("Errors:%s", errorsString(errs))
	}
	// Three documents, one of them a comment, are within it.
	write(t, dir, "a.yaml", join(svcDoc("", "cart", 82), svcDoc("", "pay", 82), "# nothing\n"))
	if err := src.Load(); err != nil {
		t.Fatal(err)
	}
	if portOf(st.Get(svcKey("default", "cart"))) != 82 || len(src.Errors()) != 0 {
		t.Errorf("back under the limit: cart port %d, Errors:%s", portOf(st.Get(svcKey("default", "cart"))), errorsString(src.Errors()))
	}
}

// Errors and warnings of one file are reported one by one up to ten; the rest are counted in one entry, in
// Errors (what /debug/config_errors and validate show) and in the log.
func TestReportedErrorsAndWarningsCappedPerFile(t *testing.T) {
	logs := &atomic.Int64{}
	dir := t.TempDir()
	st := store.New()
	src := file.New(file.Options{Dir: dir, Store: st, Logger: slog.New(countingHandler{logs})})
	broken := write(t, dir, "broken.yaml", strings.Repeat("{}\n---\n", 50)+svcDoc("", "cart", 80))
	var docs []string
	for i := range 30 {
		docs = append(docs, fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: r%d, namespace: shop}\n"+
			"spec:\n  hosts: [r]\n  tcp:\n  - match: [{sourceSubnet: 10.1.0.0/16}]\n    route: [{destination: {host: r}}]\n", i))
	}
	warned := write(t, dir, "warned.yaml", join(docs...))
	if err := src.Load(); err != nil {
		t.Fatal(err)
	}
	if st.Get(svcKey("default", "cart")) == nil {
		t.Error("the valid document after the broken ones did not load")
	}
	errs := src.Errors()
	if len(errs) != 11 {
		t.Fatalf("%d errors, want 10 and a count:%s", len(errs), errorsString(errs))
	}
	last := errs[10]
	if last.File != broken || last.Index != 10 || !strings.Contains(last.Message, "40 more rejected documents") {
		t.Errorf("the count of the rest: %+v", last)
	}
	ws := src.Warnings()
	if len(ws) != 11 || ws[10].File != warned || !ws[10].Warning || !strings.Contains(ws[10].Message, "20 more warnings") {
		t.Fatalf("%d warnings, want 10 and a count of 20 more: %+v", len(ws), ws[len(ws)-1])
	}
	// Ten errors and a count, ten warnings and a count.
	if n := logs.Load(); n != 22 {
		t.Errorf("%d log records, want 22", n)
	}
}
