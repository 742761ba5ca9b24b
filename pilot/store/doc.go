// Package store holds the current config objects from every source as typed, indexed collections,
// and tells its handlers about each change.
package store
