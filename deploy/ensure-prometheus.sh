#!/usr/bin/env bash
# Makes sure Debian's prometheus and promtool are on PATH, for the alert rules' unit
# tests and the Prometheus test in test/observability, which starts its own server on a
# free loopback port. On Debian as root it installs Debian's prometheus package (both
# commands are in it) through deploy/ensure-package.sh; elsewhere it says what to do.
# Idempotent.
#
# Where systemd runs, Debian's package also enables its own prometheus service on :9090
# (every interface); nothing here relies on it: `systemctl disable --now prometheus`.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
log() { echo "ensure-prometheus: $*" >&2; }

if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
  exit 0
fi

# apt-get would add the recommended prometheus-node-exporter, a second daemon that the
# tests do not need; APT_CONFIG is read before apt's own files, none of which set this.
aptconf=$(mktemp)
trap 'rm -f "$aptconf"' EXIT
echo 'APT::Install-Recommends "false";' >"$aptconf"
export APT_CONFIG=$aptconf

"$here/ensure-package.sh" prometheus prometheus
"$here/ensure-package.sh" promtool prometheus
log "$(prometheus --version 2>&1 | head -n 1)"
