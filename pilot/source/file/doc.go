// Package file is the config source for a directory of YAML and JSON documents, the embedded default:
// it loads the tree, watches it, and keeps serving the last good version of a file that turns invalid.
package file
