// Command testlog runs go test -json and prints what go test prints without -v (a line per package, the
// output of failed tests and packages), then lists the skipped tests with their reasons and the failed
// ones, so a CI log shows what did not run without holding every passing test's output.
//
//	go run ./tests/testlog go test -json -race ./...
//
// Its exit status is the command's.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
)

// event is one line of go test -json (cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output events name the package here
	Test       string
	Output     string
}

// maxListed bounds each list at the end; the rest are counted.
const maxListed = 200

// result is what a run left to list at the end.
type result struct {
	skipped []string // "PKG TEST: reason"
	failed  []string // "PKG TEST", or "PKG" for a package that failed outside its tests
}

type testKey struct{ pkg, test string }

// reader turns the event stream into go test's plain output.
type reader struct {
	out     io.Writer
	pending map[testKey][]string // output of tests (and, under test "", packages) not ended yet
	res     result
}

func newReader(out io.Writer) *reader {
	return &reader{out: out, pending: map[testKey][]string{}}
}

// line handles one line of the stream; a line that is not an event is printed as it is.
func (r *reader) line(raw []byte) {
	var e event
	if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &e) != nil {
		fmt.Fprintln(r.out, string(raw))
		return
	}
	k := testKey{e.Package, e.Test}
	switch e.Action {
	case "build-output":
		fmt.Fprint(r.out, e.Output)
	case "output":
		r.pending[k] = append(r.pending[k], e.Output)
	case "pass":
		r.endPassed(k)
	case "skip":
		r.endSkipped(k)
	case "fail":
		r.endFailed(k)
	}
}

func (r *reader) endPassed(k testKey) {
	if k.test == "" {
		r.printPackageLine(k)
	}
	delete(r.pending, k)
}

func (r *reader) endSkipped(k testKey) {
	if k.test == "" { // a package without tests
		r.printPackageLine(k)
		delete(r.pending, k)
		return
	}
	r.res.skipped = append(r.res.skipped, k.pkg+" "+k.test+": "+skipReason(r.pending[k]))
	delete(r.pending, k)
}

func (r *reader) endFailed(k testKey) {
	if k.test != "" {
		fmt.Fprint(r.out, strings.Join(quiet(r.pending[k]), ""))
		r.res.failed = append(r.res.failed, k.pkg+" "+k.test)
		delete(r.pending, k)
		return
	}
	// A package that fails outside a test (a panic, a timeout, a build error): the tests still running
	// say where it was.
	failedTest := slices.ContainsFunc(r.res.failed, func(f string) bool { return strings.HasPrefix(f, k.pkg+" ") })
	for pk, lines := range r.pending {
		if pk.pkg == k.pkg && pk.test != "" {
			fmt.Fprint(r.out, strings.Join(quiet(lines), ""))
			delete(r.pending, pk)
		}
	}
	fmt.Fprint(r.out, strings.Join(r.pending[k], ""))
	if !failedTest {
		r.res.failed = append(r.res.failed, k.pkg)
	}
	delete(r.pending, k)
}

// printPackageLine prints the package's "ok", "?" or coverage lines, as go test without -v does.
func (r *reader) printPackageLine(k testKey) {
	for _, l := range r.pending[k] {
		if strings.HasPrefix(l, "ok ") || strings.HasPrefix(l, "?   ") || strings.HasPrefix(l, "coverage:") {
			fmt.Fprint(r.out, l)
		}
	}
}

// quiet drops the progress lines -v adds (=== RUN, PAUSE, CONT, NAME), which go test without it omits.
func quiet(lines []string) []string {
	return slices.DeleteFunc(slices.Clone(lines), func(l string) bool { return strings.HasPrefix(l, "=== ") })
}

// skipReason is what a skipped test logged (its t.Skip message), on one line.
func skipReason(lines []string) string {
	var parts []string
	for _, l := range quiet(lines) {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "--- SKIP") {
			continue
		}
		parts = append(parts, l)
	}
	reason := strings.Join(parts, " / ")
	if reason == "" {
		return "(no reason given)"
	}
	if len(reason) > 300 {
		reason = reason[:300] + "..."
	}
	return reason
}

// summary prints the lists at the end.
func (r *reader) summary() {
	list := func(title string, items []string) {
		if len(items) == 0 {
			return
		}
		slices.Sort(items)
		fmt.Fprintf(r.out, "\n%s (%d):\n", title, len(items))
		for i, s := range items {
			if i == maxListed {
				fmt.Fprintf(r.out, "  ... and %d more\n", len(items)-maxListed)
				break
			}
			fmt.Fprintln(r.out, "  "+s)
		}
	}
	list("skipped", r.res.skipped)
	list("failed", r.res.failed)
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testlog go test -json [flags] [packages]")
		os.Exit(2)
	}
	// Ctrl-C reaches the tests too; this process stays to print what they said.
	signal.Ignore(os.Interrupt)
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testlog:", err)
		os.Exit(2)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "testlog:", err)
		os.Exit(2)
	}
	r := newReader(os.Stdout)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	for sc.Scan() {
		r.line(sc.Bytes())
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "testlog: reading the test output:", err)
		_, _ = io.Copy(io.Discard, stdout) // lets the command finish
	}
	err = cmd.Wait()
	r.summary()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		os.Exit(max(exit.ExitCode(), 1)) // -1: ended by a signal
	case err != nil:
		fmt.Fprintln(os.Stderr, "testlog:", err)
		os.Exit(2)
	case len(r.res.failed) > 0:
		os.Exit(1)
	}
}
