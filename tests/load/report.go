package main

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

func mb(b float64) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}

// byTypeText lists byte counts by type, in type order: "CDS 1.2 MB, EDS 3.4 MB".
func byTypeText[N int64 | float64](byType map[string]N) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(byType)) {
		parts = append(parts, k+" "+mb(float64(byType[k])))
	}
	return strings.Join(parts, ", ")
}

// figure prints a whole number as one, anything else with three decimals.
func figure(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

func printReport(out io.Writer, rep *Report) {
	fmt.Fprintf(out, "\n%s — %s — load %s — source %s\n", rep.Date, rep.Machine, rep.Load, rep.Config.Source)
	m := rep.Mesh
	fmt.Fprintf(out, "per sidecar: %d clusters (%d EDS), %d listeners, %d route configs; per ztunnel: %d addresses\n\n",
		m.Clusters, m.Endpoints, m.Listeners, m.Routes, m.Addresses)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tchanges\tproxies\tp50 ms\tp99 ms\tmax ms\tall p99 ms\tmissed\t"+
		"bytes/change\tresp/change\tCPU-s/change\tharness CPU-s\tRSS\tpeak RSS\t")
	for _, r := range rep.Results {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%d\t%s\t%.0f\t%.3f\t%.3f\t%s\t%s\t\n", r.Scenario, r.Changes, r.Proxies,
			r.P50Ms, r.P99Ms, r.MaxMs, r.AllP99Ms, r.Missed, mb(r.BytesPerChange), r.ResponsesPerChange, r.CPUPerChange,
			r.FleetCPUPerChange, mb(float64(r.RSSBytes)), mb(float64(r.PeakRSSBytes)))
	}
	tw.Flush()
	for _, r := range rep.Results {
		if len(r.BytesByType) > 0 {
			fmt.Fprintf(out, "  %s bytes/change by type: %s\n", r.Scenario, byTypeText(r.BytesByType))
		}
		if r.Warmings > 0 || r.WarmingTimeouts > 0 || r.WarmingPending > 0 {
			fmt.Fprintf(out, "  %s warming: %d clusters warmed, p50 %.0f ms, p99 %.0f ms; %d warming timeouts; %d still warming\n",
				r.Scenario, r.Warmings, r.WarmingP50Ms, r.WarmingP99Ms, r.WarmingTimeouts, r.WarmingPending)
		}
		if r.Note != "" {
			fmt.Fprintf(out, "  %s: %s\n", r.Scenario, r.Note)
		}
		if len(r.Figures) > 0 {
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(r.Figures)) {
				parts = append(parts, k+" "+figure(r.Figures[k]))
			}
			fmt.Fprintf(out, "  %s figures: %s\n", r.Scenario, strings.Join(parts, ", "))
		}
		if r.Scenario == "steady-churn" {
			fmt.Fprintf(out, "  steady-churn memory: RSS %s → %s, live heap after GC %s → %s\n", mb(float64(r.RSSStart)),
				mb(float64(r.RSSEnd)), mb(float64(r.HeapStart)), mb(float64(r.HeapEnd)))
		}
	}
	fmt.Fprintf(out, "server: ready %.0f ms after start, %.1f CPU-s in total, peak RSS %s\n", rep.StartupMs, rep.CPUSeconds,
		mb(float64(rep.PeakRSSBytes)))
	for _, e := range rep.Errors {
		fmt.Fprintf(out, "error: %s\n", e)
	}
}
