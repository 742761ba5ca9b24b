// Package codestyle checks rules about the repository's source that gofmt and go vet do not: the length
// of lines, files and functions.
package codestyle
