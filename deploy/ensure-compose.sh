#!/usr/bin/env bash
# Makes sure a Docker Compose answers and prints the command to use for it: "docker
# compose" (the v2 plugin) when the docker client has it, else "docker-compose".
# Debian 12 packages no v2 plugin, so on Debian as root this installs Debian's
# docker-compose (v1.29, which reads deploy/docker-compose.yml as well). Idempotent.
# Usage: COMPOSE=$(deploy/ensure-compose.sh) && $COMPOSE -f deploy/docker-compose.yml up -d
set -euo pipefail

log() { echo "ensure-compose: $*" >&2; }

if docker compose version >/dev/null 2>&1; then echo "docker compose"; exit 0; fi
if command -v docker-compose >/dev/null 2>&1; then echo "docker-compose"; exit 0; fi

if [ "$(id -u)" != 0 ] || [ ! -f /etc/debian_version ]; then
  log "no Docker Compose found. Install the compose plugin (docker compose) or docker-compose,"
  log "then run this again."
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
log "installing Debian's docker-compose"
if ! apt-get install -y -q --no-install-recommends docker-compose >/dev/null; then
  log "install failed; updating the package lists and trying again"
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends docker-compose >/dev/null
fi
command -v docker-compose >/dev/null 2>&1 || { log "docker-compose was installed but is not on PATH"; exit 1; }
echo "docker-compose"
