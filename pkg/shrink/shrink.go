// Package shrink gives back the memory of maps that were large once: Go maps never shrink, so a map that
// held a large config (a file or namespace that went away) keeps its size until it is copied.
package shrink

// Map returns m copied into a map of its current size once it holds under a quarter of peak (for a peak
// large enough to matter), with the peak to track from then on. Track peak as max(peak, len(m)) on insert.
func Map[K comparable, V any](m map[K]V, peak int) (map[K]V, int) {
	if peak < minPeak || len(m) >= peak/4 {
		return m, peak
	}
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out, len(m)
}

// minPeak is the smallest peak worth a copy: below it the map is a few tens of KiB.
const minPeak = 1024
