package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"

	"github.com/sextantmesh/sextant/pilot/debug"
)

// getAll reads every page of a view that answers a JSON array (the server pages them, saying in
// X-Next-Offset where the next starts) and returns the items, and them as one indented JSON array.
func getAll[T any](c *client, path string, query url.Values) ([]T, []byte, error) {
	q := url.Values{}
	for k, v := range query {
		q[k] = v
	}
	all := []T{}
	offset := 0
	for {
		var items []T
		_, h, err := c.fetch(path, q, &items)
		if err != nil {
			return nil, nil, err
		}
		all = append(all, items...)
		next := h.Get("X-Next-Offset")
		if next == "" {
			break
		}
		n, err := strconv.Atoi(next)
		if err != nil || n <= offset {
			return nil, nil, fmt.Errorf("%s: X-Next-Offset %q: want an offset past %d", path, next, offset)
		}
		offset = n
		q.Set("offset", next)
	}
	body, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		return nil, nil, err
	}
	return all, append(body, '\n'), nil
}

// getDump reads every page of a proxy's config dump and merges them: the resources of each type, in
// order, and a page that says it holds them all.
func getDump(c *client, query url.Values) (debug.ConfigDump, []byte, error) {
	q := url.Values{}
	for k, v := range query {
		q[k] = v
	}
	var dump debug.ConfigDump
	byType := map[string]int{}
	for {
		var page debug.ConfigDump
		if _, _, err := c.fetch("/debug/config_dump", q, &page); err != nil {
			return dump, nil, err
		}
		if dump.Configs == nil {
			dump = page
			for i, tc := range dump.Configs {
				byType[tc.TypeURL] = i
			}
		} else {
			for _, tc := range page.Configs {
				if i, ok := byType[tc.TypeURL]; ok {
					dump.Configs[i].Resources = append(dump.Configs[i].Resources, tc.Resources...)
				}
			}
		}
		next := page.Page.NextOffset
		if next == 0 {
			break
		}
		if next <= page.Page.Offset {
			return dump, nil, fmt.Errorf("/debug/config_dump: next offset %d not past %d", next, page.Page.Offset)
		}
		q.Set("offset", strconv.Itoa(next))
	}
	dump.Page.Offset, dump.Page.NextOffset, dump.Page.Omitted, dump.Page.Returned = 0, 0, 0, dump.Page.Total
	body, err := json.MarshalIndent(dump, "", "  ")
	if err != nil {
		return dump, nil, err
	}
	return dump, append(body, '\n'), nil
}
