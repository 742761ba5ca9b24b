package debug

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Bounds of every JSON view, whatever the input: a config dir of a million rejected documents or a
// proxy subscribing to a million names must not make one request cost gigabytes.
const (
	// DefaultPageLimit is how many items of a list a view returns without ?limit; MaxPageLimit the most
	// ?limit may ask for.
	DefaultPageLimit = 1000
	MaxPageLimit     = 10000
	// MaxResponseBytes bounds the body of every JSON view: a page ends early (saying where the next
	// starts) rather than cross it.
	MaxResponseBytes = 8 << 20
	// MaxItemBytes bounds one item of a list; a larger one is replaced by a stub naming it and its size
	// (config_dump resources may take up to MaxResourceBytes).
	MaxItemBytes     = 1 << 20
	MaxResourceBytes = MaxResponseBytes - 64<<10
	// MaxStringBytes bounds free text that comes from input (messages, NACK reasons, names): longer text
	// is cut at a character boundary and marked with how much was cut.
	MaxStringBytes = 4096
	// MaxNamesBytes bounds the resource names listed per subscription in /debug/adsz.
	MaxNamesBytes = 64 << 10
)

// Page says which part of a list a response holds. Views that return a JSON array say it in headers
// (X-Total-Count, X-Returned-Count, X-Omitted-Count, X-Next-Offset, Link rel="next"); views that return
// an object also carry it in the body.
type Page struct {
	Offset   int `json:"offset"`
	Limit    int `json:"limit"`
	Total    int `json:"total"`
	Returned int `json:"returned"`
	// Omitted counts the items not in this response, before and after it.
	Omitted int `json:"omitted"`
	// NextOffset is where the next page starts; absent on the last one.
	NextOffset int `json:"nextOffset,omitempty"`
}

// pageQuery is a request's ?offset= and ?limit=.
type pageQuery struct{ offset, limit int }

func parsePage(r *http.Request) (pageQuery, error) {
	q := pageQuery{limit: DefaultPageLimit}
	for name, dst := range map[string]*int{"offset": &q.offset, "limit": &q.limit} {
		v := r.URL.Query().Get(name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return q, fmt.Errorf("%s=%q: want a number ≥ 0", name, v)
		}
		*dst = n
	}
	if q.limit == 0 || q.limit > MaxPageLimit {
		return q, fmt.Errorf("limit=%d: want 1 to %d", q.limit, MaxPageLimit)
	}
	return q, nil
}

// take picks the items [offset, end) of a list of n that fit the limit and budget bytes, size(i) being
// item i's encoded size. At least one item is taken when any remains, so paging always moves on.
func (q pageQuery) take(n, budget int, size func(i int) int) (end int, p Page) {
	start := min(q.offset, n)
	end = start
	used := 0
	for end < n && end-start < q.limit {
		s := size(end)
		if end > start && used+s > budget {
			break
		}
		used += s
		end++
	}
	p = Page{Offset: q.offset, Limit: q.limit, Total: n, Returned: end - start, Omitted: n - (end - start)}
	if end < n {
		p.NextOffset = end
	}
	return end, p
}

// encodedSize is the bytes v takes in an indented response at nesting depth.
func encodedSize(v any, depth int) int {
	prefix := strings.Repeat("  ", depth)
	b, err := json.MarshalIndent(v, prefix, "  ")
	if err != nil {
		return 0
	}
	return len(prefix) + len(b) + 2 // the indentation of the first line, a comma and a newline
}

// setPageHeaders says in headers which part of the list the body holds.
func setPageHeaders(w http.ResponseWriter, r *http.Request, p Page) {
	h := w.Header()
	h.Set("X-Total-Count", strconv.Itoa(p.Total))
	h.Set("X-Returned-Count", strconv.Itoa(p.Returned))
	h.Set("X-Omitted-Count", strconv.Itoa(p.Omitted))
	if p.NextOffset > 0 {
		h.Set("X-Next-Offset", strconv.Itoa(p.NextOffset))
		q := r.URL.Query()
		q.Set("offset", strconv.Itoa(p.NextOffset))
		q.Set("limit", strconv.Itoa(p.Limit))
		h.Set("Link", fmt.Sprintf(`<%s>; rel="next"`, (&url.URL{Path: r.URL.Path, RawQuery: q.Encode()}).String()))
	}
}

// writeList writes the page a request asks for of a list of n items as a JSON array, the page in
// headers. item(i) builds item i, bounded; it is called for the items of the page only, in order.
func writeList[T any](w http.ResponseWriter, r *http.Request, n int, item func(i int) T) {
	q, err := parsePage(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	page := []T{}
	_, p := q.take(n, MaxResponseBytes-16, func(i int) int {
		v := item(i)
		page = append(page, v)
		return encodedSize(v, 1)
	})
	setPageHeaders(w, r, p)
	writeJSON(w, http.StatusOK, page[:p.Returned])
}

// clip bounds free text to MaxStringBytes, marking what was cut.
func clip(s string) string {
	if len(s) <= MaxStringBytes {
		return s
	}
	cut := MaxStringBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("… [%d more bytes cut]", len(s)-cut)
}
