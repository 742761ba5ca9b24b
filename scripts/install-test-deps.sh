#!/bin/sh
# Installs what the browser test of the dashboard (pilot/debug, TestDashboardInBrowser) needs: Debian's
# chromium. Run as root. Failure is tolerated: without chromium that test is skipped with the reason.
set -u
if [ -x /usr/bin/chromium ]; then
	echo "chromium present: $(/usr/bin/chromium --version 2>/dev/null)"
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "install-test-deps: not root; skipping chromium (the browser test will be skipped)" >&2
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update && apt-get install -y --no-install-recommends chromium; }; then
	echo "install-test-deps: could not install chromium; the browser test will be skipped" >&2
	exit 0
fi
/usr/bin/chromium --version || true
