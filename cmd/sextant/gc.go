package main

import (
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// defaultGCPercent is the collector's target when GOGC is not set.
//
// The server's heap is mostly long-lived (the snapshot, caches, informer stores), while what a push allocates
// dies at once. At Go's default of 100, endpoint churn to 300 proxies started a collection every 2 s, each
// marking for about 100 ms with one of two cores, and the changes caught in those windows made the churn
// p99 (docs/benchmarks.md). The heap may now grow to four times what is live; a cgroup memory limit, when
// there is one, bounds it (see gcSettingsFor).
const defaultGCPercent = 300

// cgroupMemoryMax is where cgroup v2 exposes the container's memory limit.
const cgroupMemoryMax = "/sys/fs/cgroup/memory.max"

// gcSettings is how the collector is tuned; zero fields leave the runtime's setting alone.
type gcSettings struct {
	percent     int
	memoryLimit int64 // soft limit in bytes
}

// gcSettingsFor returns the settings for the environment: GOGC and GOMEMLIMIT, when set, are the runtime's
// own and left alone. Otherwise the collector targets defaultGCPercent, and 90% of a cgroup memory limit
// (memoryMax is the content of memory.max) becomes a soft limit: near it the collector works harder rather
// than the container being killed.
func gcSettingsFor(getenv func(string) string, memoryMax string) gcSettings {
	var s gcSettings
	if getenv("GOGC") == "" {
		s.percent = defaultGCPercent
	}
	if getenv("GOMEMLIMIT") == "" {
		if n, err := strconv.ParseInt(strings.TrimSpace(memoryMax), 10, 64); err == nil && n > 0 {
			s.memoryLimit = n / 10 * 9
		}
	}
	return s
}

// tuneGC applies gcSettingsFor this process and describes the result.
func tuneGC() string {
	memoryMax, _ := os.ReadFile(cgroupMemoryMax) // absent outside a cgroup v2 container: no limit
	s := gcSettingsFor(os.Getenv, string(memoryMax))
	if s.percent != 0 {
		debug.SetGCPercent(s.percent)
	}
	if s.memoryLimit != 0 {
		debug.SetMemoryLimit(s.memoryLimit)
	}
	percent := debug.SetGCPercent(-1)
	debug.SetGCPercent(percent)
	limit := "none"
	if l := debug.SetMemoryLimit(-1); l != 1<<63-1 {
		limit = fmt.Sprintf("%.1f MiB", float64(l)/(1<<20))
	}
	return fmt.Sprintf("garbage collector: GOGC=%d, soft memory limit %s", percent, limit)
}
