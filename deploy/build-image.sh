#!/usr/bin/env bash
# Builds kiln's own image (default kiln:latest) from bin/kiln, building the binary
# first when it is missing or older than the Go sources. Only the binary is sent to
# the daemon as the build context. Usage: deploy/build-image.sh [TAG]
# KILN_BINARY=/path/to/kiln uses that binary instead (the tests do: they leave bin/ alone).
set -euo pipefail

tag=${1:-kiln:latest}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

log() { echo "kiln-image: $*" >&2; }

context=bin
if [ -n "${KILN_BINARY:-}" ]; then
  context=$(mktemp -d)
  trap 'rm -rf "$context"' EXIT
  cp "$KILN_BINARY" "$context/kiln"
elif [ ! -x bin/kiln ] || [ -n "$(find . -name '*.go' -newer bin/kiln -print -quit)" ] \
   || [ -n "$(find api/dashboard -newer bin/kiln -print -quit)" ]; then
  log "building bin/kiln"
  ${GO:-go} build -trimpath -o bin/kiln ./cmd/kiln
fi
if ! docker image inspect debian:trixie-slim >/dev/null 2>&1; then
  log "debian:trixie-slim is missing; images/build.sh creates it (make image)"
  exit 1
fi
log "building $tag"
docker build -q -f deploy/Dockerfile -t "$tag" "$context" >/dev/null
log "built $tag"
