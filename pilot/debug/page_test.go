package debug_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sextantmesh/sextant/pilot/config"
	"github.com/sextantmesh/sextant/pilot/debug"
	"github.com/sextantmesh/sextant/pilot/push"
	"github.com/sextantmesh/sextant/pilot/store"
	"github.com/sextantmesh/sextant/pilot/xds"
)

// boundedServer serves the debug views of a store with the given rejected and warned config.
func boundedServer(t *testing.T, rejected, warnings []*config.Error) *httptest.Server {
	t.Helper()
	st := store.New()
	p := push.New(push.Options{Store: st})
	p.Initialize()
	srv := xds.NewServer(xds.Options{Pipeline: p})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	mux := http.NewServeMux()
	debug.New(debug.Sources{Store: st, Pipeline: p, XDS: srv,
		Rejected: func() []*config.Error { return rejected },
		Warnings: func() []*config.Error { return warnings }}).Register(mux)
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return hs
}

func fetch(t *testing.T, url string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %s: %.300s", url, resp.Status, body)
	}
	return resp, body
}

// manyErrors returns n rejected documents of one file, as the file source reports a file of n `{}`; every
// tenth has a message of 100 KiB, as a document can carry its own text into the error.
func manyErrors(n int) []*config.Error {
	out := make([]*config.Error, n)
	long := "unknown kind " + strings.Repeat("é", 50<<10)
	for i := range out {
		msg := "document has no kind"
		if i%10 == 0 {
			msg = long
		}
		out[i] = &config.Error{File: "/config/huge.yaml", Index: i, Message: msg}
	}
	return out
}

// A million rejected documents: push_status (which the dashboard polls) and config_errors answer within
// MaxResponseBytes, say how many they left out, and the next page is reachable.
func TestViewsBoundedWithAMillionErrors(t *testing.T) {
	const n = 1_000_000
	hs := boundedServer(t, manyErrors(n), manyErrors(3))

	t.Run("push_status", func(t *testing.T) {
		_, body := fetch(t, hs.URL+"/debug/push_status")
		if len(body) > debug.MaxResponseBytes {
			t.Fatalf("push_status is %d bytes, over the bound of %d", len(body), debug.MaxResponseBytes)
		}
		var st debug.PushStatus
		if err := json.Unmarshal(body, &st); err != nil {
			t.Fatal(err)
		}
		p := st.RejectedPage
		if p.Total != n || p.Returned != len(st.Rejected) || p.Returned == 0 || p.Returned > debug.DefaultPageLimit ||
			p.Omitted != n-p.Returned || p.NextOffset != p.Returned {
			t.Fatalf("rejectedPage = %+v with %d rejected", p, len(st.Rejected))
		}
		if st.WarningsPage.Total != 3 || len(st.Warnings) != 3 || st.WarningsPage.Omitted != 0 {
			t.Errorf("warningsPage = %+v", st.WarningsPage)
		}
		if m := st.Rejected[0].Message; len(m) > debug.MaxStringBytes+64 || !strings.Contains(m, "more bytes cut]") {
			t.Errorf("a 100 KiB message came back as %d bytes: %.80q", len(m), m)
		}
		t.Logf("push_status: %d bytes, %d of %d rejected", len(body), p.Returned, p.Total)

		_, body = fetch(t, hs.URL+"/debug/push_status?limit=100&offset=999900")
		st = debug.PushStatus{}
		if err := json.Unmarshal(body, &st); err != nil {
			t.Fatal(err)
		}
		if len(st.Rejected) != 100 || st.Rejected[0].Index != 999900 || st.RejectedPage.NextOffset != 0 || st.RejectedPage.Omitted != n-100 {
			t.Errorf("the last page: %d rejected from %d, page %+v", len(st.Rejected), st.Rejected[0].Index, st.RejectedPage)
		}
	})

	t.Run("config_errors", func(t *testing.T) {
		resp, body := fetch(t, hs.URL+"/debug/config_errors")
		if len(body) > debug.MaxResponseBytes {
			t.Fatalf("config_errors is %d bytes, over the bound of %d", len(body), debug.MaxResponseBytes)
		}
		var page []struct {
			Index int
			Error string
		}
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatal(err)
		}
		h := resp.Header
		total, _ := strconv.Atoi(h.Get("X-Total-Count"))
		omitted, _ := strconv.Atoi(h.Get("X-Omitted-Count"))
		next := h.Get("X-Next-Offset")
		if total != n+3 || len(page) == 0 || omitted != total-len(page) || next != strconv.Itoa(len(page)) ||
			!strings.Contains(h.Get("Link"), "offset="+next) {
			t.Fatalf("%d errors; headers %v", len(page), h)
		}
		t.Logf("config_errors: %d bytes, %d of %d, next at %s", len(body), len(page), total, next)

		_, body = fetch(t, hs.URL+"/debug/config_errors?offset="+next+"&limit=5")
		page = nil
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatal(err)
		}
		if want, _ := strconv.Atoi(next); len(page) != 5 || page[0].Index != want {
			t.Errorf("the next page starts at document %d (%d errors), want %d", page[0].Index, len(page), want)
		}
		// Past the rejected, the warnings follow.
		_, body = fetch(t, hs.URL+fmt.Sprintf("/debug/config_errors?offset=%d", n))
		page = nil
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatal(err)
		}
		if len(page) != 3 || page[0].Index != 0 || page[2].Index != 2 {
			t.Errorf("the warnings page: %+v", page)
		}
	})

	t.Run("the largest page stays bounded", func(t *testing.T) {
		resp, body := fetch(t, hs.URL+fmt.Sprintf("/debug/config_errors?limit=%d", debug.MaxPageLimit))
		if len(body) > debug.MaxResponseBytes {
			t.Fatalf("%d bytes", len(body))
		}
		// Ten thousand errors, a thousand of them of 8 KiB, cross the byte bound: the page ends before.
		if next, _ := strconv.Atoi(resp.Header.Get("X-Next-Offset")); next == 0 || next >= debug.MaxPageLimit {
			t.Errorf("next offset %q: want the page cut by its size, before %d", resp.Header.Get("X-Next-Offset"), debug.MaxPageLimit)
		}
		t.Logf("limit=%d: %d bytes, next at %s", debug.MaxPageLimit, len(body), resp.Header.Get("X-Next-Offset"))
	})

	t.Run("limits", func(t *testing.T) {
		for _, q := range []string{"limit=0", fmt.Sprintf("limit=%d", debug.MaxPageLimit+1), "offset=-1", "limit=x"} {
			resp, err := http.Get(hs.URL + "/debug/config_errors?" + q)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("%s: %s, want 400", q, resp.Status)
			}
		}
	})
}
