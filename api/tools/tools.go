//go:build tools

// Package tools pins code generators in go.mod so api/generate.sh builds
// the same versions everywhere.
package tools

import (
	_ "google.golang.org/protobuf/cmd/protoc-gen-go"
)
