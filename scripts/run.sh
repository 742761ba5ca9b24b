#!/usr/bin/env bash
# make run: the server on a config directory (the example mesh by default) and, beside it, the demo proxy
# (sextant demo-proxy, the sidecar of the example's productpage pod), so that proxy-status, config-dump,
# wait --for distribution and the dashboard have a proxy to show at once. Ctrl-C stops both.
set -u
cd "$(dirname "$0")/.."
config_dir=${1:-examples/bookinfo}

bin/sextant discovery --config-dir "$config_dir" &
server=$!
bin/sextant demo-proxy &
proxy=$!

stop() { kill -TERM "$server" "$proxy" 2>/dev/null; }
trap stop INT TERM
# Whichever ends first ends the other: Ctrl-C, or the server failing to start (a port in use, say), which
# would leave the demo proxy retrying for nothing.
wait -n "$server" "$proxy"
status=$?
stop
wait
exit "$status"
