#!/usr/bin/env bash
# Builds the real Kubernetes API server and etcd that the integration tests
# (tests/integration) start on loopback. The versions are pinned in
# tools/kube/go.mod and tools/etcd/go.mod; binaries are cached outside the
# repository, under a directory named for the hash of the pinned go.mod+go.sum,
# so they are rebuilt only when a pinned version changes:
#
#   ${SEXTANT_TOOLS_DIR:-$HOME/.cache/sextant/tools}/kube-apiserver/<hash>/kube-apiserver
#   ${SEXTANT_TOOLS_DIR:-$HOME/.cache/sextant/tools}/etcd/<hash>/etcd
#
# A cold build takes ~11 minutes for kube-apiserver and ~1.5 for etcd on 2 cores.
# Usage: scripts/test-env.sh          build what is missing, print the paths
#        scripts/test-env.sh --check  exit 1 if a binary is missing, build nothing
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TOOLS_DIR=${SEXTANT_TOOLS_DIR:-$HOME/.cache/sextant/tools}
GO=${GO:-go}
K8S_VERSION=v1.37.2

# hash prints the first 16 hex digits of sha256(go.mod + go.sum) of a tools module;
# tests/kubeenv/binaries.go computes the same.
hash() { cat "$ROOT/tools/$1/go.mod" "$ROOT/tools/$1/go.sum" | sha256sum | cut -c1-16; }

KUBE_DIR=$TOOLS_DIR/kube-apiserver/$(hash kube)
ETCD_DIR=$TOOLS_DIR/etcd/$(hash etcd)

if [[ ${1:-} == --check ]]; then
	ok=0
	[[ -x $KUBE_DIR/kube-apiserver ]] || { echo "missing $KUBE_DIR/kube-apiserver (run make test-env)"; ok=1; }
	[[ -x $ETCD_DIR/etcd ]] || { echo "missing $ETCD_DIR/etcd (run make test-env)"; ok=1; }
	exit $ok
fi

# build DIR MODULE_DIR PACKAGE OUTPUT [LDFLAGS]: builds into a temporary file and
# renames it, so an interrupted build never leaves a broken binary in the cache.
build() {
	local dir=$1 mod=$2 pkg=$3 out=$4 ldflags=$5
	if [[ -x $dir/$out ]]; then
		echo "cached: $dir/$out"
		return
	fi
	mkdir -p "$dir"
	echo "building $pkg into $dir (cold: minutes) ..."
	local start=$SECONDS
	(cd "$ROOT/tools/$mod" && CGO_ENABLED=0 "$GO" build -trimpath -ldflags "$ldflags" -o "$dir/$out.tmp.$$" "$pkg")
	mv "$dir/$out.tmp.$$" "$dir/$out"
	echo "built $dir/$out in $((SECONDS - start)) s"
}

build "$ETCD_DIR" etcd go.etcd.io/etcd/server/v3 etcd "-s -w"
build "$KUBE_DIR" kube k8s.io/kubernetes/cmd/kube-apiserver kube-apiserver \
	"-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37"

echo "SEXTANT_ETCD=$ETCD_DIR/etcd"
echo "SEXTANT_KUBE_APISERVER=$KUBE_DIR/kube-apiserver"
