#!/usr/bin/env bash
# Runs kiln's Compose stack (deploy/docker-compose.yml) with whichever Compose this
# machine has (deploy/ensure-compose.sh installs one on Debian).
#   deploy/compose.sh up            build kiln:latest from bin/kiln, start kiln alone
#   deploy/compose.sh down [-v]     stop and remove the containers (-v: and the volumes)
#   deploy/compose.sh ARGS...       any other compose command, e.g. ps, logs -f kiln
# Environment: KILN_PROJECT (compose project name, default kiln), KILN_ENV_FILE (kiln's
# variables, default deploy/.env, created from .env.example when missing), DOCKER_GID
# (default: the group of /var/run/docker.sock), and the ${...} of docker-compose.yml.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
compose=$(./ensure-compose.sh)
export DOCKER_GID=${DOCKER_GID:-$(stat -c %g /var/run/docker.sock)}
run() { $compose -p "${KILN_PROJECT:-kiln}" -f docker-compose.yml "$@"; }

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  up)
    if [ -z "${KILN_ENV_FILE:-}" ] && [ ! -f .env ]; then
      cp .env.example .env
      echo "compose: created deploy/.env from .env.example; set API_KEYS there" >&2
    fi
    ./build-image.sh "${KILN_IMAGE:-kiln:latest}"
    image=$(grep -E '^SANDBOX_IMAGE=' "${KILN_ENV_FILE:-.env}" | tail -1 | cut -d= -f2-)
    if ! docker image inspect "${image:-kiln-python:latest}" >/dev/null 2>&1; then
      echo "compose: sandbox image ${image:-kiln-python:latest} is missing on this daemon; run 'make image'" >&2
      exit 1
    fi
    run up -d "$@" kiln
    ;;
  down) run down "$@" ;;
  "") echo "usage: deploy/compose.sh up|down|COMPOSE-ARGS..." >&2; exit 2 ;;
  *) run "$cmd" "$@" ;;
esac
