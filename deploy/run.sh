#!/usr/bin/env bash
# make run: kiln on LISTEN_ADDR (:8080) as soon as Python can answer, from a fresh machine
# too. Steps: the Docker daemon; kiln's binary and the Python image built side by side; kiln
# started. The polyglot image (the other languages) builds in the background once kiln is
# ready: until its pool is warm those languages answer 503 with Retry-After. Every step
# prints the time elapsed since the start. Ctrl-C stops kiln and a build still running.
#
# usage: deploy/run.sh            (IMAGE, POLYGLOT_IMAGE, POOLS and kiln's settings from the environment)
set -euo pipefail

cd "$(dirname "$0")/.."
started=$(date +%s)
step() { echo "make run [$(($(date +%s) - started))s]: $*" >&2; }

image=${IMAGE:-kiln-python:latest}
polyglot=${POLYGLOT_IMAGE:-kiln-polyglot:latest}
export POOLS=${POOLS:-python:4,polyglot:1} SANDBOX_IMAGE=${SANDBOX_IMAGE:-$image}
if [ -n "${POLYGLOT_IMAGE:-}" ] && [ -z "${SANDBOX_IMAGES:-}" ]; then export SANDBOX_IMAGES=polyglot=$polyglot; fi
mkdir -p .cache

step "the Docker daemon"
deploy/ensure-docker.sh

step "bin/kiln and the Python image ($image), side by side"
CGO_ENABLED=0 ${GO:-go} build -trimpath -o bin/kiln ./cmd/kiln >.cache/run-kiln-build.log 2>&1 &
build=$!
if ! images/build.sh python "$image"; then
  kill "$build" 2>/dev/null || true
  exit 1
fi
step "the Python image is ready"
if ! wait "$build"; then
  cat .cache/run-kiln-build.log >&2
  exit 1
fi
step "bin/kiln is built"

kiln= builder=
stop() {
  [ -z "$builder" ] || kill -- "-$builder" 2>/dev/null || true # its group: the build's docker client too
}
trap stop EXIT
# Ctrl-C reaches kiln itself (it is in this process group) and it shuts down on its own,
# removing its sandboxes: this script waits for it. A second signal would cut that short.
trap ':' INT
trap '[ -z "$kiln" ] || kill -TERM "$kiln" 2>/dev/null || true' TERM

step "starting kiln (pools: $POOLS)"
./bin/kiln &
kiln=$!

# The polyglot image, when a pool names it, once kiln answers: builds do not take the cores
# Python's first sandboxes warm with.
if [[ ",$POOLS," == *",polyglot:"* ]]; then
  set -m # the builder leads a process group of its own, which stop ends whole
  (
    until ./bin/kiln healthcheck 2>/dev/null; do
      kill -0 "$kiln" 2>/dev/null || exit 0
      sleep 1
    done
    step "kiln is ready; building the polyglot image ($polyglot) in the background (log: .cache/polyglot-build.log)"
    if images/build.sh polyglot "$polyglot" >.cache/polyglot-build.log 2>&1; then
      step "the polyglot image is ready: its pool warms now"
    else
      step "the polyglot image failed to build: see .cache/polyglot-build.log (its languages answer 503)"
    fi
  ) &
  builder=$!
  set +m
fi

status=0
while :; do
  if wait "$kiln"; then status=0; else status=$?; fi
  kill -0 "$kiln" 2>/dev/null || break # wait returns early when a signal is trapped
done
exit "$status"
