#!/usr/bin/env bash
# Times a file of N Services (default 100,000) loaded by a starting server (start → /ready) and written into
# the config dir of a running one (rename into place → snapshot holding all N), with each process's peak RSS.
# Usage: scripts/bench-file-scale.sh [N] [runs]   (figures go in docs/benchmarks.md)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-100000}
runs=${2:-1}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
go build -o "$work/sextant" ./cmd/sextant

awk -v n="$n" 'BEGIN { for (i = 0; i < n; i++) printf "apiVersion: v1\nkind: Service\nmetadata:\n  name: svc-%d\n  namespace: ns-%d\n  labels: {app: svc-%d}\nspec:\n  clusterIP: 10.%d.%d.%d\n  selector: {app: svc-%d}\n  ports:\n  - name: http\n    port: 8080\n---\n", i, i % 10, i, 100 + int(i / 65536), int(i / 256) % 256, i % 256, i }' >"$work/services.yaml"
size=$(stat -c %s "$work/services.yaml")
echo "file: $n Services, $size bytes"

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
hwm() { awk '/VmHWM/ { printf "%d MiB", $2 / 1024 }' "/proc/$1/status"; }
services() { curl -sf "http://127.0.0.1:$1/debug/push_status" | sed -n 's/^  "services": \([0-9]*\),/\1/p'; }

start() { # dir port → pid
	"$work/sextant" discovery --config-dir "$1" --grpc-addr 127.0.0.1:0 --http-addr "127.0.0.1:$2" \
		--config-max-file-bytes $((size + 1)) --config-max-total-bytes $((size + 1 << 20)) >"$work/log.$2" 2>&1 &
	echo $!
}

for run in $(seq "$runs"); do
	mkdir -p "$work/cold" "$work/warm"
	cp "$work/services.yaml" "$work/cold/"
	t0=$(now)
	pid=$(start "$work/cold" 25114)
	until curl -sf http://127.0.0.1:25114/ready >/dev/null; do sleep 0.05; done
	echo "run $run cold start: ready in $(since "$t0") s, peak RSS $(hwm "$pid"), $(services 25114) services"
	kill "$pid"; wait "$pid" 2>/dev/null || true

	pid=$(start "$work/warm" 25115)
	until curl -sf http://127.0.0.1:25115/ready >/dev/null; do sleep 0.05; done
	cp "$work/services.yaml" "$work/.services.yaml"
	t0=$(now)
	mv "$work/.services.yaml" "$work/warm/services.yaml"
	until [ "$(services 25115)" = "$n" ]; do sleep 0.05; done
	echo "run $run added to a running server: in the snapshot after $(since "$t0") s, peak RSS $(hwm "$pid")"
	kill "$pid"; wait "$pid" 2>/dev/null || true
	rm -rf "$work/cold" "$work/warm"
done
