// Package derive builds an output's list (clusters, listeners, virtual hosts) from its previous one. Each output
// declares once the inputs it reads; its cache key and the gates of its incremental path both follow from that.
package derive
