// Package push turns config changes into published snapshots: it debounces store events, builds the next
// PushContext from the previous one, publishes it atomically and hands a PushRequest to subscribers.
package push
