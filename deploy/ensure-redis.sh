#!/usr/bin/env bash
# Makes sure a redis-server binary is on PATH, for the Redis store's tests and for
# deployments that share sessions through Redis. On Debian as root it installs Debian's
# redis-server package when missing; elsewhere it says what to do. It never starts a
# daemon: the tests start their own server on a free loopback port. Idempotent.
set -euo pipefail

log() { echo "ensure-redis: $*" >&2; }

if command -v redis-server >/dev/null 2>&1; then
  exit 0
fi

if [ "$(id -u)" != 0 ] || [ ! -f /etc/debian_version ]; then
  log "redis-server is not on PATH. Install Redis 6 or later, for example:"
  log "  Debian/Ubuntu: sudo apt-get install -y redis-server"
  log "  macOS:         brew install redis"
  log "then make sure 'redis-server --version' works for this user and run this again."
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
# Where an init system runs, Debian's package also starts its own service on port 6379;
# nothing here relies on it.
log "installing Debian's redis-server"
if ! apt-get install -y -q --no-install-recommends redis-server >/dev/null; then
  log "install failed; updating the package lists and trying again"
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends redis-server >/dev/null
fi

if ! command -v redis-server >/dev/null 2>&1; then
  log "redis-server was installed but is not on PATH (PATH=$PATH)"
  exit 1
fi
log "$(redis-server --version)"
