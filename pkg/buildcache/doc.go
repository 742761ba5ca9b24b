// Package buildcache keeps values built from a snapshot's inputs: per stable identity only the value built
// from the newest inputs (Latest), or per name the value built from the current key (Slots).
package buildcache
