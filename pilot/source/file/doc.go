// Package file is the config source for a directory of YAML and JSON documents, the embedded default: it loads
// the tree, watches it, and keeps the last good objects of input that turns invalid, unreadable or vanishes.
package file
