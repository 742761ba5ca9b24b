package main

import "testing"

func TestGCSettings(t *testing.T) {
	env := func(vars map[string]string) func(string) string {
		return func(k string) string { return vars[k] }
	}
	cases := []struct {
		name      string
		vars      map[string]string
		memoryMax string
		want      gcSettings
	}{
		{"defaults, no cgroup limit", nil, "max\n", gcSettings{percent: defaultGCPercent}},
		{"outside a cgroup", nil, "", gcSettings{percent: defaultGCPercent}},
		{"cgroup limit", nil, "2147483648\n", gcSettings{percent: defaultGCPercent, memoryLimit: 2147483648 / 10 * 9}},
		{"GOGC set", map[string]string{"GOGC": "100"}, "max", gcSettings{}},
		{"GOMEMLIMIT set", map[string]string{"GOMEMLIMIT": "1GiB"}, "2147483648", gcSettings{percent: defaultGCPercent}},
		{"unreadable limit", nil, "lots", gcSettings{percent: defaultGCPercent}},
	}
	for _, c := range cases {
		if got := gcSettingsFor(env(c.vars), c.memoryMax); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
