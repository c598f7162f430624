#!/usr/bin/env bash
# Makes sure a headless Chromium is on PATH, for the dashboard's browser test
# (test/observability). On Debian as root it installs Debian's chromium package when
# missing; elsewhere it says what to do. The test skips itself when no browser is
# found, so this script is only needed where that test must run. Idempotent.
set -euo pipefail

log() { echo "ensure-chromium: $*" >&2; }

for b in chromium chromium-browser google-chrome; do
  if command -v "$b" >/dev/null 2>&1; then exit 0; fi
done

if [ "$(id -u)" != 0 ] || [ ! -f /etc/debian_version ]; then
  log "no Chromium on PATH. Install one (Debian/Ubuntu: sudo apt-get install -y chromium)"
  log "or set CHROMIUM=/path/to/chrome for the dashboard test; it skips without one."
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
log "installing Debian's chromium"
if ! apt-get install -y -q --no-install-recommends chromium >/dev/null; then
  log "install failed; updating the package lists and trying again"
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends chromium >/dev/null
fi
command -v chromium >/dev/null 2>&1 || { log "chromium was installed but is not on PATH"; exit 1; }
log "$(chromium --version 2>/dev/null || echo chromium installed)"
