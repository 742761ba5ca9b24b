// Package buildinfo says which build of Sextant is running: the module version and the commit it was built
// from, as the Go toolchain records them in the binary (go build inside a git checkout stamps the commit).
package buildinfo
