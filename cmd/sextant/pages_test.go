package main

import (
	"encoding/json"
	"net/url"
	"slices"
	"testing"

	"github.com/sextantmesh/sextant/pilot/debug"
	"github.com/sextantmesh/sextant/tests/debugtest"
)

// The readers of paged views get the whole list: one item a page gives what one page of all does.
func TestReadersFollowEveryPage(t *testing.T) {
	env, _, _ := debugtest.StartScenario(t)
	c := &client{server: env.URL}

	onePage, _, err := getAll[debug.ProxySync](c, "/debug/syncz", nil)
	if err != nil {
		t.Fatal(err)
	}
	paged, body, err := getAll[debug.ProxySync](c, "/debug/syncz", url.Values{"limit": {"1"}})
	if err != nil {
		t.Fatal(err)
	}
	ids := func(s []debug.ProxySync) []string {
		var out []string
		for _, p := range s {
			out = append(out, p.ID)
		}
		return out
	}
	if len(onePage) != 2 || !slices.Equal(ids(paged), ids(onePage)) {
		t.Errorf("syncz one a page: %v; all at once: %v", ids(paged), ids(onePage))
	}
	var again []debug.ProxySync
	if json.Unmarshal(body, &again) != nil || len(again) != 2 {
		t.Errorf("merged body: %s", body)
	}

	q := url.Values{"proxyID": {debugtest.ReviewsProxy}}
	whole, _, err := getDump(c, q)
	if err != nil {
		t.Fatal(err)
	}
	q.Set("limit", "1")
	merged, _, err := getDump(c, q)
	if err != nil {
		t.Fatal(err)
	}
	count := func(d debug.ConfigDump) (n int, names []string) {
		for _, tc := range d.Configs {
			n += len(tc.Resources)
			for _, r := range tc.Resources {
				names = append(names, tc.Type+"/"+resourceName(r))
			}
		}
		return n, names
	}
	n, names := count(whole)
	m, mergedNames := count(merged)
	if n < 2 || m != n || !slices.Equal(names, mergedNames) || merged.Page.Total != n || merged.Page.Omitted != 0 {
		t.Errorf("config_dump one a page: %d %v (page %+v); all at once: %d %v", m, mergedNames, merged.Page, n, names)
	}
}
