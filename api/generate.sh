#!/usr/bin/env bash
# Regenerates the Go code for the protobuf schemas under api/.
# Installs protoc (Debian's protobuf-compiler) if missing and builds
# protoc-gen-go at the version go.mod pins (see api/tools/tools.go).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$(pwd)

wkt_include() {
	local d
	for d in /usr/include /usr/local/include "$(dirname "$(command -v protoc)")/../include"; do
		if [[ -f "$d/google/protobuf/any.proto" ]]; then
			echo "$d"
			return 0
		fi
	done
	return 1
}

if ! command -v protoc >/dev/null 2>&1 || ! wkt_include >/dev/null; then
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y protobuf-compiler libprotobuf-dev; then
		apt-get update
		apt-get install -y protobuf-compiler libprotobuf-dev
	fi
fi
include=$(wkt_include)

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go

protos=(
	workload/workload.proto
	security/authorization.proto
)

PATH="$bin:$PATH" protoc \
	--proto_path="$root/api" \
	--proto_path="$include" \
	--go_out="$root/api" \
	--go_opt=paths=source_relative \
	"${protos[@]}"

echo "generated: ${protos[*]} ($(protoc --version))"
